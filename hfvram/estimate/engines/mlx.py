"""MLX / mlx-lm on Apple Silicon: unified memory, of which the GPU may wire ``max_recommended_working_set_size``.

Rules: docs/engines/mlx.md#mlx-wired-limit — mlx-lm wires the recommended working set (``mx.set_wired_limit``) and warns when the
model is above 0.9 × that figure; the GPU-addressable share of RAM is set by macOS (the catalogue's
``addressable_bytes``; raise it with ``sudo sysctl iogpu.wired_limit_mb=N``). KV cache in the model's dtype,
grown in steps of 256 tokens; ``--kv-bits 4|8`` quantizes it (a scale and a bias per group of 64).
Constants in ``hfvram/data/engines/mlx.toml``.

Settings (mlx-lm names): ``kv_bits``, ``kv_group_size``, ``max_kv_size`` (rotating cache cap), ``prefill_step_size``,
``wired_limit_mb`` (the sysctl, in MB = MiB as macOS reads it).
"""

from __future__ import annotations

import math
from dataclasses import replace

from hfvram.errors import UsageError
from hfvram.estimate.common import (
    MiB,
    active_weight_bytes,
    canonical_kv_dtype,
    decode_tokens_per_second,
    engine_rules,
    finish_estimate,
    kv_dtype_bytes,
    load_engine_data,
    require_weights,
    setting_int,
)
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import RECURRENT_KINDS, WINDOWED_KINDS, LayerKind, ModelSpec

ENGINE = "mlx"


def kv_element_bytes(model_dtype_bytes: float, kv_bits: int | None, group_size: int) -> float:
    """Bytes per KV element: the model dtype, or ``bits/8`` plus a scale and a bias (model dtype) per group."""
    if kv_bits is None:
        return model_dtype_bytes
    if kv_bits not in (2, 3, 4, 6, 8):
        raise UsageError(f"kv_bits={kv_bits}: mlx quantizes to 2, 3, 4, 6 or 8 bits")
    return kv_bits / 8 + 2 * model_dtype_bytes / group_size


def cache_tokens(context: int, step: int, cap: int | None) -> int:
    """Tokens a KVCache buffer holds for ``context``: grown in ``step``-token chunks, capped by a rotating size."""
    tokens = math.ceil(context / step) * step
    return min(tokens, cap) if cap else tokens


def kv_bytes_per_sequence(
    spec: ModelSpec, context: int, element_bytes: float, step: int, max_kv_size: int | None
) -> float:
    """KV of one sequence: full / MLA layers at the (stepped) context, sliding layers in a rotating cache of their
    window, recurrent layers their state (layer dtype, else the model dtype)."""
    total = 0.0
    for layer in spec.layers:
        if layer.kind in WINDOWED_KINDS and layer.window:
            tokens = min(cache_tokens(context, step, max_kv_size), layer.window)
            total += layer.kv_elems_per_token * element_bytes * tokens
        elif layer.kind in (LayerKind.FULL, LayerKind.MLA):
            total += layer.kv_elems_per_token * element_bytes * cache_tokens(context, step, max_kv_size)
        elif layer.kind in RECURRENT_KINDS:
            total += layer.state_elems * (layer.state_dtype_bytes or spec.dtype_bytes())
    return total


def wired_limit(hardware: Hardware, choice: EngineChoice) -> tuple[int, str]:
    limit_mb = setting_int(choice, "wired_limit_mb", "iogpu.wired_limit_mb")
    if limit_mb:
        return limit_mb * MiB, f"iogpu.wired_limit_mb = {limit_mb}"
    gpu = hardware.gpu
    if gpu.addressable_bytes is not None:
        return gpu.addressable_bytes, "the GPU-addressable share of RAM macOS sets by default (catalogue)"
    return gpu.memory_bytes, "the device's memory (no addressable share known for it)"


class MlxProfile:
    name = ENGINE
    rule_versions: tuple[str, ...] = tuple(load_engine_data(ENGINE)["rule_versions"])

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        version, rules = engine_rules(ENGINE, choice.version)
        warnings: list[str] = []
        context = workload.context or spec.max_position_embeddings
        if context is None:
            raise UsageError("the model states no max length; pass --context")
        model_bytes = spec.dtype_bytes()
        kv_bits = setting_int(choice, "kv_bits", "kv-bits")
        if kv_bits is None and workload.kv_dtype not in ("auto", ""):
            wanted = workload.kv_dtype.lower()
            if wanted in ("q8", "q8_0", "int8", "8bit"):
                kv_bits = 8
            elif wanted in ("q4", "q4_0", "int4", "4bit"):
                kv_bits = 4
            else:
                model_bytes = kv_dtype_bytes(wanted, model_bytes)
        group = setting_int(choice, "kv_group_size", "kv-group-size", default=int(rules["kv_group_size"])) or 64
        element = kv_element_bytes(spec.dtype_bytes() if kv_bits else model_bytes, kv_bits, group)
        step = int(rules["kv_step"])
        max_kv = setting_int(choice, "max_kv_size", "max-kv-size")
        per_seq = kv_bytes_per_sequence(spec, context, element, step, max_kv)
        kv = int(per_seq * workload.concurrency)

        weights = require_weights(spec).total_bytes
        prefill = min(
            context,
            setting_int(choice, "prefill_step_size", "prefill-step-size", default=int(rules["prefill_step_size"]))
            or 2048,
        )
        activations = int(
            prefill
            * (
                float(rules["act_hidden_factor"]) * (spec.hidden_size or 0)
                + float(rules["act_ff_factor"]) * (spec.moe_intermediate_size or spec.intermediate_size or 0)
            )
            * spec.dtype_bytes()
        )
        overhead = int(float(rules["metal_overhead_mib"]) * MiB)
        if hardware is not None:
            if not (hardware.gpu.unified_memory or hardware.gpu.vendor == "apple"):
                warnings.append(
                    f"{hardware.gpu.name} is not Apple Silicon: MLX's CUDA backend is not what these rules describe"
                )
            usable, usable_note = wired_limit(hardware, choice)
            memory = hardware.gpu.memory_bytes
            fraction = float(rules["wired_warning_fraction"])
            if weights > fraction * usable:
                warnings.append(
                    f"mlx-lm warns: the model ({weights / (1 << 30):.1f} GiB) is above {fraction:.0%} of the wired limit "
                    f"({usable / (1 << 30):.1f} GiB); raise it with `sudo sysctl iogpu.wired_limit_mb=N`"
                )
        else:
            usable, usable_note, memory = 0, "", 0
        per_gpu = PerGpu(
            weights=weights, kv_cache=kv, activations=activations, overhead=overhead, usable=usable, memory=memory
        )
        capacity = Capacity(kv_tokens=cache_tokens(context, step, max_kv) * workload.concurrency)
        if hardware is not None and per_seq > 0:
            budget = usable - weights - activations - overhead
            per_token = per_seq / cache_tokens(context, step, max_kv)
            capacity = Capacity(
                kv_tokens=capacity.kv_tokens,
                max_concurrency=max(0.0, budget / per_seq),
                max_context=min(
                    max(0, int(budget / workload.concurrency / per_token) // step * step),
                    spec.max_position_embeddings or 1 << 40,
                ),
            )
        decode = decode_tokens_per_second(
            (active_weight_bytes(spec) or 0) + per_seq, hardware.gpu.memory_bandwidth_gbs if hardware else None
        )
        warnings.append("MLX activations are an approximation (prefill chunk × hidden/FFN width), not a measured rule")
        kv_name = f"{kv_bits}-bit (group {group})" if kv_bits else canonical_kv_dtype(workload.kv_dtype, spec.dtype)
        explain = {
            "weights": "checkpoint tensors as stored (MLX loads safetensors / mlx-community quantized weights as is)",
            "kv_cache": f"{kv_name} KV, {element:.4f} B/element, buffers grown in steps of {step} tokens; sliding layers rotate at their window",
            "activations": f"prefill step {prefill} tokens × ({rules['act_hidden_factor']}·hidden + {rules['act_ff_factor']}·FFN) × dtype (approximation)",
            "overhead": "Metal context (mlx.toml metal_overhead_mib)",
            "usable": f"wired limit: {usable_note}" if hardware else "",
        }
        engine = {
            "name": ENGINE,
            "version": choice.version,
            "rules": version,
            "kv_bits": kv_bits,
            "kv_group_size": group,
            "max_kv_size": max_kv,
            "prefill_step_size": prefill,
        }
        resolved = replace(
            workload,
            context=context,
            kv_dtype=f"q{kv_bits}" if kv_bits else canonical_kv_dtype(workload.kv_dtype, spec.dtype),
        )
        return finish_estimate(
            spec=spec,
            hardware=hardware,
            engine=engine,
            workload=resolved,
            per_gpu=per_gpu,
            capacity=capacity,
            decode=decode,
            warnings=warnings,
            explain=explain,
            tp=1,
            pp=1,
        )


PROFILE = MlxProfile()
