"""ExLlamaV2 (and TabbyAPI on top of it): a static KV cache of ``max_seq_len × batch`` per layer, in one of five
cache classes, plus one layer's worth of FP16 K/V temporaries per device for the 8-bit and Q caches.

Rules: design/engines.md §8 (exllamav2/cache.py): per token per layer, ``d = kv_heads × head_dim``:
FP16 2d + 2d; FP8 d + d; Q8 d + d + scales; Q6 d + d/2 + scales; Q4 d/2 + d/2 + scales, scales = one fp16 per 32
elements of K and of V (d/16 bytes each). Constants in ``hfvram/data/engines/exllamav2.toml``.

Settings (TabbyAPI / ExLlamaV2 names): ``cache_mode`` (FP16 | FP8 | Q8 | Q6 | Q4), ``max_seq_len``,
``max_batch_size``, ``gpu_split`` (GB per GPU, comma separated) — layers go to the GPUs in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from hfvram.errors import UsageError
from hfvram.estimate.common import (
    MiB,
    Rules,
    active_weight_bytes,
    decode_tokens_per_second,
    engine_rules,
    finish_estimate,
    layer_kv_row_elems,
    load_engine_data,
    require_weights,
    setting,
    setting_int,
)
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import LayerKind, ModelSpec

ENGINE = "exllamav2"

#: --kv-dtype spellings -> cache mode
KV_DTYPE_TO_MODE = {
    "fp16": "FP16",
    "f16": "FP16",
    "bf16": "FP16",
    "auto": "FP16",
    "fp8": "FP8",
    "8bit": "FP8",
    "q8": "Q8",
    "q8_0": "Q8",
    "int8": "Q8",
    "q6": "Q6",
    "q4": "Q4",
    "q4_0": "Q4",
    "int4": "Q4",
}


def cache_mode(name: str, modes: Rules) -> str:
    key = name.strip()
    upper = key.upper()
    if upper in modes:
        return upper
    mapped = KV_DTYPE_TO_MODE.get(key.lower())
    if mapped is None:
        raise UsageError(f"ExLlamaV2 cache mode {name!r}: use one of {', '.join(modes)}")
    return mapped


def kv_dim(spec: ModelSpec) -> int:
    """``num_key_value_heads × head_dim`` — ExLlamaV2 uses one shape for every layer (config-level values)."""
    layer = next(
        (item for item in spec.layers if item.kind in (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED)), None
    )
    if layer is None:
        raise UsageError("ExLlamaV2 needs a standard attention model (no MLA / recurrent-only layers)")
    return layer_kv_row_elems(layer)[0]


def q_block(dim: int, blocksize: int) -> int:
    """Tokens per quantization block so that ``dim × q_block`` is a multiple of the Q-cache block (cache.py)."""
    block = 1
    while (dim * block) % blocksize:
        block += 1
    return block


def cache_bytes_per_layer(dim: int, seq_len: int, batch: int, mode: Rules, scale_group: int) -> int:
    """K + V state tensors (and scales) of one layer: ``batch × seq_len × d × (k + v)`` (+ 2 × d/32 fp16 scales)."""
    per_token = dim * (float(mode["k"]) + float(mode["v"]))
    if mode["scales"]:
        per_token += 2 * 2 * dim / scale_group
    return int(batch * seq_len * per_token)


def temp_bytes_per_device(dim: int, seq_len: int, batch: int, mode: Rules) -> int:
    """FP16 K and V of one layer kept per device by the 8-bit and Q caches (``touch_device``)."""
    return 2 * 2 * batch * seq_len * dim if mode["temp"] else 0


def split_layers(n_layers: int, shares: Sequence[float]) -> list[int]:
    """Layers per GPU in order, proportional to ``shares`` (gpu_split), every layer placed."""
    total = sum(shares) or 1.0
    counts = [int(n_layers * s / total) for s in shares]
    for i in range(n_layers - sum(counts)):
        counts[i % len(counts)] += 1
    return counts


class ExLlamaV2Profile:
    name = ENGINE
    rule_versions: tuple[str, ...] = tuple(load_engine_data(ENGINE)["rule_versions"])

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        data = load_engine_data(ENGINE)
        version, rules = engine_rules(ENGINE, choice.version)
        modes: Mapping[str, Rules] = data["cache_modes"]
        wanted = setting(choice, "cache_mode", "cache-mode") or (
            workload.kv_dtype if workload.kv_dtype not in ("auto", "") else str(rules["cache_mode"])
        )
        mode_name = cache_mode(wanted, modes)
        mode = modes[mode_name]
        warnings: list[str] = []

        seq_len = (
            setting_int(choice, "max_seq_len", "max-seq-len", "cache_size")
            or workload.context
            or spec.max_position_embeddings
        )
        if seq_len is None:
            raise UsageError("the model states no max length; pass --context or --set max_seq_len=N")
        batch = setting_int(choice, "max_batch_size", "max-batch-size") or max(
            int(rules["max_batch_size"]), workload.concurrency
        )
        dim = kv_dim(spec)
        block = q_block(dim, int(rules["q_cache_blocksize"])) if mode["scales"] else 1
        if block > 1 and seq_len % block:
            warnings.append(
                f"Q cache: max_seq_len reported as {-(-seq_len // block) * block} (kv dim {dim} × {block} tokens per 512-element block)"
            )
        if any(layer.kind in (LayerKind.SLIDING, LayerKind.CHUNKED) for layer in spec.layers):
            warnings.append("ExLlamaV2 allocates every layer at max_seq_len, sliding-window layers included")

        count = hardware.count if hardware else 1
        split_text = setting(choice, "gpu_split", "gpu-split")
        shares = [float(x) for x in split_text.split(",")] if split_text else [1.0] * count
        if len(shares) != count:
            raise UsageError(f"gpu_split lists {len(shares)} GPUs, {count} given")
        n_layers = spec.num_layers
        per_gpu_layers = split_layers(n_layers, shares)
        layer_cache = cache_bytes_per_layer(dim, seq_len, batch, mode, int(rules["q_scale_group"]))
        temp = temp_bytes_per_device(dim, seq_len, batch, mode)

        if spec.quantization is not None and spec.quantization.method == "gguf":
            warnings.append("ExLlamaV2 loads EXL2 / GPTQ safetensors, not GGUF: weights counted at the GGUF's size")
        weights = require_weights(spec)
        weights_total = weights.total_bytes
        embd = weights.bytes_by_component.get("embeddings", 0)
        head = weights.bytes_by_component.get("lm_head", 0)
        per_layer_weights = (weights_total - embd - head) / max(1, n_layers)
        totals = []
        for dev, layers in enumerate(per_gpu_layers):
            w = per_layer_weights * layers + (embd if dev == 0 else 0) + (head if dev == count - 1 else 0)
            kv = layer_cache * layers + (temp if layers else 0)
            totals.append((w + kv, int(w), kv))
        worst = max(range(count), key=lambda i: totals[i][0])
        overhead = int(float(rules["cuda_context_mib"]) * MiB)
        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        warnings.append("ExLlamaV2's scratch buffers for max_input_len (prefill chunk) are not modelled")
        per_gpu = PerGpu(
            weights=totals[worst][1],
            kv_cache=layer_cache * per_gpu_layers[worst],
            activations=temp if per_gpu_layers[worst] else 0,
            overhead=overhead,
            usable=memory,
            memory=memory,
        )

        per_seq_token = layer_cache / max(1, batch * seq_len)
        capacity = Capacity(kv_tokens=seq_len * batch)
        if hardware is not None:
            per_token_dev = per_seq_token * per_gpu_layers[worst]
            temp_per_token = temp / max(1, batch * seq_len)
            if per_token_dev > 0:
                max_conc = max(
                    0.0, (memory - per_gpu.weights - overhead) / (seq_len * (per_token_dev + temp_per_token / batch))
                )
                max_ctx = int(
                    max(0.0, (memory - per_gpu.weights - overhead) / (batch * (per_token_dev + temp_per_token)))
                )
                capacity = Capacity(
                    kv_tokens=seq_len * batch,
                    max_concurrency=max_conc,
                    max_context=min(max_ctx, spec.max_position_embeddings or max_ctx),
                )
        decode = decode_tokens_per_second(
            (active_weight_bytes(spec) or 0) / count + per_seq_token * n_layers * seq_len,
            hardware.gpu.memory_bandwidth_gbs if hardware else None,
        )
        explain = {
            "weights": f"checkpoint tensors (EXL2 / GPTQ as stored), {per_gpu_layers[worst]} of {n_layers} layers on this GPU",
            "kv_cache": (
                f"{mode['class']}: {batch} × {seq_len} tokens × kv dim {dim} × "
                f"({mode['k']} + {mode['v']} B{' + fp16 scale per 32' if mode['scales'] else ''}) per layer"
            ),
            "activations": (
                f"one layer of FP16 K/V temporaries per device: {temp / MiB:.1f} MiB"
                if temp
                else "FP16 cache: no temporaries"
            ),
            "overhead": "PyTorch CUDA context (exllamav2.toml cuda_context_mib, engines.md §1.3)",
            "usable": "all of the GPU's memory (ExLlamaV2 has no memory fraction)",
        }
        engine = {
            "name": ENGINE,
            "version": choice.version,
            "rules": version,
            "cache_mode": mode_name,
            "max_seq_len": seq_len,
            "max_batch_size": batch,
            "gpu_split": shares,
            "q_block": block,
        }
        resolved = replace(workload, context=seq_len, kv_dtype=mode_name.lower())
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
            pp=count,
        )


PROFILE = ExLlamaV2Profile()
