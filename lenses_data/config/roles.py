"""The model roles: each one's name and what its requests need of a server.

Written here only; the stage that asks each role is declared with the stage
(`lenses_data.config.pipeline`), and `ROLE_OF_STAGE` derives from that. `ModelsConfig` has one section per role (tests/test_facts_once.py holds the two
together); `lenses serve --role`, `lenses check`, the endpoint probe, the plan, the export manifest and
the stages' requests read the roles from here.
"""

from __future__ import annotations

from typing import NamedTuple

from lenses_data.config.pipeline import ROLE_OF_BUILTIN


class ModelRole(NamedTuple):
    needs: tuple[str, ...]  # what the role's requests ask of the server: the probe checks each one


MODEL_ROLES: dict[str, ModelRole] = {
    "filter": ModelRole(needs=("choice", "image")),  # Listing 1: YES/NO on an image
    "generator": ModelRole(needs=("json", "image")),  # Listings 2-3
    "validator": ModelRole(needs=("json",)),  # Listing 4, text only
    "visual_validator": ModelRole(needs=("json", "image")),  # Listing 5
}
ROLES: tuple[str, ...] = tuple(MODEL_ROLES)
# The built-in model stages, in pipeline order, and the role each asks (declared with the stage).
ROLE_OF_STAGE: dict[str, str] = dict(ROLE_OF_BUILTIN)


def role_settings(role: str, *fields: str) -> tuple[str, ...]:
    """Config paths in a role's section, e.g. ("models.generator.model", ...): the settings of a
    stage's model that decide its output (a stage's `output_settings`)."""
    return tuple(f"models.{role}.{field}" for field in fields)
