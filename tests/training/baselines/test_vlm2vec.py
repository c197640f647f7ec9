"""VLM2Vec on LLaVA-Next (supp. Tables 1-2), on the tiny random LLaVA-Next of the training tests.

The reference is the model's own forward on each input alone (no padding): the final hidden
state of its last token, unit-normalised, VLM2Vec's `pooling=last`, `normalize=True`.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from training.baselines.vlm2vec import (  # noqa: E402
    IMAGE_TEXT,
    encode_vlm2vec_images,
    encode_vlm2vec_texts,
    last_token,
    load_vlm2vec,
)
from training.evaluation.config import ZeroShotSection  # noqa: E402
from training.evaluation.inputs import split_labels  # noqa: E402
from training.evaluation.scoring.zero_shot import zero_shot_systems  # noqa: E402

TEXTS = ["a calm cat", "an old street at night with rain and a lot of light", "so bright"]


def _alone(bundle, **inputs) -> np.ndarray:
    with torch.no_grad():
        states = bundle.model(**inputs, output_hidden_states=True).hidden_states[-1][0]
    return torch.nn.functional.normalize(states[-1], dim=0).numpy()


def test_embeddings_are_the_last_token_of_the_models_own_forward(tiny_export, tiny_base):
    from PIL import Image

    labels = split_labels(str(tiny_export), "train")
    bundle = load_vlm2vec(str(tiny_base))
    paths = labels.image_paths[:3]
    img, txt = encode_vlm2vec_images(bundle, paths, batch_size=2), encode_vlm2vec_texts(bundle, TEXTS)
    for i, path in enumerate(paths):
        with Image.open(path) as im:
            inputs = bundle.processor(text=[IMAGE_TEXT], images=[im.convert("RGB")], return_tensors="pt")
        np.testing.assert_allclose(img[i].numpy(), _alone(bundle, **inputs), atol=2e-5)
    for i, text in enumerate(TEXTS):
        inputs = bundle.processor.tokenizer([text], return_tensors="pt")
        np.testing.assert_allclose(txt[i].numpy(), _alone(bundle, **inputs), atol=2e-5)
    scores, unavailable = zero_shot_systems(
        [ZeroShotSection(row="VLM2Vec", family="vlm2vec_llava_next", path=str(tiny_base))], paths, TEXTS
    )
    assert unavailable == {}
    np.testing.assert_allclose(scores["VLM2Vec"], (img @ txt.T).numpy(), atol=1e-5)


def test_last_token_reads_either_padding_side_and_lora_only_directories_fail(tmp_path):
    states = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    norm = torch.nn.functional.normalize
    assert torch.allclose(last_token(states, right), norm(states[[0, 1], [1, 3]], dim=-1))
    assert torch.allclose(last_token(states, left), norm(states[[0, 1], [3, 3]], dim=-1))
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="merge the adapter"):
        load_vlm2vec(str(tmp_path))
