"""Mixed GPU sets (``--gpu rtx4090+rtx3090``): what each engine does with cards of different sizes
(``mixed_set`` of each hfvram/engines/<engine>/engine.toml). llama.cpp and Ollama split whole layers by each device's free memory (the profile
places them, ``hfvram.engines.llamacpp.profile``); engines that shard tensors equally are held to the smallest
card, said in a warning; engines that run on one device refuse the set."""

from __future__ import annotations

from hfvram.estimate.types import Hardware

GIB = 1 << 30

LAYER_SPLIT = "layer_split"
EQUAL_SHARDS = "equal_shards"
EVEN_SPLIT = "even_split"
ONE_GPU = "one_gpu"


def mixed_rule(engine: str) -> str:
    """How ``engine`` runs on a mixed set (one of the four rules above; hfvram/engines/identity.py says each)."""
    from hfvram.engines import registry

    entry = registry().get(engine)
    return entry.mixed_set if entry else EVEN_SPLIT


def compact_label(gpus: tuple[object, ...] | list[object]) -> str:
    """``rtx4090+rtx3060x2`` for the devices rtx4090, rtx3060, rtx3060 (runs of one card counted)."""
    parts: list[str] = []
    run_id, run = None, 0
    for gpu in gpus:
        gpu_id = getattr(gpu, "id", str(gpu))
        if gpu_id == run_id:
            run += 1
            continue
        if run_id is not None:
            parts.append(run_id if run == 1 else f"{run_id}x{run}")
        run_id, run = gpu_id, 1
    if run_id is not None:
        parts.append(run_id if run == 1 else f"{run_id}x{run}")
    return "+".join(parts)


def mixed_refusal(engine: str, hardware: Hardware | None) -> str | None:
    """An engine that runs on one device refuses a mixed set."""
    if hardware is None or not hardware.mixed or mixed_rule(engine) != ONE_GPU:
        return None
    return f"{engine} runs on one device: it does not take the mixed set {hardware.label}"


def mixed_notes(engine: str, hardware: Hardware | None) -> list[str]:
    """The warning that says who sets the budget on a mixed set."""
    if hardware is None or not hardware.mixed:
        return []
    rule = mixed_rule(engine)
    smallest = hardware.gpu
    unused = sum(gpu.gpu_memory_bytes - smallest.gpu_memory_bytes for gpu in hardware.gpus)
    if rule == EQUAL_SHARDS:
        return [
            f"mixed set {hardware.label}: {engine} shards weights and KV cache equally over the {hardware.count} GPUs, "
            f"so the smallest card ({smallest.id}, {smallest.gpu_memory_bytes / GIB:.2f} GiB) sets the budget of "
            f"every GPU ({unused / GIB:.2f} GiB of the larger cards stay unused) and the slowest sets the speed"
        ]
    if rule == EVEN_SPLIT:
        return [
            f"mixed set {hardware.label}: counted as an even split over the {hardware.count} GPUs (the smallest card, "
            f"{smallest.id}, sets the budget); {engine}'s own split by memory (a per-GPU split setting) is not modelled"
        ]
    return []
