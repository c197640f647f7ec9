"""`lenses simulate`: run the OpenAI-compatible model simulator (answers marked simulated)."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="serve simulated model answers on an OpenAI-compatible API (for tests and dry runs)",
        description="Serve /v1/models and /v1/chat/completions with deterministic, schema-valid answers "
        "derived from each request, marked simulated (system_fingerprint lenses-simulator, model ids "
        "prefixed simulated/). Texts follow the Lenses paper's density, lens mix and word counts "
        "(lenses_data.config.simulator). Optional latency, fault injection by rate, and server faults "
        "that real servers show on every attempt; GET /sim/stats counts calls.",
    )
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--seed", type=int, default=0, help="seed for answers and faults")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds of delay per answer")
    latency = parser.add_argument_group(
        "latency model",
        "each replica serves one request at a time for prompt tokens / prefill rate + completion tokens / "
        "decode rate (the answer's usage); a request waits for the first free replica; --latency is added",
    )
    latency.add_argument("--replicas", type=int, default=0, help="number of replicas (default 0: unlimited)")
    latency.add_argument("--prefill-tps", type=float, default=0.0, help="prompt tokens/s per replica")
    latency.add_argument("--decode-tps", type=float, default=0.0, help="completion tokens/s per replica")
    parser.add_argument("--yes-rate", type=float, default=0.3, help="share of YES answers to YES/NO choices")
    parser.add_argument(
        "--faults",
        default="{}",
        help='fault rates as JSON, e.g. \'{"http_500": 0.02, "hang": 0.01}\'; kinds: http_500, http_429, '
        "hang, drop, malformed_json, schema_invalid, empty, truncated",
    )
    parser.add_argument(
        "--faults-until-attempt",
        type=int,
        default=None,
        help="attempts numbered >= this never fault, so every request eventually succeeds (chaos tests)",
    )
    faults = parser.add_argument_group(
        "server faults", "what some real OpenAI-compatible servers do, on every attempt (all off by default)"
    )
    faults.add_argument(
        "--reject-json-schema",
        action="store_true",
        help="HTTP 500 on any request whose response_format is json_schema",
    )
    faults.add_argument(
        "--ignore-choice",
        action="store_true",
        help="ignore a structured choice (structured_outputs / guided_choice) and answer free text",
    )
    faults.add_argument("--reject-images", action="store_true", help="HTTP 500 on any request with an image")
    faults.add_argument(
        "--truncate-json",
        type=float,
        default=0.0,
        metavar="RATE",
        help="share of JSON answers cut mid-document with finish_reason length (as a small max_tokens does)",
    )
    faults.add_argument(
        "--garble-validator-focus",
        action="store_true",
        help="Listing 4 answers rewrite every fixed Focus field: validate discards every text",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="served context: listed in /v1/models; prompt (words) + max_tokens over it is refused (400)",
    )
    parser.add_argument(
        "--content",
        default="{}",
        help="overrides of the simulated content rates as JSON, e.g. '{\"text_discard_rate\": 0.1}' "
        "(see lenses_data.config.simulator.SimContentSettings)",
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from lenses_data.config.simulator import SimServerFaults
    from lenses_data.simulator.simulator import SimConfig, serve

    server_faults = SimServerFaults(
        reject_json_schema=args.reject_json_schema,
        ignore_choice=args.ignore_choice,
        reject_images=args.reject_images,
        truncate_json=args.truncate_json,
        garble_validator_focus=args.garble_validator_focus,
    )
    config = SimConfig(
        seed=args.seed,
        latency_s=args.latency,
        replicas=args.replicas,
        prefill_tps=args.prefill_tps,
        decode_tps=args.decode_tps,
        yes_rate=args.yes_rate,
        faults=json.loads(args.faults),
        faults_until_attempt=args.faults_until_attempt,
        content=json.loads(args.content),
        server_faults=server_faults,
        max_model_len=args.max_model_len,
    )
    print(f"lenses simulator (SIMULATED answers) on http://{args.host}:{args.port}/v1", flush=True)
    serve(config, host=args.host, port=args.port)
    return 0
