"""The model roles: each one's name, the stage that asks it and what its requests need of a server.

Declared with their stages (`lenses_data.config.pipeline`: a model stage names its role and the
role's needs); this module derives the tables the rest reads. `ModelsConfig` has one section per
role (tests/test_facts_once.py holds the two together); `lenses serve --role`, `lenses check`, the
endpoint probe, the plan, the export manifest and the stages' requests read the roles from here.
"""

from __future__ import annotations

from typing import NamedTuple

from lenses_data.config.pipeline import BUILTIN_STAGES


class ModelRole(NamedTuple):
    stage: str  # the pipeline stage whose requests the role answers
    needs: tuple[str, ...]  # what those requests ask of the server: the probe checks each one


MODEL_ROLES: dict[str, ModelRole] = {
    spec.role: ModelRole(stage=spec.name, needs=spec.needs) for spec in BUILTIN_STAGES if spec.role
}
ROLES: tuple[str, ...] = tuple(MODEL_ROLES)
ROLE_OF_STAGE: dict[str, str] = {role.stage: name for name, role in MODEL_ROLES.items()}


def role_settings(role: str, *fields: str) -> tuple[str, ...]:
    """Config paths in a role's section, e.g. ("models.generator.model", ...): the settings of a
    stage's model that decide its output (a stage's `output_settings`)."""
    return tuple(f"models.{role}.{field}" for field in fields)
