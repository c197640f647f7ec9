"""Peak memory of export alone: `export_dataset` on a finished run directory, in a fresh process.

The process's peak RSS (ru_maxrss) after its imports and at the end of export; the growth is
what export itself costs. Point it at a run directory of any size (the rehearsal's, or
`make run`'s runs/sample) and compare commits on the same directory.

    .venv/bin/python benchmarks/bench_export_memory.py --run runs/sample [--config FILE] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys
from lenses_data.config import load_config
from lenses_data.stages.export import export_dataset
run, out, config = sys.argv[1], sys.argv[2], sys.argv[3] or None
config = load_config(config, environ={})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
export_dataset(run, out, config)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"after_imports_mib": before / 1024, "peak_mib": after / 1024}))
"""


def measure(run: Path, config: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(run), str(Path(tmp) / "export"), config],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["growth_mib"] = result["peak_mib"] - result["after_imports_mib"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished run directory")
    parser.add_argument("--config", default="", help="the run's config file (default: built-in defaults)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    rows = [measure(args.run, args.config) for _ in range(args.repeats)]
    print("| run | after imports MiB | peak MiB | growth MiB |\n|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {args.run} | {row['after_imports_mib']:.0f} | {row['peak_mib']:.0f} | {row['growth_mib']:.0f} |"
        )


if __name__ == "__main__":
    main()
