"""The build report as a person meets it: `lenses run --sample` prints its path, `lenses report`
rewrites it with hostile texts planted in the export, and headless Chromium (Debian's `chromium`,
driven through its `chromedriver` by selenium) opens it from disk: no console errors, every sampled
image in the gallery, filters by lens, split and reason, the planted texts shown and never run, and
the near-duplicate groups: every thumbnail loaded, each removed image naming its signal and distance."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lenses_data import io
from lenses_data.schemas import DedupeRecord
from lenses_data.stages.export_tables import ExportImage, ExportText, typed_parquet

LENSES = str(Path(sys.executable).parent / "lenses")
PLANTED = "<script>window.__pwned = true</script>"
PLANTED_FILE = '"><img src=x onerror="window.__pwned=true">.jpg'
# Without the background-networking flags Chromium's own connections are refused many at a time on a
# closed network, and each refusal is a console error.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)


def _browser_binaries() -> tuple[str, str]:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (os.access(chromium, os.X_OK) and os.access(driver, os.X_OK)):
        pytest.skip(
            "no chromium/chromedriver (Debian packages chromium, chromium-driver; `make test` installs them)"
        )
    return chromium, driver


@pytest.fixture
def browser(tmp_path):
    chromium, driver = _browser_binaries()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(service=Service(driver), options=options)
    yield session
    session.quit()


def _plant(export: Path) -> None:
    """A caption and a rejection message holding a script, a source file name breaking out of an
    attribute; written back as the export writes its tables."""
    captions = pd.read_parquet(export / "captions.parquet")
    captions.loc[0, "text"] = f"A quiet room. {PLANTED}"
    typed_parquet(export / "captions.parquet", captions, ExportText)
    images = pd.read_parquet(export / "images.parquet")
    images["source"] = images["source"].str.replace(r"[^/]*$", PLANTED_FILE, regex=True)
    typed_parquet(export / "images.parquet", images, ExportImage)
    rejections = pd.read_parquet(export / "rejections.parquet")
    rejections.loc[0, "message"] = PLANTED
    rejections.to_parquet(export / "rejections.parquet", index=False)


def _visible(browser, selector: str) -> list:
    return [el for el in browser.find_elements("css selector", selector) if el.is_displayed()]


def _loaded(browser, image) -> bool:
    """Scrolled into view (thumbnails load lazily), then decoded: naturalWidth > 0."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.execute_script("arguments[0].scrollIntoView()", image)
    return WebDriverWait(browser, 10).until(
        lambda b: b.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", image)
    )


def _check_duplicate_groups(browser, run: Path) -> None:
    """Every removed image of the sample build is shown beside its kept image, both thumbnails load, and
    its caption names the signal that merged it and the distance (as dedupe recorded them)."""
    records = io.read_stage(run, "dedupe", DedupeRecord)
    removed = records[~records["kept"]].set_index("image_id")
    label = {"phash": "pHash", "both": "pHash + CLIP", "phash_crop": "crop", "clip": "CLIP"}
    groups = browser.find_elements("css selector", "#dedupe .group")
    assert len(groups) == removed["group_id"].nunique() > 0
    shown = set()
    for group in groups:
        kept = group.find_element("css selector", "figure.kept")
        assert group.get_attribute("data-group") in kept.text
        for image in group.find_elements("css selector", "figure img"):
            assert _loaded(browser, image), image.get_attribute("src")
        for figure in group.find_elements("css selector", "figure.dropped"):
            image_id = figure.find_element("css selector", "code").text
            rec = removed.loc[image_id]
            unit = "aligned bits" if rec["signal"] == "phash_crop" else "bits"
            assert f"{label[rec['signal']]}: distance {int(rec['distance'])} {unit}" in figure.text, (
                figure.text
            )
            assert "threshold" in figure.text and figure.get_attribute("data-signal") == rec["signal"]
            shown.add(image_id)
    assert shown == set(removed.index)


def _choose(browser, name: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", f"f-{name}")).select_by_value(value)


@pytest.mark.slow
def test_sample_report_in_chromium(tmp_path, browser):
    run = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    built = subprocess.run(
        [LENSES, "run", "--sample", "--run", str(run)], env=env, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-2000:]
    index = run / "export" / "report" / "index.html"
    assert f"report:        {index.resolve()}" in built.stdout and index.exists()

    export = run / "export"
    _plant(export)
    written = subprocess.run([LENSES, "report", "--run", str(run)], env=env, capture_output=True, text=True)
    assert written.returncode == 0 and str(index.resolve()) in written.stdout, written.stderr[-2000:]
    images = pd.read_parquet(export / "images.parquet")
    texts = pd.concat([pd.read_parquet(export / f) for f in ("captions.parquet", "prompts.parquet")])

    browser.get(index.resolve().as_uri())
    assert browser.get_log("browser") == []  # no console errors (nor any other message)
    assert len(browser.find_elements("css selector", "#gallery .item")) == len(images) > 0
    assert len(_visible(browser, "#gallery .item")) == min(len(images), 24)  # the first page
    assert browser.find_element("css selector", ".banner").text.startswith("SIMULATED.")
    assert browser.execute_script("return window.__pwned === undefined")
    assert PLANTED in browser.find_element("id", "gallery").text
    assert PLANTED in browser.find_element("id", "rejections").text
    assert PLANTED_FILE in browser.find_element("id", "gallery").text
    _check_duplicate_groups(browser, run)

    per_lens = texts.assign(lens=texts["lens"].astype(str)).groupby("lens")["image_id"].nunique()
    lens = str(per_lens.idxmin())  # the lens of the fewest images
    _choose(browser, "lens", lens)
    assert len(_visible(browser, "#gallery .item")) == per_lens[lens]
    assert {b.get_attribute("data-lens") for b in _visible(browser, "#gallery .lens-block")} == {lens}
    _choose(browser, "lens", "")
    _choose(browser, "split", "test")
    assert len(_visible(browser, "#gallery .item")) == int((images["split"] == "test").sum())
    reason = str(pd.read_parquet(export / "rejections.parquet")["reason"].iloc[-1])
    _choose(browser, "reason", reason)
    assert {s.get_attribute("data-reason") for s in _visible(browser, "#rejections .reason")} == {reason}
    _choose(browser, "split", "")
    _choose(browser, "reason", "")
    assert browser.get_log("browser") == []
    assert browser.save_screenshot(str(tmp_path / "report.png"))
