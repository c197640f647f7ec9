"""ArtEmis and IRFL readers on small files written in their formats."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from training.external.artemis import read_artemis
from training.external.irfl import detection_accuracy, parse_name_list, read_irfl


def _image(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(path)


def test_artemis_reader(tmp_path):
    _image(tmp_path / "wikiart/Impressionism/monet_water-lilies.jpg", 10)
    _image(tmp_path / "wikiart/Cubism/picasso_guitar.jpg", 20)
    rows = [
        ("Impressionism", "monet_water-lilies", "contentment", "calm and soft", 5),
        ("Cubism", "picasso_guitar", "amusement", "the shapes look playful", 6),
        ("Impressionism", "monet_water-lilies", "awe", "light dances on water", 5),
        ("Cubism", "missing_painting", "sadness", "grey and heavy", 5),
    ]
    csv = tmp_path / "artemis.csv"
    pd.DataFrame(rows, columns=["art_style", "painting", "emotion", "utterance", "repetition"]).to_csv(csv)
    with pytest.raises(FileNotFoundError, match="missing_painting"):
        read_artemis(csv, tmp_path / "wikiart")
    got = read_artemis(csv, tmp_path / "wikiart", on_missing="skip")
    assert len(got.image_paths) == 2 and got.texts[1] == "the shapes look playful"
    assert got.caption_image.tolist() == [0, 1, 0] and set(got.caption_lens.tolist()) == {4}
    assert [(r.row, r.reason) for r in got.rejections] == [(3, "image_missing")]


def test_artemis_missing_columns_and_files(tmp_path):
    csv = tmp_path / "bad.csv"
    pd.DataFrame({"art_style": ["x"], "painting": ["y"]}).to_csv(csv)
    with pytest.raises(ValueError, match="lacks columns.*emotion"):
        read_artemis(csv, tmp_path)
    with pytest.raises(FileNotFoundError, match="ArtEmis file not found"):
        read_artemis(tmp_path / "nope.csv", tmp_path)


def test_irfl_reader_and_accuracy(tmp_path):
    for i, name in enumerate(["a.jpeg", "b.jpeg", "c.jpeg", "d.jpeg"]):
        _image(tmp_path / "imgs" / name, 40 * i)
    rows = [
        ("break the ice", '["a.jpeg"]', "['b.jpeg', 'c.jpeg']", "figurative"),
        ("as busy as a bee", "d.jpeg", '["a.jpeg", "b.jpeg"]', "figurative"),
        ("spill the beans", '["a.jpeg"]', '["zzz.jpeg"]', "literal"),
    ]
    csv = tmp_path / "idiom_detection_task.csv"
    pd.DataFrame(rows, columns=["phrase", "answer", "distractors", "figurative_type"]).to_csv(
        csv, index=False
    )
    with pytest.raises(FileNotFoundError, match="zzz.jpeg"):
        read_irfl(csv, tmp_path / "imgs")
    task = read_irfl(csv, tmp_path / "imgs", on_missing="skip")
    assert task.phrases == ["break the ice", "as busy as a bee"]
    assert task.rejections[0].reason == "image_missing"
    names = [p.rsplit("/", 1)[1] for p in task.image_paths]
    sim = np.zeros((2, len(names)))
    sim[0, names.index("a.jpeg")] = 1.0  # phrase 0 prefers its answer: correct
    sim[1, names.index("b.jpeg")] = 1.0  # phrase 1 prefers a distractor: wrong
    assert detection_accuracy(task, sim) == {"accuracy": 50.0, "accuracy/figurative": 50.0}
    # A tie between answer and distractors is not counted in the model's favour.
    assert detection_accuracy(task, np.zeros((2, len(names))))["accuracy"] == 0.0


def test_irfl_bad_cells_and_columns(tmp_path):
    (tmp_path / "imgs").mkdir()
    csv = tmp_path / "t.csv"
    pd.DataFrame({"phrase": ["x"], "answer": ["[broken"], "distractors": ["[]"]}).to_csv(csv, index=False)
    with pytest.raises(ValueError, match="row 0: cannot parse"):
        read_irfl(csv, tmp_path / "imgs")
    pd.DataFrame({"phrase": ["x"], "answer": ["a"]}).to_csv(csv, index=False)
    with pytest.raises(ValueError, match="distractors"):
        read_irfl(csv, tmp_path / "imgs")
    assert parse_name_list("['a', 'b']") == ["a", "b"] and parse_name_list("c.png") == ["c.png"]


def test_irfl_split_filter(tmp_path):
    for i, name in enumerate(["a.jpeg", "b.jpeg"]):
        _image(tmp_path / "imgs" / name, 60 * i)
    rows = [
        ("p1", "a.jpeg", "b.jpeg", "train"),
        ("p2", "b.jpeg", "a.jpeg", "test"),
        ("p3", "a.jpeg", "b.jpeg", "train"),
    ]
    csv = tmp_path / "t.csv"
    pd.DataFrame(rows, columns=["phrase", "answer", "distractors", "split"]).to_csv(csv, index=False)
    assert read_irfl(csv, tmp_path / "imgs", split="train").phrases == ["p1", "p3"]
    assert read_irfl(csv, tmp_path / "imgs", split="test").phrases == ["p2"]
    assert len(read_irfl(csv, tmp_path / "imgs").phrases) == 3
    with pytest.raises(ValueError, match="no usable IRFL rows.*split='valid'"):
        read_irfl(csv, tmp_path / "imgs", split="valid")
    pd.DataFrame(rows, columns=["phrase", "answer", "distractors", "kind"]).to_csv(csv, index=False)
    with pytest.raises(ValueError, match="no 'split' column"):
        read_irfl(csv, tmp_path / "imgs", split="train")
