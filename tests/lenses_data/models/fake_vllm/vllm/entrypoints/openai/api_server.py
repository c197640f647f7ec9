"""A stand-in for vLLM's OpenAI server, for the supervisor's tests: it starts in milliseconds, answers
GET /health and GET /v1/models as vLLM does, and ignores every engine flag.

Run as `python -m vllm.entrypoints.openai.api_server --port N` with tests/lenses_data/models/fake_vllm
on PYTHONPATH (what `lenses serve --vllm-python` runs), or as a script. `--die-after S` exits with
code 3 S seconds after its first model listing (a replica that crashes once it has served: the
supervisor reads the listing when it declares a replica ready)."""

from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-model-name", default="fake-model")
    parser.add_argument("--die-after", type=float)
    args, _engine_flags = parser.parse_known_args()
    listing = json.dumps({"object": "list", "data": [{"id": args.served_model_name}]}).encode()

    listed = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/v1/models" and args.die_after is not None and not listed.is_set():
                listed.set()
                threading.Timer(args.die_after, lambda: os._exit(3)).start()
            routes = {"/health": b"", "/v1/models": listing, "/pid": str(os.getpid()).encode()}
            body = routes.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *_args: object) -> None:  # quiet: the supervisor's lines are the output
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
