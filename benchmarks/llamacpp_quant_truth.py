"""What llama-quantize writes, per tensor, measured with llama.cpp itself (issue 10: the ``--quant`` what-if).

Each model is an F16 GGUF written with the ``gguf`` package from a real ``config.json`` of the corpus (the tensor
names and shapes ``src/models/<arch>.cpp`` loads, as ``benchmarks/llamacpp_truth.py`` writes them, every matrix
F16 and every 1-D tensor F32 as ``convert_hf_to_gguf.py --outtype f16`` writes them), extended to its full size as
a sparse file. llama.cpp's quantizer (``llama_model_quantize`` through llama-cpp-python's C API, default
parameters, no importance matrix) is run on it in a subprocess per model, once per file type:

- ``dry_run`` (``llama_model_quantize_params.dry_run``): llama.cpp picks every tensor's type with the same code
  as a real run (``llama_tensor_get_type``) and prints it with the size, without reading or writing data. For
  the types that need an importance matrix (IQ2_*, IQ1_*, IQ3_XXS, Q2_K_S) a dry run completes and says so: those
  rows are what llama.cpp would write, ``needs_imatrix`` true (the types of IQ3_XXS differ with an imatrix:
  attn_v / ffn_down; the rows here are without one).
- ``quantized``: for the small models, a real quantization to an output GGUF whose tensor types are read back
  with the ``gguf`` package: the check that the dry run is what a real run writes.

One JSON line per (model, file type) goes to ``benchmarks/data/llamacpp_quant_truth.jsonl``: the llama.cpp
commit, the architecture, the source config, the tensor -> type map (compact: ``"TYPE": [names]``), every
tensor's bytes and the total. Then hfvram's what-if (``hfvram.quant``) is compared and the error printed per
(architecture, type).

Run:  python3 benchmarks/llamacpp_quant_truth.py [--only NAME] [--types Q4_K_M,Q8_0] [--compare-only]
Needs: ``pip install llama-cpp-python`` (CPU build), configs from ``fixtures/hub``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

DEFAULT_CORPUS = REPO / "fixtures"
DEFAULT_OUT = REPO / "benchmarks" / "data" / "llamacpp_quant_truth.jsonl"
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f (2026-10-01)"
#: real quantization (data read and written) only below this F16 size: zeros quantize fast, but not 60 GB of them
REAL_QUANT_MAX_BYTES = 2 << 30
REAL_QUANT_TYPES = ("Q4_K_M", "Q8_0", "IQ4_XS")


# ---------------------------------------------------------------------------------------------------------
# F16 models from real configs
# ---------------------------------------------------------------------------------------------------------


def _recipe(corpus: Path, repo: str, name: str, arch: str) -> Any:
    """The F16 GGUF of ``repo`` as llama.cpp loads ``arch`` (llama / qwen2 / qwen3 / qwen3moe / gemma2 / gemma3,
    Mixtral as llama with experts)."""
    import llamacpp_truth as lt
    from gguf import GGMLQuantizationType as T

    c = lt._cfg(corpus, repo)
    e, nh = c["hidden_size"], c["num_attention_heads"]
    nkv = c.get("num_key_value_heads", nh)
    hd = c.get("head_dim") or e // nh
    nx = c.get("num_experts") or c.get("num_local_experts") or 0
    ff_x = c.get("moe_intermediate_size") or c["intermediate_size"]
    kv = lt._common_kv(arch, c, c["max_position_embeddings"], c["intermediate_size"])
    if nx:
        kv.update(
            {
                f"{arch}.expert_count": nx,
                f"{arch}.expert_used_count": c.get("num_experts_per_tok") or c.get("num_experts_per_token"),
            }
        )
        if arch == "qwen3moe":
            kv[f"{arch}.expert_feed_forward_length"] = ff_x
    if arch in ("gemma2", "gemma3"):
        kv[f"{arch}.attention.sliding_window"] = c["sliding_window"]
    if arch == "gemma2":
        kv["gemma2.attn_logit_softcapping"] = float(c["attn_logit_softcapping"])
        kv["gemma2.final_logit_softcapping"] = float(c["final_logit_softcapping"])
    tied = bool(c.get("tie_word_embeddings", arch in ("gemma2", "gemma3")))
    r = lt.ModelRecipe(name, f"corpus/hub/{repo}/config.json", arch, kv)
    lt._io(r, e, c["vocab_size"], tied=tied)
    rope = c.get("rope_scaling") or {}
    if arch == "llama" and rope.get("rope_type") == "llama3":
        r.add("rope_freqs.weight", [hd // 2])  # LlamaModel.generate_extra_tensors
    for i in range(c["num_hidden_layers"]):
        lt._attn(r, i, e, hd * nh, hd * nkv, bias=arch == "qwen2")
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            r.add(f"blk.{i}.attn_q_norm.weight", [hd])
            r.add(f"blk.{i}.attn_k_norm.weight", [hd])
        if arch in ("gemma2", "gemma3"):
            r.add(f"blk.{i}.post_attention_norm.weight", [e])
            r.add(f"blk.{i}.post_ffw_norm.weight", [e])
        if nx:
            r.add(f"blk.{i}.ffn_norm.weight", [e])
            r.add(f"blk.{i}.ffn_gate_inp.weight", [e, nx])
            r.add(f"blk.{i}.ffn_gate_exps.weight", [e, ff_x, nx], T.F16)
            r.add(f"blk.{i}.ffn_up_exps.weight", [e, ff_x, nx], T.F16)
            r.add(f"blk.{i}.ffn_down_exps.weight", [ff_x, e, nx], T.F16)
        else:
            lt._ffn(r, i, e, c["intermediate_size"])
    return as_f16(r)


def as_f16(r: Any) -> Any:
    """Every matrix F16 (the recipes' Q4_K / Q6_K stand-ins replaced); F32 where convert_hf_to_gguf.py writes F32
    whatever --outtype is: 1-D tensors, norms, names not ending in ".weight", the router (conversion/base.py)."""
    import llamacpp_truth as lt
    from gguf import GGMLQuantizationType as T

    def f32(name: str, ne: tuple[int, ...]) -> bool:
        return len(ne) < 2 or not name.endswith(".weight") or name.endswith("_norm.weight") or "ffn_gate_inp" in name

    r.tensors = [lt.TensorSpec(t.name, t.ne, T.F32 if f32(t.name, t.ne) else T.F16) for t in r.tensors]
    return r


def recipe_for(corpus: Path, name: str) -> Any:
    import llamacpp_truth as lt

    repo, arch = MODELS[name]
    if name == "gpt-oss-20b":  # the recipe of benchmarks/llamacpp_truth.py (src/models/openai-moe.cpp), as F16
        return as_f16(lt.recipe_gpt_oss(corpus))
    return _recipe(corpus, repo, name, arch)


#: name -> (repo, GGUF architecture)
MODELS: dict[str, tuple[str, str]] = {
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B", "llama"),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B-Instruct", "llama"),
    "llama-3.3-70b": ("meta-llama/Llama-3.3-70B-Instruct", "llama"),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-v0.1", "llama"),
    "qwen2.5-1.5b": ("Qwen/Qwen2.5-1.5B", "qwen2"),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B-Instruct", "qwen2"),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B", "qwen2"),
    "qwen3-0.6b": ("Qwen/Qwen3-0.6B", "qwen3"),
    "qwen3-8b": ("Qwen/Qwen3-8B", "qwen3"),
    "qwen3-32b": ("Qwen/Qwen3-32B", "qwen3"),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", "qwen3moe"),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B", "qwen3moe"),
    "gemma-2-9b": ("google/gemma-2-9b-it", "gemma2"),
    "gemma-3-27b": ("google/medgemma-27b-it", "gemma3"),
    "gpt-oss-20b": ("openai/gpt-oss-20b", "gpt-oss"),
}

#: llama-quantize's names (tools/quantize/quantize.cpp QUANT_OPTIONS) -> llama_ftype
FTYPES: dict[str, int] = {
    "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q8_0": 7, "F16": 1, "BF16": 32,
    "Q2_K": 10, "Q2_K_S": 21, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
    "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "IQ3_XXS": 23, "IQ3_XS": 22,
    "IQ3_S": 26, "IQ3_M": 27, "IQ2_XXS": 19, "IQ2_XS": 20, "IQ2_S": 28, "IQ2_M": 29, "IQ1_S": 24, "IQ1_M": 31,
    "MXFP4_MOE": 38,
}  # fmt: skip

# ---------------------------------------------------------------------------------------------------------
# Quantizing in llama.cpp (one subprocess per model) and parsing its log
# ---------------------------------------------------------------------------------------------------------

QUANTIZER = r"""
import ctypes, json, sys
import llama_cpp as L
s = json.loads(sys.argv[1])
buf = []
def log(level, text, user):
    buf.append(text.decode('utf-8', 'replace'))
cb = L.llama_log_callback(log)
L.llama_log_set(cb, ctypes.c_void_p(0))
L.llama_backend_init()
for job in s['jobs']:
    buf.clear()
    p = L.llama_model_quantize_default_params()
    p.ftype = job['ftype']
    p.nthread = 2
    p.dry_run = bool(job['dry_run'])
    rc = L.llama_model_quantize(s['path'].encode(), job['out'].encode(), ctypes.byref(p))
    sys.stdout.write(json.dumps({'name': job['name'], 'dry_run': job['dry_run'], 'rc': int(rc), 'log': ''.join(buf)}) + '\n')
    sys.stdout.flush()
sys.stdout.write(json.dumps({'version': L.__version__}) + '\n')
"""

_LINE = re.compile(
    r"\[\s*\d+/\s*\d+\]\s+(?P<name>\S+)\s+- \[(?P<shape>[^\]]*)\], type =\s+(?P<src>\w+), (?P<rest>[^\n]*)"
)
_FALLBACK = re.compile(r"WARNING: (\d+) of \d+ tensor\(s\) required fallback quantization")
_NEW = re.compile(r"->\s+[\d.]+ MiB \((?P<type>\w+)\)")


def parse_quant_log(text: str) -> dict[str, str]:
    """tensor name -> ggml type name (upper case) from a dry run's per-tensor lines."""
    out: dict[str, str] = {}
    for m in _LINE.finditer(text):
        new = _NEW.search(m["rest"])
        out[m["name"]] = (new["type"] if new else m["src"]).upper()
    return out


def read_output_types(path: Path) -> dict[str, str]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {t.name: t.tensor_type.name for t in reader.tensors}


def tensor_shapes(recipe: Any) -> dict[str, tuple[int, ...]]:
    return {t.name: t.ne for t in recipe.tensors}


def bytes_of(ne: tuple[int, ...], type_name: str) -> int:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    rows = 1
    for n in ne[1:]:
        rows *= n
    return rows * (ne[0] // block) * size


_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")


def _ranges(layers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    out, start, prev = [], None, None
    for n in sorted(layers):
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(out)


def _unranges(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        out += range(int(first), int(last or first) + 1)
    return out


def compact(types: dict[str, str]) -> dict[str, dict[str, str]]:
    """tensor -> type as ``{TYPE: {"blk.#.attn_v.weight": "0-3,7", "output.weight": ""}}``."""
    grouped: dict[str, dict[str, list[int]]] = {}
    for name, type_name in types.items():
        m = _BLK.match(name)
        pattern, layer = (f"blk.#.{m[2]}", int(m[1])) if m else (name, None)
        grouped.setdefault(type_name, {}).setdefault(pattern, [])
        if layer is not None:
            grouped[type_name][pattern].append(layer)
    return {t: {p: _ranges(v) for p, v in sorted(g.items())} for t, g in sorted(grouped.items())}


def expand(compacted: dict[str, dict[str, str]]) -> dict[str, str]:
    """The inverse of :func:`compact`."""
    out = {}
    for type_name, patterns in compacted.items():
        for pattern, layers in patterns.items():
            if "#" in pattern:
                for n in _unranges(layers):
                    out[pattern.replace("#", str(n), 1)] = type_name
            else:
                out[pattern] = type_name
    return out


def compact_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, list[int]]:
    """tensor -> ne as ``{"blk.#.attn_q.weight": ne}`` (every block of these models has the same shapes)."""
    out: dict[str, list[int]] = {}
    for name, ne in shapes.items():
        m = _BLK.match(name)
        key = f"blk.#.{m[2]}" if m else name
        if key in out and out[key] != list(ne):
            raise ValueError(f"{name}: blocks of different shapes")
        out[key] = list(ne)
    return out


def measure(name: str, corpus: Path, workdir: Path, types: list[str]) -> list[dict[str, Any]]:
    import llamacpp_truth as lt

    arch = MODELS[name][1]
    recipe = recipe_for(corpus, name)
    path = workdir / f"{name}-f16.gguf"
    size = lt.write_sparse_gguf(recipe, path)
    jobs = [{"name": t, "ftype": FTYPES[t], "dry_run": True, "out": str(workdir / f"{name}-{t}.gguf")} for t in types]
    if size <= REAL_QUANT_MAX_BYTES:
        jobs += [
            {"name": t, "ftype": FTYPES[t], "dry_run": False, "out": str(workdir / f"{name}-{t}.gguf")}
            for t in REAL_QUANT_TYPES
            if t in types
        ]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", QUANTIZER, json.dumps({"path": str(path), "jobs": jobs})],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    elapsed = time.monotonic() - started
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    version = next((r["version"] for r in results if "version" in r), None)
    shapes = tensor_shapes(recipe)
    rows = []
    for r in results:
        if "version" in r:
            continue
        out_path = Path(jobs[0]["out"]).with_name(f"{name}-{r['name']}.gguf")
        if r["rc"] != 0:
            print(
                f"{name} {r['name']} ({'dry run' if r['dry_run'] else 'quantized'}): llama.cpp refused", file=sys.stderr
            )
            print(r["log"][-600:], file=sys.stderr)
            continue
        if r["dry_run"]:
            typed = parse_quant_log(r["log"])
        else:
            typed = read_output_types(out_path)
            out_path.unlink(missing_ok=True)
        missing = set(shapes) - set(typed)
        if missing:
            print(f"{name} {r['name']}: no type for {sorted(missing)[:5]}", file=sys.stderr)
            continue
        per_tensor = {t: bytes_of(shapes[t], typed[t]) for t in shapes}
        rows.append(
            {
                "model": name,
                "architecture": arch,
                "source": recipe.source,
                "quant": r["name"],
                "method": "dry_run" if r["dry_run"] else "quantized (output GGUF read with gguf)",
                "needs_imatrix": "will require an imatrix" in r["log"],
                "llama_cpp_commit": LLAMA_CPP_COMMIT,
                "llama_cpp_python": version,
                "f16_file_bytes": size,
                "tensor_bytes": sum(per_tensor.values()),
                "types": compact(typed),
                "fallbacks": int(m[1]) if (m := _FALLBACK.search(r["log"])) else 0,
                "shapes": compact_shapes(shapes),
                "seconds_all_types": round(elapsed, 1),
            }
        )
    path.unlink(missing_ok=True)
    return rows


# ---------------------------------------------------------------------------------------------------------
# hfvram against the truth
# ---------------------------------------------------------------------------------------------------------


def load_truth(path: Path = DEFAULT_OUT) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


_SPECS: dict[str, Any] = {}


def hfvram_types(repo: str, quant: str, *, imatrix: bool | None = None) -> tuple[dict[str, str], int]:
    """hfvram's what-if for ``repo`` (its fixture config) as ``quant``: tensor -> type, total bytes."""
    from dataclasses import replace

    from hfvram.quant import gguf_types
    from hfvram.quant.llama_quant import tensor_bytes
    from hfvram.sources.local import load_folder

    if repo not in _SPECS:
        _SPECS[repo] = load_folder(DEFAULT_CORPUS / "hub" / repo)
    loaded = _SPECS[repo]
    choice = gguf_types.parse(quant)
    assert choice is not None
    if imatrix is not None:
        choice = replace(choice, imatrix=imatrix)
    typed, _, _ = gguf_types.typed_tensors(loaded.spec, choice)
    return {t.name: ty for t, ty in typed}, sum(tensor_bytes(t.ne, ty) for t, ty in typed)


def compare(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per truth row: hfvram's bytes, the relative error and the tensors whose type differs (the truth was
    measured without an importance matrix, so hfvram is asked for the same)."""
    out = []
    for row in rows:
        repo = MODELS[row["model"]][0]
        mine, total = hfvram_types(repo, row["quant"], imatrix=False)
        truth = expand(row["types"])
        differ = sorted(n for n in truth if mine.get(n) != truth[n])
        out.append(
            {
                "model": row["model"],
                "architecture": row["architecture"],
                "quant": row["quant"],
                "method": row["method"],
                "truth_bytes": row["tensor_bytes"],
                "hfvram_bytes": total,
                "error": (total - row["tensor_bytes"]) / row["tensor_bytes"],
                "tensors_differ": differ,
                "extra_tensors": sorted(set(mine) - set(truth)),
            }
        )
    return out


def print_comparison(results: list[dict[str, Any]]) -> None:
    print(f"{'model':<18} {'arch':<9} {'quant':<10} {'method':<9} {'llama.cpp GiB':>13} {'hfvram GiB':>11} "
          f"{'error':>8}  types differ")  # fmt: skip
    for r in results:
        print(
            f"{r['model']:<18} {r['architecture']:<9} {r['quant']:<10} {r['method'][:8]:<9} "
            f"{r['truth_bytes'] / 2**30:>13.3f} {r['hfvram_bytes'] / 2**30:>11.3f} {r['error'] * 100:>7.3f}%  "
            f"{len(r['tensors_differ'])}" + (f" e.g. {r['tensors_differ'][:2]}" if r["tensors_differ"] else "")
        )
    worst = max((abs(r["error"]) for r in results), default=0.0)
    print(f"worst |error| {worst * 100:.4f}% over {len(results)} rows")
    by_arch: dict[tuple[str, str], list[float]] = {}
    for r in results:
        by_arch.setdefault((r["architecture"], r["quant"]), []).append(abs(r["error"]))
    print("\nworst |error| per (architecture, type), % of llama.cpp's tensor bytes:")
    archs = sorted({a for a, _ in by_arch})
    quants = list(dict.fromkeys(r["quant"] for r in results))
    print(f"{'type':<10}" + "".join(f"{a:>10}" for a in archs))
    for q in quants:
        cells = [f"{max(by_arch[(a, q)]) * 100:>9.3f}%" if (a, q) in by_arch else f"{'-':>10}" for a in archs]
        print(f"{q:<10}" + "".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", action="append", help="model name(s) of MODELS")
    parser.add_argument("--types", help="comma list of llama-quantize names (default: all)")
    parser.add_argument("--compare-only", action="store_true", help="only compare hfvram with the stored truth")
    args = parser.parse_args(argv)
    if not args.compare_only:
        types = args.types.split(",") if args.types else list(FTYPES)
        names = args.only or list(MODELS)
        kept = [r for r in (load_truth(args.out) if args.out.exists() else []) if r["model"] not in names]
        with tempfile.TemporaryDirectory(prefix="hfvram-quant-") as tmp:
            for name in names:
                rows = measure(name, args.corpus, Path(tmp), types)
                print(f"{name}: {len(rows)} rows", file=sys.stderr)
                kept += rows
                args.out.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
    print_comparison(compare(load_truth(args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
