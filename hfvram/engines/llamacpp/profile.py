"""llama.cpp (llama-server / llama-cli): exact KV cells, weights per device, measured compute-buffer model.

Rules: docs/engines/llamacpp.md (defaults #llamacpp-defaults, weights #llamacpp-weights, KV #llamacpp-kv-cache, compute
buffer #llamacpp-compute-buffer, output buffer #llamacpp-output-buffer and --fit
#llamacpp-fit) and the ggml type table docs/engines/common.md#gguf-types; constants in ``hfvram/engines/llamacpp/rules.toml``. Checked against real
llama.cpp loads in ``benchmarks/data/llamacpp_truth.jsonl`` (docs/accuracy.md).

Settings use llama.cpp's own option names (long or short): ``ctx-size``/``c``, ``batch-size``/``b``,
``ubatch-size``/``ub``, ``flash-attn``/``fa``, ``cache-type-k``/``ctk``, ``cache-type-v``/``ctv``,
``n-gpu-layers``/``ngl``, ``parallel``/``np``, ``kv-unified``/``kvu``, ``swa-full``, ``cpu-moe``/``cmoe``,
``n-cpu-moe``/``ncmoe``, ``override-tensor``/``ot``, ``split-mode``/``sm``, ``tensor-split``/``ts``,
``no-kv-offload``/``nkvo``, ``fit``, ``fit-target``/``fitt``, plus ``binary`` (llama-server | llama-cli).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from hfvram.engines.base import ProfileBase
from hfvram.errors import UsageError
from hfvram.estimate.common import (
    GiB,
    MiB,
    Rules,
    active_weight_bytes,
    decode_tokens_per_second,
    engine_rules,
    finish_estimate,
    load_engine_data,
    pad_to_multiple,
    require_weights,
    setting,
    setting_bool,
    setting_int,
)
from hfvram.estimate.common import (
    layer_kv_row_elems as common_kv_row_elems,
)
from hfvram.estimate.dtypes import ggml_blocks
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import RECURRENT_KINDS, WINDOWED_KINDS, Layer, LayerKind, ModelSpec

ENGINE = "llama.cpp"

#: ggml type name -> (block elements, bytes per block) — docs/engines/common.md#gguf-types (ggml-common.h static_asserts), from
#: hfvram/data/ggml_types.json (generated from gguf's GGML_QUANT_SIZES)
GGML_BLOCKS: Mapping[str, tuple[int, int]] = ggml_blocks()
#: KV cache types llama.cpp accepts (common/arg.cpp::kv_cache_types)
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: hfvram / HF spellings -> llama.cpp names
KV_ALIASES = {"fp16": "f16", "float16": "f16", "half": "f16", "bfloat16": "bf16", "fp32": "f32", "float32": "f32"}


def row_size(type_name: str, count: int) -> int:
    """Bytes of a row of ``n`` elements of a ggml type: ``n / block × block_bytes`` (ggml_row_size)."""
    block, size = GGML_BLOCKS[type_name]
    return -(-count // block) * size


def kv_type(name: str) -> str:
    """A KV dtype as llama.cpp names it; UsageError for one it does not accept (e.g. fp8)."""
    key = KV_ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in KV_CACHE_TYPES:
        raise UsageError(f"llama.cpp KV cache type {name!r} is not one of {', '.join(KV_CACHE_TYPES)}")
    return key


# ---------------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Every llama.cpp setting the estimate depends on, resolved (defaults applied)."""

    binary: str
    n_ctx: int  # after padding (cparams.n_ctx)
    n_ctx_seq: int
    n_stream: int
    n_seq_max: int
    kv_unified: bool
    n_batch: int
    n_ubatch: int
    n_outputs_max: int
    flash_attn: bool
    type_k: str
    type_v: str
    swa_full: bool
    n_gpu_layers: int  # of n_layer + 1
    cpu_moe_layers: int  # blocks 0..N-1 keep their experts on the CPU
    override_tensor: tuple[tuple[str, str], ...]
    split_mode: str
    tensor_split: tuple[float, ...]
    kv_offload: bool
    fit: bool
    fit_target_bytes: int
    n_rs_seq: int
    notes: tuple[str, ...] = ()
    #: the GPU backend pads quantized rows (CUDA / ROCm); False for Metal and the CPU-only truth runs
    cuda: bool = True
    #: row length the CUDA buffer type pads quantized matrices to (llama.cpp.toml matrix_row_padding)
    matrix_row_padding: int = field(default_factory=lambda: packaged_row_padding())

    def as_dict(self) -> dict[str, object]:
        return {
            "binary": self.binary,
            "ctx-size": self.n_ctx,
            "n_ctx_seq": self.n_ctx_seq,
            "parallel": self.n_seq_max,
            "kv-unified": self.kv_unified,
            "batch-size": self.n_batch,
            "ubatch-size": self.n_ubatch,
            "n_outputs_max": self.n_outputs_max,
            "flash-attn": "on" if self.flash_attn else "off",
            "cache-type-k": self.type_k,
            "cache-type-v": self.type_v,
            "swa-full": self.swa_full,
            "n-gpu-layers": self.n_gpu_layers,
            "n-cpu-moe": self.cpu_moe_layers,
            "override-tensor": ",".join(f"{pattern}={buffer}" for pattern, buffer in self.override_tensor) or None,
            "split-mode": self.split_mode,
            "tensor-split": list(self.tensor_split) or None,
            "kv-offload": self.kv_offload,
            "fit": self.fit,
            "fit-target-mib": self.fit_target_bytes // MiB,
        }


def pad_cells(count: int, pad: int) -> int:
    return pad_to_multiple(max(1, count), pad)


def kv_cells(n_ctx: int, n_seq_max: int, kv_unified: bool, pad: int = 256) -> tuple[int, int, int]:
    """(n_ctx, n_ctx_seq, n_stream) as llama_context pads them (docs/engines/llamacpp.md#llamacpp-kv-cache): n_ctx to 256; a unified
    cache is one stream of n_ctx cells; otherwise n_seq_max streams of pad256(n_ctx / n_seq_max)."""
    n_ctx = pad_cells(n_ctx, pad)
    if kv_unified or n_seq_max <= 1:
        return n_ctx, n_ctx, 1
    n_ctx_seq = pad_cells(n_ctx // n_seq_max, pad)
    return n_ctx_seq * n_seq_max, n_ctx_seq, n_seq_max


def _parse_override(text: str | None) -> tuple[tuple[str, str], ...]:
    if not text:
        return ()
    pairs = []
    for item in text.split(","):
        pattern, sep, buft = item.partition("=")
        if not sep or not pattern:
            raise UsageError(f"override-tensor {item!r} is not REGEX=BUFFER_TYPE")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"override-tensor regex {pattern!r}: {exc}") from exc
        pairs.append((pattern, buft.strip()))
    return tuple(pairs)


def _on_off_auto(value: str | None, default: str) -> str:
    raw = (value if value is not None else default).strip().lower()
    mapping = {
        "": "on",
        "1": "on",
        "true": "on",
        "on": "on",
        "yes": "on",
        "enabled": "on",
        "0": "off",
        "false": "off",
        "off": "off",
        "no": "off",
        "disabled": "off",
        "auto": "auto",
    }
    if raw not in mapping:
        raise UsageError(f"flash-attn={value!r}: use on, off or auto")
    return mapping[raw]


def resolve_settings(spec: ModelSpec, choice: EngineChoice, workload: Workload, rules: Rules) -> Settings:
    """Apply llama.cpp's defaults (llamacpp.md#llamacpp-defaults) to the user's settings and workload.

    Context: ``ctx-size`` is the whole cache (all sequences); without it, n_ctx = workload.context (default the
    model's n_ctx_train) × the sequences the workload holds at full length (``workload.concurrency``)."""
    notes: list[str] = []
    binary = resolve_binary(choice, rules)
    parallel, kv_unified = resolve_slots(choice, workload, binary, rules, notes)
    ctx_size = resolve_ctx_size(spec, choice, workload, parallel, kv_unified)
    n_ctx, n_ctx_seq, n_stream = kv_cells(ctx_size, parallel, kv_unified, int(rules["n_ctx_pad"]))
    n_batch, n_ubatch, n_outputs_max = resolve_batches(choice, rules, binary, parallel)
    if binary == "llama-server" and not any(
        setting(choice, name) for name in ("build", "reserve-outputs", "n-outputs-max")
    ):
        rows = min(n_ubatch, n_outputs_max)
        notes.append(
            f"llama-server reserve: {rows} logits rows per ubatch as builds before {rules['server_outputs_cap_build']} "
            "reserve them (--set build=N for a newer build)"
        )
    fa = _on_off_auto(setting(choice, "flash-attn", "fa"), str(rules["flash_attn"]))
    if fa == "auto":
        notes.append("flash-attn auto resolves to on when the device supports every FA op (assumed)")
    flash_attn = fa != "off"
    type_k, type_v = resolve_kv_types(spec, choice, workload, rules, flash_attn)
    n_layer = spec.num_layers
    ngl = setting_int(choice, "n-gpu-layers", "ngl", "gpu-layers")
    if ngl is None or ngl < 0 or ngl > n_layer + 1:
        ngl = n_layer + 1
    cpu_moe = n_layer if setting_bool(choice, "cpu-moe", "cmoe") else 0
    cpu_moe = max(cpu_moe, setting_int(choice, "n-cpu-moe", "ncmoe", default=0) or 0)
    split_mode, tensor_split = resolve_split(choice)
    fit_target = setting_int(choice, "fit-target", "fitt", default=int(rules["fit_target_mib"]))
    return Settings(
        binary=binary,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_stream=n_stream,
        n_seq_max=parallel,
        kv_unified=kv_unified,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        n_outputs_max=n_outputs_max,
        flash_attn=flash_attn,
        type_k=type_k,
        type_v=type_v,
        swa_full=setting_bool(choice, "swa-full", default=bool(rules["swa_full"])),
        n_gpu_layers=ngl,
        cpu_moe_layers=min(cpu_moe, n_layer),
        override_tensor=_parse_override(setting(choice, "override-tensor", "ot")),
        split_mode=split_mode,
        tensor_split=tensor_split,
        kv_offload=not setting_bool(choice, "no-kv-offload", "nkvo"),
        fit=setting_bool(choice, "fit", default=bool(rules["fit"])),
        fit_target_bytes=(fit_target or 0) * MiB,
        n_rs_seq=int(rules["n_rs_seq"]),
        notes=tuple(notes),
        matrix_row_padding=int(rules["matrix_row_padding"]),
    )


def resolve_binary(choice: EngineChoice, rules: Rules) -> str:
    """llama-server or llama-cli (their slot and output defaults differ)."""
    binary = (setting(choice, "binary") or str(rules["binary"])).strip().lower()
    if binary in ("server", "llama-server"):
        return "llama-server"
    if binary in ("cli", "llama-cli", "main", "llama-bench", "library"):
        return "llama-cli"
    raise UsageError(f"binary={binary!r}: use llama-server or llama-cli")


def resolve_slots(
    choice: EngineChoice, workload: Workload, binary: str, rules: Rules, notes: list[str]
) -> tuple[int, bool]:
    """(parallel sequences, unified KV cache): ``-np`` when given, else the workload's concurrency, else
    llama-server's auto slots sharing one unified cache."""
    parallel = setting_int(choice, "parallel", "np", "n-parallel")
    unified_setting = setting(choice, "kv-unified", "kvu")
    if parallel is None or parallel < 0:
        if workload.concurrency > 1:
            parallel = workload.concurrency
        elif binary == "llama-server":
            parallel = int(rules["server_auto_parallel"])
            if unified_setting is None:
                unified_setting = "true"
                notes.append(f"llama-server -np auto: {parallel} slots sharing one unified KV cache")
        else:
            parallel = 1
    kv_unified = (
        setting_bool(choice, "kv-unified", "kvu", default=bool(rules["kv_unified"]))
        if unified_setting is None
        else unified_setting.strip().lower() in ("", "1", "true", "on", "yes")
    )
    return parallel, kv_unified


def resolve_ctx_size(spec: ModelSpec, choice: EngineChoice, workload: Workload, parallel: int, kv_unified: bool) -> int:
    """``ctx-size`` (all sequences together) as given, else the per-sequence context × the sequences held."""
    ctx_size = setting_int(choice, "ctx-size", "c", "n-ctx", "num-ctx")
    if ctx_size is not None and ctx_size > 0:
        return ctx_size
    per_seq = workload.context or spec.max_position_embeddings
    if per_seq is None:
        raise UsageError("the model states no context length (n_ctx_train); pass --context or --set ctx-size=N")
    # a unified cache shared by auto slots holds `concurrency` full sequences; per-sequence streams hold one each
    return per_seq * max(1, workload.concurrency if kv_unified else parallel)


def resolve_batches(choice: EngineChoice, rules: Rules, binary: str, parallel: int) -> tuple[int, int, int]:
    """(n_batch, n_ubatch, n_outputs_max). The prompt graph of the reserve holds ``min(ubatch, n_outputs_max)`` logits
    rows; ``n_outputs_max`` is n_batch except in llama-server from build 9460 on (de6f727a, 2026-06-01:
    ``server_n_outputs_max`` = n_parallel × (1 + draft)). Without ``build=N`` hfvram assumes an older llama-server
    (every published log we hold: one row per ubatch token); ``reserve-outputs=ubatch|slots`` forces the era,
    ``n-outputs-max=N`` sets the cap directly."""
    n_batch = setting_int(choice, "batch-size", "b", default=int(rules["n_batch"])) or int(rules["n_batch"])
    n_ubatch = setting_int(choice, "ubatch-size", "ub", default=int(rules["n_ubatch"])) or int(rules["n_ubatch"])
    n_ubatch = min(n_ubatch, n_batch)
    n_outputs_max = n_batch
    if binary == "llama-server":
        build = setting_int(choice, "build")
        default = str(rules["server_reserve_outputs"])
        if build is not None and build > 0:
            default = "slots" if build >= int(rules["server_outputs_cap_build"]) else "ubatch"
        era = (setting(choice, "reserve-outputs") or default).strip().lower()
        if era not in ("ubatch", "slots"):
            raise UsageError(f"reserve-outputs={era!r}: use ubatch (builds before the cap) or slots (n_outputs_max)")
        if era == "slots":
            n_outputs_max = min(n_batch, parallel)
    n_outputs_max = setting_int(choice, "n-outputs-max", default=n_outputs_max) or n_outputs_max
    return n_batch, n_ubatch, n_outputs_max


def resolve_kv_types(
    spec: ModelSpec, choice: EngineChoice, workload: Workload, rules: Rules, flash_attn: bool
) -> tuple[str, str]:
    """(cache-type-k, cache-type-v), with llama.cpp's refusals: different K and V types for MLA, a quantized
    V cache without flash attention."""
    default_kv = None if workload.kv_dtype in ("auto", "") else kv_type(workload.kv_dtype)
    type_k = kv_type(setting(choice, "cache-type-k", "ctk") or default_kv or str(rules["type_k"]))
    type_v = kv_type(setting(choice, "cache-type-v", "ctv") or default_kv or str(rules["type_v"]))
    if type_k != type_v and any(layer.kind is LayerKind.MLA for layer in spec.layers):
        # llama_init_from_model: "model does not support different K and V cache types" (MLA keeps V inside K);
        # seen in benchmarks/data/llamacpp_truth.jsonl (deepseek-v2-lite, q8_0 / f16)
        raise UsageError(f"llama.cpp refuses different K ({type_k}) and V ({type_v}) cache types for an MLA model")
    if GGML_BLOCKS[type_v][0] > 1 and not flash_attn:
        raise UsageError(f"llama.cpp needs flash-attn for a quantized V cache (cache-type-v={type_v})")
    return type_k, type_v


def resolve_split(choice: EngineChoice) -> tuple[str, tuple[float, ...]]:
    """(split-mode, tensor-split proportions)."""
    split_mode = (setting(choice, "split-mode", "sm") or "layer").strip().lower()
    if split_mode not in ("layer", "row", "none"):
        raise UsageError(f"split-mode={split_mode!r}: use layer, row or none")
    ts_text = setting(choice, "tensor-split", "ts")
    if not ts_text:
        return split_mode, ()
    try:
        tensor_split = tuple(float(part) for part in re.split(r"[,/]", ts_text) if part.strip())
    except ValueError as exc:
        raise UsageError(f"tensor-split={ts_text!r} is not a list of numbers") from exc
    if any(share < 0 for share in tensor_split) or not any(tensor_split):
        raise UsageError(f"tensor-split={ts_text!r} needs non-negative proportions")
    return split_mode, tensor_split


# ---------------------------------------------------------------------------------------------------------
# KV cache and recurrent state (exact, llamacpp.md#llamacpp-kv-cache, llamacpp.md#llamacpp-recurrent-state)
# ---------------------------------------------------------------------------------------------------------


def swa_cells(window: int, settings: Settings, pad: int = 256) -> int:
    """Cells of a sliding-window layer's cache per stream: ``pad256(min(n_ctx_seq, n_swa × (unified ? n_seq_max
    : 1) + n_ubatch))``, or the full n_ctx_seq with ``swa_full`` (llama-kv-cache-iswa.cpp)."""
    if settings.swa_full:
        return settings.n_ctx_seq
    seqs = settings.n_seq_max if settings.kv_unified else 1
    return min(settings.n_ctx_seq, pad_cells(window * seqs + settings.n_ubatch, pad))


def layer_kv_row_elems(layer: Layer) -> tuple[int, int]:
    """(K, V) elements per cell of one layer: n_embd_k_gqa / n_embd_v_gqa; MLA stores one latent as K, no V."""
    return common_kv_row_elems(layer)


def layer_cells(layer: Layer, settings: Settings, pad: int = 256) -> int:
    """Cells per stream of this layer's cache (0 for layers without KV)."""
    if layer.kind in WINDOWED_KINDS and layer.window:
        return swa_cells(layer.window, settings, pad)
    if layer.kind in (LayerKind.FULL, LayerKind.MLA, LayerKind.SLIDING, LayerKind.CHUNKED):
        return settings.n_ctx_seq
    return 0


@dataclass(frozen=True)
class KvBytes:
    k: int
    v: int
    state: int
    #: bytes per layer index (K + V + recurrent state), for placing layers on devices
    per_layer: tuple[int, ...]

    @property
    def total(self) -> int:
        return self.k + self.v + self.state


def kv_bytes(spec: ModelSpec, settings: Settings, pad: int = 256) -> KvBytes:
    """K, V and recurrent-state bytes of the whole model (docs/engines/llamacpp.md#llamacpp-kv-cache).

    Without flash attention V is stored transposed and every layer uses ``n_embd_v_gqa_max``. Recurrent layers
    hold F32 conv (R) and SSM (S) state for ``max(1, n_seq_max) × (1 + n_rs_seq)`` sequences."""
    v_max = max((layer_kv_row_elems(layer)[1] for layer in spec.layers), default=0)
    rows = max(1, settings.n_seq_max) * (1 + settings.n_rs_seq)
    k_total = v_total = state_total = 0
    per_layer = []
    for layer in spec.layers:
        k_elems, v_elems = layer_kv_row_elems(layer)
        if v_elems and not settings.flash_attn:
            v_elems = v_max
        cells = layer_cells(layer, settings, pad) * settings.n_stream
        k_bytes = row_size(settings.type_k, k_elems) * cells if k_elems else 0
        v_bytes = row_size(settings.type_v, v_elems) * cells if v_elems else 0
        state = 4 * layer.state_elems * rows if layer.kind in RECURRENT_KINDS else 0
        k_total, v_total, state_total = k_total + k_bytes, v_total + v_bytes, state_total + state
        per_layer.append(k_bytes + v_bytes + state)
    return KvBytes(k=k_total, v=v_total, state=state_total, per_layer=tuple(per_layer))


# ---------------------------------------------------------------------------------------------------------
# Compute buffer (measured model, llamacpp.md#llamacpp-compute-buffer)
# ---------------------------------------------------------------------------------------------------------


def _n_used_and_ff_exp(spec: ModelSpec) -> tuple[int, int]:
    return spec.experts_per_token or 0, spec.moe_intermediate_size or spec.intermediate_size or 0


def layer_live_elems(spec: ModelSpec, consts: Mapping[str, float]) -> float:
    """f32 elements per ubatch token alive inside one layer's FFN (the fitted L_layer of llamacpp.md#llamacpp-compute-buffer)."""
    n_embd = spec.hidden_size or 0
    if any(layer.moe for layer in spec.layers) and spec.experts_per_token:
        n_used, n_ff_exp = _n_used_and_ff_exp(spec)
        return max(
            consts["moe_ff_factor"] * n_used * n_ff_exp,
            consts["moe_used_embd_factor"] * n_used * n_embd
            + consts["moe_embd_factor"] * n_embd
            + consts["moe_used_ff_factor"] * n_used * n_ff_exp,
        )
    return consts["dense_ff_factor"] * (spec.intermediate_size or 0) + consts["dense_embd_factor"] * n_embd


def recurrent_live_elems(spec: ModelSpec, consts: Mapping[str, float]) -> float:
    """f32 elements per ubatch token alive inside a recurrent (Mamba-2 / linear-attention) layer: in-projection,
    conv and scan outputs, taken proportional to the conv state width (``(d_conv − 1) × conv channels``).
    Fitted on Nemotron-H-56B (benchmarks/data/llamacpp_truth.jsonl); 0 without recurrent layers."""
    conv = max((layer.conv_state_elems for layer in spec.layers if layer.kind in RECURRENT_KINDS), default=0)
    return consts["recurrent_conv_factor"] * conv


def attention_masks(spec: ModelSpec, settings: Settings, pad: int = 256) -> list[int]:
    """KV lengths of the masks the graph keeps alive: one for the full-attention layers (n_ctx_seq) and one for
    the sliding-window layers (their cell count) — two masks even when both have the same length (measured on
    gemma-2 with np 4: the layer term needs both)."""
    masks = []
    full = [layer_cells(layer, settings, pad) for layer in spec.layers if layer.kind in (LayerKind.FULL, LayerKind.MLA)]
    windowed = [layer_cells(layer, settings, pad) for layer in spec.layers if layer.kind in WINDOWED_KINDS]
    if full:
        masks.append(max(full))
    if windowed:
        masks.append(max(windowed))
    return masks


def compute_buffer_bytes(
    spec: ModelSpec,
    settings: Settings,
    consts: Mapping[str, float],
    *,
    with_output: bool = True,
    pad: int = 256,
    first_device: bool = True,
) -> tuple[int, str]:
    """The backend compute buffer of the worst-case graph (llama_context::sched_reserve), docs/engines/llamacpp.md#llamacpp-compute-buffer:

    ``4 · ub · max(logits, layer + masks)`` with ``logits = n_out·V/ub + 2·n_embd``; FA on: masks f16
    (``n_kv/2`` per mask); FA off: f32 KQ scores ``n_kv·n_head`` plus an f32 mask and ``5.5·n_embd`` (CPU backend) or
    ``2·n_embd + 2·n_head·head_dim`` (CUDA).
    ``with_output`` False for a device that holds no output layer (multi-GPU: only the last has logits);
    ``first_device`` False for the other GPUs (CUDA op offload copies host weights to the first GPU only)."""
    ub = min(settings.n_ctx, settings.n_ubatch)
    n_out = min(ub, settings.n_outputs_max)
    n_embd = spec.hidden_size or 0
    vocab = spec.vocab_size or 0
    n_head = spec.num_attention_heads or 0
    logits = (n_out * vocab / ub + consts["logits_embd_factor"] * n_embd) if with_output else 0.0
    views = attention_masks(spec, settings, pad)
    layer = layer_live_elems(spec, consts)
    mla = [mla_layer for mla_layer in spec.layers if mla_layer.kind is LayerKind.MLA]
    extra = 0.0
    if mla:
        # absorbed MLA queries (one latent + rope per head) stay live next to either peak; fitted on
        # DeepSeek-V2-Lite (benchmarks/data/llamacpp_truth.jsonl), see docs/accuracy.md
        extra = consts["mla_head_factor"] * n_head * (mla[0].kv_lora_rank + mla[0].qk_rope_head_dim)
        logits += extra
        layer += extra
    recurrent = recurrent_live_elems(spec, consts)
    if settings.flash_attn:
        attention = layer + consts["mask_fa_on"] * sum(views)
        live = max(logits, attention, recurrent)
        rule = f"FA on: max(logits {logits:.0f}, layer {layer:.0f} + f16 masks {consts['mask_fa_on'] * sum(views):.0f})"
    else:
        n_kv = max(views, default=0)
        if settings.cuda:
            # CUDA: next to the f32 KQ scores and the mask copy, the residual and the normed input (n_embd each) and Q
            # before and after RoPE (n_head × head_dim each) — exact on seven published CUDA logs (docs/accuracy.md)
            n_q = n_head * (spec.head_dim or (n_embd // n_head if n_head else 0))
            residue = consts["fa_off_cuda_embd_factor"] * n_embd + consts["fa_off_cuda_q_factor"] * n_q
        else:
            residue = consts["fa_off_embd_factor"] * n_embd
        scores = n_kv * n_head + consts["mask_fa_off"] * sum(views) + residue + extra
        live = max(logits, layer, scores, recurrent)
        rule = f"FA off: max(logits {logits:.0f}, layer {layer:.0f}, KQ {scores:.0f})"
    size = int(4 * ub * live)
    rule = f"4 B × ubatch {ub} × {rule} elements per token"
    copy, copy_rule = offload_copy_bytes(spec, settings, consts, ub, layer) if first_device else (0, "")
    if copy > size:
        return copy, copy_rule
    return size, rule


def offload_copy_bytes(
    spec: ModelSpec, settings: Settings, consts: Mapping[str, float], ub: int, layer_elems: float
) -> tuple[int, str]:
    """CUDA op offload (docs/engines/llamacpp.md#llamacpp-compute-buffer): at ``ubatch ≥ 32`` the scheduler runs
    the matrix products of weights kept in host memory on the first GPU and copies each such weight into that GPU's
    compute buffer for its split (``ggml_backend_sched`` op offload, ``ggml_backend_cuda_device_offload_op``). The
    largest copy and what lives next to it:

    - output layer on the CPU (``-ngl`` ≤ n_layer): ``output.weight`` + f32 logits rows + one f32 hidden state;
    - experts on the CPU (``--cpu-moe`` / ``--n-cpu-moe`` / ``-ot exps=CPU``): one expert tensor (up, gate or down:
      every offloaded weight starts a new split, so earlier copies are reused) + the MoE layer's live set.

    (0, "") on the CPU / Metal backend, below the offload batch, or when nothing is kept in host memory."""
    if not settings.cuda or ub < int(consts["op_offload_min_batch"]):
        return 0, ""
    n_layer = spec.num_layers
    _, experts, _, output = _layer_weight_bytes(spec)
    n_embd = spec.hidden_size or 0
    candidates: list[tuple[int, str]] = []
    if settings.n_gpu_layers <= n_layer and output:
        n_out = min(ub, settings.n_outputs_max)
        rows = 4 * (n_out * (spec.vocab_size or 0) + consts["offload_output_embd_factor"] * ub * n_embd)
        candidates.append(
            (int(output + rows), f"op offload: output.weight {output / MiB:.2f} MiB copied to the GPU + logits rows")
        )
    cpu_expert_layers = [
        experts[il]
        for il in range(n_layer)
        if experts[il]
        and (il < settings.cpu_moe_layers or _matches_override(f"blk.{il}.ffn_up_exps.weight", settings) == "CPU")
    ]
    if cpu_expert_layers:
        largest = int(max(cpu_expert_layers) * consts["offload_expert_tensor_share"])
        candidates.append(
            (
                int(largest + 4 * ub * layer_elems),
                f"op offload: one CPU expert tensor ~{largest / MiB:.2f} MiB copied to the GPU + the MoE live set",
            )
        )
    return max(candidates, default=(0, ""))


def host_compute_buffer_bytes(
    spec: ModelSpec, settings: Settings, consts: Mapping[str, float], *, pad: int = 256
) -> tuple[int, str]:
    """The ``CUDA_Host`` compute buffer (pinned host memory, not VRAM) of a CUDA run: the graph inputs the CPU
    backend fills and the scheduler uploads — the f32 token embeddings of one ubatch (token_embd stays on the
    CPU, ``get_rows`` runs there) and the f32 KQ masks (one per mask kind, ``n_kv × ubatch``), with FA on or off.
    0 on the CPU / Metal backend. docs/engines/llamacpp.md#llamacpp-compute-buffer."""
    if not settings.cuda:
        return 0, ""
    ub = min(settings.n_ctx, settings.n_ubatch)
    masks = attention_masks(spec, settings, pad)
    embd = consts["host_embd_factor"] * (spec.hidden_size or 0)
    size = int(4 * ub * (embd + consts["host_mask_factor"] * sum(masks)))
    return size, f"4 B × ubatch {ub} × (n_embd {embd:.0f} + f32 masks {sum(masks)}) elements per token"


def output_buffer_bytes(spec: ModelSpec, settings: Settings) -> int:
    """Host (pinned) logits buffer reserved at start-up: ``4 × n_vocab × n_seq_max`` (llama_context::output_reserve
    is called for n_seq_max outputs; measured: 0.49 MiB for V = 128 256 and one sequence). It grows on demand
    when a batch asks for more outputs."""
    return 4 * (spec.vocab_size or 0) * max(1, settings.n_seq_max)


# ---------------------------------------------------------------------------------------------------------
# Weights per device (llamacpp.md#llamacpp-weights)
# ---------------------------------------------------------------------------------------------------------


def _matches_override(name: str, settings: Settings) -> str | None:
    for pattern, buft in settings.override_tensor:
        if re.search(pattern, name):
            return buft
    return None


@dataclass(frozen=True)
class Placement:
    """Which device holds what: one entry per GPU plus the CPU side."""

    gpu_weights: tuple[int, ...]
    gpu_kv: tuple[int, ...]
    gpu_has_output: tuple[bool, ...]
    gpu_layers: tuple[int, ...]
    cpu_weights: int
    cpu_kv: int
    notes: tuple[str, ...] = ()


def _layer_weight_bytes(spec: ModelSpec) -> tuple[list[int], list[int], int, int]:
    """(non-expert bytes per block, expert bytes per block, token_embd bytes, output bytes).

    Uses ``spec.extra["gguf_block_bytes"]`` / ``["gguf_block_expert_bytes"]`` when the GGUF reader gives per-block
    sums; otherwise spreads the component sums evenly over the layers (MoE experts over the MoE layers)."""
    n_blocks = max(1, spec.num_layers)
    weights = spec.weights
    comps = dict(weights.bytes_by_component) if weights else {}
    embd = comps.get("embeddings", 0)
    output = comps.get("lm_head", 0)
    if not output and (spec.tie_word_embeddings or spec.tie_word_embeddings is None):
        output = embd  # llama.cpp duplicates token_embd as the output matrix (TENSOR_DUPLICATED) on the output device
    extra_blocks = spec.extra.get("gguf_block_bytes") if spec.extra else None
    extra_experts = spec.extra.get("gguf_block_expert_bytes") if spec.extra else None
    if isinstance(extra_blocks, (list, tuple)) and len(extra_blocks) == n_blocks:
        dense = [int(size) for size in extra_blocks]
        experts = (
            [int(size) for size in extra_experts]
            if isinstance(extra_experts, (list, tuple)) and len(extra_experts) == n_blocks
            else [0] * n_blocks
        )
        return dense, experts, embd, output
    total = weights.total_bytes if weights else 0
    expert_total = comps.get("experts", 0)
    rest = total - embd - comps.get("lm_head", 0) - expert_total - comps.get("vision", 0) - comps.get("mtp", 0)
    # a set, not a list: membership is tested once per layer (a list made this quadratic in the layer count)
    moe_layers = {index for index, layer in enumerate(spec.layers) if layer.moe} or set(range(n_blocks))
    dense = [rest // n_blocks] * n_blocks
    experts = (
        [expert_total // len(moe_layers) if index in moe_layers else 0 for index in range(n_blocks)]
        if expert_total
        else [0] * n_blocks
    )
    return dense, experts, embd, output


def packaged_row_padding() -> int:
    """``matrix_row_padding`` of the packaged llama.cpp.toml."""
    return int(load_engine_data(ENGINE)["defaults"]["matrix_row_padding"])


def cuda_row_padding_bytes(spec: ModelSpec, matrix_row_padding: int | None = None) -> int:
    """Bytes the CUDA buffer type adds per layer: every quantized matrix whose row length ``ne0`` is not a multiple
    of 512 gets the rest of one padded row (ggml-cuda.cu ``get_alloc_size``: ``row_size(type, 512 − ne0 % 512)``,
    once per tensor). Row lengths from the spec (hidden, attention width, FFN widths), bytes per element from the
    file's average bits per weight; 0 for unquantized files. A few KiB per layer at most."""
    bpw = spec.extra.get("bits_per_weight") if spec.extra else None
    if not isinstance(bpw, (int, float)) or bpw >= 16:
        return 0
    if matrix_row_padding is None:
        matrix_row_padding = packaged_row_padding()
    hidden = spec.hidden_size or 0
    heads = spec.num_attention_heads or 0
    head_dim = spec.head_dim or 0
    rows = [hidden] * 3 + [heads * head_dim]  # q, k, v take hidden-long rows; attn_output takes n_head·head_dim
    if spec.intermediate_size and not spec.num_experts:
        rows += [hidden, hidden, spec.intermediate_size]
    if spec.num_experts and spec.moe_intermediate_size:
        rows += [hidden, hidden, spec.moe_intermediate_size]
    missing = sum((matrix_row_padding - length % matrix_row_padding) % matrix_row_padding for length in rows if length)
    return int(missing * bpw / 8)


def _device_shares(count: int, tensor_split: Sequence[float], free: Sequence[int] = ()) -> list[float]:
    """Each device's share of the offloaded layers: ``tensor-split`` when given, else (llama.cpp's default) each
    device's free memory (``free``: one figure per device, for a mixed set; equal devices share equally)."""
    if tensor_split:
        split = list(tensor_split[:count]) + [0.0] * max(0, count - len(tensor_split))
    elif len(free) == count:
        split = [float(max(0, size)) for size in free]
    else:
        split = [1.0] * count
    total = sum(split) or 1.0
    return [share / total for share in split]


def place_layers(n_layer: int, n_offloaded: int, shares: Sequence[float]) -> list[int]:
    """Device index for each of the last ``n_offloaded`` of the ``n_layer + 1`` layers (−1 = CPU), split in
    proportion to ``shares`` as llama_model::load_tensors does (cumulative split points)."""
    start = n_layer + 1 - n_offloaded
    device = [-1] * (n_layer + 1)
    cumulative, acc = [], 0.0
    for share in shares:
        acc += share
        cumulative.append(acc)
    for il in range(start, n_layer + 1):
        position = (il - start) / max(1, n_offloaded)
        dev = next((index for index, edge in enumerate(cumulative) if position < edge - 1e-12), len(shares) - 1)
        device[il] = dev
    return device


def place(spec: ModelSpec, settings: Settings, kv: KvBytes, n_gpus: int, free: Sequence[int] = ()) -> Placement:
    """Weights and KV on each GPU and on the CPU (docs/engines/llamacpp.md#llamacpp-weights): token_embd stays on the CPU; the last
    ``n_gpu_layers`` of ``n_layer + 1`` layers (the output layer counts) go to the GPUs, split by layer in
    proportion to memory (``tensor-split`` when given); ``cpu-moe`` / ``n-cpu-moe`` / ``override-tensor=…=CPU``
    keep matching expert (or other) tensors on the CPU; KV follows its layer unless ``no-kv-offload``."""
    n_layer = spec.num_layers
    dense, experts, embd, output = _layer_weight_bytes(spec)
    row_padding = cuda_row_padding_bytes(spec, settings.matrix_row_padding)
    gpus = 1 if settings.split_mode == "none" else max(1, n_gpus)
    shares = _device_shares(gpus, settings.tensor_split, free)
    devices = place_layers(n_layer, min(settings.n_gpu_layers, n_layer + 1), shares)
    gpu_w, gpu_kv = [0] * gpus, [0] * gpus
    gpu_layers, has_output = [0] * gpus, [False] * gpus
    cpu_w, cpu_kv = embd, 0
    notes = []
    for il in range(n_layer):
        dev = devices[il]
        layer_dense, layer_experts = dense[il], experts[il]
        if layer_experts and (
            il < settings.cpu_moe_layers or _matches_override(f"blk.{il}.ffn_up_exps.weight", settings) == "CPU"
        ):
            cpu_w += layer_experts
            layer_experts = 0
        if layer_dense and _matches_override(f"blk.{il}.attn_q.weight", settings) == "CPU":
            cpu_w += layer_dense
            layer_dense = 0
        layer_kv = kv.per_layer[il] if il < len(kv.per_layer) else 0
        if dev < 0:
            cpu_w += layer_dense + layer_experts
            cpu_kv += layer_kv
            continue
        gpu_w[dev] += layer_dense + layer_experts + (row_padding if settings.cuda else 0)
        gpu_layers[dev] += 1
        if settings.kv_offload:
            gpu_kv[dev] += layer_kv
        else:
            cpu_kv += layer_kv
    out_dev = devices[n_layer]
    if out_dev >= 0:
        gpu_w[out_dev] += output
        gpu_layers[out_dev] += 1
        has_output[out_dev] = True
    else:
        cpu_w += output if spec.weights and spec.weights.bytes_by_component.get("lm_head") else 0
    if settings.split_mode == "row" and gpus > 1:
        # row split: matrices are cut across GPUs by tensor-split; KV and the compute buffer stay on the main GPU
        total_w = sum(gpu_w)
        gpu_w = [int(total_w * share) for share in shares]
        gpu_kv = [sum(gpu_kv)] + [0] * (gpus - 1)
        has_output = [True] + [False] * (gpus - 1)
        notes.append("split-mode row: weights cut by tensor-split, KV cache and compute buffer on the main GPU")
    return Placement(tuple(gpu_w), tuple(gpu_kv), tuple(has_output), tuple(gpu_layers), cpu_w, cpu_kv, tuple(notes))


# ---------------------------------------------------------------------------------------------------------
# The profile
# ---------------------------------------------------------------------------------------------------------


def rules_for(choice: EngineChoice, engine: str = ENGINE) -> tuple[str, dict[str, object], dict[str, float]]:
    version, rules = engine_rules(engine, choice.version)
    compute = dict(load_engine_data(ENGINE)["compute"])
    compute.update(load_engine_data(engine).get("compute", {}))
    return version, rules, compute


def is_metal(hardware: Hardware | None) -> bool:
    return hardware is not None and (hardware.gpu.unified_memory or hardware.gpu.vendor == "apple")


def overhead_bytes(hardware: Hardware | None, rules: Rules) -> tuple[int, str]:
    """CUDA / Metal context and backend pool per GPU (outside llama.cpp's logged buffers), and its explanation."""
    if is_metal(hardware):
        mib = float(rules["metal_overhead_mib"])
        return int(mib * MiB), f"Metal context {mib:g} MiB (constant, llama.cpp.toml metal_overhead_mib)"
    mib = float(rules["cuda_overhead_mib"])
    return (
        int(mib * MiB),
        f"CUDA context + backend memory pool {mib:g} MiB (constant, llama.cpp.toml cuda_overhead_mib; llama.cpp "
        "logs it only as 'unaccounted')",
    )


@dataclass(frozen=True)
class Breakdown:
    """All llama.cpp buffers of one configuration (bytes), worst GPU first."""

    settings: Settings
    kv: KvBytes
    placement: Placement
    gpu_compute: tuple[int, ...]
    compute_rule: str
    output_buffer: int
    overhead: int
    worst: int
    #: the CUDA_Host compute buffer (pinned host memory, not VRAM); 0 on the CPU / Metal backend
    host_compute: int = 0


def breakdown(
    spec: ModelSpec,
    hardware: Hardware | None,
    settings: Settings,
    rules: Rules,
    compute_consts: Mapping[str, float],
) -> Breakdown:
    pad = int(rules["n_ctx_pad"])
    if is_metal(hardware):
        settings = replace(settings, cuda=False)
    kv = kv_bytes(spec, settings, pad)
    n_gpus = hardware.count if hardware else 1
    overhead, _ = overhead_bytes(hardware, rules)
    placement = place(spec, settings, kv, n_gpus, free_memory(hardware, overhead))
    computes, rule = [], ""
    # the buffer depends only on (holds the output, is the first device): computed once per kind, not per device
    by_kind: dict[tuple[bool, bool], tuple[int, str]] = {}
    for dev, has_output in enumerate(placement.gpu_has_output):
        kind = (has_output or len(placement.gpu_has_output) == 1, dev == 0)
        if kind not in by_kind:
            by_kind[kind] = compute_buffer_bytes(
                spec, settings, compute_consts, with_output=kind[0], pad=pad, first_device=kind[1]
            )
        size, rule_dev = by_kind[kind]
        computes.append(size if placement.gpu_layers[dev] or dev == 0 else 0)
        rule = rule if rule and not has_output else rule_dev
    totals = [
        weights + kv_cache + buffer + overhead
        for weights, kv_cache, buffer in zip(placement.gpu_weights, placement.gpu_kv, computes)
    ]
    if hardware is not None and hardware.mixed and len(totals) == hardware.count:
        # devices of different sizes: the worst is the fullest against its own memory
        usable = [usable_bytes(hardware, settings, dev) for dev in range(len(totals))]
        worst = max(range(len(totals)), key=lambda index: totals[index] / max(1, usable[index]))
    else:
        worst = max(range(len(totals)), key=lambda index: totals[index])
    host_compute, _ = host_compute_buffer_bytes(spec, settings, compute_consts, pad=pad)
    return Breakdown(
        settings,
        kv,
        placement,
        tuple(computes),
        rule,
        output_buffer_bytes(spec, settings),
        overhead,
        worst,
        host_compute,
    )


def free_memory(hardware: Hardware | None, overhead: int) -> tuple[int, ...]:
    """A mixed set: each device's free memory when llama.cpp loads (its memory less the CUDA / Metal context), the
    default tensor split's proportions (docs/engines/llamacpp.md#llamacpp-mixed-sets); () for a uniform set."""
    if hardware is None or not hardware.mixed:
        return ()
    return tuple(max(0, gpu.gpu_memory_bytes - overhead) for gpu in hardware.gpus)


def device_memory(hardware: Hardware, device: int | None = None) -> int:
    """The memory of device ``device`` of a mixed set; of the set's GPU otherwise."""
    gpus = hardware.gpus
    if device is not None and hardware.mixed and 0 <= device < len(gpus):
        return gpus[device].gpu_memory_bytes
    return hardware.gpu.gpu_memory_bytes


def usable_bytes(hardware: Hardware, settings: Settings, device: int | None = None) -> int:
    """What llama.cpp lets itself use on one GPU: the device memory minus --fit's free-memory target (1 GiB by
    default), because with fit on a configuration that leaves less free makes llama.cpp shrink the context or
    move layers to the CPU — i.e. what was asked for does not load as asked (docs/methodology.md)."""
    memory = device_memory(hardware, device)
    return memory - settings.fit_target_bytes if settings.fit else memory


class LlamaCppProfile(ProfileBase):
    """llama-server / llama-cli on CUDA, ROCm, Metal or Vulkan (one process, layer split over GPUs)."""

    name = ENGINE
    data_name = ENGINE

    def settings_for(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> tuple[str, Settings, dict[str, object], dict[str, float]]:
        version, rules, compute = rules_for(choice, self.data_name)
        return version, resolve_settings(spec, choice, workload, rules), rules, compute

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        require_weights(spec)
        version, settings, rules, compute = self.settings_for(spec, hardware, choice, workload)
        return self.finish(spec, hardware, choice, workload, version, settings, rules, compute)

    def finish(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        version: str,
        settings: Settings,
        rules: Rules,
        compute: Mapping[str, float],
        extra_warnings: Sequence[str] = (),
        extra_explain: Mapping[str, str] | None = None,
    ) -> Estimate:
        """The estimate for resolved settings: the breakdown, its per-GPU terms, capacity and narration
        (``extra_*``: what a profile built on llama.cpp, such as Ollama, adds to the warnings and explanation)."""
        require_weights(spec)
        parts = breakdown(spec, hardware, settings, rules, compute)
        per_gpu = per_gpu_of(parts, hardware)
        warnings = [*extra_warnings, *narrate_warnings(spec, hardware, parts, per_gpu, rules)]
        explain = {**explain_lines(spec, hardware, parts, rules), **(extra_explain or {})}
        engine = {"name": self.name, "version": choice.version, "rules": version, **settings.as_dict()}
        kv_dtype = settings.type_k if settings.type_k == settings.type_v else f"{settings.type_k}/{settings.type_v}"
        result = finish_estimate(
            spec=spec,
            hardware=hardware,
            engine=engine,
            workload=replace(workload, context=settings.n_ctx_seq, kv_dtype=kv_dtype),
            per_gpu=per_gpu,
            capacity=self._capacity(spec, hardware, settings, rules, compute, settings.n_ctx_seq * settings.n_stream),
            decode=decode_bound(spec, hardware, parts),
            warnings=warnings,
            explain=explain,
            tp=1,
            pp=hardware.count if hardware and settings.split_mode == "layer" else 1,
        )
        return replace(result, worst_device=parts.worst) if hardware is not None and hardware.mixed else result

    def _capacity(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        settings: Settings,
        rules: Rules,
        compute: Mapping[str, float],
        kv_tokens: int,
    ) -> Capacity:
        """kv_tokens = cells the cache holds; max_context / max_concurrency by searching the whole breakdown (the
        compute buffer grows with n_kv without flash attention), in steps of the 256-cell padding."""
        if hardware is None:
            return Capacity(kv_tokens=kv_tokens)
        pad = int(rules["n_ctx_pad"])
        seqs_now = settings.n_stream if settings.n_stream > 1 else max(1, settings.n_ctx // max(1, settings.n_ctx_seq))
        per_seq_now = settings.n_ctx_seq if settings.n_stream > 1 else settings.n_ctx // seqs_now

        def fits(per_seq: int, seqs: int) -> bool:
            trial = with_context(settings, per_seq, seqs, pad)
            parts = breakdown(spec, hardware, trial, rules, compute)
            dev = parts.worst
            return parts.placement.gpu_weights[dev] + parts.placement.gpu_kv[dev] + parts.gpu_compute[
                dev
            ] + parts.overhead <= usable_bytes(hardware, trial, dev)

        limit = max(1, (spec.max_position_embeddings or per_seq_now) // pad)
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid * pad, seqs_now):
                lo = mid
            else:
                hi = mid - 1
        max_context = lo * pad
        max_conc = 0
        if fits(per_seq_now, 1):
            lo, hi = 1, 2
            while hi <= 65536 and fits(per_seq_now, hi):
                lo, hi = hi, hi * 2
            while lo < hi - 1:
                mid = (lo + hi) // 2
                if fits(per_seq_now, mid):
                    lo = mid
                else:
                    hi = mid
            max_conc = lo
        return Capacity(kv_tokens=kv_tokens, max_concurrency=float(max_conc), max_context=max_context)


def with_context(settings: Settings, per_seq: int, seqs: int, pad: int = 256) -> Settings:
    """The same settings holding ``seqs`` sequences of ``per_seq`` tokens: one unified cache of
    ``per_seq × seqs`` cells, or ``seqs`` streams of ``per_seq`` cells."""
    if settings.n_stream > 1 or (not settings.kv_unified and seqs > 1):
        cells = pad_cells(per_seq, pad)
        return replace(settings, n_ctx=cells * seqs, n_ctx_seq=cells, n_stream=seqs, n_seq_max=seqs)
    n_ctx = pad_cells(per_seq * seqs, pad)
    return replace(settings, n_ctx=n_ctx, n_ctx_seq=n_ctx, n_stream=1, n_seq_max=max(settings.n_seq_max, seqs))


def per_gpu_of(parts: Breakdown, hardware: Hardware | None) -> PerGpu:
    """The four terms on the worst GPU, against the device memory less --fit's target."""
    placement, dev = parts.placement, parts.worst
    return PerGpu(
        weights=placement.gpu_weights[dev],
        kv_cache=placement.gpu_kv[dev],
        activations=parts.gpu_compute[dev],
        overhead=parts.overhead,
        usable=usable_bytes(hardware, parts.settings, dev) if hardware else 0,
        memory=device_memory(hardware, dev) if hardware else 0,
    )


def decode_bound(spec: ModelSpec, hardware: Hardware | None, parts: Breakdown) -> float | None:
    """Bandwidth / (active weights on the GPUs + one sequence's KV at the context)."""
    settings, kv = parts.settings, parts.kv
    active = active_weight_bytes(spec) or 0
    context = settings.n_ctx_seq
    per_token_kv = kv.total / max(1, settings.n_stream) / max(1, settings.n_ctx_seq) * context if kv.total else 0
    return decode_tokens_per_second(active + per_token_kv, layer_split_bandwidth(hardware, parts))


def layer_split_bandwidth(hardware: Hardware | None, parts: Breakdown) -> float | None:
    """The bandwidth one token sees: the GPU's; on a mixed set split by layers the devices run one after the other,
    so each reads its own share of the bytes at its own speed (1 / Σ share_d / bandwidth_d)."""
    if hardware is None:
        return None
    if not hardware.mixed:
        return hardware.gpu.memory_bandwidth_gbs
    placed = [w + k for w, k in zip(parts.placement.gpu_weights, parts.placement.gpu_kv)]
    bandwidths = [gpu.memory_bandwidth_gbs for gpu in hardware.gpus[: len(placed)]]
    total = sum(placed)
    if total <= 0 or any(not bw for bw in bandwidths):
        return hardware.gpu.memory_bandwidth_gbs
    return 1 / sum(bytes_d / total / float(bw) for bytes_d, bw in zip(placed, bandwidths) if bw)


def narrate_warnings(
    spec: ModelSpec, hardware: Hardware | None, parts: Breakdown, per_gpu: PerGpu, rules: Rules
) -> list[str]:
    """What llama.cpp would do differently from what was asked, and what lands outside the GPUs."""
    settings, placement = parts.settings, parts.placement
    warnings = []
    if not spec.extra.get("gguf_arch") and not (spec.quantization and spec.quantization.method == "gguf"):
        warnings.append(
            "not a GGUF: weights counted as if converted to GGUF at the checkpoint's own dtype; a quantized GGUF "
            "(Q4_K_M ≈ 4.9 bits per weight) is much smaller"
        )
    token_embd = spec.weights.bytes_by_component.get("embeddings", 0) if spec.weights else 0
    if placement.cpu_weights > token_embd or placement.cpu_kv:
        host = placement.cpu_weights + placement.cpu_kv + parts.output_buffer
        warnings.append(
            f"CPU RAM needed besides the GPUs: {host / GiB:.2f} GiB "
            f"(weights {placement.cpu_weights / GiB:.2f} GiB incl. token embeddings, KV {placement.cpu_kv / GiB:.2f} GiB, "
            f"logits buffer {parts.output_buffer / MiB:.0f} MiB); mmap'd weights live in the page cache"
        )
    if settings.n_gpu_layers < spec.num_layers + 1:
        warnings.append(
            f"only {settings.n_gpu_layers} of {spec.num_layers + 1} layers on the GPU: the rest runs on the CPU (slow)"
        )
    if hardware is not None and settings.fit and per_gpu.total > per_gpu.usable:
        warnings.append(
            f"llama.cpp --fit would not load this as asked: it keeps {settings.fit_target_bytes // MiB} MiB free per GPU and "
            f"would first lower ctx-size (not below {rules['fit_ctx_min']}, only when ctx-size is not set) and then "
            "move layers / experts to the CPU"
        )
    if hardware is not None and hardware.count > 1 and settings.split_mode == "layer":
        warnings.append(
            "multi-GPU layer split: pipeline parallelism keeps up to 4 copies of split inputs in each compute buffer (not modelled)"
        )
    if hardware is not None and hardware.mixed:
        warnings.append(mixed_split_note(spec, hardware, parts))
    return [*warnings, *settings.notes, *placement.notes]


def layer_ranges(devices: Sequence[int], device: int) -> str:
    """``0-20`` / ``21-31 + output`` for the layers placed on ``device`` (the last index is the output layer)."""
    n_layer = len(devices) - 1
    runs: list[str] = []
    start = None
    for il in range(n_layer + 1):
        on = il < n_layer and devices[il] == device
        if on and start is None:
            start = il
        if not on and start is not None:
            runs.append(f"{start}-{il - 1}" if il - 1 > start else str(start))
            start = None
    if devices[n_layer] == device:
        runs.append("output")
    return " + ".join(runs) if runs else "none"


def mixed_split_note(spec: ModelSpec, hardware: Hardware, parts: Breakdown) -> str:
    """Which layers land where on a mixed set, and by what rule (llama.cpp's default tensor split: free memory)."""
    settings = parts.settings
    free = free_memory(hardware, parts.overhead)
    gpus = 1 if settings.split_mode == "none" else hardware.count
    shares = _device_shares(gpus, settings.tensor_split, free)
    devices = place_layers(spec.num_layers, min(settings.n_gpu_layers, spec.num_layers + 1), shares)
    rule = (
        f"tensor-split {','.join(f'{share:g}' for share in settings.tensor_split)}"
        if settings.tensor_split
        else "llama.cpp's default tensor split, in proportion to each GPU's free memory"
    )
    placed = "; ".join(
        f"GPU {dev} {gpu.id}: layers {layer_ranges(devices, dev)} "
        f"({parts.placement.gpu_layers[dev] if dev < len(parts.placement.gpu_layers) else 0} of {spec.num_layers}+1)"
        for dev, gpu in enumerate(hardware.gpus[:gpus])
    )
    return f"mixed set {hardware.label}, {rule}: {placed}"


def explain_lines(spec: ModelSpec, hardware: Hardware | None, parts: Breakdown, rules: Rules) -> dict[str, str]:
    """One line per term, from the breakdown's own figures."""
    settings, placement, kv, dev = parts.settings, parts.placement, parts.kv, parts.worst
    embd = spec.weights.bytes_by_component.get("embeddings", 0) if spec.weights else 0
    windowed = any(layer.kind in WINDOWED_KINDS for layer in spec.layers) and not settings.swa_full
    return {
        "weights": (
            f"GGUF tensor bytes of the {placement.gpu_layers[dev]} layers on this GPU (of {spec.num_layers}+1 incl. output); "
            f"token_embd {embd / MiB:.0f} MiB stays on the CPU; CPU holds {placement.cpu_weights / GiB:.2f} GiB"
        ),
        "kv_cache": (
            f"{settings.n_stream} stream(s) × {settings.n_ctx_seq} cells (ctx-size {settings.n_ctx}, padded to "
            f"{rules['n_ctx_pad']}), K {settings.type_k} {kv.k / MiB:.2f} MiB + V {settings.type_v} {kv.v / MiB:.2f} MiB"
            + (f" + recurrent state F32 {kv.state / MiB:.2f} MiB" if kv.state else "")
            + (" (windowed layers: n_swa + ubatch cells)" if windowed else "")
        ),
        "activations": (
            f"compute buffer {parts.gpu_compute[dev] / MiB:.2f} MiB = {parts.compute_rule}; "
            f"host: logits buffer {parts.output_buffer / MiB:.2f} MiB"
            + (f" + CUDA_Host compute buffer {parts.host_compute / MiB:.2f} MiB" if parts.host_compute else "")
            + " (not VRAM)"
        ),
        "overhead": overhead_bytes(hardware, rules)[1],
        "usable": (
            f"device memory − {settings.fit_target_bytes // MiB} MiB that --fit keeps free"
            if settings.fit
            else "device memory (--fit off)"
        ),
        "decode": "bandwidth-bound upper bound: active weights on the GPU + KV at the context, per token",
    }


PROFILE = LlamaCppProfile()
