"""Dry runs: point every model role at an in-process simulator for the duration of a block."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from lenses_data.config import PipelineConfig
from lenses_data.config.models import ROLES

log = logging.getLogger(__name__)


@contextlib.contextmanager
def simulated_models(config: PipelineConfig) -> Iterator[PipelineConfig]:
    """Start the simulator on 127.0.0.1 and yield a config whose roles all use it.

    Model names stay as configured, so journal keys and manifests name the production models,
    while every answer is marked simulated by the client (the simulator's fingerprint).
    """
    from lenses_data.simulator.simulator import SimConfig, run_in_thread

    sim = SimConfig.from_settings(config.simulator)
    with run_in_thread(sim) as base_url:
        log.warning("SIMULATED RUN: model answers come from the built-in simulator at %s", base_url)
        roles = {
            role: getattr(config.models, role).model_copy(
                update={"base_urls": [base_url], "api_key_env": None}
            )
            for role in ROLES
        }
        models = config.models.model_copy(update=roles)
        yield config.model_copy(update={"models": models})
