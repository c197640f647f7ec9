"""A tiny random-weight Jina-v4 directory in the published layout, for tests and dry runs.

jinaai/jina-embeddings-v4 ships a Qwen2.5-VL checkpoint whose config.json adds the Jina fields
(`single_vector_pool_strategy`, `task_names`, ...), the Qwen2.5-VL processor files, and
`adapters/` with one PEFT LoRA per task and layer (`adapter_config.json`,
`adapter_model.safetensors`, keys `base_model.model.<module>.lora_A.<task>.weight`). This writes
the same files at toy size (locally trained tokenizer with Qwen's special tokens, 56x56 images
= 4 merged patches), so `training.baselines.jina_v4.load_jina_v4` reads it like the real one.
`adapter_layout` picks the module paths the adapter keys use: `new` (transformers' current
`model.language_model.*`, `model.visual.*`) or `old` (`model.layers.*`, `visual.*`). Nothing is
downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from training.dryrun.tiny import build_tiny_tokenizer

QWEN_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                 "<|video_pad|>")  # fmt: skip
TASKS = ("retrieval", "text-matching", "code")
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PIXELS = 56 * 56


def qwen_like_tokenizer(texts: Iterable[str]):
    """The tiny BPE tokenizer with Qwen2.5-VL's special tokens, <|image_pad|> as the image token."""
    from transformers import PreTrainedTokenizerFast

    backend = build_tiny_tokenizer(texts, 300).backend_tokenizer
    backend.add_special_tokens(list(QWEN_SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
    )  # fmt: skip


def tiny_jina_config(tokenizer):
    from transformers import Qwen2_5_VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    text = {"vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
            "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}}  # fmt: skip
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 32,
              "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 56,
              "fullatt_block_indexes": [1]}  # fmt: skip
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )  # fmt: skip
    # The fields JinaEmbeddingsV4Config adds to Qwen2_5_VLConfig.
    config.single_vector_pool_strategy = "mean"
    config.multi_vector_projector_dim = 8
    config.task_names = list(TASKS)
    config.matryoshka_dims = [8, 16, 32]
    config.architectures = ["JinaEmbeddingsV4Model"]
    return config


def _old_layout(name: str) -> str:
    return name.replace("model.language_model.", "model.", 1).replace("model.visual.", "visual.", 1)


def write_adapters(
    model, out: Path, *, r: int = 4, lora_alpha: float = 8.0, layout: str = "new", seed: int = 1
) -> None:
    """adapters/ with random LoRA weights for every task on the language model's projections."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, layer in model.named_modules():
        if not (isinstance(layer, torch.nn.Linear) and name.startswith("model.language_model.")):
            continue
        if name.rsplit(".", 1)[-1] not in TARGETS:
            continue
        key = f"base_model.model.{_old_layout(name) if layout == 'old' else name}"
        for task in TASKS:
            tensors[f"{key}.lora_A.{task}.weight"] = 0.2 * torch.randn(r, layer.in_features, generator=g)
            tensors[f"{key}.lora_B.{task}.weight"] = 0.2 * torch.randn(layer.out_features, r, generator=g)
    tensors["base_model.model.multi_vector_projector.lora_A.retrieval.weight"] = torch.zeros(r, 32)
    tensors["base_model.model.multi_vector_projector.lora_B.retrieval.weight"] = torch.zeros(8, r)
    (out / "adapters").mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapters" / "adapter_model.safetensors"))
    cfg = {"peft_type": "LORA", "r": r, "lora_alpha": lora_alpha, "lora_dropout": 0.1, "use_rslora": False,
           "target_modules": "(.*(model).*(down_proj|gate_proj|up_proj|k_proj|q_proj|v_proj|o_proj).*$)"}  # fmt: skip
    (out / "adapters" / "adapter_config.json").write_text(json.dumps(cfg))


def materialize_tiny_jina_v4(
    out_dir: str | Path, texts: Iterable[str], *, layout: str = "new", seed: int = 0
) -> Path:
    """Write the tiny model, processor and adapters to `out_dir`; return it."""
    import torch
    from transformers import (
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    out = Path(out_dir)
    tok = qwen_like_tokenizer(texts)
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(tiny_jina_config(tok))
    model.save_pretrained(out)
    sizes = {"min_pixels": PIXELS, "max_pixels": PIXELS}
    Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(**sizes),
        tokenizer=tok,
        video_processor=Qwen2VLVideoProcessor(**sizes),
    ).save_pretrained(out)
    write_adapters(model, out, layout=layout)
    return out
