"""Tiny random-weight zero-shot baselines saved like real checkpoints, for tests and dry runs.

`materialize_tiny_blip2` writes a `Blip2ForImageTextRetrieval` (the class of
Salesforce/blip2-itm-vit-g) and `materialize_tiny_hf_clip` a `CLIPModel` (the class of
BAAI/BGE-VL-large), each with a locally trained tokenizer and an image processor, into a
directory that `training.baselines.hf_zero_shot.load_hf_zero_shot` reads like the real one.
Nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from training.dryrun.tiny import build_tiny_tokenizer

IMAGE_SIZE = 32
_VISION = {
    "hidden_size": 32,
    "intermediate_size": 37,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "image_size": IMAGE_SIZE,
    "patch_size": 8,
}


def _tokenizer(texts: Iterable[str], *, append_eos: bool):
    from tokenizers import processors

    tok = build_tiny_tokenizer(texts, 300)
    if append_eos:  # CLIP pools the first EOS, so every text must end with one
        tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", tok.bos_token_id), ("</s>", tok.eos_token_id)]
        )
    return tok


def materialize_tiny_blip2(out_dir: str | Path, texts: Iterable[str], seed: int = 0) -> Path:
    import torch
    from transformers import Blip2Config, Blip2ForImageTextRetrieval, BlipImageProcessor

    out = Path(out_dir)
    tok = _tokenizer(texts, append_eos=False)
    qformer = {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 37,
        "encoder_hidden_size": 32,
        "vocab_size": len(tok),
        "max_position_embeddings": 64,
        "use_qformer_text_input": True,  # as blip2-itm-vit-g: the Q-Former also encodes text
        "pad_token_id": tok.pad_token_id,
    }
    text = {"model_type": "opt", "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "ffn_dim": 32, "vocab_size": len(tok), "word_embed_proj_dim": 16}  # fmt: skip
    config = Blip2Config(
        vision_config=_VISION,
        qformer_config=qformer,
        text_config=text,
        num_query_tokens=4,
        image_text_hidden_size=16,
    )
    torch.manual_seed(seed)
    Blip2ForImageTextRetrieval(config).save_pretrained(out)
    tok.save_pretrained(out)
    BlipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}).save_pretrained(out)
    return out


def materialize_tiny_hf_clip(out_dir: str | Path, texts: Iterable[str], seed: int = 0) -> Path:
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    out = Path(out_dir)
    tok = _tokenizer(texts, append_eos=True)
    text = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1, "num_attention_heads": 2,
            "vocab_size": len(tok), "max_position_embeddings": 40, "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}  # fmt: skip
    config = CLIPConfig(text_config=text, vision_config=_VISION, projection_dim=16)
    torch.manual_seed(seed)
    CLIPModel(config).save_pretrained(out)
    tok.save_pretrained(out)
    size = {"shortest_edge": IMAGE_SIZE}
    CLIPImageProcessor(size=size, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}).save_pretrained(out)
    return out
