"""What the simulator keeps of a request for GET /sim/requests (tests read what reached the server)."""

from __future__ import annotations

import hashlib
from typing import Any


def recorded_body(body: dict[str, Any]) -> dict[str, Any]:
    """The request as received, each image's data URI replaced by its head, length and hash."""
    messages = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            content = [_recorded_part(part) for part in content]
        messages.append({**message, "content": content})
    return {**body, "messages": messages}


def _recorded_part(part: Any) -> Any:
    url = part.get("image_url", {}).get("url") if isinstance(part, dict) else None
    if not isinstance(url, str):
        return part
    image = {"head": url[:32], "chars": len(url), "sha256": hashlib.sha256(url.encode()).hexdigest()}
    return {**part, "image_url": image}
