"""Measure what plain transformers holds: the weights' bytes and the KV cache's bytes after ``generate``.

Builds models with random weights from the real ``config.json`` files in ``fixtures/hub`` (``from_config``, no
download, no checkpoint) and writes one JSON line per measurement to ``benchmarks/data/transformers_truth.jsonl``,
with the torch and transformers versions. What is measured, and how:

- ``weights``: the sum of ``nbytes`` over the model's parameters and buffers (tied tensors counted once), in the
  config's ``torch_dtype``. Small models are built on the CPU; large ones (``--meta``) on the ``meta`` device, where
  tensors have shapes and dtypes but no storage, so their ``nbytes`` is exact without allocating anything.
- ``cache``: after ``model.generate(prompt, max_new_tokens=N)`` (greedy) the returned ``past_key_values``; the sum of
  ``nbytes`` over every layer's key and value tensors, with the cache's own sequence length. DynamicCache (the
  default) and StaticCache (``cache_implementation="static"``, allocated for prompt + N up front). These sizes are
  the tensors' shapes × dtype, so they are the same on a GPU.

Not measured: peak memory. PyTorch's CPU allocator keeps no peak statistic (``torch.cuda.max_memory_allocated``
has no CPU counterpart) and the process RSS counts Python and the allocator's caching, so it is not recorded as a
figure; the GPU peak needs a device, and none was lent when this was run.

Run it in a separate environment (torch and transformers must never enter hfvram's own):

    python3 -m venv /work/venv-tf && /work/venv-tf/bin/pip install torch transformers safetensors
    /work/venv-tf/bin/python benchmarks/transformers_truth.py [--out PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HUB = ROOT / "fixtures" / "hub"
OUT = ROOT / "benchmarks" / "data" / "transformers_truth.jsonl"

#: models built for real on the CPU (weights and caches measured): (repo id, [(prompt tokens, new tokens, batch)])
CACHE_RUNS: dict[str, list[tuple[int, int, int]]] = {
    "Qwen/Qwen3-0.6B": [(32, 4, 1), (128, 4, 1), (512, 4, 1), (128, 4, 2)],
    "meta-llama/Llama-3.2-1B": [(32, 4, 1), (256, 4, 1), (128, 4, 2)],
    "Qwen/Qwen2.5-1.5B": [(64, 4, 1), (256, 4, 1)],
}
#: real configs with fewer layers and a smaller window, so a sliding-window cache is measured past its window on
#: a CPU: (repo id, {field: value}, [(prompt tokens, new tokens, batch)]); benchmarks/accuracy_engines.py writes
#: the same derived config to a folder for hfvram to read
DERIVED_RUNS: list[tuple[str, dict[str, Any], list[tuple[int, int, int]]]] = [
    ("google/gemma-2-9b-it", {"num_hidden_layers": 2, "sliding_window": 64, "sliding_window_size": 64}, [(200, 4, 1)]),
]
#: models too large to build with storage here: weights measured on the meta device only
META_WEIGHTS = (
    "Qwen/Qwen3-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "mistralai/Mistral-7B-v0.1",
    "google/gemma-2-9b-it",
    "Qwen/Qwen3-30B-A3B",
    "microsoft/phi-4",
)


def load_config(repo: str, overrides: dict[str, Any] | None = None) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(HUB / repo), **(overrides or {}))


def dtype_of(config: Any) -> Any:
    import torch

    name = getattr(config, "torch_dtype", None) or getattr(config, "dtype", None) or "float32"
    return name if isinstance(name, torch.dtype) else getattr(torch, str(name).replace("torch.", ""))


def build(repo: str, device: str, overrides: dict[str, Any] | None = None) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    config = load_config(repo, overrides)
    dtype = dtype_of(config)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def weight_bytes(model: Any) -> dict[str, int]:
    """Parameters and buffers, each storage counted once (tied embeddings share one tensor)."""
    seen: set[int] = set()
    params = buffers = 0
    count = 0
    for tensor in model.parameters():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        params += tensor.nbytes
        count += tensor.numel()
    for tensor in model.buffers():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        buffers += tensor.nbytes
    return {"parameter_bytes": params, "buffer_bytes": buffers, "parameters": count}


def cache_bytes(cache: Any) -> tuple[int, int, str]:
    """(bytes of every key and value tensor, the cache's sequence length, the class name)."""
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if tensor is not None and hasattr(tensor, "nbytes"):
                total += tensor.nbytes
    return total, int(cache.get_seq_length()), type(cache).__name__


def measure_cache(model: Any, prompt: int, new: int, batch: int, implementation: str | None) -> dict[str, Any]:
    import torch

    vocab = model.config.get_text_config().vocab_size
    generator = torch.Generator().manual_seed(prompt * 31 + batch)
    ids = torch.randint(0, vocab, (batch, prompt), generator=generator)
    kwargs: dict[str, Any] = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False}
    if implementation:
        kwargs["cache_implementation"] = implementation
    started = time.monotonic()
    with torch.inference_mode():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), return_dict_in_generate=True, pad_token_id=0, **kwargs
        )
    cache = getattr(out, "cache", None) or out.past_key_values
    total, seq_len, kind = cache_bytes(cache)
    lengths = {int(layer.keys.shape[-2]) for layer in cache.layers if getattr(layer, "keys", None) is not None}
    return {
        "prompt_tokens": prompt,
        "new_tokens": new,
        "batch": batch,
        "cache_implementation": implementation or "dynamic (default)",
        "cache_class": kind,
        "cache_seq_len": seq_len,
        "allocated_positions": sorted(lengths),
        "cache_bytes": total,
        "generated_tokens": int(out.sequences.shape[1] - prompt),
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    import torch
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--quick", action="store_true", help="one model, one run (a smoke test)")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    common = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": "cpu",
        "method": "from_config with random weights (seed 0); nbytes of parameters + buffers and of the cache tensors",
    }
    rows: list[dict[str, Any]] = []
    runs = dict(list(CACHE_RUNS.items())[:1]) if args.quick else CACHE_RUNS
    for repo, cases in runs.items():
        model = build(repo, "cpu")
        rows.append({"kind": "weights", "model": repo, "build": "cpu", **weight_bytes(model), **common})
        print(json.dumps(rows[-1]), flush=True)
        for index, (prompt, new, batch) in enumerate(cases[:1] if args.quick else cases):
            implementations: tuple[str | None, ...] = (None, "static") if index < 2 else (None,)
            for implementation in implementations:
                row = {"kind": "cache", "model": repo, **measure_cache(model, prompt, new, batch, implementation)}
                rows.append({**row, **common})
                print(json.dumps(rows[-1]), flush=True)
        del model
    if not args.quick:
        for repo, overrides, derived_cases in DERIVED_RUNS:
            model = build(repo, "cpu", overrides)
            for prompt, new, batch in derived_cases:
                for implementation in (None, "static"):
                    row = {"kind": "cache", "model": repo, "config_overrides": overrides}
                    row.update(measure_cache(model, prompt, new, batch, implementation))
                    rows.append({**row, **common})
                    print(json.dumps(rows[-1]), flush=True)
            del model
        for repo in META_WEIGHTS:
            model = build(repo, "meta")
            rows.append({"kind": "weights", "model": repo, "build": "meta", **weight_bytes(model), **common})
            print(json.dumps(rows[-1]), flush=True)
            del model
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows), encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {len(rows)} rows to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
