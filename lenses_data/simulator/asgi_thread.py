"""Serve an ASGI app on 127.0.0.1 from a background thread: the simulator's `run_in_thread`, and the
fake OpenAI-compatible servers of the tests, all start and stop their server this one way."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve_in_thread(
    app: Any,
    port: int | None = None,
    *,
    what: str = "server",
    thread_name: str | None = None,
    start_timeout_s: float = 120.0,
    **options: Any,
) -> Iterator[str]:
    """Run `app` with uvicorn on 127.0.0.1 (a free port unless given) in a daemon thread; yields the
    base URL (…/v1) once the server accepts connections, and stops it on exit. `options` go to
    `uvicorn.Config`; RuntimeError "<what> did not start" if it is not up within `start_timeout_s` (generous: a
    busy coordinator starts a thread late, and an idle one is up in milliseconds anyway)."""
    import uvicorn

    port = port or free_port()
    # No log_config: uvicorn's default calls logging.config.dictConfig, which reconfigures the
    # host process's logging (and deadlocked Prefect's API log handler). A library must not.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=thread_name, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"{what} did not start: its thread ended (port {port} taken?)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start within {start_timeout_s:.0f} s (machine too busy?)")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
