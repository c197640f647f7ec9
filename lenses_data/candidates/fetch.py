"""Bounded, host-checked HTTP downloads for URL sources.

Redirects are followed by hand so that every hop is checked against private/loopback
addresses (a public URL redirecting to 127.0.0.1 is refused like the direct URL would be).
Bodies are streamed and abandoned as soon as they pass the size limit, and the whole transfer
has one time budget, so a slow-drip server cannot hold a worker forever.
Known gap: the address is resolved for the check and again by the HTTP client, so a DNS
rebinding attacker could still switch addresses in between.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from lenses_data.candidates.rejection import ImageRejected
from lenses_data.config.ingest import IngestConfig

if TYPE_CHECKING:
    import httpx  # imported where a request is made: ingest of local files never needs it

BAD_URL = "bad_url"
PRIVATE_HOST = "private_host"
DNS_ERROR = "dns_error"
HTTP_ERROR = "http_error"
TIMEOUT = "timeout"
REDIRECT_LOOP = "redirect_loop"
TOO_MANY_REDIRECTS = "too_many_redirects"
BAD_CONTENT_TYPE = "bad_content_type"
TOO_LARGE = "too_large"
DOWNLOAD_ERROR = "download_error"

# Content types that may still hold an image (servers often mislabel); decoding decides.
_NEUTRAL_TYPES = ("application/octet-stream", "binary/octet-stream", "application/binary")


class FetchError(ImageRejected):
    """A URL whose bytes could not be fetched (reason codes above)."""


@dataclass(frozen=True)
class Fetched:
    data: bytes
    final_url: str
    content_type: str | None


def is_url(text: str) -> bool:
    return text.lower().startswith(("http://", "https://"))


def _resolve(host: str, port: int) -> list:
    """Addresses of a host (a seam: tests swap it without touching the HTTP client's resolver)."""
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def check_host(url: str, allow_private: bool) -> None:
    """Refuse URLs whose host resolves to a non-public address (unless allowed)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(BAD_URL, f"not an http(s) URL with a host: {url!r}")
    if allow_private:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = _resolve(parts.hostname, port)
    except (socket.gaierror, UnicodeError) as error:
        raise FetchError(DNS_ERROR, f"cannot resolve {parts.hostname!r}: {error}") from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        if not address.is_global:
            raise FetchError(
                PRIVATE_HOST,
                f"{parts.hostname} resolves to non-public address {address}; "
                "set ingest.allow_private_hosts to allow it",
            )


def make_client(config: IngestConfig) -> httpx.Client:
    import httpx

    timeout = httpx.Timeout(config.download_timeout_s)
    return httpx.Client(timeout=timeout, follow_redirects=False, headers={"User-Agent": config.user_agent})


def fetch_url(client: httpx.Client, url: str, config: IngestConfig) -> Fetched:
    """Download one image URL or raise `FetchError` with a reason code."""
    import httpx

    deadline = time.monotonic() + config.download_timeout_s
    seen = {url}
    current = url
    for _hop in range(config.max_redirects + 1):
        check_host(current, config.allow_private_hosts)
        try:
            outcome = _get_once(client, current, config, deadline)
        except httpx.TimeoutException:
            raise FetchError(TIMEOUT, f"no complete answer within {config.download_timeout_s:g} s") from None
        except httpx.HTTPError as error:
            raise FetchError(DOWNLOAD_ERROR, f"{type(error).__name__}: {error}") from None
        if isinstance(outcome, Fetched):
            return outcome
        current = urljoin(current, outcome)
        if current in seen:
            raise FetchError(REDIRECT_LOOP, f"redirect loop back to {current}")
        seen.add(current)
    raise FetchError(TOO_MANY_REDIRECTS, f"more than {config.max_redirects} redirects starting at {url}")


def _get_once(client: httpx.Client, url: str, config: IngestConfig, deadline: float) -> Fetched | str:
    """One request: the body, or the redirect target as a string."""
    with client.stream("GET", url) as response:
        if response.is_redirect:
            location = response.headers.get("location")
            if not location:
                raise FetchError(HTTP_ERROR, f"HTTP {response.status_code} redirect without Location")
            return location
        if response.status_code != 200:
            raise FetchError(HTTP_ERROR, f"HTTP {response.status_code} {response.reason_phrase} for {url}")
        content_type = response.headers.get("content-type")
        _check_content_type(content_type, url)
        declared = response.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > config.max_download_bytes:
            raise FetchError(TOO_LARGE, f"declared {declared} bytes, limit is {config.max_download_bytes}")
        return Fetched(_read_body(response, config, deadline), str(response.url), content_type)


def _check_content_type(content_type: str | None, url: str) -> None:
    if not content_type:
        return
    main = content_type.split(";", 1)[0].strip().lower()
    if main.startswith("image/") or main in _NEUTRAL_TYPES:
        return
    raise FetchError(BAD_CONTENT_TYPE, f"content type {main!r} is not an image ({url})")


def _read_body(response: httpx.Response, config: IngestConfig, deadline: float) -> bytes:
    chunks: list[bytes] = []
    total = 0
    for chunk in response.iter_bytes():
        total += len(chunk)
        if total > config.max_download_bytes:
            raise FetchError(
                TOO_LARGE, f"body passed the limit of {config.max_download_bytes} bytes; stopped"
            )
        if time.monotonic() > deadline:
            raise FetchError(TIMEOUT, f"body not complete within {config.download_timeout_s:g} s")
        chunks.append(chunk)
    return b"".join(chunks)
