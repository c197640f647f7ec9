"""Swapped test splits (captions or prompts from another build) and the harness tables' layout."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from training.evaluation.config import EvalConfig
from training.evaluation.systems.swapped_split import swap_texts
from training.evaluation.types import SplitLabels


def _labels(image_ids: list[str], captions: list[tuple[str, str, int]], prompts: list[tuple[str, str, int]]):
    """SplitLabels from (image_id, text, lens) captions and prompts."""
    row = {i: r for r, i in enumerate(image_ids)}
    sets: list[list[tuple[str, int]]] = [[] for _ in image_ids]
    for image_id, text, lens in prompts:
        sets[row[image_id]].append((text, lens))
    return SplitLabels(
        image_ids=image_ids,
        image_paths=[f"/img/{i}.png" for i in image_ids],
        caption_ids=[f"c-{t}" for _, t, _ in captions],
        captions=[t for _, t, _ in captions],
        caption_image=np.array([row[i] for i, _, _ in captions]),
        caption_lens=np.array([lens for _, _, lens in captions]),
        prompt_sets=sets,
        prompts=[t for _, t, _ in prompts],
        prompt_image=np.array([row[i] for i, _, _ in prompts], dtype=np.int64),
        prompt_lens=np.array([lens for _, _, lens in prompts], dtype=np.int64),
    )


BASE = _labels(
    ["a", "b", "c"],
    [("a", "base cap a", 0), ("b", "base cap b", 1), ("c", "base cap c", 4)],
    [("a", "base p a", 0), ("c", "base p c", 2)],
)
# Another build: image "c" has no texts there, "z" is not in the base split, row order differs.
OTHER = _labels(
    ["z", "b", "a"],
    [("b", "new cap b", 3), ("z", "new cap z", 0), ("a", "new cap a1", 1), ("a", "new cap a2", 2)],
    [("a", "new p a", 4), ("z", "new p z", 1), ("b", "new p b", 0)],
)


def test_swapped_captions_keep_base_images_and_prompts_and_count_what_does_not_match():
    swapped, cov = swap_texts(BASE, OTHER, "captions")
    assert swapped.image_ids == BASE.image_ids and swapped.prompt_sets == BASE.prompt_sets
    assert swapped.captions == ["new cap b", "new cap a1", "new cap a2"]
    # caption_image indexes the BASE image rows (b = 1, a = 0), lenses come along
    assert swapped.caption_image.tolist() == [1, 0, 0] and swapped.caption_lens.tolist() == [3, 1, 2]
    assert cov == {
        "n_base_images": 3,
        "n_base_images_without_swapped_texts": 1,  # c
        "n_other_images_outside_base_split": 1,  # z
        "n_swapped_texts": 3,
        "n_other_texts_outside_base_split": 1,  # z's caption
    }
    assert BASE.captions[0] == "base cap a"  # the base labels are not modified


def test_swapped_prompts_keep_base_captions_and_leave_unmatched_images_without_prompts():
    swapped, cov = swap_texts(BASE, OTHER, "prompts")
    assert swapped.captions == BASE.captions and swapped.caption_image.tolist() == BASE.caption_image.tolist()
    assert swapped.prompt_sets == [[("new p a", 4)], [("new p b", 0)], []]
    assert swapped.prompts == ["new p a", "new p b"]
    assert swapped.prompt_image.tolist() == [0, 1] and swapped.prompt_lens.tolist() == [4, 0]
    assert cov["n_base_images_without_swapped_texts"] == 1 and cov["n_other_texts_outside_base_split"] == 1


def test_swap_errors():
    disjoint = _labels(["q"], [("q", "x", 0)], [])
    with pytest.raises(ValueError, match="no caption of the other build belongs"):
        swap_texts(BASE, disjoint, "captions")
    with pytest.raises(ValueError, match="unknown part"):
        swap_texts(BASE, OTHER, "images")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="backbone_scaling: each row at most once"):
        EvalConfig(backbone_scaling=[{"row": "4B", "export_dir": "x"}, {"row": "4B", "export_dir": "y"}])


def test_harness_tables_say_what_to_configure_when_not_run():
    from training.evaluation.tables.harness_tables import harness_tables

    main = {"all/i2t/R@1": 12.5, "macro/i2t/R@1": 7.0}
    tables = "\n".join(harness_tables({"systems": {"lens_gallery": {"Lenses (lens-masked + global)": main}}}))
    assert tables.count("not run: no `backbone_scaling` entries") == 2  # main Table 6 and supp. Table 7
    assert "not run: no `generator_swap` entries" in tables
    assert "not run: baselines.clip_finetune.enabled is false" in tables
    assert "| Lenses - All | 12.50 | - | - | - |  |" in tables


def test_swapped_rows_are_unavailable_without_a_model_to_encode_with():
    """Only encodings of the lens model (no checkpoint): other builds' texts cannot be encoded."""
    from training.evaluation.systems.swap import FINE_TUNED, MAIN, swap_results
    from training.evaluation.tables.harness_tables import harness_tables

    main = {"macro/i2t/R@1": 40.0, "literal/i2t/R@1": 30.0, "all/t2i/R@5": 70.0}
    results = {"systems": {"lens_gallery": {MAIN: main}}}
    cfg = EvalConfig(
        encodings_dir="enc",
        backbone_scaling=[{"row": "InternVL3.5-4B", "export_dir": "b4"}, {"row": "InternVL3.5-38B"}],
        generator_swap=[{"row": "Qwen3VL-30B-A3B", "export_dir": "q"}],
    )
    source = {"encodings_dir": "enc", "checkpoint": None}
    scaling = swap_results(cfg, BASE, results, source, cfg.backbone_scaling, "prompts", False)
    assert scaling["rows"] == {"InternVL3.5-38B": {MAIN: {"lens_gallery": main}}}
    assert "set checkpoint to encode new inputs" in scaling["unavailable"]["InternVL3.5-4B"]
    swap = swap_results(cfg, BASE, results, source, cfg.generator_swap, "captions", True)
    assert set(swap["unavailable"]) == {"Qwen3VL-30B-A3B", FINE_TUNED}
    tables = "\n".join(harness_tables({**results, "backbone_scaling": scaling, "generator_swap": swap}))
    assert "| InternVL3.5-38B | 40.00 |" in tables  # main Table 6 row from the main evaluation
    four_b = [line for line in tables.splitlines() if line.startswith("| InternVL3.5-4B |")]
    assert len(four_b) == 2 and all(
        "unavailable: the lens model was read from encodings_dir" in x for x in four_b
    )
    assert "*Qwen3VL-30B-A3B (captions)*" in tables
    assert tables.index("| InternVL3.5-4B |") < tables.index("| InternVL3.5-38B |")  # the config's order
