"""Shared fixtures for tests/training: a synthetic export folder and a tiny random LLaVA-Next.

The eval helper may add fixtures here; keep these cheap (session-scoped, built once).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory):
    """Export-format folder with 16 skimage.data images (12 train, 2 valid, 2 test)."""
    from training.dryrun.synthetic import write_synthetic_export

    return write_synthetic_export(tmp_path_factory.mktemp("export"))


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory, tiny_export):
    """Directory holding a tiny random-weight LLaVA-Next + processor (tokenizer trained locally)."""
    import torch

    # Tiny matrices gain nothing from intra-op threads; on a shared 2-core box they only spin.
    torch.set_num_threads(1)
    from training.dryrun.tiny import materialize_tiny_base
    from training.loop.data import load_records
    from training.retriever.config import load_train_config

    records = load_records(tiny_export, "train")
    texts = [t for r in records for t, _ in r.captions + r.prompts]
    return materialize_tiny_base(tmp_path_factory.mktemp("base"), texts, load_train_config("tiny").model.tiny)


@pytest.fixture()
def tiny_config(tmp_path, tiny_export, tiny_base):
    """training/configs/tiny.yaml pointed at the fixtures; a fresh out_dir per test."""
    from training.retriever.config import load_train_config

    return load_train_config(
        "tiny",
        {
            "model": {"source": "local", "path": str(tiny_base)},
            "data": {"export_dir": str(tiny_export)},
            "run": {"out_dir": str(tmp_path / "run")},
        },
    )


@pytest.fixture(scope="session")
def tiny_retriever(tiny_export, tiny_base):
    """(LensRetriever, processor, TokenIds) on CPU from the tiny base, lens mode, untrained."""
    import torch

    from training.retriever.build import build_retriever
    from training.retriever.config import load_train_config

    cfg = load_train_config("tiny", {"model": {"source": "local", "path": str(tiny_base)}})
    return build_retriever(cfg, tiny_base, torch.device("cpu"))


@pytest.fixture(scope="session")
def eval_prefect_harness(tmp_path_factory):
    """(eval helper) A temporary SQLite-backed Prefect API for the evaluate-retriever flow test."""
    from prefect.settings import PREFECT_HOME, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    home = tmp_path_factory.mktemp("prefect-home-eval")
    with temporary_settings({PREFECT_HOME: str(home)}), prefect_test_harness(server_startup_timeout=120):
        yield
