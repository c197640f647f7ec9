"""The GPU check's outputs (benchmarks/gpu_check.py): the JSON as measured and one markdown page of
tables (items, rehearsals, CLIP, the profile's top operators and shares)."""

from __future__ import annotations

import json
from pathlib import Path

GIB = 1024**3


def _pct(value) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) else "n/a"


def _rehearsal_row(name: str, r: dict) -> str:
    if not r.get("fits"):
        return f"| {name} | refused: {r.get('refusal', '')} | | | | | | |"
    m, mem = r["measured"], r["memory"]
    peak = mem.get("peak_allocated_bytes")
    peak = (
        f"{peak / GIB:.1f} GiB"
        if peak
        else f"n/a (CPU estimate {mem.get('estimated_bytes', 0) / GIB:.2f} GiB)"
    )

    def is_on(key: str, value) -> bool:  # booleans on; counts above their off value (length_chunks: 1)
        return value is True or (type(value) is int and value > (1 if key == "length_chunks" else 0))

    on = {k: v for k, v in r.get("speed", {}).items() if is_on(k, v)}
    speed = ", ".join(k if v is True else f"{k}={v}" for k, v in on.items()) or "none"
    return (
        f"| {name} | {speed} | {r['seconds_per_micro_batch']:.3f} | {r['images_per_s']:.2f} | "
        f"{_pct(r['mfu'])} | {_pct(r['hfu'])} | {peak} | {m['prompts_per_image']:.1f} / "
        f"{m['image_input_tokens']:,.0f} / {m['image_input_padded_tokens']:,.0f} |"
    )


def _profile_lines(p: dict) -> list[str]:
    shares = p["shares_of_busy_time"]
    lines = [
        f"One training step as shipped, {p['clock']} time: wall {p['step_wall_s']:.3f} s, busy {p['busy_s']:.3f} s; "
        f"attention {_pct(shares['attention'])}, matmuls {_pct(shares['matmul'])}, recompute "
        f"{_pct(shares['recompute'])}, optimizer {_pct(shares['optimizer'])} of busy time; data wait "
        f"{_pct(p['data_wait_share_of_wall'])} of wall (collation in the step's process: an upper bound).",
        "",
        "| operator | self ms | share of busy | calls |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| `{o['name']}` | {o['self_ms']:.2f} | {_pct(o['share'])} | {o['calls']} |"
        for o in p["top_operators"]
    ]
    return lines


def markdown(report: dict) -> str:
    mach = report["machine"]
    card = mach.get("gpu", "CPU")
    lines = [
        f"# GPU check ({report['mode']}): {card}, {report['started_at']}",
        "",
        f"`{report['command']}`; torch {mach['torch']}, Python {mach['python']}, {mach['cpu_cores']} CPU cores; "
        f"time budget {report['budget_s']:.0f} s.",
        "",
        "| item | status | seconds | note |",
        "|---|---|---|---|",
    ]
    for name, item in report["items"].items():
        note = item.get("reason") or item.get("error") or ""
        lines.append(f"| {name} | {item['status']} | {item.get('seconds', '')} | {note} |")
    rehearsals = {
        k: v["result"] for k, v in report["items"].items() if v["status"] == "ok" and "rehearsal" in k
    }
    rehearsals.update(
        {k: v["result"] for k, v in report["items"].items() if v["status"] == "ok" and k.startswith("lever_")}
    )
    if rehearsals:
        lines += ["", "## Rehearsals (seconds per micro-batch; lever_* timed over one micro-batch)", "",
                  "| run | levers on | s / micro-batch | images/s | MFU | HFU | peak allocated | prompts / tokens / padded per image input |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [_rehearsal_row(k, v) for k, v in rehearsals.items()]
    clip = report["items"].get("clip", {})
    if clip.get("status") == "ok":
        c = clip["result"]
        lines += ["", "## CLIP (dedupe's embed_images)", "",
                  "| model | precision, batch | end to end img/s | encoder alone img/s | end to end / encoder |",
                  "|---|---|---|---|---|",
                  f"| {c['model']} ({c['images']} JPEGs) | {c['precision']}, {c['batch']} | "
                  f"{c['end_to_end_images_per_s']:.1f} | {c['encoder_images_per_s']:.1f} | "
                  f"{c['end_to_end_vs_encoder']:.2f} |"]  # fmt: skip
    profile = report["items"].get("profile", {})
    if profile.get("status") == "ok":
        lines += ["", "## Profile of one training step", "", *_profile_lines(profile["result"])]
    return "\n".join(lines) + "\n"


def write_outputs(report: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "gpu_check.json", out / "gpu_check.md"
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(markdown(report), encoding="utf-8")
    return json_path, md_path
