"""Jina-v4 from transformers' Qwen2.5-VL classes, built tiny in the published layout.

The reference is the architecture's own forward with the adapter applied by PEFT (not merged):
a `Qwen2_5_VLModel` read from the same directory, the retrieval task's LoRA weights loaded into
PEFT LoRA layers, each input run alone (no padding), and the mean of its last hidden states
taken by hand over the image tokens or the text tokens.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from training.baselines.jina_v4 import (  # noqa: E402
    IMAGE_PROMPT,
    TEXT_PREFIX,
    encode_jina_images,
    encode_jina_texts,
    load_jina_v4,
    module_name,
)
from training.dryrun.jina_v4 import TARGETS, materialize_tiny_jina_v4  # noqa: E402
from training.evaluation.inputs import split_labels  # noqa: E402

TEXTS = ["a calm cat on a mat", "the sky", "an old street at night with a lot of light and rain"]


@pytest.fixture(scope="module")
def labels(tiny_export):
    return split_labels(str(tiny_export), "train")


def _peft_reference(root, task: str = "retrieval"):
    """Qwen2_5_VLModel of `root` with PEFT LoRA layers holding the task's adapter weights."""
    from safetensors.torch import load_file
    from transformers import Qwen2_5_VLForConditionalGeneration

    adapter = json.loads((root / "adapters" / "adapter_config.json").read_text())
    full = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(root)).eval()
    cfg = peft.LoraConfig(r=adapter["r"], lora_alpha=adapter["lora_alpha"], lora_dropout=0.0,
                          target_modules=r".*language_model.*\.(" + "|".join(TARGETS) + ")")  # fmt: skip
    wrapped = peft.get_peft_model(full, cfg).eval()
    weights = load_file(str(root / "adapters" / "adapter_model.safetensors"))
    layers = dict(wrapped.base_model.model.named_modules())
    n = 0
    for key, value in weights.items():
        if f".{task}.weight" not in key or "vector_projector" in key:
            continue
        name, ab = key.split(".lora_")[0], key.split(".lora_")[1][0]
        getattr(layers[module_name(name)], f"lora_{ab}")["default"].weight.data.copy_(value)
        n += 1
    assert n == 2 * 7 * 2  # A and B of 7 projections in 2 layers
    return wrapped.base_model.model.model  # the Qwen2_5_VLModel, LoRA layers inside


@pytest.mark.parametrize("layout", ["new", "old"])
def test_mean_pooled_embeddings_equal_the_adapted_architectures_own_forward(tmp_path, labels, layout):
    from PIL import Image
    from transformers import Qwen2_5_VLProcessor

    root = materialize_tiny_jina_v4(tmp_path / "jina", [*labels.captions, *TEXTS], layout=layout)
    bundle = load_jina_v4(str(root))
    assert bundle.adapter["n_merged"] == 14 and bundle.adapter["skipped"] == ["multi_vector_projector"]
    paths = labels.image_paths[:3]
    got_img, got_txt = encode_jina_images(bundle, paths, batch_size=2), encode_jina_texts(bundle, TEXTS)

    ref = _peft_reference(root)
    processor = Qwen2_5_VLProcessor.from_pretrained(str(root))
    cfg = json.loads((root / "config.json").read_text())
    start, end = cfg["vision_start_token_id"], cfg["vision_end_token_id"]
    for i, path in enumerate(paths):  # one image at a time: no padding
        with Image.open(path) as im:
            batch = processor(text=[IMAGE_PROMPT], images=[im.convert("RGB")], return_tensors="pt")
        with torch.no_grad():
            states = ref(**batch).last_hidden_state[0]
        ids = batch["input_ids"][0].tolist()
        lo, hi = ids.index(start), ids.index(end)
        assert hi - lo - 1 == int(batch["image_grid_thw"].prod()) // 4 > 0  # the merged patches between
        want = torch.nn.functional.normalize(states[lo : hi + 1].mean(0), dim=0)
        np.testing.assert_allclose(got_img[i].numpy(), want.numpy(), atol=2e-5)
    for i, text in enumerate(TEXTS):
        batch = processor(text=[TEXT_PREFIX + text], return_tensors="pt")
        with torch.no_grad():
            states = ref(**batch).last_hidden_state[0]
        want = torch.nn.functional.normalize(states.mean(0), dim=0)
        np.testing.assert_allclose(got_txt[i].numpy(), want.numpy(), atol=2e-5)


def test_the_adapter_changes_the_embeddings_and_bad_layouts_fail(tmp_path, labels):
    from training.baselines.jina_v4 import merge_task_adapter

    root = materialize_tiny_jina_v4(tmp_path / "jina", [*labels.captions, *TEXTS])
    bundle = load_jina_v4(str(root))
    (root / "adapters" / "adapter_model.safetensors").rename(root / "kept.safetensors")
    with pytest.raises(FileNotFoundError, match="adapter file missing"):
        load_jina_v4(str(root))
    (root / "kept.safetensors").rename(root / "adapters" / "adapter_model.safetensors")
    from transformers import Qwen2_5_VLForConditionalGeneration

    base = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(root)).eval()
    bundle_plain = type(bundle)(base.model, bundle.processor, bundle.vision_start, bundle.vision_end,
                                bundle.device, bundle.max_text_tokens)  # fmt: skip
    adapted, plain = encode_jina_texts(bundle, TEXTS), encode_jina_texts(bundle_plain, TEXTS)
    assert (adapted - plain).abs().max() > 1e-3
    with pytest.raises(ValueError, match="no lora_A/lora_B weights of task 'nope'"):
        merge_task_adapter(base, root / "adapters", "nope")
    cfg = json.loads((root / "config.json").read_text())
    (root / "config.json").write_text(json.dumps({**cfg, "single_vector_pool_strategy": "last"}))
    with pytest.raises(ValueError, match="only 'mean'"):
        load_jina_v4(str(root))


def test_the_zero_shot_family_scores_cosines_of_the_embeddings(tmp_path, labels):
    from training.evaluation.config import ZeroShotSection
    from training.evaluation.scoring.zero_shot import zero_shot_systems

    root = materialize_tiny_jina_v4(tmp_path / "jina", [*labels.captions, *TEXTS])
    paths, texts = labels.image_paths[:4], labels.captions[:5]
    scores, unavailable = zero_shot_systems([ZeroShotSection(row="Jina-v4", family="jina_v4", path=str(root))],
                                            paths, texts)  # fmt: skip
    assert unavailable == {}
    bundle = load_jina_v4(str(root))
    want = (encode_jina_images(bundle, paths) @ encode_jina_texts(bundle, texts).T).numpy()
    np.testing.assert_allclose(scores["Jina-v4"], want, atol=1e-5)
    with pytest.raises(ValueError, match="needs path"):
        ZeroShotSection(row="Jina-v4", family="jina_v4")
