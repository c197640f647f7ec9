"""Inputs of an evaluation run: the export split as index arrays and the lens model's encodings.

Encodings come from a `lenses encode` folder (`encodings_dir`) or are computed here with the
retriever of a training config (`train_config`, latest checkpoint of its run unless
`checkpoint` names one; an untrained model when there is none, which is logged loudly).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from training.evaluation.config import EvalConfig
from training.evaluation.types import DiscardedTexts, EncodedSplit, SplitLabels

log = logging.getLogger(__name__)


def split_labels(export_dir: str, split: str) -> SplitLabels:
    """Every image of the split is a gallery item, also those without captions (never dropped)."""
    from training.loop.data import read_export
    from training.retriever.lenses import lens_index

    images, captions, prompts = read_export(export_dir, split)
    if captions.empty:
        raise ValueError(f"split {split!r} of {export_dir} has no captions to evaluate")
    images = images.sort_values("image_id").reset_index(drop=True)
    captions = captions.sort_values("text_id").reset_index(drop=True)
    row_of = {str(i): r for r, i in enumerate(images["image_id"])}
    orphans = sorted({str(i) for i in captions["image_id"]} - set(row_of))
    if orphans:
        raise ValueError(f"{len(orphans)} {split} captions belong to no {split} image, e.g. {orphans[:3]}")
    prompts = prompts.assign(_l=[lens_index(str(x)) for x in prompts["lens"]])
    prompts = prompts[prompts["image_id"].astype(str).isin(row_of)].sort_values(["image_id", "_l", "text_id"])
    sets: list[list[tuple[str, int]]] = [[] for _ in row_of]
    for image_id, text, lens in zip(prompts["image_id"], prompts["text"], prompts["_l"], strict=True):
        sets[row_of[str(image_id)]].append((str(text), int(lens)))
    return SplitLabels(
        image_ids=[str(i) for i in images["image_id"]],
        image_paths=[str(p) for p in images["path"]],
        caption_ids=[str(i) for i in captions["text_id"]],
        captions=[str(t) for t in captions["text"]],
        caption_image=np.array([row_of[str(i)] for i in captions["image_id"]]),
        caption_lens=np.array([lens_index(str(x)) for x in captions["lens"]]),
        prompt_sets=sets,
        prompts=[str(t) for t in prompts["text"]],
        prompt_image=np.array([row_of[str(i)] for i in prompts["image_id"]], dtype=np.int64),
        prompt_lens=prompts["_l"].to_numpy(dtype=np.int64),
    )


def discarded_captions(export_dir: str, build_run: str | None, labels: SplitLabels) -> DiscardedTexts:
    """Captions of the split's images that a validator discarded, with their texts and rejection
    rows; per image the visual validator's (Listing 5) first, then the text-only one's (Listing 4).
    The export's `rejections.parquet` names them (stage validate or visual_validate, reason
    validator_discarded) without their text, which the build run's generate stage holds
    (`build_run`, default the export folder's parent). Missing files give no texts and a note.
    """
    from lenses_data import io
    from lenses_data.annotation.validation import TEXT_VALIDATOR, VALIDATOR_DISCARDED, VISUAL_VALIDATOR
    from lenses_data.schemas import LensText
    from training.retriever.lenses import lens_index

    STAGE, VISUAL_STAGE = TEXT_VALIDATOR.stage, VISUAL_VALIDATOR.stage

    def none(note: str) -> DiscardedTexts:
        return DiscardedTexts([], np.zeros(0, np.int64), np.zeros(0, np.int64), note)

    table = Path(export_dir) / "rejections.parquet"
    if not table.is_file():
        return none(f"no {table}")
    rej = pd.read_parquet(table, columns=["stage", "record_id", "reason", "message", "image_id"])
    row_of = {i: r for r, i in enumerate(labels.image_ids)}
    rej = rej[rej["stage"].isin((STAGE, VISUAL_STAGE)) & (rej["reason"] == VALIDATOR_DISCARDED)]
    rej = rej[rej["image_id"].astype(str).isin(row_of)]
    run = Path(build_run) if build_run else Path(export_dir).resolve().parent
    if rej.empty or not io.stage_shards(run, "generate", require_complete=False):
        return none(f"{len(rej)} discarded texts of this split in {table}; generate stage of {run}: "
                    f"{'not needed' if rej.empty else 'not found'}")  # fmt: skip
    texts = io.read_stage(run, "generate", LensText, require_complete=False)
    texts = texts[texts["kind"] == "caption"].drop_duplicates("text_id").set_index("text_id")
    found = rej[rej["record_id"].isin(texts.index)].copy()
    found["text_first"] = found["stage"] != VISUAL_STAGE  # the visual validator's discards come first
    found = found.sort_values(["image_id", "text_first", "record_id"]).drop_duplicates("record_id")
    rows = texts.loc[found["record_id"]]
    return DiscardedTexts(
        [str(t) for t in rows["text"]],
        np.array([row_of[str(i)] for i in found["image_id"]], dtype=np.int64),
        np.array([lens_index(str(x)) for x in rows["lens"]], dtype=np.int64),
        f"{len(found)} discarded captions from {table} with texts from {run} "
        f"({len(rej) - len(found)} discarded texts not captions or not in the generate stage)",
        [str(i) for i in found["record_id"]], [str(x) for x in found["stage"]],
        [f"{r}: {m}" for r, m in zip(found["reason"], found["message"], strict=True)],
    )  # fmt: skip


def _pad_slots(
    parts: list[torch.Tensor], lens_parts: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(p.shape[1] for p in parts)
    slots = torch.cat([torch.nn.functional.pad(p, (0, 0, 0, width - p.shape[1])) for p in parts])
    lens = torch.cat([torch.nn.functional.pad(x, (0, width - x.shape[1]), value=-1) for x in lens_parts])
    return slots, lens


@torch.no_grad()
def encode_texts(
    retriever, collator, items: list[str], batch_size: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    """(slots [n, 5, d], global [n, d]) of texts encoded like captions (all five lens tags)."""
    device = next(retriever.parameters()).device
    out_slots, out_glob = [], []
    for i in range(0, len(items), batch_size):
        t = collator.captions(items[i : i + batch_size])
        emb = retriever.encode_captions(t["txt_input_ids"].to(device), t["txt_attention_mask"].to(device))
        out_slots.append(emb.slots.cpu())
        out_glob.append(emb.global_.cpu())
    return torch.cat(out_slots), torch.cat(out_glob)


@torch.no_grad()
def encode_in_process(
    retriever, processor, data_cfg, labels: SplitLabels, batch_size: int = 8
) -> EncodedSplit:
    """Encode the split with a LensRetriever (images with their prompts; texts with five lens tags)."""
    from training.loop.data import load_image
    from training.loop.inputs import Collator

    retriever.eval()
    device = next(retriever.parameters()).device
    collator = Collator(processor, data_cfg, lens_mode=True)
    slots, lens, glob = [], [], []
    for i in range(0, len(labels.image_ids), batch_size):
        paths, sets = labels.image_paths[i : i + batch_size], labels.prompt_sets[i : i + batch_size]
        b = collator.images([load_image(p, data_cfg.image_size) for p in paths], sets)
        emb = retriever.encode_images(
            b["img_input_ids"].to(device), b["img_attention_mask"].to(device), b["pixel_values"].to(device),
            b["image_sizes"].to(device), b["img_slot_lens"].to(device),
        )  # fmt: skip
        slots.append(emb.slots.cpu())
        lens.append(emb.slot_lens.cpu())
        glob.append(emb.global_.cpu())
    img_slots, img_lens = _pad_slots(slots, lens)

    txt_slots, txt_global = encode_texts(retriever, collator, labels.captions, 4 * batch_size)
    prompt_global = (
        encode_texts(retriever, collator, labels.prompts, 4 * batch_size)[1] if labels.prompts else None
    )
    return EncodedSplit(
        img_slots, img_lens, torch.cat(glob), txt_slots, txt_global, labels.caption_image, labels.caption_lens,
        prompt_global, labels.prompt_image if labels.prompts else None, labels.prompt_lens if labels.prompts else None,
    )  # fmt: skip


def retriever_from_train_config(cfg: EvalConfig):
    """(retriever, processor, data config) of cfg.train_config with its checkpoint loaded if any."""
    from training.loop.checkpoint import latest_checkpoint, load_weights
    from training.loop.data import load_records
    from training.loop.dist import DistContext
    from training.loop.train import resolve_base
    from training.retriever.build import build_retriever
    from training.retriever.config import load_train_config

    tcfg = load_train_config(cfg.train_config, {"data": {"export_dir": cfg.export_dir}})
    if tcfg.loss.mode != "lens":
        raise ValueError(
            "the lens model must be trained with loss.mode=lens; score global-only runs as a baseline"
        )
    records = load_records(tcfg.data.export_dir, tcfg.data.split)
    base = resolve_base(tcfg, records, DistContext())
    retriever, processor, _ = build_retriever(tcfg, base, torch.device("cpu"))
    ckpt = Path(cfg.checkpoint) if cfg.checkpoint else latest_checkpoint(tcfg.run.out_dir)
    if ckpt is None:
        log.warning("NO CHECKPOINT in %s: evaluating an UNTRAINED retriever", tcfg.run.out_dir)
    else:
        load_weights(ckpt, retriever)
        log.info("evaluating checkpoint %s", ckpt)
    return retriever, processor, tcfg.data, (str(ckpt) if ckpt else None)


def read_encodings(encodings_dir: str | Path, labels: SplitLabels) -> EncodedSplit:
    """A `lenses encode` folder (training.evaluation.encode layout) as an EncodedSplit in the export's image order."""
    import json

    from training.evaluation.encode import load_encoded

    root = Path(encodings_dir)
    manifest_path = root / "manifest.json"
    if not manifest_path.exists():
        raise FileNotFoundError(f"{root} is not a finished `lenses encode` folder (no manifest.json)")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("mode", "lens") != "lens":
        raise ValueError(
            f"{root} holds {manifest.get('mode')!r}-mode encodings; the lens model needs mode 'lens'"
        )
    img, cap = load_encoded(root, "images"), load_encoded(root, "captions")
    row_of = {str(i): r for r, i in enumerate(img["ids"])}
    unknown = sorted({str(i) for i in cap["image_ids"]} - set(row_of))
    if unknown:
        raise ValueError(
            f"{len(unknown)} captions refer to images missing from {root}/images, e.g. {unknown[:3]}"
        )
    if [str(i) for i in img["ids"]] != labels.image_ids or [str(i) for i in cap["ids"]] != labels.caption_ids:
        raise ValueError(
            f"encodings in {root} (split {manifest.get('split')!r}) do not match the export split"
        )
    # float16 stays float16 here: scoring converts block by block, keeping memory bounded.
    return EncodedSplit(
        img_slots=torch.from_numpy(img["slots"]),
        img_slot_lens=torch.from_numpy(img["slot_lens"].astype(np.int64)),
        img_global=torch.from_numpy(img["global"]),
        txt_slots=torch.from_numpy(cap["slots"]),
        txt_global=torch.from_numpy(cap["global"]),
        caption_image=np.array([row_of[str(i)] for i in cap["image_ids"]]),
        caption_lens=cap["lens"].astype(np.int64),
    )


def add_prompt_encodings(
    enc: EncodedSplit, retriever, processor, data_cfg, labels: SplitLabels
) -> EncodedSplit:
    """Prompt globals for text-only retrieval (prompts encoded as texts with the lens tags)."""
    from training.loop.inputs import Collator

    if labels.prompts:
        collator = Collator(processor, data_cfg, lens_mode=True)
        enc.prompt_global = encode_texts(retriever, collator, labels.prompts)[1]
        enc.prompt_image, enc.prompt_lens = labels.prompt_image, labels.prompt_lens
    return enc


def lens_model_encodings(cfg: EvalConfig, labels: SplitLabels) -> tuple[EncodedSplit, dict]:
    """Encodings of the lens model and a description of where they came from."""
    from training.evaluation.encode import encode_split, load_for_inference
    from training.loop.checkpoint import latest_checkpoint
    from training.retriever.config import load_train_config

    want_prompts = cfg.baselines.text_only
    if cfg.encodings_dir:
        enc = read_encodings(cfg.encodings_dir, labels)
        if want_prompts and cfg.checkpoint:
            retriever, processor, tcfg = load_for_inference(cfg.checkpoint, torch.device("cpu"))
            add_prompt_encodings(enc, retriever, processor, tcfg.data, labels)
        return enc, {"encodings_dir": cfg.encodings_dir, "checkpoint": cfg.checkpoint}
    if cfg.checkpoint is None and cfg.train_config is None:
        raise ValueError("set encodings_dir, checkpoint or train_config in the evaluation config")
    ckpt = cfg.checkpoint
    if ckpt is None:
        found = latest_checkpoint(load_train_config(cfg.train_config).run.out_dir)
        ckpt = str(found) if found else None
    if ckpt is not None:  # the same code path as `lenses encode`, cached under out_dir
        enc_dir = Path(cfg.out_dir) / "encodings"
        encode_split(ckpt, cfg.export_dir, cfg.split, enc_dir, device="cpu")
        enc = read_encodings(enc_dir, labels)
        if want_prompts:
            retriever, processor, tcfg = load_for_inference(ckpt, torch.device("cpu"))
            add_prompt_encodings(enc, retriever, processor, tcfg.data, labels)
        return enc, {"checkpoint": ckpt, "encodings_dir": str(enc_dir)}
    retriever, processor, data_cfg, _ = retriever_from_train_config(cfg)
    enc = encode_in_process(retriever, processor, data_cfg, labels)
    if not want_prompts:
        enc.prompt_global = None
    return enc, {"checkpoint": None, "untrained": True, "train_config": cfg.train_config}


def global_only_scores(encodings_dir: str, labels: SplitLabels) -> np.ndarray:
    """Score matrix of a global-only fine-tuned model from its `lenses encode` folder."""
    from training.baselines.global_only import global_scores
    from training.evaluation.encode import load_encoded

    img, cap = load_encoded(encodings_dir, "images"), load_encoded(encodings_dir, "captions")
    if [str(i) for i in img["ids"]] != labels.image_ids or [str(i) for i in cap["ids"]] != labels.caption_ids:
        raise ValueError(f"global-only encodings in {encodings_dir} do not match the evaluated split")
    return global_scores(torch.from_numpy(img["global"]), torch.from_numpy(cap["global"]))


def open_clip_model(cfg: EvalConfig):
    from training.baselines.open_clip import load_open_clip
    from training.evaluation.config import CONFIG_DIR

    oc = cfg.baselines.open_clip
    arch = oc.model_config_path
    if arch and not Path(arch).is_file() and (CONFIG_DIR / Path(arch).name).is_file():
        arch = str(CONFIG_DIR / Path(arch).name)  # bundled configs work from any working directory
    return load_open_clip(oc.model_name, pretrained=oc.pretrained, model_config=arch, device=oc.device)


def open_clip_scores(model_bundle, cfg: EvalConfig, image_paths: list[str], texts: list[str]) -> np.ndarray:
    """Zero-shot global cosine scores of an open_clip model."""
    from training.baselines.global_only import global_scores
    from training.baselines.open_clip import encode_open_clip

    img, txt = encode_open_clip(
        *model_bundle, image_paths, texts, batch_size=cfg.baselines.open_clip.batch_size
    )
    return global_scores(img, txt)
