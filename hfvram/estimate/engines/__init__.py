"""Engine profiles: how each serving engine splits GPU memory.

Each engine lives in its own module exposing ``PROFILE`` (an :class:`EngineProfile`); its constants live in
``hfvram/data/engines/<name>.toml``. Modules are imported lazily so that start-up stays fast.
"""

from __future__ import annotations

import importlib
import re
from typing import Protocol, runtime_checkable

from hfvram.errors import UsageError
from hfvram.estimate.types import EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import ModelSpec

#: engine name -> module implementing it
ENGINE_MODULES: dict[str, str] = {
    "vllm": "hfvram.estimate.engines.vllm",
    "sglang": "hfvram.estimate.engines.sglang",
    "llama.cpp": "hfvram.estimate.engines.llamacpp",
    "ollama": "hfvram.estimate.engines.ollama",
    "tensorrt-llm": "hfvram.estimate.engines.trtllm",
    "lmdeploy": "hfvram.estimate.engines.lmdeploy",
    "exllamav2": "hfvram.estimate.engines.exllamav2",
    "mlx": "hfvram.estimate.engines.mlx",
    "transformers": "hfvram.estimate.engines.transformers_engine",
}

ENGINE_ALIASES: dict[str, str] = {
    "llamacpp": "llama.cpp",
    "llama-cpp": "llama.cpp",
    "llama-server": "llama.cpp",
    "trtllm": "tensorrt-llm",
    "trt-llm": "tensorrt-llm",
    "tensorrt_llm": "tensorrt-llm",
    "exllama": "exllamav2",
    "exl2": "exllamav2",
    "mlx-lm": "mlx",
    "hf": "transformers",
    "pytorch": "transformers",
}


@runtime_checkable
class EngineProfile(Protocol):
    name: str
    #: versions whose accounting rules differ, oldest first ("0.19", "0.21"); the newest is the default
    rule_versions: tuple[str, ...]

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        """The four terms on the worst GPU, the usable memory, verdict and capacity."""
        ...


#: an engine release as typed after ``@``: a version (``0.19``, ``0.6.4.post1``, ``0.12.x``) or a commit / build id
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


def parse_engine_name(text: str) -> tuple[str, str | None]:
    """``vllm@0.19`` -> ("vllm", "0.19"); aliases resolved; unknown names raise UsageError."""
    name, _, version = text.strip().partition("@")
    key = name.lower()
    key = ENGINE_ALIASES.get(key, key)
    if key not in ENGINE_MODULES:
        known = ", ".join(sorted(ENGINE_MODULES))
        raise UsageError(f"unknown engine {name[:80]!r}; known engines: {known}")
    if version and not _VERSION.fullmatch(version.strip()):
        raise UsageError(f"engine version {version[:80]!r}: expected a release such as 0.19 or 0.6.4.post1")
    return key, (version.strip() or None) if version else None


def get_profile(name: str) -> EngineProfile:
    key, _ = parse_engine_name(name)
    module = importlib.import_module(ENGINE_MODULES[key])
    return module.PROFILE
