"""Export tables and dataset-card pieces on hand-made frames."""

from __future__ import annotations

import pandas as pd

from lenses_data import card
from lenses_data.schemas import LENS_NAMES
from lenses_data.stages.export import ExportText, typed_parquet


def _texts():
    return pd.DataFrame(
        {
            "text_id": ["t1", "t2", "t3"],
            "image_id": ["a", "a", "b"],
            "split": ["train", "train", "test"],
            "lens": ["Literal", "Figurative", "Literal"],
            "text": ["A tree on a hill.", "A house of cards on a table.", "A dog on a boat."],
            "focus": ["tree", "cards", "dog"],
            "idioms": [[], ["house of cards"], []],
            "edited": [False, True, False],
            "original_text": ["A tree on a hill.", "A house of cards.", "A dog on a boat."],
            "prompt_hash": ["h"] * 3,
            "model": ["m"] * 3,
            "simulated": [True] * 3,
            "flags": [[], [], ["forbidden_idiom"]],
        }
    )


def test_typed_parquet_gives_categoricals_in_contract_order(tmp_path):
    typed_parquet(tmp_path / "captions.parquet", _texts(), ExportText)
    back = pd.read_parquet(tmp_path / "captions.parquet")
    assert list(back["lens"].cat.categories) == list(LENS_NAMES)
    assert list(back["split"].cat.categories) == ["train", "valid", "test"]
    assert back["idioms"].map(list).tolist() == [[], ["house of cards"], []]
    assert back["edited"].dtype == bool and back["simulated"].all()


def test_card_tables():
    images = pd.DataFrame({"image_id": ["a", "b"], "split": ["train", "test"]})
    table = card.split_lens_table(images, _texts(), "Captions").set_index("Split")
    assert table.loc["Total", "# Captions"] == 3 and table.loc["Train", "Figurative"] == 1
    assert table.loc["Test", "# Images"] == 1 and table.loc["Valid", "# Captions"] == 0
    shares, families = card.idiom_tables(_texts(), _texts().iloc[0:0])
    assert shares.set_index("Lens").loc["Figurative", "Idiomatic captions"] == "1/1"
    assert families.set_index("Family").loc["Fragility, Risk & Volatility", "Figurative"] == 1
    # image a: 1 of 2 idiomatic >= ceil(0.4 * 2) = 1; image b: 0 of 1 < 1
    assert "1 of 2 images by captions" in card.idiom_target_line(_texts(), _texts().iloc[0:0])
    rejections = pd.DataFrame(
        {"stage": ["rules", "rules", "rules"], "reason": ["x", "x", "y"], "record_id": ["t9", "t9", "t8"]}
    )
    reasons = card.rejection_table(rejections).set_index("Reason")
    assert reasons.loc["x", "Rows"] == 2 and reasons.loc["x", "Records"] == 1
    stats = card.diversity(_texts()).iloc[0]
    assert stats["Captions"] == 3 and 0 < stats["Distinct-1"] <= 1
