"""llama.cpp's compute buffers: the backend compute buffer of the worst-case graph (a measured model), the
``CUDA_Host`` buffer and the host logits buffer (docs/engines/llamacpp.md#llamacpp-compute-buffer,
#llamacpp-output-buffer)."""

from __future__ import annotations

from collections.abc import Mapping

from hfvram.engines.llamacpp.kv import layer_cells, layer_kv_row_elems
from hfvram.engines.llamacpp.placement import layer_weight_bytes
from hfvram.engines.llamacpp.settings import Settings, matches_override
from hfvram.estimate.common import MiB
from hfvram.spec import RECURRENT_KINDS, WINDOWED_KINDS, LayerKind, ModelSpec

#: KV cache types flash attention reads as they are (no F16 copy)
UNQUANTIZED = ("f16", "bf16", "f32")

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
        live, rule = _fa_on_live(spec, settings, consts, pad, logits, layer, recurrent, views)
    else:
        n_kv = max(views, default=0)
        if settings.cuda:
            # CUDA: next to the f32 KQ scores and the mask copy, the residual and the normed input (n_embd each) and Q
            # before and after RoPE (n_head × head_dim each) — exact on seven published CUDA logs (docs/accuracy.md)
            n_q = n_head * (spec.head_dim or (n_embd // n_head if n_head else 0))
            residue = consts["fa_off_cuda_embd_factor"] * n_embd + consts["fa_off_cuda_q_factor"] * n_q
        else:
            residue = consts["fa_off_embd_factor"] * n_embd
        scores = n_kv * n_head + consts["mask_fa_off"] * sum(views) * max(1, settings.sched_copies) + residue + extra
        live = max(logits, layer, scores, recurrent)
        rule = f"FA off: max(logits {logits:.0f}, layer {layer:.0f}, KQ {scores:.0f})"
    size = int(4 * ub * live)
    rule = f"4 B × ubatch {ub} × {rule} elements per token"
    copy, copy_rule = offload_copy_bytes(spec, settings, consts, ub, layer) if first_device else (0, "")
    if copy > size:
        return copy, copy_rule
    return size, rule


def _fa_on_live(
    spec: ModelSpec,
    settings: Settings,
    consts: Mapping[str, float],
    pad: int,
    logits: float,
    layer: float,
    recurrent: float,
    views: list[int],
) -> tuple[float, str]:
    """f32 elements per ubatch token at the peak with flash attention, and the rule: the f16 masks next to the
    layer's live set (every scheduler copy pinned with pipeline parallelism, docs/engines/llamacpp.md#llamacpp-pipeline-parallel)
    and, for a quantized cache on CUDA, F16 copies of the largest layer's K / V views (#llamacpp-kv-dequant-scratch)."""
    ub = min(settings.n_ctx, settings.n_ubatch)
    scratch = kv_dequant_scratch_bytes(spec, settings, pad) / (4 * ub)
    masks = consts["mask_fa_on"] * sum(views)
    if settings.sched_copies > 1:
        live = max(logits, layer + scratch, recurrent) + settings.sched_copies * masks
    else:
        live = max(logits, layer + masks + scratch, recurrent)
    rule = f"FA on: max(logits {logits:.0f}, layer {layer:.0f} + f16 masks {masks:.0f}"
    rule += f" + F16 dequant scratch {scratch:.0f})" if scratch else ")"
    rule += f", masks × {settings.sched_copies} scheduler copies" if settings.sched_copies > 1 else ""
    return live, rule


def kv_dequant_scratch_bytes(spec: ModelSpec, settings: Settings, pad: int = 256) -> int:
    """F16 copies of a quantized K / V cache that CUDA flash attention reserves in its output tensor
    (docs/engines/llamacpp.md#llamacpp-kv-dequant-scratch): ``2 B × elements`` of the K view when K is quantized,
    of the V view when V is, for the layer whose views are largest (the views span every allocated cell of every
    stream). 0 off CUDA, without flash attention, with an F16 / BF16 / F32 cache, or before the build that adds it."""
    if not (settings.cuda and settings.flash_attn and settings.kv_dequant_scratch):
        return 0
    quant_k, quant_v = settings.type_k not in UNQUANTIZED, settings.type_v not in UNQUANTIZED
    if not (quant_k or quant_v):
        return 0
    largest = 0
    for layer in spec.layers:
        k_elems, v_elems = layer_kv_row_elems(layer)
        cells = layer_cells(layer, settings, pad) * settings.n_stream
        largest = max(largest, cells * (k_elems * quant_k + v_elems * quant_v))
    return 2 * largest


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
    _, experts, _, output = layer_weight_bytes(spec)
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
        and (il < settings.cpu_moe_layers or matches_override(f"blk.{il}.ffn_up_exps.weight", settings) == "CPU")
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
