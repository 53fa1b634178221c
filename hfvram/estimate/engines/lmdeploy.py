"""LMDeploy (PyTorch engine and TurboMind): ``cache_max_entry_count`` of the free memory after weights.

Rules follow ``docs/engines/lmdeploy.md``; constants live in ``hfvram/data/engines/lmdeploy.toml``. Per GPU:

    free     = memory − CUDA context (− NCCL) − weights                    (min over ranks)
    PyTorch: free −= state cache ((max_batches + 2) × recurrent state, hybrid models)
             runtime = (max_prefill_token_num + 2 × max_batches) × vocab × 2   (halved until ≥ 16 blocks fit)
             blocks  = floor((free − runtime) × cache_max_entry_count / block_bytes)
    TurboMind: cache = free × cache_max_entry_count

hfvram reports the memory LMDeploy leaves outside the KV cache (runtime + the other ``1 − ratio``) as the
activations term, the context as overhead and the whole device as usable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.common import GiB
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import GROWING_KINDS, RECURRENT_KINDS, WINDOWED_KINDS, Layer, LayerKind, ModelSpec

ENGINE = "lmdeploy"


@dataclass(frozen=True)
class Settings:
    rules: str
    backend: str
    tp: int
    cache_max_entry_count: float
    block_size: int
    session_len: int
    max_batch_size: int
    max_prefill_token_num: int
    quant_policy: int
    kv_cache_dtype: str


def kv_bytes_per_token_rank(
    layers: tuple[Layer, ...],
    tp: int,
    data_bytes: float,
    quantized: bool,
    model_dtype_bytes: float,
    scale_zero_elems: int,
) -> float:
    """K+V bytes per token on one rank over every attention layer (LMDeploy's PyTorch cache keeps every layer
    at full length; lmdeploy.md#lmdeploy-kv-quant and common.md#kv-dtype-sizes): data at the KV dtype plus, for INT4/INT8, scale+zero per token-head for K and V."""
    total = 0.0
    for layer in layers:
        if layer.kind not in GROWING_KINDS and layer.kind not in WINDOWED_KINDS:
            continue
        total += common.layer_kv_elems_per_token_rank(layer, tp) * data_bytes
        if quantized:
            heads = 1 if layer.kind is LayerKind.MLA else common.kv_heads_per_rank(layer.num_kv_heads, tp)
            total += 2 * heads * scale_zero_elems * model_dtype_bytes
    return total


def runtime_bytes(
    rules: Mapping[str, Any], free: float, block_bytes: float, max_batches: int, vocab: int, ratio: float
) -> tuple[int, int]:
    """(runtime bytes, max_prefill_token_num after halving) — ``_get_runtime_size`` (lmdeploy.md#lmdeploy-pytorch)."""
    prefill = rules["max_prefill_token_num"]
    runtime = 0
    while prefill > 0:
        runtime = int((prefill + 2 * max_batches) * vocab * rules["runtime_bytes_per_logit"])
        if block_bytes > 0 and int((free - runtime) * ratio) // block_bytes >= rules["min_gpu_blocks"]:
            break
        prefill //= 2
    return runtime, prefill


def default_max_batch_size(rules: Mapping[str, Any], hardware: Hardware | None) -> int:
    """``get_max_batch_size('cuda')``: by a substring of the device name, else 128."""
    if hardware is not None:
        names = f"{hardware.gpu.id} {hardware.gpu.name}".lower()
        for key, size in rules["max_batch_size_by_gpu_name"].items():
            if key in names:
                return int(size)
    return int(rules["max_batch_size_default"])


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    rules: Mapping[str, Any],
    version: str,
) -> Settings:
    tp, _ = common.resolve_parallel(choice, hardware, ("tp",), ())
    ratio = choice.gpu_util if choice.gpu_util is not None else common.setting_float(choice, "cache-max-entry-count")
    ratio = ratio if ratio is not None else float(rules["cache_max_entry_count"])
    if not 0 < ratio < 1:
        raise UsageError(f"cache-max-entry-count must be in (0, 1) (a block count is no longer accepted), got {ratio}")
    backend = (common.setting(choice, "backend") or "auto").lower()
    if backend == "auto":
        backend = "turbomind" if spec.architecture in rules["turbomind"]["architectures"] else "pytorch"
    if backend not in ("turbomind", "pytorch"):
        raise UsageError(f"LMDeploy backend must be turbomind, pytorch or auto, got {backend!r}")
    policy = common.setting_int(choice, "quant-policy", default=0)
    if workload.kv_dtype != "auto":
        kv_name = workload.kv_dtype
    elif str(policy) in rules["quant_policy_kv"]:
        kv_name = rules["quant_policy_kv"][str(policy)]
    else:
        raise UsageError(f"quant-policy {policy} is not modelled (0, 4, 8, 16, 17)")
    head_dim = spec.head_dim or 0
    block = common.setting_int(choice, "cache-block-seq-len", "block-size", default=rules["block_size"])
    if backend == "pytorch" and head_dim >= rules["large_head_dim"]:
        block = min(block, rules["block_size_large_head"])
    session = common.setting_int(choice, "session-len") or workload.context or spec.max_position_embeddings
    if session is None:
        raise UsageError("the model does not state its maximum length; give --context")
    return Settings(
        rules=version,
        backend=backend,
        tp=tp,
        cache_max_entry_count=float(ratio),
        block_size=int(block),
        session_len=int(session),
        max_batch_size=int(
            common.setting_int(choice, "max-batch-size", default=default_max_batch_size(rules, hardware))
        ),
        max_prefill_token_num=int(
            common.setting_int(choice, "max-prefill-token-num", default=rules["max_prefill_token_num"])
        ),
        quant_policy=int(policy),
        kv_cache_dtype=common.canonical_kv_dtype(kv_name, spec.dtype),
    )


class LmdeployProfile:
    name = ENGINE

    def __init__(self) -> None:
        self.data: Mapping[str, Any] = common.load_engine_data(ENGINE)
        self.rule_versions: tuple[str, ...] = tuple(sorted(self.data.get("versions", {}), key=common.version_key))

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        version, rules = common.engine_rules(ENGINE, choice.version)
        warnings: list[str] = []
        explain: dict[str, str] = {}
        common.require_weights(spec)
        s = resolve_settings(spec, hardware, choice, workload, rules, version)
        rules = {**rules, "max_prefill_token_num": s.max_prefill_token_num}
        context = workload.context or s.session_len
        if context > s.session_len:
            warnings.append(f"context {context} is longer than session_len {s.session_len}")
        refuses = False
        kv_heads = {layer.num_kv_heads for layer in spec.layers if layer.kind in (LayerKind.FULL, LayerKind.SLIDING)}
        if any(heads % s.tp for heads in kv_heads if heads):
            warnings.append(f"LMDeploy asserts that the KV heads ({sorted(kv_heads)}) divide by tp={s.tp}")
            refuses = True

        split = common.weights_per_rank(spec, s.tp, 1, vocab_padding=1)
        weights = split.bytes
        explain["weights"] = split.explain
        overhead = int(rules["cuda_context_gib"] * GiB + (rules["nccl_init_gib"] * GiB if s.tp > 1 else 0))
        explain["overhead"] = (
            f"CUDA context {rules['cuda_context_gib']} GiB"
            + (f" + NCCL {rules['nccl_init_gib']} GiB [unverified]" if s.tp > 1 else "")
            + ", in use before LMDeploy measures free memory"
        )

        quantized = s.quant_policy in (4, 8) or s.kv_cache_dtype in ("int4", "int8")
        kv_bytes = common.kv_dtype_bytes(s.kv_cache_dtype, spec.dtype_bytes())
        per_token = kv_bytes_per_token_rank(
            spec.layers, s.tp, kv_bytes, quantized, spec.dtype_bytes(), rules["quant_scale_zero_elems"]
        )
        if any(layer.kind in WINDOWED_KINDS for layer in spec.layers):
            warnings.append("LMDeploy's paged cache keeps sliding-window layers at full length here [unverified]")
        block_bytes = per_token * s.block_size
        state = sum(
            common.layer_state_bytes_rank(l, s.tp, spec.dtype_bytes()) for l in spec.layers if l.kind in RECURRENT_KINDS
        )
        state_cache = (
            int(state * (s.max_batch_size + rules["state_cache_extra_slots"])) if s.backend == "pytorch" else 0
        )
        explain["cache_block"] = (
            f"{block_bytes:.0f} B per block of {s.block_size} tokens ({s.kv_cache_dtype}"
            + (", + scale/zero per token-head" if quantized else "")
            + ")"
        )

        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        blocks = None
        runtime = 0
        if hardware is not None:
            free = memory - overhead - weights - state_cache
            if rules.get("cache_of_total"):
                pool = memory * s.cache_max_entry_count
                slack = max(0.0, free - pool)
            elif s.backend == "pytorch":
                runtime, prefill = runtime_bytes(
                    rules, free, block_bytes, s.max_batch_size, spec.vocab_size or 0, s.cache_max_entry_count
                )
                pool = max(0.0, (free - runtime) * s.cache_max_entry_count)
                slack = runtime + max(0.0, (free - runtime) * (1 - s.cache_max_entry_count))
                explain["runtime"] = (
                    f"({prefill} prefill tokens + 2 × {s.max_batch_size} batches) × vocab "
                    f"{spec.vocab_size} × 2 B = {runtime / GiB:.2f} GiB (_get_runtime_size)"
                )
            else:
                pool = max(0.0, free * s.cache_max_entry_count)
                slack = max(0.0, free * (1 - s.cache_max_entry_count))
            blocks = int(pool // block_bytes) if block_bytes > 0 else 0
            explain["budget"] = (
                f"{s.backend}: "
                + (
                    f"free after weights{' and state cache' if state_cache else ''} {free / GiB:.2f} GiB"
                    if free >= 0
                    else f"weights{' and state cache' if state_cache else ''} exceed "
                    f"the free memory by {-free / GiB:.2f} GiB (no cache possible)"
                )
                + (f" (state cache {state_cache / GiB:.2f} GiB)" if state_cache else "")
                + (f" − runtime {runtime / GiB:.2f} GiB" if runtime else "")
                + (
                    f", × cache_max_entry_count {s.cache_max_entry_count} = {pool / GiB:.2f} GiB → {blocks} blocks"
                    if free >= 0
                    else ""
                )
            )
            # a model that keeps nothing per sequence (encoder-only) needs no cache blocks to start
            if free <= 0 or (blocks <= 0 and (block_bytes > 0 or state_cache > 0)):
                warnings.append("no memory is left for LMDeploy's KV cache after the weights")
                refuses = True
        else:
            slack = 0.0
            explain["budget"] = "no GPU: the KV share and the slack are fractions of an unknown free memory"
        activations = int(slack)
        explain["activations"] = (
            "what LMDeploy leaves outside the KV cache: "
            + ("runtime buffers + " if s.backend == "pytorch" else "")
            + f"the other {1 - s.cache_max_entry_count:.2f} of the free memory (activations)"
        )

        blocks_per_seq = math.ceil(context / s.block_size)
        kv_needed = int(workload.concurrency * blocks_per_seq * block_bytes + state_cache)
        explain["kv_cache"] = f"{workload.concurrency} × {blocks_per_seq} blocks × {block_bytes:.0f} B" + (
            f" + state cache {state_cache} B" if state_cache else ""
        )
        capacity = Capacity()
        if blocks is not None:
            concurrency = min(blocks / blocks_per_seq, float(s.max_batch_size)) if blocks_per_seq else 0.0
            max_context = min(blocks // max(1, workload.concurrency) * s.block_size, s.session_len)
            capacity = Capacity(
                kv_tokens=blocks * s.block_size,
                max_concurrency=concurrency,
                max_context=0 if workload.concurrency > s.max_batch_size else max_context,
            )
        per_gpu = PerGpu(
            weights=weights,
            kv_cache=kv_needed,
            activations=activations,
            overhead=overhead,
            usable=memory,
            memory=memory,
        )
        decode = None
        active = common.active_weight_bytes(spec)
        if hardware is not None and active is not None:
            decode = common.decode_tokens_per_second(
                active / s.tp + per_token * context, hardware.gpu.memory_bandwidth_gbs
            )
            explain["decode"] = "upper bound: bandwidth / (active weights per GPU + KV at the context), one sequence"
        engine = {
            "name": ENGINE,
            "version": version,
            "requested_version": choice.version,
            "backend": s.backend,
            "gpu_util": s.cache_max_entry_count,
            "cache_max_entry_count": s.cache_max_entry_count,
            "block_size": s.block_size,
            "session_len": s.session_len,
            "max_batch_size": s.max_batch_size,
            "max_prefill_token_num": s.max_prefill_token_num,
            "quant_policy": s.quant_policy,
            "kv_cache_dtype": s.kv_cache_dtype,
            "num_gpu_blocks": blocks,
            "runtime_bytes": runtime,
            "state_cache_bytes": state_cache,
            "tp": s.tp,
        }
        return common.finish_estimate(
            spec=spec,
            hardware=hardware,
            engine=engine,
            workload=replace(workload, context=context, kv_dtype=s.kv_cache_dtype),
            per_gpu=per_gpu,
            capacity=capacity,
            decode=decode,
            warnings=warnings,
            explain=explain,
            tp=s.tp,
            pp=1,
            force_does_not_fit=hardware is not None and refuses,
        )


PROFILE = LmdeployProfile()
