"""`lenses check`: probe each model role's endpoint by hand, as a stage does before sending work.

Prints one line per role and capability (model served, JSON-schema output, choice constraint,
image input, prefix-cache use, context fit) with ok, fallback (the pipeline will use a workaround,
or pay more) or fail. Exit codes: 0 every role can work, 1 some role cannot (or its endpoint is
unreachable, or its real requests do not fit its served context), 2 bad configuration.
"""

from __future__ import annotations

import argparse

from lenses_data.config.roles import MODEL_ROLES, ROLES


def _needs() -> str:
    """'filter: choice + image; generator: JSON + image; ...', from the roles' declaration."""
    return "; ".join(
        f"{name}: {' + '.join(n.replace('json', 'JSON') for n in role.needs)}"
        for name, role in MODEL_ROLES.items()
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="probe each model role's endpoint (model served, JSON schema, choice, images, prefix cache) "
        "and report which fallbacks the pipeline will use",
        description="Ask each role's server its vLLM release (GET /version; it decides the choice field the "
        "client sends) and served context, then send it one cheap request per capability the pipeline "
        "needs from it "
        f"({_needs()}; with processor settings, the same wide image with and without them, which must cost fewer "
        "prompt tokens with them), then two requests with the same instructions to see how much the server's prefix cache "
        "served (cached_tokens). vLLM reports only hits, so a silent second answer is followed by a "
        "word-for-word repeat: a hit there means the second missed (fallback: the image is rendered "
        "before the instructions); no hit reads 'not measured' (caching or its reporting is off). "
        "Last, the role's real requests (its templates rendered for a representative row: validators a "
        "batch of 7 long texts per kind, image roles a 4:3 image, InternVL's largest tile grid) are sent "
        "with max_tokens 1: the prompt tokens the server counts plus the role's configured max_tokens "
        "must fit the context it serves (max_model_len in /v1/models), or the line reads fail with the "
        "numbers (vLLM 0.10.1.1 refuses every such request; 0.32 cuts its answer short). "
        "Exits 1 when a role cannot work, so it can gate a run.",
    )
    parser.add_argument("--config", help="pipeline YAML config (default: built-in defaults)")
    parser.add_argument(
        "--role",
        action="append",
        choices=[*ROLES, *(r.replace("_", "-") for r in ROLES if "_" in r)],
        help="only this role (repeatable; default: every role)",
    )
    parser.set_defaults(func=handle)


def format_table(reports: list) -> str:
    """Role, endpoint, capability, status and detail, aligned."""
    rows = [("role", "endpoint", "capability", "status", "detail")]  # details on one line each
    for report in reports:
        for check in report.checks:
            detail = " ".join(check.detail.split())
            rows.append((report.role, ", ".join(report.urls), check.capability, check.status, detail))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)) + "  " + row[4]
             for row in rows]  # fmt: skip
    return "\n".join(line.rstrip() for line in lines)


def usage(report) -> str:
    """How the pipeline will talk to a usable role, for the capabilities it was checked for."""
    checked = {c.capability for c in report.checks}
    parts = []
    if "json" in checked:
        parts.append(f"JSON via {report.json_mode}")
    if "choice" in checked:
        parts.append(
            f"choice via {report.choice_style}" + (", tolerant parsing" if report.tolerant_choice else "")
        )
    if "image" in checked:
        parts.append("images accepted")
    return "; ".join(parts) or "model served"


def handle(args: argparse.Namespace) -> int:
    import sys

    from lenses_data.config import ConfigError, load_config
    from lenses_data.models.probe import check_roles
    from lenses_data.stages.sample_requests import representative_requests

    try:
        config = load_config(args.config)
    except (ConfigError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    roles = [r.replace("-", "_") for r in (args.role or ROLES)]
    reports = check_roles(config.models, list(dict.fromkeys(roles)), representative_requests(config))
    print(format_table(reports))
    failed = [r for r in reports if not r.ok]
    for report in reports:
        if report.ok:
            print(f"{report.role}: usable ({usage(report)})")
    for report in failed:
        print(f"error: role {report.role} cannot work: see the fail lines above", file=sys.stderr)
    return 1 if failed else 0
