"""The one exception of a candidate that cannot become an image row: a reason code (the rejection
row's `reason`) and a human message. Decoding raises it as is (`imaging`), downloading as its
subclass `FetchError` (`fetch`); light on purpose, so `fetch` need not import Pillow.
"""

from __future__ import annotations


class ImageRejected(Exception):
    """A file that cannot become a candidate image, with a reason code and a human message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
