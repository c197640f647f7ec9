"""The rehearsal's FLOPs count against what torch actually runs: every matmul and convolution of one
forward + backward of the tiny retriever is counted as it is dispatched (weights' forward and
input-gradient products, weight-gradient products of trained weights), and must equal the
hardware count of rehearsal_flops, lever by lever (checkpointing, vision_no_grad,
checkpoint_skip_last, length_chunks)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from training.loop.rehearsal_batches import Shape, patch_tokens, synthetic_batches, vision_tokens  # noqa: E402
from training.loop.rehearsal_flops import (  # noqa: E402
    TokenCounts,
    flops_per_micro_batch,
    matmul_weights,
    padded_tokens,
)
from training.loop.rehearse import build_for_rehearsal  # noqa: E402

aten = torch.ops.aten


class WeightMatmuls(TorchDispatchMode):
    """FLOPs of the matmuls that involve a model weight: one operand is a parameter (forward,
    input gradient), or the product has a trained parameter's shape (weight gradient). The loss's
    own products (embeddings against embeddings) involve no weight and are left out, as in the count."""

    def __init__(self, model):
        super().__init__()
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.trained = {  # weight gradients: shapes of trained matmul weights (not the token rows)
            tuple(m.weight.shape)
            for m in model.modules()
            if type(m) is torch.nn.Linear and m.weight.requires_grad
        }
        self.flops = 0

    def _is_param(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in self.params

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (aten.mm.default, aten.addmm.default):
            a, b = args[-2:]
            weighted = self._is_param(a) or self._is_param(b) or tuple(out.shape) in self.trained
            self.flops += 2 * a.shape[0] * a.shape[1] * b.shape[1] if weighted else 0
        elif func == aten.convolution.default and self._is_param(args[1]):
            self.flops += 2 * args[1].numel() * out.shape[0] * out.shape[2] * out.shape[3]
        elif func in (aten.bmm.default, aten.convolution_backward.default) and any(map(self._is_param, args)):
            raise AssertionError(f"{func} on a weight: the counter does not know it")
        return out


def _tokens(batch, patch: int, chunks: int) -> TokenCounts:
    real = float(batch["img_attention_mask"].sum() + batch["txt_attention_mask"].sum())
    padded = padded_tokens(batch["img_attention_mask"], chunks) + padded_tokens(
        batch["txt_attention_mask"], chunks
    )
    return TokenCounts(real, padded, vision_tokens(batch, patch), patch_tokens(batch, patch))


LEVERS = {
    "checkpointing, tower with a graph": (True, {}),
    "checkpointing, vision_no_grad": (True, {"vision_no_grad": True}),
    "no checkpointing": (False, {}),
    "skip_last=1, length_chunks=2": (
        True,
        {"vision_no_grad": True, "checkpoint_skip_last": 1, "length_chunks": 2},
    ),
}


@pytest.mark.parametrize("lever", list(LEVERS))
def test_hardware_flops_equal_the_dispatched_matmuls(tiny_config, tiny_base, lever) -> None:
    checkpointing, speed = LEVERS[lever]
    cfg = tiny_config.model_copy(update={"speed": tiny_config.speed.model_copy(update=speed)})
    torch.manual_seed(0)
    retriever, processor, _ = build_for_rehearsal(cfg, tiny_base, torch.device("cpu"), checkpointing, True)
    retriever.train()
    (batch,) = synthetic_batches(processor, cfg.data, True, Shape(prompts_per_image=None), 1, seed=3)
    counter = WeightMatmuls(retriever)
    with counter:
        retriever(batch)["total"].backward()
    weights = matmul_weights(retriever, checkpointing, cfg.speed.vision_no_grad)
    patch = retriever.net.get_base_model().config.vision_config.patch_size
    flops = flops_per_micro_batch(weights, _tokens(batch, patch, cfg.speed.length_chunks))
    assert flops["hardware"]["total"] == counter.flops
    assert weights.vision_graph == (lever == "checkpointing, tower with a graph")
    assert (flops["hardware"]["lm_recompute"] > 0) == checkpointing
    # model FLOPs: real tokens, no recompute, no tower backward; never above the hardware count
    model, hardware = flops["model"], flops["hardware"]
    assert model["vision"] <= hardware["vision"] and model["projector"] <= hardware["projector"]
    assert model["lm_base"] / hardware["lm_base"] == pytest.approx(
        batch_real(batch) / batch_padded(batch, cfg)
    )
    assert model["total"] < hardware["total"]


def batch_real(batch) -> float:
    return float(batch["img_attention_mask"].sum() + batch["txt_attention_mask"].sum())


def batch_padded(batch, cfg) -> float:
    chunks = cfg.speed.length_chunks
    return padded_tokens(batch["img_attention_mask"], chunks) + padded_tokens(
        batch["txt_attention_mask"], chunks
    )


def test_the_count_per_token_of_the_paper_model():
    """BGE-VL-MLLM-S1's shapes: the model count is ~4 N_lm per real LM token (LoRA's 6 N on 0.6% of
    the weights adds 0.036), the hardware count with every layer checkpointed ~6 N per computed token."""
    from training.loop.rehearsal_flops import MatmulWeights

    lm, lora = 6_979_321_856, 41_943_040  # Mistral-7B's 32 decoder layers; r16 on all 7 projections
    w = MatmulWeights(
        lm,
        lora,
        lm,
        lora,
        20_971_520,
        4_194_304,
        301_989_888,
        289_406_976,
        289_406_976,
        602_112,
        False,
        32,
        32,
    )
    t = TokenCounts(lm_real=1.0, lm_padded=1.0, vision=0.0, patches=0.0)
    flops = flops_per_micro_batch(w, t)
    assert flops["model"]["total"] / lm == pytest.approx(4.036, abs=1e-3)
    assert flops["hardware"]["total"] / lm == pytest.approx(6.048, abs=1e-3)
