"""Prefill / time to first token: a lower bound from compute (docs/engines/common.md#prefill-bound).

Pure arithmetic on the model's facts and the GPU catalogue: a prompt of ``prompt`` tokens costs 2 FLOPs per active
parameter per token (the matrix products) plus the causal attention scores and their product with V,
``2 × 2 × layers × query width × prompt² / 2``; ``concurrency`` such prompts arriving together are computed one
after another at the GPUs' dense BF16/FP16 peak (tensor parallelism splits the work over ``tp`` GPUs). Real kernels
reach a fraction of the peak, so the time is a bound below which prefill cannot go: the first token of the last of
the prompts waits at least that long.
"""

from __future__ import annotations

from dataclasses import dataclass

from hfvram.estimate.types import Estimate


@dataclass(frozen=True)
class PrefillBound:
    prompt: int
    concurrency: int
    #: FLOPs of one prompt, and the peak the bound divides by (TFLOPS over the GPUs that split it)
    flops_per_prompt: float
    tflops: float
    #: seconds to the first token of the first and of the last prompt (all arriving together)
    first_seconds: float
    last_seconds: float

    def as_dict(self) -> dict[str, object]:
        return {
            "prompt_tokens": self.prompt,
            "concurrency": self.concurrency,
            "flops_per_prompt": self.flops_per_prompt,
            "tflops": self.tflops,
            "first_token_seconds_min": self.first_seconds,
            "last_first_token_seconds_min": self.last_seconds,
            "basis": "compute bound at the GPUs' dense BF16/FP16 peak (docs/engines/common.md#prefill-bound)",
        }


def prefill_bound(est: Estimate, prompt: int) -> PrefillBound | None:
    """The bound for ``prompt`` tokens at the estimate's concurrency; None without a GPU, its TFLOPS or the model's
    parameter count."""
    spec, hardware = est.spec, est.hardware
    if hardware is None:
        return None
    flops = [gpu.bf16_tflops_dense for gpu in hardware.gpus]
    if not flops or any(value is None for value in flops):
        return None
    active = spec.params_active or spec.params_total
    if not active:
        return None
    heads, head_dim, layers = spec.num_attention_heads, spec.head_dim, spec.num_layers
    attention = 2.0 * 2.0 * layers * heads * head_dim * prompt * prompt / 2.0 if heads and head_dim else 0.0
    per_prompt = 2.0 * active * prompt + attention
    # tensor parallelism splits every product over tp GPUs; pipeline stages run one after another for one prompt
    peak = min(value for value in flops if value is not None) * max(1, est.tp)
    one = per_prompt / (peak * 1e12)
    concurrency = max(1, est.workload.concurrency)
    return PrefillBound(prompt, concurrency, per_prompt, peak, one, one * concurrency)
