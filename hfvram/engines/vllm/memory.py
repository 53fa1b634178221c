"""The per-GPU memory terms of the breakdown, arithmetic only: the weights ("Model loading took",
docs/engines/vllm.md#vllm-weights), the activation peak of ``profile_run`` (docs/engines/vllm.md#vllm-activations),
non-torch memory (docs/engines/vllm.md#vllm-non-torch) and CUDA graphs (docs/engines/vllm.md#vllm-cuda-graphs)."""

from __future__ import annotations

from collections.abc import Sequence

from hfvram.engines.vllm import features
from hfvram.engines.vllm.constants import VllmConstants
from hfvram.engines.vllm.kv import _cdiv
from hfvram.engines.vllm.settings import Settings
from hfvram.engines.vllm.terms import ActivationTerm, WeightsTerm
from hfvram.estimate import common, multimodal
from hfvram.estimate.common import GiB, Rules
from hfvram.estimate.types import Hardware
from hfvram.spec import RECURRENT_KINDS, LayerKind, ModelSpec


def weights_per_gpu(spec: ModelSpec, settings: Settings, constants: VllmConstants) -> WeightsTerm:
    """ "Model loading took X GiB" on the worst rank (vllm.md#vllm-weights): TP/PP split, vocab padding, MXFP4 padding,
    float32 checkpoints loaded as bfloat16, the encoder tower and rotary cache (vllm.md#vllm-multimodal), minus
    ``cpu-offload-gb``."""
    scale: dict[str, float] = {}
    notes = []
    quant = (spec.quantization.method if spec.quantization else "").lower()
    if quant == "mxfp4" and spec.hidden_size and spec.moe_intermediate_size:
        # the kernels pad intermediate_size_per_partition, the TP shard (vllm.md#vllm-weights)
        hidden, inter, tp = spec.hidden_size, spec.moe_intermediate_size, settings.tensor_parallel_size
        shard = _cdiv(inter, tp)
        padded = common.pad_to_multiple(hidden, constants.mxfp4_round_hidden) * common.pad_to_multiple(
            shard, constants.mxfp4_round_intermediate
        )
        scale["experts"] = padded * tp / (hidden * inter)
        shape = f"{hidden}×{shard} per TP shard" if tp > 1 else f"{hidden}×{inter}"
        notes.append(f"MXFP4 experts padded {shape} → kernel sizes (×{scale['experts']:.3f})")
    if (
        spec.weights is not None
        and spec.weights.bytes_by_component.get("mtp")
        and "mtp" not in (settings.speculative_method or "")
    ):
        # the main model's load_weights skips the MTP layers (get_spec_layer_idx_from_weight_name); only an MTP draft
        # (--speculative-config method *mtp) loads them (vllm.md#vllm-weights)
        scale["mtp"] = 0.0
        notes.append(
            f"{spec.num_mtp_layers or 'the'} multi-token-prediction layer(s) of the checkpoint "
            f"({spec.weights.bytes_by_component['mtp'] / GiB:.2f} GiB) not loaded: vLLM loads them only as an MTP draft"
        )
    stored = spec.dtype_bytes()
    if spec.quantization is None and spec.weights is not None and stored != settings.dtype_bytes:
        for component in {*spec.weights.bytes_by_component, "other"}:
            scale[component] = scale.get(component, 1.0) * settings.dtype_bytes / stored
        notes.append(f"{spec.dtype or 'bfloat16'} checkpoint loaded as {settings.dtype}")
    if settings.online_quantization == "fp8" and spec.weights is not None:
        # online FP8: every Linear of the layers stored in one byte; embeddings, lm_head and norms keep the dtype
        for component in ("attention", "mlp", "experts", "mtp"):
            scale[component] = scale.get(component, 1.0) / settings.dtype_bytes
        notes.append("--quantization fp8: linear layers quantized to 1 byte per weight at load time")
    replicated = common.mla_replicated_bytes(spec, settings.tensor_parallel_size, scale.get("attention", 1.0))
    kept: dict[str, float] = {"attention": replicated} if replicated else {}
    notes.extend(multimodal.place_tower(spec, settings.tensor_parallel_size, settings.multimodal, scale, kept))
    split = common.weights_per_rank(
        spec,
        settings.tensor_parallel_size,
        settings.pipeline_parallel_size,
        constants.vocab_padding,
        scale,
        replicated=kept or None,
    )
    if replicated:
        notes.append(
            f"the attention kept whole is MLA's fused_qkv_a_proj / kv_a_proj_with_mqa (not split by vLLM): "
            f"+{replicated * (1 - 1 / settings.tensor_parallel_size) / GiB:.2f} GiB per GPU over an even split"
        )
    return feature_weights(spec, settings, constants, split, notes)


def feature_weights(
    spec: ModelSpec, settings: Settings, constants: VllmConstants, split: common.WeightsSplit, earlier: Sequence[str]
) -> WeightsTerm:
    """The split weights less ``--cpu-offload-gb`` (decoder-layer parameters only) plus the LoRA slots allocated
    while the model loads (docs/engines/vllm.md#vllm-features); its notes follow the ``earlier`` ones."""
    notes = list(earlier)
    rope, rope_note = multimodal.rope_cache(spec, settings.dtype_bytes)
    if rope_note:
        notes.append(rope_note)
    weights = split.bytes + rope
    if settings.cpu_offload_gb:
        moved, movable = features.offloaded_bytes(
            split.by_component, settings.pipeline_parallel_size, settings.cpu_offload_gb
        )
        weights -= moved
        short = moved < settings.cpu_offload_gb * GiB
        notes.append(
            f"cpu-offload-gb {settings.cpu_offload_gb}: {moved / GiB:.2f} GiB of decoder-layer parameters moved to "
            "host memory" + (f" (all {movable / GiB:.2f} GiB the layers hold)" if short else "")
        )
    lora = None
    if settings.lora is not None:
        layers = common.worst_stage_layers(spec, settings.pipeline_parallel_size)
        lora = features.lora_term(
            spec, settings.lora, settings.tensor_parallel_size, layers, settings.max_num_batched_tokens, constants
        )
        weights += lora.bytes
        notes.append(f"+{lora.bytes / GiB:.3f} GiB LoRA slots (--enable-lora)")
    return WeightsTerm(bytes=weights, split_explain=split.explain, notes=tuple(notes), lora=lora)


def activation_peak(
    spec: ModelSpec, settings: Settings, constants: VllmConstants, lora: features.LoraTerm | None = None
) -> ActivationTerm:
    """Torch peak during ``profile_run`` (vllm.md#vllm-activations), the same on every rank:

    max(sampler, forward) + fused-MoE workspace, where
    sampler = sampler_bytes_per_logit × min(max_num_seqs, max_num_batched_tokens) × vocab (logits gathered
    on every rank), forward = max_num_batched_tokens × (forward_bytes_per_ffn × ffn per rank +
    forward_bytes_per_hidden × hidden) (ffn: one expert's width for a MoE), workspace =
    max_num_batched_tokens × experts_per_token × (2 × moe_ffn per rank + hidden) × moe_workspace_bytes_per_elem."""
    tp = settings.tensor_parallel_size
    batched = settings.max_num_batched_tokens
    seqs = min(settings.max_num_seqs, batched)
    vocab = spec.vocab_size or 0
    hidden = spec.hidden_size or 0
    per_logit = float(constants.sampler_bytes_per_logit)
    experts_per_token = spec.experts_per_token or 0
    is_moe = bool(spec.num_experts and spec.num_experts > 1 and experts_per_token)
    moe_ffn = spec.moe_intermediate_size or spec.intermediate_size or 0
    ffn = moe_ffn if is_moe else (spec.intermediate_size or 4 * hidden)
    forward = batched * (
        float(constants.forward_bytes_per_ffn) * ffn / tp + float(constants.forward_bytes_per_hidden) * hidden
    )
    workspace = 0.0
    quant = (spec.quantization.method if spec.quantization else "").lower()
    if is_moe and quant not in constants.moe_workspace_exempt_quantizations:
        per_elem = float(constants.moe_workspace_bytes_per_elem)
        workspace = batched * experts_per_token * (2 * moe_ffn / tp + hidden) * per_elem
    tower = multimodal.tower_placement(spec, "vllm", tp, settings.multimodal)
    encoder = multimodal.encoder_cache_bytes(spec, batched, settings.dtype_bytes) if tower.profiled else 0
    return ActivationTerm(
        sampler_bytes_per_logit=per_logit,
        sampler_rows=seqs,
        vocab=vocab,
        forward_tokens=batched,
        sampler=per_logit * seqs * vocab,
        forward=forward,
        workspace=workspace,
        encoder_cache=encoder,
        lora=float(lora.activation) if lora else 0.0,
    )


def non_torch_row(settings: Settings, hardware: Hardware | None, rows: Sequence[Rules]) -> Rules | None:
    """The first ``[[non_torch]]`` row of vllm.toml for this engine generation, parallelism, release and GPU
    (docs/engines/vllm.md#vllm-non-torch); None when no row matches."""
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    parallel = "tp" if tp >= 2 else ("pp" if pp >= 2 else "tp1")
    gpu = f"{hardware.gpu.id} {hardware.gpu.name}".lower() if hardware is not None else ""
    asked = common.version_key(settings.requested_version) if settings.requested_version else None
    for row in rows:
        if row.get("engine", "v1") != settings.engine_generation or row.get("parallel", parallel) != parallel:
            continue
        since, until = row.get("since"), row.get("until")
        if since and asked is not None and asked < common.version_key(str(since)):
            continue
        if until and (asked is None or asked[: len(common.version_key(str(until)))] > common.version_key(str(until))):
            continue
        names = [str(name).lower() for name in row.get("gpus", ())]
        if names and not any(name in gpu for name in names):
            continue
        return row
    return None


def non_torch_bytes(settings: Settings, hardware: Hardware | None, rows: Sequence[Rules]) -> tuple[int, Rules | None]:
    """Non-torch memory that grows during the first forward, inside the budget, and the table row it came from
    (the ``[[non_torch]]`` ``rows``, docs/engines/vllm.md#vllm-non-torch); 0 when no row matches."""
    row = non_torch_row(settings, hardware, rows)
    return (int(float(row["gib"]) * GiB), row) if row else (0, None)


def capture_sizes(settings: Settings, constants: VllmConstants, architecture: str | None = None) -> list[int]:
    """The decode batch sizes vLLM captures graphs for (``VllmConfig._set_cudagraph_sizes``; none eager): up to
    min(max_num_seqs x decode_query_len x 2, 512, max_num_batched_tokens), on the default grid of
    ``cudagraph_size_steps`` ([1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)); GPT-OSS raises the 512."""
    if settings.enforce_eager:
        return []
    speculative = settings.speculative
    query_len = 1 + (speculative.num_speculative_tokens or 0 if speculative else 0)
    cap = dict(constants.cudagraph_max_capture_size_by_architecture).get(architecture or "")
    largest = min(settings.max_num_seqs * query_len * 2, int(cap or constants.cudagraph_max_capture_size))
    largest = max(1, min(settings.max_num_batched_tokens, largest))
    sizes: list[int] = []
    for start, stop, step in constants.cudagraph_size_steps:
        sizes.extend(range(int(start), min(int(stop), largest) + 1, int(step)))
    return sizes


def cudagraph_bytes(spec: ModelSpec, settings: Settings, constants: VllmConstants) -> int:
    """CUDA-graph memory per GPU (docs/engines/vllm.md#vllm-cuda-graphs); 0 eager.

    Bytes per (decoder layer x capture size): the graphs of every size are extrapolated from two captures, so
    the figure follows ``max_num_seqs`` (7 sizes at 16 sequences, 51 at the defaults). Layers are the token
    mixers (Nemotron-H lists its MLPs as blocks of their own: counting them would charge each mixer+MLP pair
    twice), divided over the pipeline stages. From v0.26 a hybrid linear-attention model is charged the profile's
    transient as well (``cudagraph_hybrid_transient``, scaled from article 003 by layers x hidden)."""
    if settings.cudagraph_flat_gib is not None:  # the V0 engine: a flat reserve (docs/engines/vllm.md#vllm-v0)
        return 0 if settings.enforce_eager else int(float(settings.cudagraph_flat_gib) * GiB)
    sizes = capture_sizes(settings, constants, spec.architecture)
    if not sizes:
        return 0
    mixers = sum(1 for layer in spec.layers if layer.kind is not LayerKind.NONE) or len(spec.layers)
    layers = mixers / settings.pipeline_parallel_size
    moe = bool(spec.num_experts and spec.num_experts > 1)
    per = float(constants.cudagraph_moe_bytes_per_layer_size if moe else constants.cudagraph_bytes_per_layer_size)
    graphs = per * layers * len(sizes)
    hybrid = not RECURRENT_KINDS.isdisjoint(common.layer_summary(spec.layers).kinds)
    if hybrid and constants.cudagraph_hybrid_transient and spec.hidden_size:
        transient = float(constants.cudagraph_hybrid_bytes_per_layer_hidden) * layers * spec.hidden_size
        graphs = max(graphs, transient, float(constants.cudagraph_hybrid_min_gib) * GiB)
    return int(graphs)
