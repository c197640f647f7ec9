"""Shipped ablation configs (main Table 3a, supp. Tables 5 and 8, Lenses-Literal/-Emotional) and
tiny runs of the data options they use."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from training.loop.train import train  # noqa: E402
from training.retriever.config import CONFIG_DIR, load_train_config  # noqa: E402


def _ablation(name: str):
    return load_train_config(f"ablations/{name}")


def test_every_ablation_config_extends_the_recipe_and_changes_only_its_knob():
    recipe = load_train_config("h200x8").model_dump()
    names = sorted(p.stem for p in (CONFIG_DIR / "ablations").glob("*.yaml"))
    assert len(names) == 12
    out_dirs = set()
    for name in names:
        cfg = _ablation(name).model_dump()
        out_dirs.add(cfg["run"]["out_dir"])
        assert cfg["model"] == recipe["model"] and cfg["lora"] == recipe["lora"]
        changed = {
            (section, key)
            for section in ("data", "loss", "optim")
            for key in recipe[section]
            if cfg[section][key] != recipe[section][key]
        }
        assert changed <= {
            ("data", "fraction"), ("data", "lenses"), ("data", "prompt_density"),
            ("loss", "lambda_slot"), ("loss", "lambda_div"), ("optim", "max_steps"),
        }, name  # fmt: skip
    assert len(out_dirs) == len(names)  # no two runs share a directory


def test_loss_ablation_and_sweep_values_are_the_papers():
    rows = [
        (_ablation(n).loss.lambda_slot, _ablation(n).loss.lambda_div) for n in ("loss-ret", "loss-ret-slot")
    ]
    assert rows == [(0.0, 0.0), (0.05, 0.0)]
    full = load_train_config("h200x8").loss
    assert (full.lambda_slot, full.lambda_div) == (0.05, 0.01)  # Table 3a row 3
    for v in (0.1, 0.05, 0.01):
        slot, div = _ablation(f"sweep-slot-{v}"), _ablation(f"sweep-div-{v}")
        assert (slot.loss.lambda_slot, slot.loss.lambda_div) == (v, 0.0)
        assert (div.loss.lambda_slot, div.loss.lambda_div) == (0.0, v)
        assert slot.data.fraction == div.data.fraction == 0.2
    assert _ablation("lenses-literal").data.lenses == ["Literal"]
    assert _ablation("lenses-emotional").data.lenses == ["Emotional"]
    assert _ablation("density-z0").data.prompt_density == "none"
    assert _ablation("density-z1").data.prompt_density == "top1"


def test_extends_cycle_is_an_error(tmp_path):
    (tmp_path / "a.yaml").write_text(f"extends: {tmp_path / 'b.yaml'}\n")
    (tmp_path / "b.yaml").write_text(f"extends: {tmp_path / 'a.yaml'}\n")
    with pytest.raises(ValueError, match="extends itself"):
        load_train_config(tmp_path / "a.yaml")


@pytest.mark.parametrize(
    "data",
    [
        {"lenses": ["Literal"], "fraction": 0.75},
        {"prompt_density": "none"},
        {"prompt_density": "top1"},
    ],
    ids=["literal-75pct", "token-only", "top1"],
)
def test_tiny_runs_with_the_data_options_train(tiny_config, data):
    cfg = tiny_config.model_copy(deep=True)
    cfg.data = cfg.data.model_copy(update={**data, "images_per_batch": 4})
    cfg.optim.max_steps = 2
    cfg.run.save_every = 2
    result = train(cfg)
    assert result.final_step == 2 and all(r["total"] == r["total"] for r in result.history)  # no NaN
    if data.get("prompt_density") == "none":
        # z = 0 keeps a lens-token slot per lens: matched pairs meet a same-lens slot (no fallback
        # for all of them) and the slots of one image are diversified.
        assert all(r["fallback_rate"] < 1.0 for r in result.history), result.history
        assert any(r["div"] != 0.0 for r in result.history), result.history
