"""Encode a split for evaluation: image slots (with lens labels), caption slots, and globals.

Layout under OUT (one .npz per chunk, written atomically; finished chunks are skipped on rerun):
  OUT/images/chunk-00000.npz    ids [n] (image_id), slots [n, S, d] float16, slot_lens [n, S] int8,
                                global [n, d] float16
  OUT/captions/chunk-00000.npz  ids [n] (text_id), image_ids [n], lens [n] int8 (annotated label,
                                for evaluation only: it is NOT given to the model), slots [n, 5, d],
                                slot_lens [n, 5] (all five active, 0-4), global [n, d]
  OUT/manifest.json             checkpoint, split, counts, dims (written last)
Rows keep the export's order sorted by id, so chunk files are stable across reruns.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from training.loop.checkpoint import load_weights, read_state
from training.retriever.config import TrainConfig
from training.retriever.lenses import lens_index

log = logging.getLogger(__name__)


def load_for_inference(checkpoint: str | Path, device: torch.device):
    """Rebuild the retriever from its checkpoint (base path + config recorded in state.json)."""
    from training.retriever.build import build_retriever

    state = read_state(checkpoint)
    cfg = TrainConfig.model_validate(state["config"])
    retriever, processor, ids = build_retriever(cfg, state["base_path"], device)
    load_weights(checkpoint, retriever)
    retriever.eval()
    return retriever, processor, cfg


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _prompt_sets(prompts) -> dict[str, list[tuple[str, int]]]:
    """image_id -> [(prompt, lens)] in the training order (lens, then text_id)."""
    ordered = prompts.assign(_l=[lens_index(str(x)) for x in prompts["lens"]]).sort_values(["_l", "text_id"])
    return {
        str(i): [(str(t), int(c)) for t, c in zip(g["text"], g["_l"], strict=True)]
        for i, g in ordered.groupby("image_id", observed=True)
    }


def _claim_out_dir(out: Path, checkpoint, split: str, chunk_size: int) -> None:
    """Finished chunks are only reused for the same checkpoint, split and chunk size."""
    out.mkdir(parents=True, exist_ok=True)
    claim = {"checkpoint": str(Path(checkpoint).resolve()), "split": split, "chunk_size": chunk_size}
    path = out / "encode.json"
    if path.exists() and json.loads(path.read_text()) != claim:
        raise ValueError(
            f"{out} holds encodings of {path.read_text().strip()}; use a fresh --out for {claim}"
        )
    path.write_text(json.dumps(claim, indent=2))


def _strings(series) -> np.ndarray:
    """Fixed-width unicode array (loads without pickle, unlike pandas' object strings)."""
    return np.asarray([str(x) for x in series], dtype=np.str_)


def _chunks(n: int, size: int):
    for k, start in enumerate(range(0, n, size)):
        yield k, start, min(start + size, n)


def _pad_stack(parts: list[np.ndarray], width: int, fill) -> np.ndarray:
    out = []
    for p in parts:
        pad = [(0, 0)] * p.ndim
        pad[1] = (0, width - p.shape[1])
        out.append(np.pad(p, pad, constant_values=fill))
    return np.concatenate(out)


def _run_chunks(
    kind: str, n: int, out_dir: Path, chunk_size: int, batch_size: int, encode_batch: Callable, meta: Callable
) -> int:
    """Encode rows [0, n) chunk by chunk; `encode_batch(lo, hi)` -> (slots, slot_lens, global) arrays."""
    folder = out_dir / kind
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for k, lo, hi in _chunks(n, chunk_size):
        path = folder / f"chunk-{k:05d}.npz"
        if path.exists():
            continue
        parts = [encode_batch(b, min(b + batch_size, hi)) for b in range(lo, hi, batch_size)]
        width = max(p[0].shape[1] for p in parts)
        _save_npz(
            path,
            slots=_pad_stack([p[0] for p in parts], width, 0).astype(np.float16),
            slot_lens=_pad_stack([p[1] for p in parts], width, -1).astype(np.int8),
            **{"global": np.concatenate([p[2] for p in parts]).astype(np.float16)},
            **meta(lo, hi),
        )
        written += 1
        log.info("%s chunk %d (%d rows) written", kind, k, hi - lo)
    return written


def encode_split(
    checkpoint: str | Path,
    export_dir: str | Path,
    split: str,
    out_dir: str | Path,
    *,
    batch_size: int = 16,
    chunk_size: int = 1024,
    device: str = "auto",
) -> dict:
    """Encode every image and caption of `split`; returns the manifest dict."""
    from training.loop.data import load_image, read_export
    from training.loop.inputs import Collator, to_device
    from training.retriever.build import resolve_device

    dev = resolve_device(device)
    out = Path(out_dir)
    _claim_out_dir(out, checkpoint, split, chunk_size)
    retriever, processor, cfg = load_for_inference(checkpoint, dev)
    collator = Collator(processor, cfg.data, lens_mode=cfg.loss.mode == "lens")
    images, captions, prompts = read_export(export_dir, split)
    images = images.sort_values("image_id").reset_index(drop=True)
    captions = captions.sort_values("text_id").reset_index(drop=True)
    prompt_sets = _prompt_sets(prompts)

    @torch.no_grad()
    def enc_images(lo: int, hi: int):
        rows = images.iloc[lo:hi]
        pils = [load_image(p, cfg.data.image_size) for p in rows["path"]]
        b = to_device(collator.images(pils, [prompt_sets.get(str(i), []) for i in rows["image_id"]]), dev)
        e = retriever.encode_images(
            b["img_input_ids"],
            b["img_attention_mask"],
            b["pixel_values"],
            b["image_sizes"],
            b["img_slot_lens"],
        )
        return e.slots.cpu().numpy(), e.slot_lens.cpu().numpy(), e.global_.cpu().numpy()

    @torch.no_grad()
    def enc_captions(lo: int, hi: int):
        b = to_device(collator.captions([str(t) for t in captions["text"].iloc[lo:hi]]), dev)
        e = retriever.encode_captions(
            b["txt_input_ids"], b["txt_attention_mask"], None
        )  # all five lenses active
        return e.slots.cpu().numpy(), e.slot_lens.cpu().numpy(), e.global_.cpu().numpy()

    n_img = _run_chunks("images", len(images), out, chunk_size, batch_size, enc_images,
                        lambda lo, hi: {"ids": _strings(images["image_id"].iloc[lo:hi])})  # fmt: skip
    n_txt = _run_chunks("captions", len(captions), out, chunk_size, batch_size, enc_captions,
                        lambda lo, hi: {"ids": _strings(captions["text_id"].iloc[lo:hi]),
                                        "image_ids": _strings(captions["image_id"].iloc[lo:hi]),
                                        "lens": np.array([lens_index(str(x)) for x in captions["lens"].iloc[lo:hi]], dtype=np.int8)})  # fmt: skip
    manifest = {
        "checkpoint": str(checkpoint), "split": split, "mode": cfg.loss.mode, "images": len(images),
        "captions": len(captions), "chunk_size": chunk_size, "chunks_written_now": {"images": n_img, "captions": n_txt},
    }  # fmt: skip
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def load_encoded(out_dir: str | Path, kind: str) -> dict[str, np.ndarray]:
    """Concatenate all chunks of `kind` ("images" or "captions"); slots padded to a common S."""
    files = sorted((Path(out_dir) / kind).glob("chunk-*.npz"))
    files = [f for f in files if not f.name.endswith(".tmp.npz")]
    if not files:
        raise FileNotFoundError(f"no encoded {kind} chunks under {out_dir}")
    parts = [dict(np.load(f, allow_pickle=False)) for f in files]
    width = max(p["slots"].shape[1] for p in parts)
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k not in ("slots", "slot_lens")}
    out["slots"] = _pad_stack([p["slots"] for p in parts], width, 0)
    out["slot_lens"] = _pad_stack([p["slot_lens"] for p in parts], width, -1)
    return out
