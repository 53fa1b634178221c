"""Ollama's launch: the server's environment (``OLLAMA_CONTEXT_LENGTH``, ``OLLAMA_NUM_PARALLEL``,
``OLLAMA_KV_CACHE_TYPE``, ``OLLAMA_FLASH_ATTENTION``), the Modelfile lines, and ``ollama run``
(docs/engines/launch.md#launch-ollama)."""

from __future__ import annotations

import re
from pathlib import PurePath

from hfvram.estimate.launch import Launch, ModelRef, join, number
from hfvram.estimate.types import EngineChoice, Estimate

#: hfvram's Ollama setting (``--set``, dashes) -> the server's environment variable (envconfig/config.go)
ENV_OF = {
    "num-ctx": "OLLAMA_CONTEXT_LENGTH",
    "context-length": "OLLAMA_CONTEXT_LENGTH",
    "num-parallel": "OLLAMA_NUM_PARALLEL",
    "kv-cache-type": "OLLAMA_KV_CACHE_TYPE",
    "flash-attention": "OLLAMA_FLASH_ATTENTION",
    "gpu-overhead": "OLLAMA_GPU_OVERHEAD",
    "sched-spread": "OLLAMA_SCHED_SPREAD",
    "max-loaded-models": "OLLAMA_MAX_LOADED_MODELS",
    "new-engine": "OLLAMA_NEW_ENGINE",
}
#: hfvram's Ollama settings that are Modelfile parameters (``PARAMETER num_gpu 20``)
PARAMETERS = ("num-batch", "num-gpu")


def model_name(ref: ModelRef) -> str:
    """``hf.co/org/repo:QUANT`` for a GGUF on the Hub (Ollama pulls it); a local file gets a name of its own."""
    if ref.hub and ref.repo_id:
        return f"hf.co/{ref.repo_id}" + (f":{ref.quant}" if ref.quant else "")
    stem = PurePath(ref.name).name.split(".gguf")[0].lower()
    return re.sub(r"[^a-z0-9._-]+", "-", stem).strip("-._") or "model"


def launch(est: Estimate, choice: EngineChoice, ref: ModelRef) -> Launch:
    engine = est.engine
    env: dict[str, str] = {"OLLAMA_CONTEXT_LENGTH": number(engine.get("num_ctx"))}
    parallel = engine.get("num_parallel")
    if isinstance(parallel, int) and parallel > 0:
        env["OLLAMA_NUM_PARALLEL"] = str(parallel)
    kv = str(engine.get("kv_cache_type") or "f16")
    user = {name.replace("_", "-").lstrip("-"): value for name, value in choice.settings.items()}
    if kv != "f16":
        env["OLLAMA_KV_CACHE_TYPE"] = kv
    if kv != "f16" or "flash-attention" in user or "OLLAMA-FLASH-ATTENTION" in user:
        env["OLLAMA_FLASH_ATTENTION"] = "1" if engine.get("flash_attention") else "0"
    for name, value in user.items():
        variable = ENV_OF.get(name) or (name.replace("-", "_") if name.startswith("OLLAMA-") else None)
        if variable and variable not in env:
            env[variable] = value
    name = model_name(ref)
    modelfile = [f"FROM {name if ref.hub else ref.name}", f"PARAMETER num_ctx {number(engine.get('num_ctx'))}"]
    modelfile += [f"PARAMETER {p.replace('-', '_')} {user[p]}" for p in PARAMETERS if p in user]
    notes = ["the environment is the Ollama server's: set it where `ollama serve` runs"]
    if ref.hub:
        return Launch(
            "ollama",
            join(["ollama", "run", name], env),
            env=env,
            files={"Modelfile": tuple(modelfile)},
            notes=tuple(notes),
        )
    return Launch(
        "ollama",
        join(["ollama", "serve"], env),
        env=env,
        files={"Modelfile": tuple(modelfile)},
        then=(join(["ollama", "create", name, "-f", "Modelfile"]), join(["ollama", "run", name])),
        notes=tuple(notes),
    )
