"""A pipeline config whose four roles are served by the real vLLM servers of the session fixtures.

The tiny InternVL model is in transformers' format (InternVLForConditionalGeneration, as
OpenGVLab/InternVL3_5-38B-HF): vLLM renders its image as `<IMG_CONTEXT>` and its processor reads
the tile limit as `max_patches` (docs/serving.md, "Two formats of InternVL3.5"), as configs/production.yaml
serves it. The models section names 0.10.1.1 as its `vllm_version` on purpose: the servers report 0.32,
and the client must follow them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lenses_data.candidates.sample import build_sample_pool, sample_sources
from lenses_data.config import deep_merge
from tests.realvllm.vllm_server import VllmServer

HF_INTERNVL_PLACEHOLDER = "<IMG_CONTEXT>"
HF_INTERNVL_ONE_TILE = {"max_patches": 1}


# The tiny models' judgement is noise; their answers' shape is what is tested. Greedy decoding made
# the tiny filter answer NO to every image (nothing left for the later stages): its YES gets a logit
# bias (sampling hotter is capped: vLLM refuses temperature above 2, and at 2 only 1 of 22 passed).
# The tiny JSON roles repeat items until max_tokens when greedy, so the generator samples, seeded.
SAMPLED = {"temperature": 0.7, "top_p": 0.95, "seed": 0}


def yes_bias(model_dir: Path) -> dict[str, Any]:
    """Greedy, with the first token of YES favoured, as the served tokenizer splits it."""
    from transformers import AutoTokenizer

    first = AutoTokenizer.from_pretrained(str(model_dir)).encode("YES", add_special_tokens=False)[0]
    return {"temperature": 0.0, "extra": {"logit_bias": {str(first): 8.0}}}


def models_section(internvl: VllmServer, validator: VllmServer) -> dict[str, Any]:
    def role(server: VllmServer, sampling: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {
            "model": server.served_model_name,
            "base_urls": [server.base_url],
            "timeout_s": 300,
            "max_concurrency": 8,
            "sampling": sampling,
            **extra,
        }

    image = {"image_placeholder": HF_INTERNVL_PLACEHOLDER}
    return {
        "filter": role(
            internvl,
            {**yes_bias(internvl.model_dir), "max_tokens": 8},
            mm_processor_kwargs=HF_INTERNVL_ONE_TILE,
            **image,
        ),
        "generator": role(internvl, {**SAMPLED, "max_tokens": 600}, **image),
        "visual_validator": role(internvl, {**SAMPLED, "max_tokens": 600}, **image),
        "validator": role(validator, {"temperature": 0.0, "max_tokens": 600}),
        # A release whose dialect differs from the servers' (guided_choice): they report 0.32, and
        # the client must follow them, not this fallback.
        "vllm_version": "0.10.1.1",
        "retry": {"max_attempts": 3, "backoff_base_s": 0.2, "backoff_max_s": 2.0},
    }


def write_config(
    tmp: Path, internvl: VllmServer, validator: VllmServer, overrides: dict[str, Any] | None = None
) -> Path:
    """configs/sample.yaml's pipeline over the bundled sample pool, models on the real servers."""
    return write_pipeline_config(tmp, models_section(internvl, validator), overrides)


def write_pipeline_config(tmp: Path, models: dict[str, Any], overrides: dict[str, Any] | None = None) -> Path:
    """configs/sample.yaml's pipeline over the bundled sample pool with this `models` section."""
    pool = tmp / "pool"
    if not pool.exists():
        build_sample_pool(pool)
    config: dict[str, Any] = {
        "run_dir": str(tmp / "run"),
        "shard_size": 12,
        "ingest": {"sources": sample_sources(pool), "min_side": 64, "max_aspect_ratio": 4.0, "workers": 2},
        "dedupe": {"hash_kind": "phash", "clip_model": None},
        "split": {"valid": 0.15, "test": 0.3, "seed": "lenses-sample"},
        # The tiny models were trained on six-word texts (short answers close their JSON); the
        # listings' 8-22 / 10-28 words would reject every text at the rules and leave the
        # validators on real vLLM nothing to read.
        "annotate": {
            "candidates_per_image": 1,
            "kinds": ["caption"],  # half the generation work: every image passes the biased filter
            "caption_words": {"min": 1, "max": 40},
            "prompt_words": {"min": 1, "max": 40},
        },
        "orchestration": {"task_runner": "thread", "max_workers": 2},
        # The tiny models' judgement is noise (the tiny validator rewrites fixed fields, which
        # discards most texts): the yield bands judge real models, so a build here accepts its yields.
        "yields": {"accept": True},
        "models": models,
    }
    path = tmp / "real-vllm.yaml"
    path.write_text(yaml.safe_dump(deep_merge(config, overrides or {}), sort_keys=False))
    return path
