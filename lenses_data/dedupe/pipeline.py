"""The dedupe computation on an in-memory table of candidate images (no run-dir I/O here).

Images are processed in image-id order, so the result does not depend on shard layout or
input order: the same inputs and config always give the same groups and survivors.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lenses_data.config.dedupe import DedupeConfig
from lenses_data.dedupe.groups import Thresholds, build_groups, combine_pairs

log = logging.getLogger(__name__)

STAGE = "dedupe"
REASON = {"phash": "near_duplicate_phash", "both": "near_duplicate_phash", "clip": "near_duplicate_clip",
          "phash_crop": "near_duplicate_crop"}  # fmt: skip


@dataclass
class DedupeResult:
    records: pd.DataFrame  # DedupeRecord columns
    pairs: pd.DataFrame  # DedupePair columns
    rejections: list[dict[str, Any]]
    embeddings: np.ndarray | None  # float16, rows aligned with `records`
    summary: dict[str, Any] = field(default_factory=dict)


def _failure(row: dict, reason: str, message: str) -> dict[str, Any]:
    return {
        "stage": STAGE,
        "record_id": row["image_id"],
        "reason": reason,
        "message": message,
        "source": row.get("source"),
        "image_id": row["image_id"],
    }


def _hash_step(frame: pd.DataFrame, config: DedupeConfig, rejections: list) -> pd.DataFrame:
    """Hashes stored by ingest where they are of the current version; the rest hashed on demand
    (run directories ingested before hashes were stored, or another `hash_kind`)."""
    from lenses_data.dedupe.hashing import HASH_VERSION, hash_files, hash_images

    if config.hash_kind != "phash":  # stored codes are pHashes: whole-image signal only
        results = hash_images(frame["path"].tolist(), config.hash_kind, config.hash_workers)
        codes = [None if r.error else {"phash": r.value} for r in results]
        errors = [r.error for r in results]
    else:
        version = frame["hash_version"] if "hash_version" in frame else pd.Series(None, index=frame.index)
        stale = np.flatnonzero((version != HASH_VERSION).to_numpy())
        codes = [None] * len(frame)
        errors: list[str | None] = [None] * len(frame)
        for row in np.flatnonzero((version == HASH_VERSION).to_numpy()):
            codes[row] = {k: frame.at[row, k] for k in ("phash", "phash_crops", "dhashes")}
        if len(stale):
            log.info("dedupe: %d of %d images have no stored hashes; hashing them", len(stale), len(frame))
        fresh = hash_files(frame["path"].iloc[stale].tolist(), config.hash_workers)
        for row, (value, error) in zip(stale, fresh, strict=True):
            codes[row], errors[row] = value, error
    for row, error in zip(frame.to_dict(orient="records"), errors, strict=True):
        if error is not None:
            rejections.append(_failure(row, "hash_failed", f"{config.hash_kind} failed: {error}"))
    ok = np.array([e is None for e in errors], dtype=bool)
    kept = [c for c in codes if c is not None]
    frame = frame[ok].reset_index(drop=True)[["image_id", "path", "width", "height", "source"]]
    frame["phash"] = np.array([c["phash"] for c in kept], dtype=np.int64)
    if config.hash_kind == "phash":
        frame["crop_codes"] = [[c["phash"], *c["phash_crops"]] for c in kept]
        frame["dhashes"] = [list(c["dhashes"]) for c in kept]
    return frame


def _crop_step(frame: pd.DataFrame, config: DedupeConfig):
    if not config.crop_signal or "crop_codes" not in frame or len(frame) < 2:
        return None, None
    from lenses_data.dedupe.crops import crop_pairs

    phashes = np.array(frame["crop_codes"].tolist(), dtype=np.int64).reshape(len(frame), -1)
    dhashes = np.array(frame["dhashes"].tolist(), dtype=np.int64).reshape(len(frame), -1)
    pairs, aligned, report = crop_pairs(
        phashes, dhashes, config.crop_radius, config.crop_confirm_radius, config.hash_flat_max
    )
    return (pairs, aligned), report


def _clip_step(frame: pd.DataFrame, config: DedupeConfig, rejections: list):
    from lenses_data.dedupe.clip_embed import embed_images

    result = embed_images(frame["path"].tolist(), config)
    for index, message in sorted(result.errors.items()):
        row = frame.iloc[index].to_dict()
        rejections.append(_failure(row, "embedding_failed", f"CLIP embedding failed: {message}"))
    frame = frame[result.ok].reset_index(drop=True)
    return frame, result.embeddings.astype(np.float16), result.device


def _clusters(emb: np.ndarray, config: DedupeConfig) -> np.ndarray | None:
    if config.n_clusters <= 0 or emb is None or len(emb) < config.n_clusters:
        return None
    import faiss

    data = np.ascontiguousarray(emb, dtype=np.float32)
    kmeans = faiss.Kmeans(data.shape[1], config.n_clusters, niter=20, seed=config.seed, spherical=True)
    kmeans.train(data)
    return kmeans.index.search(data, 1)[1][:, 0].astype(np.int64)


def _clip_pairs(emb: np.ndarray | None, config: DedupeConfig):
    if emb is None:
        return np.empty((0, 2), dtype=np.int64), np.empty(0, dtype=np.float32), None
    from lenses_data.dedupe.neighbours import clip_pairs

    params = {
        "hnsw_m": config.hnsw_m,
        "ef_construction": config.hnsw_ef_construction,
        "ef_search": config.hnsw_ef_search,
        "ivf_nlist": config.ivf_nlist,
        "ivf_nprobe": config.ivf_nprobe,
    }
    pairs, sims, report = clip_pairs(
        emb.astype(np.float32),
        config.leakage_threshold,
        method=config.clip_index,
        exact_max=config.clip_exact_max,
        k=config.clip_k,
        recall_sample=config.recall_sample,
        params=params,
    )
    return pairs, sims, report.as_dict()


def find_duplicates(frame: pd.DataFrame, config: DedupeConfig) -> DedupeResult:
    """frame: image_id, path, width, height (source optional) -> records, pairs, rejections."""
    from lenses_data.dedupe.clip_embed import clip_status
    from lenses_data.dedupe.hash_index import plan_search, range_pairs

    started = time.monotonic()
    frame = frame.sort_values("image_id", ignore_index=True)
    rejections: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    frame = _hash_step(frame, config, rejections)
    timings["hash_s"] = time.monotonic() - started
    status = clip_status(config) if config.clip_model else "off"
    emb, device = None, None
    if status != "off":
        frame, emb, device = _clip_step(frame, config, rejections)
        timings["embed_s"] = time.monotonic() - started - sum(timings.values())
    mark = time.monotonic()
    plan = plan_search(len(frame), config.leak_radius, config.hash_flat_max)
    hash_pairs, _, plan = range_pairs(frame["phash"].to_numpy(np.int64), config.leak_radius, plan)
    clip_idx, _sims, clip_report = _clip_pairs(emb, config)
    crop, crop_report = _crop_step(frame, config)
    timings["search_s"] = time.monotonic() - mark
    t = Thresholds(config.hamming_radius, config.leak_radius, config.clip_threshold, config.leakage_threshold)
    codes = frame["phash"].to_numpy(np.int64)
    pairs = combine_pairs(codes, hash_pairs, clip_idx, _sims, emb, t, crop)
    groups = build_groups(
        frame["image_id"].to_numpy(), (frame["width"] * frame["height"]).to_numpy(), pairs, t
    )
    records = groups.assign(phash=codes)
    clusters = _clusters(emb, config)
    records["cluster_id"] = clusters if clusters is not None else None
    rejections += _removal_rejections(frame, records)
    summary = _summary(frame, records, pairs, rejections, config, status, device, plan, clip_report)
    summary["crop_signal"] = crop_report
    summary["seconds"] = {
        k: round(v, 3) for k, v in {**timings, "total_s": time.monotonic() - started}.items()
    }
    return DedupeResult(records, _pair_table(pairs, frame), rejections, emb, summary)


def _pair_table(pairs: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    ids = frame["image_id"].to_numpy()
    table = pd.DataFrame(
        {
            "image_a": ids[pairs["a"].to_numpy(np.int64)],
            "image_b": ids[pairs["b"].to_numpy(np.int64)],
            "signal": pairs["signal"],
            "hamming": pairs["hamming"].astype("Int64"),
            "cosine": pairs["cosine"].astype(float),
            "tier": pairs["tier"],
        }
    )
    return table.astype({"hamming": object}).where(table.notna(), None)


def _removal_rejections(frame: pd.DataFrame, records: pd.DataFrame) -> list[dict[str, Any]]:
    removed = records[~records["kept"]]
    info = frame.set_index("image_id")
    rows = []
    for rec in removed.itertuples(index=False):
        keeper = info.loc[rec.duplicate_of]
        via = "" if rec.linked_via == rec.duplicate_of else f", linked via {rec.linked_via}"
        unit = {"phash": "bits", "both": "bits", "phash_crop": "bits (aligned crop hashes)"}.get(
            rec.signal, "(1 - cosine)"
        )
        message = (
            f"near-duplicate of {rec.duplicate_of} (kept: {keeper['width']}x{keeper['height']}; rule: largest "
            f"resolution, then lowest id); signal {rec.signal}, distance {rec.distance:.4g} {unit}{via}"
        )
        row = {"image_id": rec.image_id, "source": info.loc[rec.image_id].get("source")}
        rows.append(_failure(row, REASON[rec.signal], message))
    return rows


def _summary(frame, records, pairs, rejections, config, status, device, plan, clip_report) -> dict[str, Any]:
    removed = records[~records["kept"]]
    sizes = records.groupby("group_id").size()
    split_sizes = records.groupby("split_group_id").size()
    return {
        "images_in": len(frame) + sum(r["reason"] in ("hash_failed", "embedding_failed") for r in rejections),
        "images_out": int(records["kept"].sum()),
        "failed": {r: sum(x["reason"] == r for x in rejections) for r in ("hash_failed", "embedding_failed")},
        "groups": int((sizes > 1).sum()),
        "largest_group": int(sizes.max()) if len(sizes) else 0,
        "split_groups": int((split_sizes > 1).sum()),
        "removed": int(len(removed)),
        "removed_by_signal": {
            s: int((removed["signal"] == s).sum()) for s in ("phash", "clip", "both", "phash_crop")
        },
        "pairs_by_tier": {t: int((pairs["tier"] == t).sum()) for t in ("duplicate", "leakage")},
        "thresholds": {
            "hash_kind": config.hash_kind,
            "hamming_radius": config.hamming_radius,
            "leakage_hamming_radius": config.leak_radius,
            "clip_threshold": config.clip_threshold,
            "leakage_threshold": config.leakage_threshold,
            # where the default radius comes from, so a reader can judge a non-default one
            "calibrated_default_radius": DedupeConfig.model_fields["hamming_radius"].default,
            "calibration": "lenses dedupe --calibrate on the sample pool (docs/components/dedupe.md)",
        },
        "hash_index": vars(plan),
        "clip_signal": status,
        "clip_model": config.clip_model if status != "off" else None,
        "clip_checkpoint": config.clip_checkpoint,
        "clip_device": device,
        "clip_index": clip_report,
        "clusters": config.n_clusters if records["cluster_id"].notna().any() else 0,
    }
