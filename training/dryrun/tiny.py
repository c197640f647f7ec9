"""A tiny random-weight LLaVA-Next (Mistral text + CLIP vision) with a locally trained tokenizer.

Used by tests and dry runs instead of BGE-VL-MLLM-S1: same classes, same processor logic
(anyres tiling, image-newline tokens, CLS dropped by the "default" feature strategy), only sizes
differ. Nothing is downloaded: the BPE tokenizer is trained on the texts it is given.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from training.retriever.config import TinyModelConfig

log = logging.getLogger(__name__)

BASE_SPECIALS = ("<unk>", "<s>", "</s>", "<pad>", "<image>")
_SEED_TEXT = (
    "Represent this image under each of the following lens prompts. "
    "Represent this caption under each of the five lenses. <instruct> a photo of a cat on a mat; "
    "the sky feels calm and wide; an old street at night; coins, a rocket, a coffee cup."
)


def build_tiny_tokenizer(texts: Iterable[str], vocab_size: int):
    """Byte-level BPE trained on `texts`, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(BASE_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_SEED_TEXT, *texts], trainer)
    # Prepend BOS like the Mistral tokenizer does, so position 0 is never a content token.
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
    )


def _pinpoints(size: int) -> list[list[int]]:
    return [[size, size], [size, 2 * size], [2 * size, size], [2 * size, 2 * size]]


def build_tiny_processor(tokenizer, cfg: TinyModelConfig):
    from transformers import LlavaNextImageProcessor, LlavaNextProcessor

    size = cfg.vision_image_size
    image_processor = LlavaNextImageProcessor(
        size={"shortest_edge": size},
        crop_size={"height": size, "width": size},
        image_grid_pinpoints=_pinpoints(size),
    )
    return LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=cfg.patch_size,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # the CLIP CLS token, dropped by the "default" strategy
    )


def build_tiny_model(tokenizer, cfg: TinyModelConfig):
    import torch
    from transformers import (
        CLIPVisionConfig,
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        MistralConfig,
    )

    torch.manual_seed(cfg.seed)
    vision = CLIPVisionConfig(
        hidden_size=cfg.vision_hidden,
        intermediate_size=2 * cfg.vision_hidden,
        num_hidden_layers=cfg.vision_layers,
        num_attention_heads=2,
        image_size=cfg.vision_image_size,
        patch_size=cfg.patch_size,
        projection_dim=cfg.vision_hidden,
    )
    text = MistralConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.text_hidden,
        intermediate_size=2 * cfg.text_hidden,
        num_hidden_layers=cfg.text_layers,
        num_attention_heads=cfg.text_heads,
        num_key_value_heads=cfg.text_kv_heads,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config = LlavaNextConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_grid_pinpoints=_pinpoints(cfg.vision_image_size),
        image_seq_length=(cfg.vision_image_size // cfg.patch_size) ** 2,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
    )
    return LlavaNextForConditionalGeneration(config)


def materialize_tiny_base(out_dir: str | Path, texts: Iterable[str], cfg: TinyModelConfig) -> Path:
    """Write a tiny base model + processor to `out_dir` (once) and return the directory.

    After this, the tiny base is loaded exactly like a production checkpoint from a local path.
    """
    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "processor_config.json").exists():
        return out
    tokenizer = build_tiny_tokenizer(texts, cfg.vocab_size)
    processor = build_tiny_processor(tokenizer, cfg)
    model = build_tiny_model(tokenizer, cfg)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    log.info("tiny random-weight base model written to %s", out)
    return out
