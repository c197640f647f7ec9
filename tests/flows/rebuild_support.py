"""Shared parts of the regeneration tests: an external `lenses simulate` that counts its calls, a
config pointing every model role at it, and what a test compares before and after a rerun."""

from __future__ import annotations

import copy
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from PIL import Image

from flows.build import build_dataset
from lenses_data import io
from lenses_data.candidates.sample import sample_sources
from lenses_data.config.models import ROLES
from lenses_data.simulator.testing import sim_stats

REPO_ROOT = Path(__file__).resolve().parents[2]
EARLY = ["ingest", "dedupe", "filter", "split", "generate"]


def config_dict(run: Path, pool: Path, base_url: str) -> dict[str, Any]:
    """configs/sample.yaml with the sample pool as sources, every role at `base_url` (real HTTP),
    and the word limits as rejections (a lowered maximum then drops texts)."""
    config = yaml.safe_load((REPO_ROOT / "configs" / "sample.yaml").read_text())
    role = {"base_urls": [base_url], "timeout_s": 5, "max_concurrency": 4}
    config["models"] = {r: dict(role) for r in ROLES}  # the default models: `lenses plan` has their figures
    config["models"]["retry"] = {"backoff_base_s": 0.01, "backoff_max_s": 0.05}
    config["models"]["probe"] = False  # only the pipeline's own requests are counted
    config["run_dir"] = str(run)
    config["ingest"]["sources"] = sample_sources(pool)
    config["annotate"].update({"word_limits": "reject"})
    return config


def write_config(path: Path, config: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(config))
    return str(path)


def build(config_path: str, **params: Any) -> dict[str, Any]:
    return build_dataset(config_path=config_path, **params)


def calls(base_url: str) -> dict[str, int]:
    """The simulator's calls so far, by the request key the client sent (e.g. `filter:<image id>`)."""
    stats = sim_stats(base_url)
    counted: dict[str, int] = {}
    for digest, number in stats["calls"].items():
        key = stats["keys"].get(digest, "")
        counted[key] = counted.get(key, 0) + number
    return counted


def sent_since(base_url: str, before: dict[str, int]) -> dict[str, int]:
    now = calls(base_url)
    return {key: n - before.get(key, 0) for key, n in now.items() if n > before.get(key, 0)}


def copy_run(built: Path, into: Path) -> Path:
    shutil.copytree(built, into, symlinks=True)
    return into


def with_changes(config: dict[str, Any], run: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(config)
    changed["run_dir"] = str(run)
    for name, values in sections.items():
        changed.setdefault(name, {}).update(values)
    return changed


def snapshot(run: Path, stages: list[str]) -> dict[str, int]:
    """Every file of the stages' folders, rejections and journals with its modification time
    (but the success markers, which every resume writes again)."""
    paths = [p for s in stages for p in io.stage_dir(run, s).rglob("*")]
    paths += [p for s in stages for p in (run / io.REJECTIONS_DIR).glob(f"{s}-part-*.parquet")]
    paths += [p for s in stages for p in (run / "journal" / s).rglob("*")]
    wanted = [p for p in paths if p.is_file() and p.name != io.SUCCESS_MARKER]
    return {str(p.relative_to(run)): p.stat().st_mtime_ns for p in wanted}


def exported(run: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(run / "export" / f"{name}.parquet")


def splits(run: Path) -> dict[str, str]:
    frame = io.read_stage(run, "split")
    return dict(zip(frame["image_id"], frame["split"].astype(str), strict=True))


def new_images(folder: Path, count: int, seed: int = 7) -> Path:
    """`count` distinct noise images (each its own perceptual hash), 96x96 PNG."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for number in range(count):
        pixels = bytes(rng.randrange(256) for _ in range(24 * 24 * 3))
        image = Image.frombytes("RGB", (24, 24), pixels).resize((96, 96), Image.NEAREST)
        image.save(folder / f"new-{number:02d}.png")
    return folder


def near_copy(source: str, target: Path) -> None:
    """The same picture with other bytes, a near-duplicate the survivor rule prefers (larger: 1.5x,
    and 2% brighter), saved as PNG."""
    with Image.open(source) as image:
        bigger = image.convert("RGB").resize((image.width * 3 // 2, image.height * 3 // 2), Image.LANCZOS)
        bigger.point(lambda v: min(255, int(v * 1.02) + 1)).save(target)


def json_of(path: Path) -> Any:
    return json.loads(path.read_text())
