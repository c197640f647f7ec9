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
from lenses_data.config.pipeline import DEDUPE
from lenses_data.dedupe.groups import Thresholds, build_groups, combine_pairs

log = logging.getLogger(__name__)

STAGE = DEDUPE
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


@dataclass
class Codes:
    """Hash codes aligned with the rows of the frame they were computed for."""

    phash: np.ndarray  # (n,) int64: the whole-image hash of `hash_kind`
    crops: np.ndarray | None  # (n, 3) int64: whole-view pHash + centre-crop pHashes (phash kind only)
    dhashes: np.ndarray | None  # (n, 3) int64: dHashes of the same three views

    def take(self, keep: np.ndarray) -> Codes:
        return Codes(self.phash[keep], *(None if m is None else m[keep] for m in (self.crops, self.dhashes)))


def _stored_codes(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows whose stored codes are current, crop matrix, dHash matrix); other rows are zeros."""
    from lenses_data.candidates.view_hash import CROP_LEVELS, HASH_VERSION

    n, width = len(frame), 1 + len(CROP_LEVELS)
    version = frame["hash_version"].to_numpy(object) if "hash_version" in frame else np.full(n, None, object)
    stored = version == HASH_VERSION
    crops, dhashes = np.zeros((n, width), np.int64), np.zeros((n, width), np.int64)
    rows = np.flatnonzero(stored)
    if len(rows):  # current codes are never null: ingest stores all of them or none
        crops[rows, 0] = frame["phash"].to_numpy()[rows]
        crops[rows, 1:] = np.stack(frame["phash_crops"].to_numpy(object)[rows]).astype(np.int64)
        dhashes[rows] = np.stack(frame["dhashes"].to_numpy(object)[rows]).astype(np.int64)
    return stored, crops, dhashes


def _hash_step(frame: pd.DataFrame, config: DedupeConfig, rejections: list) -> tuple[pd.DataFrame, Codes]:
    """Hashes stored by ingest where they are of the current version; the rest hashed on demand
    (run directories ingested before hashes were stored, or another `hash_kind`)."""
    from lenses_data.dedupe.hashing import hash_files, hash_images

    n = len(frame)
    errors: list[str | None] = [None] * n
    if config.hash_kind != "phash":  # stored codes are pHashes: whole-image signal only
        results = hash_images(frame["path"].tolist(), config.hash_kind, config.hash_workers)
        codes = Codes(np.array([r.value or 0 for r in results], dtype=np.int64), None, None)
        errors = [r.error for r in results]
    else:
        stored, crops, dhashes = _stored_codes(frame)
        stale = np.flatnonzero(~stored)
        if len(stale):
            log.info("dedupe: %d of %d images have no stored hashes; hashing them", len(stale), n)
        fresh = hash_files(frame["path"].iloc[stale].tolist(), config.hash_workers)
        for row, (value, error) in zip(stale, fresh, strict=True):
            errors[row] = error
            if value is not None:
                crops[row] = [value["phash"], *value["phash_crops"]]
                dhashes[row] = value["dhashes"]
        codes = Codes(crops[:, 0].copy(), crops, dhashes)
    failed = [row for row, error in enumerate(errors) if error is not None]
    for row in failed:
        info = {"image_id": frame["image_id"].iat[row], "source": frame.get("source", {}).get(row)}
        rejections.append(_failure(info, "hash_failed", f"{config.hash_kind} failed: {errors[row]}"))
    ok = np.ones(n, dtype=bool)
    ok[failed] = False
    columns = [c for c in ("image_id", "path", "width", "height", "source") if c in frame]
    frame = frame.loc[ok, columns].reset_index(drop=True)
    frame["phash"] = codes.phash[ok]
    return frame, codes.take(ok)


def _crop_step(codes: Codes, config: DedupeConfig):
    if not config.crop_signal or codes.crops is None or len(codes.phash) < 2:
        return None, None
    from lenses_data.dedupe.crops import crop_pairs

    pairs, aligned, report = crop_pairs(
        codes.crops, codes.dhashes, config.crop_radius, config.crop_confirm_radius, config.hash_flat_max
    )
    return (pairs, aligned), report


def _clip_step(frame: pd.DataFrame, codes: Codes, config: DedupeConfig, rejections: list):
    from lenses_data.dedupe.clip_embed import embed_images

    result = embed_images(frame["path"].tolist(), config)
    for index, message in sorted(result.errors.items()):
        row = frame.iloc[index].to_dict()
        rejections.append(_failure(row, "embedding_failed", f"CLIP embedding failed: {message}"))
    ok = np.asarray(result.ok, dtype=bool)
    frame = frame[ok].reset_index(drop=True)
    return frame, codes.take(ok), result.embeddings.astype(np.float16), result.device, result.settings


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
    frame, hashes = _hash_step(frame, config, rejections)
    timings["hash_s"] = time.monotonic() - started
    status = clip_status(config) if config.clip_model else "off"
    emb, device, embed_settings = None, None, None
    if status != "off":
        frame, hashes, emb, device, embed_settings = _clip_step(frame, hashes, config, rejections)
        timings["embed_s"] = time.monotonic() - started - sum(timings.values())
    mark = time.monotonic()
    plan = plan_search(len(frame), config.leak_radius, config.hash_flat_max)
    hash_pairs, _, plan = range_pairs(hashes.phash, config.leak_radius, plan)
    clip_idx, _sims, clip_report = _clip_pairs(emb, config)
    crop, crop_report = _crop_step(hashes, config)
    timings["search_s"] = time.monotonic() - mark
    t = Thresholds(config.hamming_radius, config.leak_radius, config.clip_threshold, config.leakage_threshold)
    codes = hashes.phash
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
    summary["clip_embed"] = embed_settings  # activation (and why), precision, batch size, decode threads
    summary["seconds"] = {
        k: round(v, 3) for k, v in {**timings, "total_s": time.monotonic() - started}.items()
    }
    return DedupeResult(records, _pair_table(pairs, frame), rejections, emb, summary)


def _pair_table(pairs: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """DedupePair columns; missing hamming/cosine/aligned are NA/NaN (null in Parquet)."""
    ids = frame["image_id"].to_numpy()
    return pd.DataFrame(
        {
            "image_a": ids[pairs["a"].to_numpy(np.int64)],
            "image_b": ids[pairs["b"].to_numpy(np.int64)],
            "signal": pairs["signal"].to_numpy(),
            "hamming": pairs["hamming"].astype("Int64").array,
            "cosine": pairs["cosine"].to_numpy(float),
            "tier": pairs["tier"].to_numpy(),
            "aligned": pairs["aligned"].astype("Int64").array,
        }
    )


def _removal_rejections(frame: pd.DataFrame, records: pd.DataFrame) -> list[dict[str, Any]]:
    removed = records[~records["kept"]]
    ids = frame["image_id"].tolist()
    size = dict(zip(ids, zip(frame["width"].tolist(), frame["height"].tolist(), strict=True), strict=True))
    sources = frame["source"].tolist() if "source" in frame else [None] * len(ids)
    source = dict(zip(ids, sources, strict=True))
    units = {"phash": "bits", "both": "bits", "phash_crop": "bits (aligned crop hashes)"}
    rows = []
    for rec in removed.itertuples(index=False):
        width, height = size[rec.duplicate_of]
        via = "" if rec.linked_via == rec.duplicate_of else f", linked via {rec.linked_via}"
        unit = units.get(rec.signal, "(1 - cosine)")
        message = (
            f"near-duplicate of {rec.duplicate_of} (kept: {width}x{height}; rule: largest "
            f"resolution, then lowest id); signal {rec.signal}, distance {rec.distance:.4g} {unit}{via}"
        )
        row = {"image_id": rec.image_id, "source": source[rec.image_id]}
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
            # the crop signal's own radii (a phash_crop removal is judged against these)
            "crop_radius": config.crop_radius if config.crop_signal else None,
            "crop_confirm_radius": config.crop_confirm_radius if config.crop_signal else None,
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
