"""`lenses train-lora-clip` on the tiny config and the tiny IRFL folder."""

from __future__ import annotations

import json

import torch

from lenses_app.cli import main


def test_train_lora_clip_command(irfl_folder, tmp_path, capsys):
    torch.set_num_threads(1)
    csv, images = irfl_folder
    out = tmp_path / "run"
    args = ["train-lora-clip", "--config", "lora-clip-tiny", "--train-csv", str(csv), "--images", str(images)]
    assert main([*args, "--out", str(out), "--epochs", "2"]) == 0
    printed = capsys.readouterr().out
    history = json.loads((out / "history.json").read_text())
    assert len(history["epoch_loss"]) == 2 and history["config"]["data"]["train_csv"] == str(csv)
    assert f"adapter: {out / 'adapter'}" in printed and (out / "adapter" / "adapter.pt").is_file()
    assert main([*args[:3], "--train-csv", str(tmp_path / "missing.csv"), "--images", str(images)]) == 2
    assert "not found" in capsys.readouterr().err
