"""A tiny IRFL-shaped folder (skimage pictures) and the tiny LoRA-CLIP config pointing at it."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def irfl_folder(tmp_path_factory):
    from training.dryrun.irfl import write_synthetic_irfl

    return write_synthetic_irfl(tmp_path_factory.mktemp("irfl"))


@pytest.fixture()
def tiny_lora_cfg(irfl_folder, tmp_path):
    from training.baselines.lora_clip.config import CONFIG_DIR, load_lora_clip_config

    csv, images = irfl_folder
    overrides = {  # the bundled tiny architecture by absolute path: tests may run from anywhere
        "clip": {"model_config_path": str(CONFIG_DIR / "lora-clip-tiny-openclip.json")},
        "data": {"train_csv": str(csv), "images_dir": str(images)},
        "run": {"out_dir": str(tmp_path / "run")},
    }
    return load_lora_clip_config("lora-clip-tiny", overrides)
