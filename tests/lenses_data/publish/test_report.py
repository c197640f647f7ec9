"""The build report (lenses_data.publish.report) on a hand-made export with planted hostile texts and real
images from the sample pool: what is shown, what is escaped, what is read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from lenses_data import io
from lenses_data.publish import card_counts
from lenses_data.publish.report import select, write_report
from lenses_data.schemas import LENS_NAMES, Rejection
from lenses_data.stages.export_tables import ExportImage, ExportText, typed_parquet

PLANTED = "<script>window.__pwned = true</script>"
PLANTED_ATTR = '"><img src=x onerror="window.__pwned=true">'


def _pool_images(sample_pool: Path) -> list[Path]:
    return sorted((sample_pool / "originals").glob("*.*"))


def _export(root: Path, sample_pool: Path, images: int = 30, simulated: bool = True) -> tuple[Path, Path]:
    """RUN/export with `images` images (real files, reused), two to five lenses each, hostile texts
    planted in every image's source and second text (text and focus) and in a rejection message."""
    run, export = root / "run", root / "run" / "export"
    export.mkdir(parents=True)
    files = _pool_images(sample_pool)
    ids = [f"{i:016x}" for i in range(images)]
    splits = ["train", "valid", "test"]
    frame = pd.DataFrame(
        {
            "image_id": ids,
            "path": [str(files[i % len(files)]) for i in range(images)],
            "width": 100,
            "height": 100,
            "split": [splits[i % 3] for i in range(images)],
            "source": [f"pool/{i}{PLANTED_ATTR}.jpg" for i in range(images)],
            "group_id": ids,
        }
    )
    typed_parquet(export / "images.parquet", frame, ExportImage)
    ingest = frame[["image_id", "path"]].assign(licence="CC BY 4.0 <i>")  # licences come from ingest
    io.write_table(io.shard_path(run, "ingest", 0), pa.Table.from_pandas(ingest, preserve_index=False))
    rows = []
    for i, image_id in enumerate(ids):
        for j, lens in enumerate(LENS_NAMES[: 2 + i % 4]):  # image i has lenses 0..(1 + i % 4)
            text = PLANTED if j == 1 else f"Image {i} seen as {lens}: the plan felt like a house of cards."
            rows.append(
                {
                    "text_id": f"{image_id}-{j}",
                    "image_id": image_id,
                    "split": frame["split"][i],
                    "lens": lens,
                    "text": text,
                    "focus": PLANTED_ATTR if j == 1 else "table",
                    "idioms": ["house of cards"],
                    "edited": j == 0,
                    "original_text": "before the edit" if j == 0 else text,
                    "prompt_hash": "h",
                    "model": "m",
                    "simulated": simulated,
                    "flags": [],
                }
            )
    texts = pd.DataFrame(rows)
    typed_parquet(export / "captions.parquet", texts, ExportText)
    typed_parquet(export / "prompts.parquet", texts.assign(text_id=texts["text_id"] + "p"), ExportText)
    rejections = pd.DataFrame(
        [
            {"stage": "rules", "record_id": "t1", "reason": "word_count_low", "message": PLANTED},
            {
                "stage": "ingest",
                "record_id": "x",
                "reason": "too_small",
                "message": "48x40",
                "source": "a.jpg",
            },
        ],
        columns=list(Rejection.model_fields),
    )
    io.write_table(export / "rejections.parquet", io.to_table(rejections, Rejection))
    manifest = {"created_at": "2026-01-01T00:00:00Z", "simulated": simulated, "tables": {}}
    (export / "manifest.json").write_text(json.dumps(manifest))
    return run, export


def test_report_shows_n_images_escapes_every_text_and_loads_nothing(tmp_path, sample_pool):
    run, export = _export(tmp_path, sample_pool)
    done = write_report(run, n=12, seed=3)
    page = Path(done["index"]).read_text()
    assert done["images"] == 12 and page.count('<article class="item"') == 12
    # the planted texts are shown as text: only the report's own script tag is in the page
    assert page.count("<script>") == 1 and "onerror=" not in page.replace("onerror=&quot;", "")
    assert "&lt;script&gt;window.__pwned = true&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=&quot;window.__pwned=true&quot;&gt;" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing from the network
    assert "SIMULATED." in page and 'class="banner"' in page
    assert page.count('<mark title="Fragility, Risk &amp; Volatility">house of cards</mark>') > 0
    assert "<del>before the edit</del>" in page
    assert page.count("licence: CC BY 4.0 &lt;i&gt;</div>") == 12
    # thumbnails: one per shown image, at most 256 px, made once
    thumbs = sorted((export / "report" / "thumbs").glob("*.webp"))
    assert len(thumbs) == 12 and all(max(Image.open(p).size) <= 256 for p in thumbs)
    stamps = {p: p.stat().st_mtime_ns for p in thumbs}
    write_report(run, n=12, seed=3)
    assert {p: p.stat().st_mtime_ns for p in thumbs} == stamps


def test_gallery_is_a_block_of_consecutive_ids_with_all_its_texts(tmp_path, sample_pool):
    """Across row groups: the sampled block and its texts equal what pandas finds in the whole table."""
    _, export = _export(tmp_path, sample_pool, images=40)
    for name in ("images", "captions", "prompts"):  # rewrite in row groups of 7 rows
        io.write_table(
            export / f"{name}.parquet", pq.read_table(export / f"{name}.parquet"), row_group_size=7
        )
    assert pq.ParquetFile(export / "captions.parquet").num_row_groups > 10
    everything = pd.read_parquet(export / "images.parquet")
    for seed in range(5):
        images, total = select.sample_images(export, 9, seed)
        assert total == 40 and len(images) == 9
        start = everything.index[everything["image_id"] == images["image_id"].iloc[0]][0]
        assert images["image_id"].tolist() == everything["image_id"].iloc[start : start + 9].tolist()
        texts = select.sample_texts(export, images["image_id"].tolist())
        for kind, name in (("caption", "captions"), ("prompt", "prompts")):
            full = pd.read_parquet(export / f"{name}.parquet")
            expected = full[full["image_id"].isin(images["image_id"])]["text_id"]
            assert sorted(texts[texts["kind"] == kind]["text_id"]) == sorted(expected)
    assert len(select.sample_images(export, 500)[0]) == 40


def test_counts_are_the_cards_and_an_older_export_gets_them_from_the_card_functions(tmp_path, sample_pool):
    run, export = _export(tmp_path, sample_pool, simulated=False)
    page = Path(write_report(run, n=5)["index"]).read_text()
    assert 'class="banner"' not in page
    images = pd.read_parquet(export / "images.parquet")
    captions = pd.read_parquet(export / "captions.parquet")
    table = card_counts.split_lens_table(images, captions, "Captions")
    total = table.set_index("Split").loc["Total"]
    row = "".join(f"<td>{int(v):,}</td>" for v in total.tolist())
    assert f"<td>Total</td>{row}" in page
    # a saved card_counts.json is what the page shows: change it and the page follows
    saved = card_counts.count_tables(
        run,
        images,
        captions,
        pd.read_parquet(export / "prompts.parquet"),
        pd.read_parquet(export / "rejections.parquet"),
    )
    saved["captions"].loc[3, "# Captions"] = 987654
    card_counts.write_counts(export, saved)
    assert "<td>987,654</td>" in Path(write_report(run, n=5)["index"]).read_text()


def test_funnel_artifact_links_the_report_once_export_ran(tmp_path):
    from flows.reporting import funnel_markdown, report_path

    index = tmp_path / "export" / "report" / "index.html"
    index.parent.mkdir(parents=True)
    index.write_text("<html></html>")
    stages = [{"stage": "split"}, {"stage": "export"}]
    assert report_path(str(tmp_path), stages[:1]) is None
    found = report_path(str(tmp_path), stages)
    assert found == index.resolve()
    assert f"({index.resolve().as_uri()})" in funnel_markdown(stages, str(tmp_path), found)
