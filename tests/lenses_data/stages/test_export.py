"""Export tables and dataset-card pieces on hand-made frames."""

from __future__ import annotations

import random

import pandas as pd
import pyarrow as pa
import pytest

from lenses_data import io
from lenses_data.config.export import ExportConfig
from lenses_data.publish import card, card_counts, card_meta, card_texts
from lenses_data.schemas import LENS_NAMES, LensText, Rejection, arrow_schema
from lenses_data.stages.export_hf import hf_table, write_hf_layout
from lenses_data.stages.export_tables import ExportImage, ExportText, typed_parquet
from lenses_data.stages.export_texts import card_frame, final_texts


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
    table = card_counts.split_lens_table(images, _texts(), "Captions").set_index("Split")
    assert table.loc["Total", "# Captions"] == 3 and table.loc["Train", "Figurative"] == 1
    assert table.loc["Test", "# Images"] == 1 and table.loc["Valid", "# Captions"] == 0
    shares, families = card_texts.idiom_tables(_texts(), _texts().iloc[0:0])
    assert shares.set_index("Lens").loc["Figurative", "Idiomatic captions"] == "1/1"
    assert families.set_index("Family").loc["Fragility, Risk & Volatility", "Figurative"] == 1
    # image a: 1 of 2 idiomatic >= ceil(0.4 * 2) = 1; image b: 0 of 1 < 1
    assert "1 of 2 images by captions" in card_texts.idiom_target_line(_texts(), _texts().iloc[0:0])
    rejections = pd.DataFrame(
        {"stage": ["rules", "rules", "rules"], "reason": ["x", "x", "y"], "record_id": ["t9", "t9", "t8"]}
    )
    reasons = card_counts.rejection_table(rejections).set_index("Reason")
    assert reasons.loc["x", "Rows"] == 2 and reasons.loc["x", "Records"] == 1
    stats = card_texts.diversity(_texts()).iloc[0]
    assert stats["Captions"] == 3 and 0 < stats["Distinct-1"] <= 1


def test_hf_table_stores_class_label_codes_and_refuses_unknown_values():
    table = hf_table(_texts(), ExportText)
    assert table.column("lens").to_pylist() == [LENS_NAMES.index(v) for v in _texts()["lens"]]
    assert table.column("split").to_pylist() == [0, 0, 2]
    bad = _texts().assign(lens=["Literal", "Ironic", "Literal"])
    with pytest.raises(ValueError, match="Ironic"):
        hf_table(bad, ExportText)


def test_hf_layout_with_an_empty_split_loads(tmp_path):
    """No valid rows and no rejections: those are left out (`datasets` cannot load an empty split),
    the rest loads, and the card says what is missing."""
    datasets = pytest.importorskip("datasets")
    texts = hf_table(_texts(), ExportText)
    images = hf_table(
        pd.DataFrame(
            {
                "image_id": ["a", "b"],
                "path": ["/x/a.jpg", "/x/b.jpg"],
                "width": [10, 20],
                "height": [30, 40],
                "split": ["train", "test"],
                "source": ["s", "s"],
                "group_id": ["a", "b"],
            }
        ),
        ExportImage,
    )
    rejections = io.to_table(pd.DataFrame(columns=list(Rejection.model_fields)), Rejection)
    io.write_table(tmp_path / "rejections.parquet", rejections)
    tables = {"captions": texts, "prompts": texts, "images": images}
    layout = write_hf_layout(tmp_path, tables, rejections, ExportConfig())
    assert layout["empty"] == ["captions/valid", "prompts/valid", "images/valid", "rejections/full"]
    assert [c["config_name"] for c in layout["configs"]] == ["captions", "prompts", "images"]
    meta = {"configs": layout["configs"], "dataset_info": layout["dataset_info"]}
    (tmp_path / "README.md").write_text(card_meta.front_matter(meta) + "# test\n")
    loaded = datasets.load_dataset(str(tmp_path), "captions", cache_dir=str(tmp_path / "cache"))
    assert {k: len(v) for k, v in loaded.items()} == {"train": 2, "test": 1}
    assert loaded["test"][0]["text_id"] == "t3" and loaded["train"].features["lens"].names == list(LENS_NAMES)
    assert not list((tmp_path / "hf" / "captions").glob("valid-*"))
    assert "`captions/valid`" in "\n".join(card._loading(meta))


def test_licence_fields():
    one = pd.Series(["CC BY 4.0", "cc-by-4.0"])
    assert card_meta.licence_fields(one, []) == {"license": "cc-by-4.0"}
    mixed = card_meta.licence_fields(pd.Series(["CC BY 4.0", None, "CC BY 4.0", "custom terms"]), ["m"])
    assert mixed["license"] == "other" and mixed["license_name"] == "mixed-source-licences"
    assert "CC BY 4.0 (2 images); custom terms (1 images); unspecified (1 images)" in mixed["license_details"]
    assert "machine-generated by m" in mixed["license_details"]
    unknown = card_meta.licence_fields(pd.Series([None, ""]), [])
    assert unknown["license"] == "unknown"
    assert card_meta.licence_fields(pd.Series(["custom terms"]), [])["license"] == "other"


def test_size_category_bounds():
    assert [card_meta.size_category(n) for n in (0, 999, 1000, 99_999, 732_405, 10**9)] == [
        "n<1K",
        "n<1K",
        "1K<n<10K",
        "10K<n<100K",
        "100K<n<1M",
        "n>100M",
    ]


def _lens_texts(rows: int = 60) -> pa.Table:
    """Final texts as visual_validate stores them: both kinds, shuffled, some unedited (null
    original_text) and some null idioms/flags lists."""
    rng = random.Random(5)
    lenses = list(LENS_NAMES)
    data: dict[str, list] = {name: [] for name in arrow_schema(LensText).names}
    for n in range(rows):
        edited = rng.random() < 0.3
        data["text_id"].append(f"t{rng.randrange(10**6):06d}")
        data["image_id"].append(f"img{rng.randrange(7)}")
        data["kind"].append(rng.choice(("caption", "prompt")))
        data["lens"].append(rng.choice(lenses))
        data["text"].append(f"text {n} " + " ".join(rng.choice("abcdefgh") for _ in range(6)))
        data["focus"].append("f")
        data["idioms"].append(rng.choice(([], ["house of cards"], None)))
        data["candidate_index"].append(n)
        data["prompt_name"].append("p")
        data["prompt_hash"].append("h")
        data["model"].append(rng.choice(("m1", "m2")))
        data["simulated"].append(True)
        data["edited"].append(edited)
        data["original_text"].append(f"before {n}" if edited else None)
        data["split"].append(rng.choice(("train", "valid", "test")))
        data["flags"].append(rng.choice(([], ["forbidden_idiom"], None)))
    schema = arrow_schema(LensText)
    fields = [f.with_nullable(True) if f.name in ("idioms", "flags") else f for f in schema]
    return pa.Table.from_pydict(data, schema=pa.schema(fields))


def _pandas_final_texts(texts: pd.DataFrame, kind: str) -> pd.DataFrame:
    """What export did before the texts stayed Arrow (the reference for the Arrow path)."""
    chosen = texts[texts["kind"] == kind].copy()
    chosen["original_text"] = chosen["original_text"].where(chosen["original_text"].notna(), chosen["text"])
    chosen["edited"] = chosen["edited"].astype(bool)
    chosen["idioms"] = chosen["idioms"].apply(lambda v: [] if v is None else list(v))
    chosen["flags"] = chosen["flags"].apply(lambda v: [] if v is None else list(v))
    return chosen.sort_values(["image_id", "lens", "text_id"]).reset_index(drop=True)


@pytest.mark.parametrize("kind", ["caption", "prompt"])
def test_arrow_export_tables_equal_the_pandas_ones(tmp_path, kind):
    """Sorted by image, lens in contract order (not alphabetical) and text id; the flat table,
    the Hugging Face table, the card's columns and the diversity table as the pandas path made them."""
    texts = _lens_texts()
    reference = _pandas_final_texts(io.typed_frame(texts), kind)
    arrow = final_texts(texts, kind)
    assert len(arrow) == len(reference) > 10
    typed_parquet(tmp_path / "pandas.parquet", reference, ExportText)
    typed_parquet(tmp_path / "arrow.parquet", arrow, ExportText)
    written = pd.read_parquet(tmp_path / "arrow.parquet")
    pd.testing.assert_frame_equal(written, pd.read_parquet(tmp_path / "pandas.parquet"))
    for _, group in written.groupby("image_id"):
        assert group["lens"].cat.codes.is_monotonic_increasing  # contract order within an image
    assert hf_table(arrow, ExportText).equals(hf_table(reference, ExportText))
    light = card_frame(arrow)
    for column in ("image_id", "lens", "split", "model", "idioms", "flags"):
        assert light[column].tolist() == reference[column].tolist(), column
    pd.testing.assert_frame_equal(card_texts.diversity(arrow), card_texts.diversity(reference))


def test_arrow_hf_table_refuses_unknown_values():
    bad = pa.Table.from_pandas(_texts().assign(lens=["Literal", "Ironic", "Literal"]), preserve_index=False)
    with pytest.raises(ValueError, match="Ironic"):
        hf_table(bad, ExportText)
