"""Will a role's real requests fit the context its server serves? (`lenses check`'s `context` line)

vLLM 0.10.1.1 refuses (HTTP 400) any request whose prompt plus `max_tokens` exceeds the model's
`max_model_len`, on every attempt: a validator served with 2,048 tokens, asked for 1,024 new tokens
after a ~1,100-token prompt, refused every request of a real build while the probe said ok. vLLM
0.32 accepts such a request and cuts `max_tokens` to the room left (`get_max_tokens`; measured in
tests/realvllm), so an answer longer than that comes back cut. Either way the configured answer
length does not fit, and the check fails. So the
probe sends the role's representative requests (the stages' own templates and batches, built by
`lenses_data.stages.sample_requests`) with `max_tokens` 1, reads the prompt tokens the server
counted (its tokenizer, its chat template, its image tokens) and adds the configured `max_tokens`.

The image is the probe's own, 1792x1344 px: 4:3 is InternVL's largest tile grid (4x3 = 12 tiles of
448 px plus a thumbnail at the default `max_dynamic_patch` 12), so it costs what the dearest real
image costs; the role's `mm_processor_kwargs` go with it, as with its real requests.
"""

from __future__ import annotations

from lenses_data.models.messages import build_messages
from lenses_data.models.probe_requests import Check, Prober, probe_image_uri
from lenses_data.models.types import ModelRequest

CONTEXT_IMAGE_SIZE = (1792, 1344)


async def check_context(
    prober: Prober, samples: list[tuple[str, ModelRequest]], json_mode: str, context: int | None
) -> Check:
    """`fail` when the largest representative request's prompt plus `max_tokens` exceeds `context`."""
    if context is None:
        return Check("context", "ok", "not measured: the server lists no max_model_len for the model")
    measured: list[tuple[int, str]] = []
    for label, request in samples:
        image = probe_image_uri(0, CONTEXT_IMAGE_SIZE) if request.image_path else None
        messages = build_messages(request, image, json_mode, prober.role.image_placeholder)
        body = prober.image_body() if image else None
        answer = await prober.ask(None, max_tokens=1, extra_body=body, messages=messages)
        if not answer.answered:
            await prober.down_unless_plain_works(answer)
            detail = (
                f"a representative {label} was refused ({answer.message[:200]}); its prompt alone may exceed "
            )
            return Check("context", "fail", detail + f"the {context} tokens of context served")
        if answer.prompt_tokens is None:
            return Check("context", "ok", "not measured: the server reported no prompt token count")
        measured.append((answer.prompt_tokens, label))
    if not measured:
        return Check("context", "ok", "not measured: no representative request")
    prompt, label = max(measured)
    return _verdict(prober, prompt, label, context)


def _verdict(prober: Prober, prompt: int, label: str, context: int) -> Check:
    max_tokens = prober.role.sampling.max_tokens
    need = prompt + max_tokens
    sums = f"{prompt} prompt tokens + {max_tokens} max_tokens = {need}"
    note = " (the lenses simulator counts words, not image tokens)" if prober.simulated else ""
    if need <= context:
        return Check(
            "context",
            "ok",
            f"the largest request ({label}) needs {sums} of the {context} tokens served{note}",
        )
    room = context - prompt
    fix = (
        f"Lower models.{prober.name}.sampling.max_tokens to at most {room}, or serve more context"
        if room >= 1
        else "The prompt alone does not fit: serve more context"
    )
    return Check(
        "context",
        "fail",
        f"the largest request ({label}) needs {sums} > the {context} tokens of context served{note}: the "
        f"server refuses every such request (vLLM 0.10.1.1) or cuts its answer short (0.32). {fix} "
        "(vLLM --max-model-len; "
        f"models.{prober.name}.serve.max_model_len for `lenses serve`)",
    )
