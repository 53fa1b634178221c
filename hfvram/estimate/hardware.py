"""The accelerator catalogue (``hfvram/data/gpus.toml``) and the ``--gpu SPEC`` syntax.

Memory is what the device exposes (``memory_bytes``: nvidia-smi totals where measured), never the
marketing number. Unified-memory parts (Apple Silicon, Strix Halo, DGX Spark) expose only a share of
their RAM to the GPU: the catalogue's measured share when the row has one, else macOS's rule (2/3 of RAM
up to 32 GiB, 3/4 above — gpus/README.md "Apple Silicon: GPU-addressable memory"), or the caller's
``unified_fraction`` override (``sudo sysctl iogpu.wired_limit_mb`` changes it on a real Mac).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from hfvram.datafiles import data_table
from hfvram.errors import UsageError
from hfvram.estimate.types import GPU, Hardware

GIB = 1 << 30

#: macOS's default Metal working set (recommendedMaxWorkingSetSize) as a share of RAM, measured at
#: 16/24/32 GiB (2/3) and 36…128 GiB (3/4) — gpus/README.md.
UNIFIED_SMALL_RAM_LIMIT = 32 * GIB
UNIFIED_SMALL_FRACTION = 2 / 3
UNIFIED_LARGE_FRACTION = 3 / 4

_COUNT_SUFFIX = re.compile(r"^(?P<rest>.+?)\s*[x×*]\s*(?P<count>\d+)$")
_COUNT_PREFIX = re.compile(r"^(?P<count>\d+)\s*[x×*]\s*(?P<rest>.+)$")
#: an id that itself ends in "x" followed directly by the count (``mi325x2`` = 2 × mi325x)
_COUNT_AFTER_X_ID = re.compile(r"^(?P<rest>.+x)(?P<count>\d+)$")
_RAW_SIZE = re.compile(r"^(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>gib|gb|g|tib|tb|t|mib|mb|m)$")
#: a ``hfvram gpus`` query that names a memory size (``24GB``, ``24 gb``, ``16GiB``, ``24G``) rather than a name
_SIZE_QUERY = re.compile(r"^(?P<number>\d{1,4}(?:\.\d{1,2})?)\s*(?P<unit>gib|gb|g)$")
#: the separators of GPU lists that ``--gpu`` does not take yet (issue 10: comparison, mixed sets)
_LIST_SEPARATORS = {",": "a comma list", "+": "a mixed set"}
#: units of a raw ``--gpu`` size; GPU vendors' "GB" are binary (gpus/README.md caveat 1), so GB = GiB here
_RAW_UNITS = {
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": GIB,
    "gb": GIB,
    "gib": GIB,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}


# ---- catalogue -----------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _catalog_rows() -> tuple[Mapping[str, Any], ...]:
    return tuple(data_table("gpus.toml")["device"])


def unified_fraction_rule(ram_bytes: int) -> float:
    """macOS's default GPU share of unified RAM: 2/3 up to 32 GiB, 3/4 above."""
    return UNIFIED_SMALL_FRACTION if ram_bytes <= UNIFIED_SMALL_RAM_LIMIT else UNIFIED_LARGE_FRACTION


def _addressable_bytes(row: Mapping[str, Any], unified_fraction: float | None) -> int | None:
    if not row.get("unified_memory"):
        return None
    ram = int(row["memory_bytes"])
    if unified_fraction is not None:
        return int(ram * unified_fraction)
    measured = row.get("gpu_addressable_bytes_default")
    if measured is not None:
        return int(measured)
    return int(ram * unified_fraction_rule(ram))


def _gpu_from_row(row: Mapping[str, Any], unified_fraction: float | None = None) -> GPU:
    return GPU(
        id=row["id"],
        name=row.get("name", row["id"]),
        vendor=row.get("vendor", "unknown"),
        memory_bytes=int(row["memory_bytes"]),
        memory_bandwidth_gbs=row.get("memory_bandwidth_gbs"),
        bf16_tflops_dense=row.get("bf16_tflops_dense"),
        interconnect_gbs=row.get("interconnect_gbs"),
        unified_memory=bool(row.get("unified_memory", False)),
        addressable_bytes=_addressable_bytes(row, unified_fraction),
        aliases=tuple(row.get("aliases", ())),
        cuda_total_bytes=int(float(row["cuda_total_gib"]) * (1 << 30)) if "cuda_total_gib" in row else None,
    )


@lru_cache(maxsize=1)
def load_catalog() -> tuple[GPU, ...]:
    """Every accelerator of the catalogue, in file order."""
    return tuple(_gpu_from_row(row) for row in _catalog_rows())


@lru_cache(maxsize=1)
def _names() -> dict[str, int]:
    """Lower-case id or alias -> row index."""
    names: dict[str, int] = {}
    for index, row in enumerate(_catalog_rows()):
        for name in (row["id"], *row.get("aliases", ())):
            names[_normalise(name)] = index
    return names


def _normalise(text: str) -> str:
    return " ".join(text.strip().lower().split())


def _lookup(name: str) -> int | None:
    return _names().get(_normalise(name))


def catalog_row(gpu_id: str) -> Mapping[str, Any]:
    """The raw catalogue table of a GPU id or alias (every field, for ``hfvram gpus`` and --explain)."""
    index = _lookup(gpu_id)
    if index is None:
        raise _unknown(gpu_id)
    return _catalog_rows()[index]


def closest_names(text: str, count: int = 3) -> list[str]:
    """The ``count`` catalogue ids whose id or an alias is closest to ``text`` (one entry per device)."""
    names = _names()
    rows = _catalog_rows()
    ids: list[str] = []
    for match in difflib.get_close_matches(_normalise(text), list(names), n=len(names), cutoff=0.0):
        gpu_id = rows[names[match]]["id"]
        if gpu_id not in ids:
            ids.append(gpu_id)
        if len(ids) == count:
            break
    return ids


def _unknown(text: str) -> UsageError:
    hints = ", ".join(closest_names(text))
    return UsageError(f"unknown GPU {text!r}; closest catalogue ids/aliases: {hints} (see `hfvram gpus`)")


def find_gpu(name: str, *, unified_fraction: float | None = None) -> GPU:
    """The catalogue GPU for an id or alias (case and spacing ignored); UsageError with hints otherwise."""
    index = _lookup(name)
    if index is None:
        raise _unknown(name)
    if unified_fraction is None:
        return load_catalog()[index]
    return _gpu_from_row(_catalog_rows()[index], unified_fraction)


def size_query_gb(query: str | None) -> float | None:
    """The memory size a ``hfvram gpus`` query names (``24GB``, ``24 GB``, ``24gb``, ``24G``, ``16GiB``), or None.

    Vendors' GB are binary (gpus/README.md caveat 1), so GB and GiB name the same size: the catalogue's
    ``memory_gb``, the capacity as marketed (for unified-memory machines, the RAM).
    """
    match = _SIZE_QUERY.match(_normalise(query or "").replace(" ", ""))
    return float(match["number"]) if match else None


def search_catalog(query: str | None = None, vendor: str | None = None) -> tuple[GPU, ...]:
    """GPUs of one nominal memory size when ``query`` is a size (``24GB``), else those whose id, name or an alias
    contains ``query`` (all when empty); optionally of one vendor."""
    size = size_query_gb(query)
    needle = _normalise(query or "")
    found = []
    for gpu, row in zip(load_catalog(), _catalog_rows(), strict=True):
        if vendor and gpu.vendor.lower() != vendor.lower():
            continue
        if size is not None:
            if float(row["memory_gb"]) == size:
                found.append(gpu)
            continue
        haystack = (gpu.id, gpu.name.lower(), *gpu.aliases)
        if not needle or any(needle in _normalise(text) for text in haystack):
            found.append(gpu)
    return tuple(found)


# ---- --gpu SPEC ----------------------------------------------------------------------------------


def _validate_fraction(unified_fraction: float | None) -> None:
    if unified_fraction is not None and not 0 < unified_fraction <= 1:
        raise UsageError(f"unified-memory fraction must be in (0, 1], got {unified_fraction}")


def max_gpu_count() -> int:
    """The most GPUs one --gpu spec may name (hfvram/data/bounds.toml [hardware] maximum_gpu_count)."""
    return int(data_table("bounds.toml")["hardware"]["maximum_gpu_count"])


def _count(text: str, spec: str) -> int:
    limit = max_gpu_count()
    digits = text.lstrip("0") or "0"
    count = int(digits) if len(digits) <= len(str(limit)) else limit + 1  # no 5000-digit int() for a count
    if count < 1:
        raise UsageError(f"GPU count must be at least 1 in {spec!r}")
    if count > limit:
        raise UsageError(
            f"GPU count {text[:12]}{'…' if len(text) > 12 else ''} in {spec[:60]!r} is more than {limit:,}"
        )
    return count


def _raw_size_gpu(number: str, unit: str) -> GPU:
    limit = int(data_table("bounds.toml")["hardware"]["maximum_memory_bytes"])
    size = float(number) * _RAW_UNITS[unit]
    if size <= 0:
        raise UsageError(f"GPU memory size must be positive, got {number[:20]}{unit}")
    if size > limit:  # also inf: float("1" * 400) overflows
        raise UsageError(
            f"GPU memory size {number[:20]}{'…' if len(number) > 20 else ''}{unit} is more than {limit:,} bytes"
        )
    size = int(size)
    label = f"{number}{'GiB' if _RAW_UNITS[unit] == GIB else unit.upper()}"
    return GPU(id=label, name=f"unlisted GPU with {label}", vendor="unknown", memory_bytes=size)


def _parse_single(text: str, unified_fraction: float | None) -> GPU | None:
    """A catalogue name or raw size without count, or None when it is neither."""
    if _lookup(text) is not None:
        return find_gpu(text, unified_fraction=unified_fraction)
    raw = _RAW_SIZE.match(text.replace(" ", ""))
    if raw:
        return _raw_size_gpu(raw["number"], raw["unit"])
    return None


def _reject_lists(spec: str, text: str) -> None:
    """A comma list or mixed set that is no catalogue name gets a usage line that says so, not "unknown GPU"."""
    for separator, what in _LIST_SEPARATORS.items():
        if separator in spec:
            shown = text.strip()[:80] + ("…" if len(text.strip()) > 80 else "")
            raise UsageError(
                f"--gpu {shown!r} is {what} of GPUs: comparing GPUs or mixing cards in one set is not supported yet; "
                "give one GPU spec, e.g. --gpu rtx4090 or --gpu rtx4090x2 (run once per GPU to compare)"
            )


def _exposed(gpu: GPU, count: int, text: str, unified_fraction: float | None) -> Hardware:
    """A catalogue board that software sees as several devices (``exposed_as`` / ``exposed_count``: an MI250X is
    two 64 GB GCDs under ROCm) -> that many of the device; anything else unchanged."""
    index = _names().get(gpu.id) if gpu.vendor != "unknown" else None
    row = _catalog_rows()[index] if index is not None else {}
    device = row.get("exposed_as")
    if device is None:
        return Hardware(gpu=gpu, count=count)
    total = count * int(row.get("exposed_count", 1))
    if total > max_gpu_count():
        raise UsageError(f"{text[:60]!r} is {total:,} {device} devices, more than {max_gpu_count():,}")
    return Hardware(gpu=find_gpu(device, unified_fraction=unified_fraction), count=total)


def parse_gpu_spec(text: str, *, unified_fraction: float | None = None) -> Hardware:
    """``rtx4090``, ``rtx4090x2``, ``2xh100``, ``h100-sxm x8``, ``24GiB``, ``80GBx4`` -> Hardware.

    A trailing ``x<N>`` (or leading ``<N>x``) is a count only when what remains is a known id, alias or
    raw size (gpus/README.md caveat 6); the whole text is tried first. A raw size has no bandwidth. A board
    that software sees as several devices is counted in those devices (``mi250x`` = 2 x ``mi250x-gcd``).
    A comma list (``rtx4090,h100``) or mixed set (``rtx4090+rtx3090``) is a usage error: not supported yet.
    """
    _validate_fraction(unified_fraction)
    spec = _normalise(text)
    if not spec:
        raise UsageError("empty --gpu spec")
    single = _parse_single(spec, unified_fraction)
    if single is not None:
        return _exposed(single, 1, text, unified_fraction)
    for pattern in (_COUNT_SUFFIX, _COUNT_PREFIX, _COUNT_AFTER_X_ID):
        match = pattern.match(spec)
        if match:
            gpu = _parse_single(match["rest"].strip(), unified_fraction)
            if gpu is not None:
                return _exposed(gpu, _count(match["count"], text), text, unified_fraction)
    _reject_lists(spec, text)  # after the names: an alias may hold a "+" (ryzen-ai-max+-395)
    raise _unknown(text)


def memory_provenance(gpu: GPU) -> str:
    """Where the GPU's usable memory figure comes from, for --explain."""
    if gpu.vendor == "unknown" and gpu.id not in _names():
        return f"raw size given on the command line: {gpu.memory_bytes} bytes"
    row = catalog_row(gpu.id)
    base = f"gpus.toml [{gpu.id}] memory_bytes ({row.get('memory_bytes_basis', 'basis not stated')})"
    if gpu.cuda_total_bytes is not None and gpu.addressable_bytes is None:
        base += f"; engines see the CUDA total, cuda_total_gib {row.get('cuda_total_gib')} ({row.get('cuda_total_source', '')})"
    if not gpu.unified_memory or gpu.addressable_bytes is None:
        return base
    measured = row.get("gpu_addressable_bytes_default")
    if measured is not None and gpu.addressable_bytes == int(measured):
        return f"{base}; GPU share: gpus.toml gpu_addressable_bytes_default ({row.get('gpu_addressable_basis', '')})"
    ruled = int(gpu.memory_bytes * unified_fraction_rule(gpu.memory_bytes))
    if measured is None and gpu.addressable_bytes == ruled:
        return f"{base}; GPU share: derived: macOS default 2/3 of RAM up to 32 GiB, 3/4 above"
    share = gpu.addressable_bytes / gpu.memory_bytes
    return f"{base}; GPU share: {share:.3f} of RAM (user override)"
