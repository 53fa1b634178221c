"""A repo answered from the Hub listing's per-dtype parameter counts alone (``safetensors.parameters``): when
the checkpoint's weights outweigh every GPU of the set together, an engine that holds every weight on its GPUs
(``[weights_on_gpu]`` in its engine.toml) cannot start it, whatever the rest of the model is. Pure: counts and
hardware in, a :class:`ListedVerdict` or None out."""

from __future__ import annotations

from collections.abc import Mapping

from hfvram.estimate.types import Hardware, ListedVerdict
from hfvram.readers.tensors import dtype_bits

#: where the weights figure of such a row comes from (``explain.provenance``)
LISTING_PROVENANCE = "Hub listing: safetensors.parameters"
#: dtypes counted at no more than 16 bits: an engine may load a 32-bit float checkpoint in 16 bits (vLLM's
#: ``--dtype auto`` takes FP16 for an FP32 model), so only that much is sure to be on the GPUs
CAST_TO_16_BITS = frozenset({"F32"})
#: dtypes not counted: 64-bit tensors of a checkpoint are buffers (position ids) rather than weights an engine loads
NOT_COUNTED = frozenset({"F64", "I64", "U64", "C64"})


def listed_weights_bytes(parameters: Mapping[str, int]) -> int | None:
    """Bytes the counts need on the GPUs at least: Σ count × the dtype's size (hfvram/data/dtypes.toml), 32-bit
    floats at 16 bits, 64-bit buffers left out (see above); None when a dtype is unknown."""
    bits_total = 0
    for dtype, count in parameters.items():
        bits = dtype_bits(dtype)
        if bits is None or isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return None
        if dtype in NOT_COUNTED:
            continue
        bits_total += count * (min(bits, 16) if dtype in CAST_TO_16_BITS else bits)
    return bits_total // 8  # rounded down: never more than the tensors hold


def listed_verdict(parameters: Mapping[str, int], hardware: Hardware) -> ListedVerdict | None:
    """The verdict does not fit when the weights the counts give outweigh the set's whole GPU memory (more than any
    engine's usable memory, so no offload the engine does not make and no setting of its budget changes it);
    None when they do not, or when the counts do not say."""
    weights = listed_weights_bytes(parameters)
    memory = hardware.total_gpu_memory_bytes
    if weights is None or weights <= memory:
        return None
    count = len(hardware.gpus)
    least = min(gpu.gpu_memory_bytes for gpu in hardware.gpus)
    return ListedVerdict(weights, memory, -(-weights // count), least, count)
