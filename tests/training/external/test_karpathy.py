"""The Karpathy-split reader on small caption files in the COCO and Flickr30K layouts, with real
photographs from scikit-image."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from training.external.karpathy import read_karpathy


def _photo(path, picture: str) -> None:
    from skimage import data

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(getattr(data, picture)()).convert("RGB").save(path)


def _sentences(*texts):
    return [{"raw": t, "tokens": t.lower().split(), "sentid": i} for i, t in enumerate(texts)]


def write_coco(root, entries=None):
    """dataset_coco.json with images under val2014/ (filepath + filename, as the COCO file has)."""
    for name, picture in (("COCO_val2014_1.jpg", "chelsea"), ("COCO_val2014_2.jpg", "coffee")):
        _photo(root / "images" / "val2014" / name, picture)
    _photo(root / "images" / "train2014" / "COCO_train2014_3.jpg", "astronaut")
    default = [
        {"filepath": "val2014", "filename": "COCO_val2014_1.jpg", "split": "test", "cocoid": 1, "imgid": 0,
         "sentences": _sentences("a cat lies down", "a ginger cat", "cat on a sofa", "a tabby", "a pet", "six")},
        {"filepath": "train2014", "filename": "COCO_train2014_3.jpg", "split": "restval", "imgid": 1,
         "sentences": _sentences("an astronaut")},
        {"filepath": "val2014", "filename": "COCO_val2014_2.jpg", "split": "test", "imgid": 2,
         "sentences": _sentences("a cup of coffee", "coffee on a saucer")},
    ]  # fmt: skip
    path = root / "dataset_coco.json"
    path.write_text(json.dumps({"dataset": "coco", "images": default if entries is None else entries}))
    return path


def test_coco_test_split_with_five_captions_per_image(tmp_path):
    path = write_coco(tmp_path)
    ds = read_karpathy(path, tmp_path / "images")
    assert [p.rsplit("/", 2)[1:] for p in ds.image_paths] == [
        ["val2014", "COCO_val2014_1.jpg"],
        ["val2014", "COCO_val2014_2.jpg"],
    ]
    assert ds.texts == ["a cat lies down", "a ginger cat", "cat on a sofa", "a tabby", "a pet"] + [
        "a cup of coffee",
        "coffee on a saucer",
    ]
    assert ds.caption_image.tolist() == [0] * 5 + [1] * 2
    assert ds.n_captions_beyond_limit == 1 and not ds.rejections  # the sixth caption is counted, not hidden
    assert set(ds.caption_lens.tolist()) == {0}  # Literal
    every = read_karpathy(path, tmp_path / "images", captions_per_image=None)
    assert len(every.texts) == 8 and every.n_captions_beyond_limit == 0
    train = read_karpathy(path, tmp_path / "images", split="restval")
    assert train.texts == ["an astronaut"]


def test_flickr_layout_has_no_filepath(tmp_path):
    _photo(tmp_path / "flickr30k-images" / "1000092795.jpg", "rocket")
    entries = [
        {"filename": "1000092795.jpg", "split": "test", "imgid": 0, "sentences": _sentences("a rocket")}
    ]
    path = tmp_path / "dataset_flickr30k.json"
    path.write_text(json.dumps({"dataset": "flickr30k", "images": entries}))
    ds = read_karpathy(path, tmp_path / "flickr30k-images")
    assert ds.image_names == ["1000092795.jpg"] and ds.texts == ["a rocket"]


def test_malformed_entries_are_recorded_with_reasons(tmp_path):
    path = write_coco(tmp_path)
    good = json.loads(path.read_text())["images"]
    bad = [
        "not an object",
        {"split": "test", "sentences": _sentences("x")},  # no filename
        {"filename": "a.jpg", "split": "testing", "sentences": []},  # unknown split
        {"filename": "b.jpg", "split": "test", "sentences": "a string"},  # sentences not a list
        {"filepath": "val2014", "filename": "COCO_val2014_2.jpg", "split": "test",
         "sentences": [{"raw": "  "}, {"tokens": ["x"]}]},  # no usable raw caption
    ]  # fmt: skip
    write_coco(tmp_path, good + bad)
    ds = read_karpathy(path, tmp_path / "images")
    assert len(ds.image_paths) == 2
    got = [(r.row, r.reason) for r in ds.rejections]
    assert got == [(3, "malformed_entry"), (4, "malformed_entry"), (5, "malformed_entry"),
                   (6, "malformed_entry"), (7, "no_caption")]  # fmt: skip
    assert "filename" in ds.rejections[1].message and "'testing'" in ds.rejections[2].message


def test_missing_image_is_an_error_or_a_recorded_skip(tmp_path):
    path = write_coco(tmp_path)
    (tmp_path / "images" / "val2014" / "COCO_val2014_2.jpg").unlink()
    with pytest.raises(FileNotFoundError, match="COCO_val2014_2.jpg"):
        read_karpathy(path, tmp_path / "images")
    ds = read_karpathy(path, tmp_path / "images", on_missing="skip")
    assert len(ds.image_paths) == 1 and [r.reason for r in ds.rejections] == ["image_missing"]
    # A flattened folder (no val2014/) is found too.
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(flat / "COCO_val2014_1.jpg")
    assert len(read_karpathy(path, flat, on_missing="skip").image_paths) == 1


def test_bad_files_and_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="Karpathy caption file not found"):
        read_karpathy(tmp_path / "nope.json", tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_karpathy(bad, tmp_path)
    bad.write_text(json.dumps({"annotations": []}))
    with pytest.raises(ValueError, match="'images' list"):
        read_karpathy(bad, tmp_path)
    path = write_coco(tmp_path)
    with pytest.raises(FileNotFoundError, match="image folder not found"):
        read_karpathy(path, tmp_path / "missing")
    with pytest.raises(ValueError, match="no usable 'val' entries"):
        read_karpathy(path, tmp_path / "images", split="val")
    with pytest.raises(ValueError, match="split must be one of"):
        read_karpathy(path, tmp_path / "images", split="dev")
    with pytest.raises(ValueError, match="captions_per_image"):
        read_karpathy(path, tmp_path / "images", captions_per_image=0)
