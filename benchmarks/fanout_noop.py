"""The Prefect server under fan-out alone: one flow run mapping N no-op tasks on the Dask runner.

Run by bench_fanout.py (spec `noop:N`) with PREFECT_API_URL set. The tasks do nothing, so what is
timed is only what every shard task of a build also pays: creating, starting and finishing a task
run on a 2-worker LocalCluster, with its state changes and log lines sent to the server.
"""

from __future__ import annotations

import argparse

from prefect import flow, task


@task(task_run_name="noop-{index:05d}", persist_result=False)
def noop_task(index: int) -> int:
    return index


@flow(name="fanout-noop", log_prints=True)
def fanout_noop(tasks: int) -> int:
    futures = noop_task.map(list(range(tasks)))
    return sum(future.result() for future in futures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, required=True)
    args = parser.parse_args()
    from prefect_dask import DaskTaskRunner

    cluster = {"n_workers": 2, "threads_per_worker": 1, "processes": True, "dashboard_address": None}
    runner = DaskTaskRunner(cluster_kwargs=cluster)
    total = fanout_noop.with_options(task_runner=runner)(args.tasks)
    assert total == args.tasks * (args.tasks - 1) // 2, total


if __name__ == "__main__":
    main()
