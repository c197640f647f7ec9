"""Whether a benched endpoint may come back: its server's health, asked over HTTP.

A replica that died is restarted by `lenses serve` (models/supervise.py) and answers again minutes
later on the same URL. The pool (endpoints.py) keeps a benched endpoint out of rotation until one of
these checks passes, so no request is spent finding out that a restarting server is still down.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx

# A health check that takes longer than this is a server that cannot take work yet.
HEALTH_TIMEOUT_S = 5.0

HealthCheck = Callable[[Any], Awaitable[bool]]


class EndpointsDown(Exception):
    """Every endpoint of a role stayed out of rotation longer than `retry.down_grace_s`."""


async def server_healthy(endpoint: Any) -> bool:
    """GET /health on the endpoint's server (vLLM, llama.cpp and the simulator answer it); a server
    without that route (404) is asked for its model listing instead, with the role's key."""
    root = endpoint.url.rstrip("/").removesuffix("/v1")
    try:
        async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S) as http:
            answer = await http.get(f"{root}/health")
            if answer.status_code == 404:
                key = getattr(endpoint.clients[0], "api_key", None) if endpoint.clients else None
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                answer = await http.get(f"{endpoint.url.rstrip('/')}/models", headers=headers)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200
