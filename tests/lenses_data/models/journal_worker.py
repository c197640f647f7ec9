"""Worker process for the kill test: runs one batch against the simulator with a journal and
prints a JSON summary of the results. Usage: journal_worker.py BASE_URL JOURNAL_FILE N"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.parsing import parse_choice
from lenses_data.simulator.testing import sim_models_config


def main() -> None:
    url, journal_file, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    config = sim_models_config([url], timeout_s=5.0, concurrency=8)
    client = ModelClient.from_config(config, journal_dir=journal_file.parent)
    requests = [
        ModelRequest(
            key=f"filter:{i:05d}",
            role="filter",
            text="Does this image support non-literal readings?",
            after_image_text=f"candidate {i}",
            choice=["YES", "NO"],
        )
        for i in range(count)
    ]
    with client.shard_journal(journal_file):
        results = client.run_sync(requests, parse_choice(["YES", "NO"]))
    client.close()
    summary = {
        "n": len(results),
        "ok": sum(r.ok for r in results),
        "cached": sum(r.cached for r in results),
        "keys": [r.key for r in results],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
