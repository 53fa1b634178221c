"""llama.cpp's launch line: ``llama-server -m <the .gguf> -c N -ngl L`` with the cache types, slots and the user's own
placement flags (docs/engines/launch.md#launch-llamacpp). The offload plan's own command (``offload_plan.command``)
is the placement ``--fit`` would make when the model does not fit as asked; this line is the setting judged."""

from __future__ import annotations

from hfvram.estimate.launch import Launch, ModelRef, carried, join, number
from hfvram.estimate.types import VERDICT_OFFLOAD, EngineChoice, Estimate

#: settings hfvram reads that are not llama.cpp flags (the binary, its build, the outputs era)
NOT_FLAGS = ("binary", "build", "reserve-outputs", "n-outputs-max", "num-ctx", "n-ctx", "n-parallel")
#: the short spellings hfvram reads for the flags this writer writes itself
WRITTEN = (
    "ctx-size",
    "c",
    "n-gpu-layers",
    "ngl",
    "gpu-layers",
    "parallel",
    "np",
    "cache-type-k",
    "ctk",
    "cache-type-v",
    "ctv",
    "model",
    "m",
    "hf-repo",
    "hf",
)

ENGINE = "llama.cpp"


def model_words(ref: ModelRef) -> list[str]:
    """``-m PATH`` for a local file, ``-hf repo[:QUANT]`` for a GGUF on the Hub (llama.cpp downloads it)."""
    if ref.what_if:  # a --quant what-if: the file llama-quantize would write
        return ["-m", f"{ref.name.rstrip('/').split('/')[-1]}-{ref.what_if}.gguf"]
    if ref.hub and ref.repo_id:
        return ["-hf", ref.repo_id + (f":{ref.quant}" if ref.quant else "")]
    return ["-m", ref.name]


def launch(est: Estimate, choice: EngineChoice, ref: ModelRef) -> Launch:
    engine = est.engine
    binary = str(engine.get("binary") or "llama-server")
    words = [binary, *model_words(ref), "-c", number(engine.get("ctx-size"))]
    # an answer of llama.cpp's --fit (on by default): the line leaves the placement to it, as the check did; an
    # explicit -ngl would make --fit stand down and load every layer on the GPU
    # (docs/engines/llamacpp.md#llamacpp-offload-verdict)
    fit_placed = est.verdict == VERDICT_OFFLOAD and est.offload is not None and est.offload.planner == "llama.cpp"
    notes: tuple[str, ...] = ()
    if fit_placed:
        notes = ("no -ngl / -ot: llama.cpp's --fit (on by default) places the layers and experts as the plan shows",)
    elif any(name.replace("_", "-") in ("n-gpu-layers", "ngl", "gpu-layers") for name in choice.settings):
        # only the user's own -ngl: llama.cpp's default (-1, every layer) lets --fit keep its margin, an explicit
        # -ngl makes it abort and load as asked (docs/engines/llamacpp.md#llamacpp-user-placement)
        words += ["-ngl", number(engine.get("n-gpu-layers"))]
    parallel = engine.get("parallel")
    user_slots = any(name.replace("_", "-") in ("parallel", "np", "n-parallel") for name in choice.settings)
    if isinstance(parallel, int) and (user_slots or est.workload.concurrency > 1 or binary != "llama-server"):
        words += ["-np", str(parallel)]
    type_k, type_v = str(engine.get("cache-type-k") or "f16"), str(engine.get("cache-type-v") or "f16")
    if (type_k, type_v) != ("f16", "f16"):
        words += ["-ctk", type_k, "-ctv", type_v]
    words += carried(choice, ENGINE, WRITTEN, skip=NOT_FLAGS)
    return Launch("llama.cpp", join(words), notes=notes)
