"""The papers' tables in report.md: their rows in order, numbers where the run has them, every
other row marked unavailable (with the reason) or not run (with what to configure)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from training.evaluation.config import EvalConfig  # noqa: E402
from training.evaluation.evaluate import evaluate_encoded  # noqa: E402
from training.evaluation.tables.paper_tables import paper_tables_markdown  # noqa: E402
from training.evaluation.types import MAIN_SYSTEM  # noqa: E402

from .test_evaluate import _write_external, random_split  # noqa: E402


def _line(report: str, start: str) -> str:
    return next(line for line in report.splitlines() if line.startswith(start))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def test_paper_tables_place_numbers_and_mark_missing_rows():
    enc = random_split()
    cfg = EvalConfig()
    from training.baselines.global_only import global_scores

    blip = global_scores(enc.img_global, enc.txt_global)
    results = evaluate_encoded(enc, cfg, {"BLIP-2": blip})
    variant = evaluate_encoded(random_split(seed=3), cfg)
    results["zero_shot"] = {"rows": ["BLIP-2", "Jina-v4"], "unavailable": {"Jina-v4": "needs remote code"}}
    results["variants"] = {"density_z0": {p: s[MAIN_SYSTEM] for p, s in variant["systems"].items()}}
    report = "\n\n".join(paper_tables_markdown(results))
    main = results["systems"]["lens_gallery"][MAIN_SYSTEM]
    slot = results["systems"]["lens_slot"][MAIN_SYSTEM]
    # Lens models read per lens by their lens-c slots (main Sec. 4.2), the full score beside them
    lenses = _cells(_line(report, "| Lenses |"))
    assert lenses[1] == f"{slot['literal/i2t/R@1']:.2f}" and lenses[-2] == f"{main['all/t2i/R@5']:.2f}"
    assert lenses[-1] == "`lens_slot`"
    beside = _cells(_line(report, "| Lenses, full score |"))
    assert beside[1] == f"{main['literal/i2t/R@1']:.2f}" and beside[-1].startswith("`lens_gallery`")
    blip_row = _cells(_line(report, "| BLIP-2 |"))
    assert blip_row[1] == f"{results['systems']['lens_gallery']['BLIP-2']['literal/i2t/R@1']:.2f}"
    assert "unavailable: needs remote code" in _line(report, "| Jina-v4 |")
    assert "not run: no baselines.zero_shot entry with row 'CoCa'" in _line(report, "| CoCa |")
    zero_shot_bge, fine_tuned_bge = [x for x in report.splitlines() if x.startswith("| BGE-VL-MLLM |")][:2]
    assert "not run: no baselines.zero_shot entry with row 'BGE-VL-MLLM'" in zero_shot_bge
    assert "not run: baselines.global_only_encodings or global_only_checkpoint not set" in fine_tuned_bge
    # Table 3a: rows 1-2 need ablation runs; row 3 is the main model's RSUM
    assert _cells(_line(report, "| 3 | ✓ | ✓ | ✓ |"))[4] == f"{main['RSUM']:.1f}"
    assert "not run: variants entry with role loss_ret" in _line(report, "| 1 | ✓ |")
    # supp. Table 5: z=0 from the variant, z=1 missing, z>1 the main model
    z0 = variant["systems"]["lens_slot"][MAIN_SYSTEM]
    assert _cells(_line(report, "| z=0 (Token-Only) |"))[1] == f"{z0['literal/i2t/R@1']:.2f}"
    assert _cells(_line(report, "| z>1 (All-Prompts) |"))[1] == f"{slot['literal/i2t/R@1']:.2f}"
    assert "not run: variants entry with role density_z1" in _line(report, "| z=1 (Top-1 Prompt) |")
    assert "not run: external.artemis not configured" in report
    assert "unavailable: no loader for OnePiece" not in report  # only in Table 5, absent without ArtEmis
    full = _cells(_line(report, "| Full Model (Lens-masked + Global) |"))
    assert full[1] == f"{results['ablations']['Full model (lens-masked + global)']['all/i2t/R@1']:.1f}"
    headings = [line for line in report.splitlines() if line.startswith("## ")]
    assert [h.split(",")[0] for h in headings] == [
        "## Main Table 2 (paper rows)", "## Main Table 3a", "## Main Table 4", "## Main Table 5",
        "## Supp. Table 1", "## Supp. Table 2", "## Supp. Table 3", "## Supp. Table 5",
        "## Main Table 6", "## Supp. Table 6", "## Supp. Table 7", "## Supp. Table 9",
    ]  # fmt: skip


def _train(cfg, out, **data):
    from training.loop.train import train

    c = cfg.model_copy(deep=True)
    c.data = c.data.model_copy(update=data)
    c.run.out_dir, c.optim.max_steps, c.run.save_every = str(out), 2, 2
    if data.pop("global_mode", False):
        c.loss.mode = "global"
    return str(train(c).run_dir / "checkpoints" / "step-0000002")


@pytest.mark.slow
def test_lenses_evaluate_fills_the_papers_tables(tiny_config, tiny_export, tiny_base, tmp_path):
    """Tiny trained lens models (main, Literal-only, token-only), a global-only model and tiny
    zero-shot baselines through `lenses evaluate`, with ArtEmis."""
    import pandas as pd
    import yaml

    from lenses_app.cli import main
    from training.dryrun.jina_v4 import materialize_tiny_jina_v4
    from training.dryrun.zero_shot import materialize_tiny_blip2, materialize_tiny_hf_clip

    main_ckpt = _train(tiny_config, tmp_path / "main")
    literal = _train(tiny_config, tmp_path / "literal", lenses=["Literal"], images_per_batch=4)
    z0 = _train(tiny_config, tmp_path / "z0", prompt_density="none")
    glob_cfg = tiny_config.model_copy(deep=True)
    glob_cfg.loss.mode = "global"
    global_ckpt = _train(glob_cfg, tmp_path / "global")
    _write_external(tmp_path)
    pd.DataFrame([("Baroque", "a_cat", "Emotional", "How does the cat feel?")],
                 columns=["art_style", "painting", "lens", "text"]).to_csv(tmp_path / "prompts.csv", index=False)  # fmt: skip
    corpus = ["a calm cat", "so bright", "an astronaut", "a cup of coffee"]
    blip = materialize_tiny_blip2(tmp_path / "blip2", corpus)
    clip = materialize_tiny_hf_clip(tmp_path / "bge-vl-large", corpus)
    jina = materialize_tiny_jina_v4(tmp_path / "jina-v4", corpus)
    eval_cfg = {
        "export_dir": str(tiny_export),
        "checkpoint": main_ckpt,
        "baselines": {
            "zero_shot": [
                {"row": "BLIP-2", "family": "blip2", "path": str(blip)},
                {"row": "BGE-VL-Large", "family": "hf_clip", "path": str(clip)},
                {"row": "Jina-v4", "family": "jina_v4", "path": str(jina)},
                {"row": "BGE-VL-MLLM", "family": "bge_vl_mllm", "path": str(tiny_base), "train_config": "tiny"},
            ],
            "global_only_checkpoint": global_ckpt,
        },
        "variants": [{"role": "lenses_literal", "checkpoint": literal}, {"role": "density_z0", "checkpoint": z0}],
        "external": {"artemis": {"csv": str(tmp_path / "artemis.csv"), "wikiart_dir": str(tmp_path / "wikiart"),
                                 "prompts": str(tmp_path / "prompts.csv")}},
    }  # fmt: skip
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(eval_cfg))
    out = tmp_path / "eval-out"
    assert main(["evaluate", "--config", str(tmp_path / "eval.yaml"), "--out", str(out)]) == 0
    data = json.loads((out / "metrics.json").read_text())
    report = (out / "report.md").read_text()
    gallery = data["systems"]["lens_gallery"]
    assert {"BLIP-2", "BGE-VL-Large", "BGE-VL-MLLM", "Global-only fine-tuned", MAIN_SYSTEM} <= set(gallery)
    assert data["zero_shot"]["unavailable"] == {}
    assert set(data["variants"]) == {"lenses_literal", "density_z0"}
    assert (out / "variants" / "density_z0" / "manifest.json").exists()
    art = data["artemis"]
    assert art["n_images"] == 2 and art["n_images_with_prompts"] == 1
    assert {
        "BLIP-2",
        "BGE-VL-Large",
        "Jina-v4",
        "BGE-VL-MLLM (fine-tuned)",
        "Lenses - All",
        "Lenses - Literal",
    } <= set(art["systems"])
    assert "Lenses - Emotional" in art["unavailable"]
    for row in ("BLIP-2", "Jina-v4", "Lenses - All", "Lenses - Literal", "BGE-VL-MLLM (fine-tuned)"):
        cells = _cells(_line(report.split("## Main Table 5")[1], f"| {row} |"))
        assert cells[1] == f"{art['systems'][row]['all/i2t/R@1']:.2f}" and cells[-1] == ""
    jina_row = _cells(_line(report.split("## Main Table 2")[1], "| Jina-v4 |"))  # main Table 2, per lens
    assert jina_row[1] == f"{gallery['Jina-v4']['literal/i2t/R@1']:.2f}"
    assert (
        "no loader for OnePiece" in report
        and "not run: no variants entry with role lenses_emotional" in report
    )
    assert data["ablations"]["Global only (w/o prompts)"]["all/i2t/R@1"] >= 0
    z0_row = _cells(_line(report, "| z=0 (Token-Only) |"))
    assert z0_row[-2] == f"{data['variants']['density_z0']['lens_gallery']['all/t2i/R@5']:.2f}"
