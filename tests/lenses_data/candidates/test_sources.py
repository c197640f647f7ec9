"""Source detection, TSV/CSV/Parquet/WebDataset/WikiArt readers and URL fetching (real HTTP)."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from skimage import data as skdata

from lenses_data.candidates.fetch import FetchError, check_host, fetch_url, make_client
from lenses_data.candidates.sources import SourceError, detect_kind, iter_source
from lenses_data.config.ingest import IngestConfig


def _jpeg(array=None, size: tuple[int, int] = (160, 120)) -> bytes:
    image = Image.fromarray(skdata.astronaut() if array is None else array).resize(size)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=85)
    return buffer.getvalue()


IMAGE = _jpeg()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        path = self.path
        if path == "/img.jpg":
            self._send(200, IMAGE, "image/jpeg")
        elif path == "/octet":
            self._send(200, IMAGE, "application/octet-stream")
        elif path == "/fake.jpg":
            self._send(200, b"<html>not really</html>" * 10, "image/jpeg")
        elif path == "/html":
            self._send(200, b"<html><body>hello</body></html>", "text/html; charset=utf-8")
        elif path == "/slow":
            time.sleep(1.5)
            self._send(200, IMAGE, "image/jpeg")
        elif path == "/loop-a":
            self._redirect("/loop-b")
        elif path == "/loop-b":
            self._redirect("/loop-a")
        elif path.startswith("/hop/"):
            self._redirect(f"/hop/{int(path.rsplit('/', 1)[1]) + 1}")
        elif path == "/to-img":
            self._redirect("/img.jpg")
        elif path == "/to-localhost":
            self._redirect(f"http://localhost:{self.server.server_address[1]}/img.jpg")
        elif path == "/big-declared":
            self._send(200, IMAGE, "image/jpeg", length=50_000_000)
        elif path == "/big-stream":
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.end_headers()  # no Content-Length: the body ends when the connection closes
            try:
                for _ in range(64):
                    self.wfile.write(b"\xff" * 65536)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading: that is the behaviour under test
        else:
            self._send(404, b"not found", "text/plain")


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # clients that hang up early (timeouts, size limits) are what these tests provoke


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    server = _QuietServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _config(**overrides) -> IngestConfig:
    values = {"allow_private_hosts": True, "download_timeout_s": 5.0, "max_download_bytes": 200_000}
    values.update(overrides)
    return IngestConfig(**values)


def _fetch_reason(url: str, config: IngestConfig) -> str:
    with make_client(config) as client, pytest.raises(FetchError) as caught:
        fetch_url(client, url, config)
    return caught.value.reason


def test_fetch_returns_image_bytes_and_follows_redirects(http_server: str) -> None:
    config = _config()
    with make_client(config) as client:
        direct = fetch_url(client, f"{http_server}/img.jpg", config)
        redirected = fetch_url(client, f"{http_server}/to-img", config)
        octet = fetch_url(client, f"{http_server}/octet", config)
    assert direct.data == IMAGE and redirected.data == IMAGE and octet.data == IMAGE
    assert redirected.final_url.endswith("/img.jpg")
    assert direct.content_type == "image/jpeg"


@pytest.mark.parametrize(
    ("path", "overrides", "reason"),
    [
        ("/missing.jpg", {}, "http_error"),
        ("/slow", {"download_timeout_s": 0.2}, "timeout"),
        ("/loop-a", {}, "redirect_loop"),
        ("/hop/0", {"max_redirects": 3}, "too_many_redirects"),
        ("/html", {}, "bad_content_type"),
        ("/big-declared", {}, "too_large"),
        ("/big-stream", {}, "too_large"),
    ],
)
def test_fetch_failures_have_reason_codes(http_server: str, path: str, overrides: dict, reason: str) -> None:
    assert _fetch_reason(http_server + path, _config(**overrides)) == reason


def test_private_and_loopback_hosts_refused_unless_allowed(http_server: str) -> None:
    refused = _config(allow_private_hosts=False)
    assert _fetch_reason(f"{http_server}/img.jpg", refused) == "private_host"
    for url in (
        "http://10.1.2.3/x.jpg",
        "http://192.168.0.1/x.jpg",
        "http://[::1]/x.jpg",
        "http://169.254.1.1/",
    ):
        with pytest.raises(FetchError) as caught:
            check_host(url, allow_private=False)
        assert caught.value.reason == "private_host"
    check_host(f"{http_server}/img.jpg", allow_private=True)  # allowed: no error
    with pytest.raises(FetchError) as caught:
        check_host("ftp://example.org/x.jpg", allow_private=False)
    assert caught.value.reason == "bad_url"


def test_url_rows_through_ingest_record_each_reason(http_server: str, tmp_path: Path) -> None:
    from lenses_data.config import config_from_dict
    from lenses_data.io import read_rejections, read_stage
    from lenses_data.stages.ingest import run_ingest

    rows = {
        "good": "/img.jpg",
        "missing": "/missing.jpg",
        "slow": "/slow",
        "loop": "/loop-a",
        "html": "/html",
        "huge": "/big-stream",
        "fake": "/fake.jpg",
    }
    tsv = tmp_path / "urls.tsv"
    tsv.write_text("".join(f"{caption}\t{http_server}{path}\n" for caption, path in rows.items()))
    settings = {"allow_private_hosts": True, "download_timeout_s": 0.5, "max_download_bytes": 200_000}
    config = config_from_dict({"ingest": {**settings, "workers": 1}}, environ={})
    run = tmp_path / "run"
    summary = run_ingest([str(tsv)], run, config)
    accepted = read_stage(run, "ingest")
    assert summary.accepted == 1 and list(accepted["source_caption"]) == ["good"]
    image_id = accepted["image_id"].iloc[0]
    materialised = run / "images" / image_id[:2] / f"{image_id}.jpg"
    assert accepted["path"].iloc[0] == str(materialised) and materialised.read_bytes() == IMAGE
    rejections = read_rejections(run, "ingest")
    reasons = dict(zip(rejections["source"], rejections["reason"], strict=True))
    expected = {
        "missing": "http_error",
        "slow": "timeout",
        "loop": "redirect_loop",
        "html": "bad_content_type",
        "huge": "too_large",
        "fake": "not_an_image",
    }
    assert reasons == {http_server + rows[name]: reason for name, reason in expected.items()}


# --- detection and readers --------------------------------------------------------------------


def test_detect_kind_for_each_source_kind(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "wikiart" / "Impressionism").mkdir(parents=True)
    for name in ("a.tsv", "b.csv", "c.parquet", "d.tar", "notes.json"):
        (tmp_path / name).write_bytes(b"")
    assert detect_kind(str(tmp_path / "folder"))[0] == "folder"
    assert detect_kind(str(tmp_path / "wikiart"))[0] == "wikiart"
    assert detect_kind(str(tmp_path / "a.tsv"))[0] == "tsv"
    assert detect_kind(str(tmp_path / "b.csv"))[0] == "tsv"
    assert detect_kind(str(tmp_path / "c.parquet"))[0] == "parquet"
    assert detect_kind(str(tmp_path / "d.tar"))[0] == "webdataset"
    assert detect_kind(f"folder:{tmp_path / 'wikiart'}")[0] == "folder"  # a prefix forces the kind
    assert detect_kind(f"tsv:{tmp_path / 'notes.json'}")[0] == "tsv"
    with pytest.raises(SourceError, match="unknown source kind"):
        detect_kind(str(tmp_path / "notes.json"))
    with pytest.raises(SourceError, match="not found"):
        detect_kind(str(tmp_path / "absent"))
    with pytest.raises(SourceError, match="URL is not a source"):
        detect_kind("https://example.org/images.tar")


def test_tsv_without_header_is_cc3m_order_and_csv_header_maps_columns(tmp_path: Path) -> None:
    (tmp_path / "tsv.tsv").write_text("a red car\timg/car.jpg\nno url here\nsky\thttps://example.org/s.jpg\n")
    items = list(iter_source(str(tmp_path / "tsv.tsv"), IngestConfig()))
    assert [i.caption for i in items] == ["a red car", None, "sky"]
    assert items[0].path == str((tmp_path / "img" / "car.jpg").absolute())
    assert items[1].error is not None and items[1].error[0] == "malformed_row"
    assert items[2].url == "https://example.org/s.jpg" and items[2].path is None
    (tmp_path / "meta.csv").write_text('license,URL,caption\ncc-by,/abs/x.png,"a, comma"\n')
    (row,) = iter_source(str(tmp_path / "meta.csv"), IngestConfig())
    assert (row.path, row.caption, row.licence) == ("/abs/x.png", "a, comma", "cc-by")


def test_parquet_reader_takes_bytes_url_or_records_missing(tmp_path: Path) -> None:
    table = pa.table(
        {
            "key": ["000", "001", "002"],
            "url": ["https://example.org/a.jpg", "https://example.org/b.jpg", None],
            "caption": ["with bytes", "url only", "nothing"],
            "jpg": [IMAGE, None, None],
        }
    )
    pq.write_table(table, tmp_path / "shard.parquet")
    items = list(iter_source(str(tmp_path / "shard.parquet"), IngestConfig()))
    assert items[0].data == IMAGE and items[0].source == "https://example.org/a.jpg"
    assert items[1].data is None and items[1].url == "https://example.org/b.jpg"
    assert items[2].error is not None and items[2].error[0] == "missing_image"
    assert items[2].source.endswith("shard.parquet#002")
    pq.write_table(pa.table({"caption": ["x"]}), tmp_path / "bad.parquet")
    with pytest.raises(SourceError, match="no image bytes column"):
        list(iter_source(str(tmp_path / "bad.parquet"), IngestConfig()))


def _add(archive: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    archive.addfile(info, io.BytesIO(payload))


def test_webdataset_groups_members_by_key(tmp_path: Path) -> None:
    shard = tmp_path / "shard-000.tar"
    with tarfile.open(shard, "w") as archive:
        _add(archive, "s/0001.jpg", IMAGE)
        _add(archive, "s/0001.txt", b"caption from txt\n")
        _add(archive, "s/0002.png", IMAGE)
        _add(archive, "s/0002.json", json.dumps({"caption": "from json", "license": "cc0"}).encode())
        _add(archive, "s/0003.txt", b"no image for this key")
        link = tarfile.TarInfo("s/0004.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    items = list(iter_source(str(shard), IngestConfig()))
    by_source = {item.source.rsplit("::", 1)[1]: item for item in items}
    assert by_source["s/0001.jpg"].caption == "caption from txt" and by_source["s/0001.jpg"].data == IMAGE
    assert (by_source["s/0002.png"].caption, by_source["s/0002.png"].licence) == ("from json", "cc0")
    assert by_source["s/0003"].error[0] == "missing_image"
    assert by_source["s/0004.jpg"].error[0] == "unsupported_member"


def test_wikiart_root_keeps_style_artist_title(tmp_path: Path) -> None:
    root = tmp_path / "wikiart"
    (root / "Impressionism").mkdir(parents=True)
    (root / "Impressionism" / "claude-monet_water-lilies-1906.jpg").write_bytes(IMAGE)
    (root / "Ukiyo_e").mkdir()
    (root / "Ukiyo_e" / "untitled.jpg").write_bytes(IMAGE)
    items = list(iter_source(str(root), IngestConfig()))
    assert [(i.style, i.artist, i.title, i.source_kind) for i in items] == [
        ("Impressionism", "claude-monet", "water-lilies-1906", "wikiart"),
        ("Ukiyo_e", None, "untitled", "wikiart"),
    ]


def test_folder_reader_is_sorted_and_counts_metadata_files(tmp_path: Path) -> None:
    for name in ("b/2.jpg", "a/1.jpg", "c.jpg", "list.tsv", ".hidden.jpg"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(IMAGE)
    (tmp_path / "linked").symlink_to(tmp_path / "a", target_is_directory=True)
    items = list(iter_source(str(tmp_path), IngestConfig()))
    candidates = [Path(i.path).relative_to(tmp_path).as_posix() for i in items if i.path]
    assert candidates == ["c.jpg", "a/1.jpg", "b/2.jpg"]
    assert sorted(i.skipped for i in items if i.skipped) == ["hidden_file", "metadata_file"]
    assert [i.error[0] for i in items if i.error] == ["symlinked_directory"]


def test_tsv_keeps_quotes_literal_and_survives_an_oversized_field(tmp_path: Path) -> None:
    giant = "x" * 200_000  # over the csv module's field size limit
    text = '"quoted" caption\ta.jpg\n' + f"{giant}\tb.jpg\n" + "after\tc.jpg\n"
    (tmp_path / "rows.tsv").write_text(text)
    items = list(iter_source(str(tmp_path / "rows.tsv"), IngestConfig()))
    assert items[0].caption == '"quoted" caption' and items[0].path.endswith("a.jpg")
    assert items[1].error is not None and items[1].error[0] == "malformed_row"
    assert items[-1].caption == "after" and items[-1].path.endswith("c.jpg")


def test_every_redirect_hop_is_host_checked(http_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL that passes the check must not reach a private host through a redirect."""
    import lenses_data.candidates.fetch as fetch

    real = fetch._resolve

    def fake(host: str, port: int) -> list:  # the check sees 127.0.0.1 as public; localhost stays local
        if host == "127.0.0.1":
            return [(2, 1, 6, "", ("93.184.216.34", port))]
        return real(host, port)

    monkeypatch.setattr(fetch, "_resolve", fake)
    config = _config(allow_private_hosts=False)
    with make_client(config) as client:
        assert fetch_url(client, f"{http_server}/img.jpg", config).data == IMAGE  # the first hop passes
    assert _fetch_reason(f"{http_server}/to-localhost", config) == "private_host"


def test_a_dead_decode_process_costs_only_the_image_that_killed_it(tmp_path: Path) -> None:
    """Real worker processes, one of them SIGKILLed mid-run: every batch in flight is redone."""
    from lenses_data.config import config_from_dict
    from lenses_data.stages.ingest import decode_limits
    from lenses_data.stages.ingest_exec import DecodePool, batched, ordered
    from tests.lenses_data.candidates.crash_decoder import decode_or_die

    paths = []
    for index in range(60):
        name = "poison-17.jpg" if index == 17 else f"img-{index:02d}.jpg"
        image = Image.new("RGB", (64 + index, 48), (index * 4, 90, 200 - index * 3))
        image.save(tmp_path / name, "JPEG")
        paths.append(str(tmp_path / name))
    tasks = [{"seq": seq, "path": path} for seq, path in enumerate(paths)]
    limits = decode_limits(config_from_dict({"ingest": {"min_side": 16}}, environ={}))
    with DecodePool(2, limits, str(tmp_path / "out"), decode=decode_or_die) as pool:
        outcomes = [o for batch in ordered(lambda b: pool.submit([], b), batched(tasks, 5), 6) for o in batch]
    assert [o["seq"] for o in outcomes] == list(range(60))
    crashed = [o["seq"] for o in outcomes if not o["ok"]]
    assert crashed == [17], [(o["seq"], o.get("reason")) for o in outcomes if not o["ok"]]
    assert outcomes[17]["reason"] == "decoder_crashed" and "twice" in outcomes[17]["message"]


def test_parquet_path_cells_and_compressed_shards(tmp_path: Path) -> None:
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(IMAGE)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    cells = pa.array([{"bytes": None, "path": "imgs/a.jpg"}, {"bytes": IMAGE, "path": None}], type=image_type)
    pq.write_table(pa.table({"image": cells, "text": ["by path", "by bytes"]}), tmp_path / "hf.parquet")
    by_path, by_bytes = iter_source(str(tmp_path / "hf.parquet"), IngestConfig())
    assert by_path.path == str(tmp_path / "imgs" / "a.jpg") and by_path.caption == "by path"
    assert not by_path.materialise and by_bytes.materialise and by_bytes.data == IMAGE
    with tarfile.open(tmp_path / "shard.tar.gz", "w:gz") as archive:
        _add(archive, "k.jpg", IMAGE)
    assert detect_kind(str(tmp_path / "shard.tar.gz"))[0] == "webdataset"
    (item,) = iter_source(str(tmp_path / "shard.tar.gz"), IngestConfig())
    assert item.data == IMAGE


def test_non_text_metadata_becomes_text(tmp_path: Path) -> None:
    shard = tmp_path / "numbers.tar"
    with tarfile.open(shard, "w") as archive:
        _add(archive, "k.jpg", IMAGE)
        _add(archive, "k.json", json.dumps({"caption": 42, "license": ["cc0"]}).encode())
    (item,) = iter_source(str(shard), IngestConfig())
    assert (item.caption, item.licence) == ("42", "['cc0']")
    pq.write_table(pa.table({"jpg": [IMAGE], "caption": [7]}), tmp_path / "n.parquet")
    (row,) = iter_source(str(tmp_path / "n.parquet"), IngestConfig())
    assert row.caption == "7"
