"""llama.cpp's weights per device: GGUF bytes per block, the layer split over the GPUs (``-ngl``, ``tensor-split``,
``--cpu-moe``, ``-ot``), and each device's memory as llama.cpp sees it (context overhead, free memory, what --fit
lets it use); docs/engines/llamacpp.md#llamacpp-weights."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hfvram.engines.llamacpp.kv import KvBytes
from hfvram.engines.llamacpp.settings import LlamaCppConstants, Settings, override_target, packaged_row_padding
from hfvram.errors import UsageError
from hfvram.estimate.common import MiB
from hfvram.estimate.types import Hardware
from hfvram.spec import ModelSpec

# ---------------------------------------------------------------------------------------------------------
# Weights per device (llamacpp.md#llamacpp-weights)
# ---------------------------------------------------------------------------------------------------------


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


def layer_weight_bytes(spec: ModelSpec) -> tuple[list[int], list[int], int, int]:
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


def device_shares(count: int, tensor_split: Sequence[float], free: Sequence[int] = ()) -> list[float]:
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


def _target(name: str, settings: Settings, gpus: int) -> int | None:
    """Where ``-ot`` sends tensor ``name``: −1 host memory, a GPU index, None when no pattern matches; a GPU the set
    does not have is an error, as llama.cpp's "unknown buffer type" (docs/engines/llamacpp.md#llamacpp-override-devices)."""
    target = override_target(name, settings)
    if target is not None and target >= gpus:
        raise UsageError(f"override-tensor sends {name} to GPU {target}, but the set has {gpus} GPU(s)")
    return target


def place(spec: ModelSpec, settings: Settings, kv: KvBytes, n_gpus: int, free: Sequence[int] = ()) -> Placement:
    """Weights and KV on each GPU and on the CPU (docs/engines/llamacpp.md#llamacpp-weights): token_embd stays on the
    CPU; the last ``n_gpu_layers`` of ``n_layer + 1`` layers (the output layer counts) go to the GPUs, split by layer
    in proportion to memory (``tensor-split`` when given; ``--split-mode none``: all on ``--main-gpu``);
    ``cpu-moe`` / ``n-cpu-moe`` keep the first layers' experts on the CPU and ``override-tensor=…=DEVICE`` sends
    matching expert (or other) tensors to the CPU or to any GPU (#llamacpp-override-devices); KV follows its layer
    unless ``no-kv-offload``; ``--split-mode row`` then spreads the dense matrices by rows (#llamacpp-split-modes)."""
    n_layer = spec.num_layers
    dense, experts, embd, output = layer_weight_bytes(spec)
    row_padding = cuda_row_padding_bytes(spec, settings.matrix_row_padding) if settings.cuda else 0
    gpus = max(1, n_gpus)
    if settings.split_mode == "none":
        if settings.main_gpu >= gpus:
            raise UsageError(f"main-gpu={settings.main_gpu}, but the set has {gpus} GPU(s)")
        # --split-mode none: the model's one device is --main-gpu (llama_model_load_from_file_impl)
        shares = [1.0 if dev == settings.main_gpu else 0.0 for dev in range(gpus)]
    else:
        shares = device_shares(gpus, settings.tensor_split, free)
    devices = place_layers(n_layer, min(settings.n_gpu_layers, n_layer + 1), shares)
    gpu_w, gpu_kv, gpu_dense = [0] * gpus, [0] * gpus, [0] * gpus
    gpu_layers, has_output = [0] * gpus, [False] * gpus
    cpu = [embd, 0]  # weights, KV
    for il in range(n_layer):
        dev = devices[il]
        layer_kv = kv.per_layer[il] if il < len(kv.per_layer) else 0
        expert_to = -1 if experts[il] and il < settings.cpu_moe_layers else None
        if expert_to is None and experts[il]:
            expert_to = _target(f"blk.{il}.ffn_up_exps.weight", settings, gpus)
        dense_to = _target(f"blk.{il}.attn_q.weight", settings, gpus) if dense[il] else None
        for size, to, row_split in ((experts[il], expert_to, False), (dense[il], dense_to, dense_to is None)):
            where = dev if to is None else to
            if where < 0:
                cpu[0] += size
            elif row_split:
                gpu_dense[where] += size
            else:
                gpu_w[where] += size
        if dev < 0:
            cpu[1] += layer_kv
            continue
        gpu_w[dev] += row_padding
        gpu_layers[dev] += 1
        if settings.kv_offload:
            gpu_kv[dev] += layer_kv
        else:
            cpu[1] += layer_kv
    out_dev = devices[n_layer]
    if out_dev >= 0:
        gpu_w[out_dev] += output
        gpu_layers[out_dev] += 1
        has_output[out_dev] = True
    elif spec.weights and spec.weights.bytes_by_component.get("lm_head"):
        cpu[0] += output
    notes: tuple[str, ...] = ()
    if settings.split_mode == "row" and gpus > 1:
        gpu_dense, has_output, notes = _row_split(gpu_dense, shares)
    gpu_w = [w + d for w, d in zip(gpu_w, gpu_dense)]
    return Placement(tuple(gpu_w), tuple(gpu_kv), tuple(has_output), tuple(gpu_layers), cpu[0], cpu[1], notes)


def _row_split(gpu_dense: Sequence[int], shares: Sequence[float]) -> tuple[list[int], list[bool], tuple[str, ...]]:
    """``--split-mode row`` (docs/engines/llamacpp.md#llamacpp-split-modes): the layers keep their devices (their
    KV and expert tensors with them), but every 2-D matrix of the GPU layers sits in a split buffer, cut by rows in
    proportion to ``tensor-split``, and every GPU runs its rows of every layer, so each holds the whole compute
    buffer."""
    total = sum(gpu_dense)
    split = [int(total * share) for share in shares]
    note = "split-mode row: dense matrices cut by rows over the GPUs by tensor-split; every GPU holds the full compute buffer"
    return split, [True] * len(shares), (note,)


# ---------------------------------------------------------------------------------------------------------
# Device memory
# ---------------------------------------------------------------------------------------------------------


def is_metal(hardware: Hardware | None) -> bool:
    return hardware is not None and (hardware.gpu.unified_memory or hardware.gpu.vendor == "apple")


def overhead_bytes(hardware: Hardware | None, constants: LlamaCppConstants) -> tuple[int, str]:
    """CUDA / Metal context and backend pool per GPU (outside llama.cpp's logged buffers), and its explanation."""
    if is_metal(hardware):
        mib = float(constants.metal_overhead_mib)
        return int(mib * MiB), f"Metal context {mib:g} MiB (constant, llama.cpp.toml metal_overhead_mib)"
    mib = float(constants.cuda_overhead_mib)
    return (
        int(mib * MiB),
        f"CUDA context + backend memory pool {mib:g} MiB (constant, llama.cpp.toml cuda_overhead_mib; llama.cpp "
        "logs it only as 'unaccounted')",
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
    move layers to the CPU — i.e. what was asked for does not load as asked (docs/methodology.md). Not when --fit
    does not run: with a placement the user set (or ``--split-mode row`` on several GPUs) and a context the user
    set, --fit aborts before it changes anything and llama.cpp loads as asked, up to the whole device
    (docs/engines/llamacpp.md#llamacpp-user-placement)."""
    memory = device_memory(hardware, device)
    return memory - settings.fit_target_bytes if fit_keeps_margin(settings, hardware.count) else memory


def fit_keeps_margin(settings: Settings, n_gpus: int) -> bool:
    """Whether --fit's free-memory target binds (docs/engines/llamacpp.md#llamacpp-user-placement): --fit on, and
    either it may place the weights itself or the context is unset (its context step runs before it aborts)."""
    several = n_gpus > 1 and (settings.split_mode == "row" or bool(settings.tensor_split))
    user_placed = settings.user_placement or several
    return settings.fit and (settings.ctx_auto or not user_placed)
