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
_RAW_SIZE = re.compile(
    r"^(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>gib|gb|g|tib|tb|t|mib|mb|m)"
    # an optional bandwidth, so that a raw size gets a decode speed: 8GiB@448GB/s, 96GB@1.6TB/s
    r"(?:@(?P<bandwidth>\d{1,6}(?:\.\d{1,3})?)\s*(?P<bw_unit>gb/s|tb/s)?)?$"
)
#: the fastest memory a raw ``--gpu SIZE@BANDWIDTH`` may claim, GB/s (ten times an HBM3e board)
_MAX_RAW_BANDWIDTH_GBS = 100_000.0
#: a ``hfvram gpus`` query that names a memory size (``24GB``, ``24 gb``, ``16GiB``, ``24G``) rather than a name
_SIZE_QUERY = re.compile(r"^(?P<number>\d{1,4}(?:\.\d{1,2})?)\s*(?P<unit>gib|gb|g)$")
#: ``--gpu a,b,c``: several GPU sets compared side by side; ``--gpu a+b``: one set of different cards
LIST_SEPARATOR = ","
MIXED_SEPARATOR = "+"
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
        fp16_tensor_tflops=row.get("fp16_acc16_tflops_dense") or row.get("fp16_tflops_dense"),
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


def _raw_size_gpu(number: str, unit: str, bandwidth: str | None = None, bw_unit: str | None = None) -> GPU:
    limit = int(data_table("bounds.toml")["hardware"]["maximum_memory_bytes"])
    size = float(number) * _RAW_UNITS[unit]
    least = int(data_table("bounds.toml")["hardware"]["minimum_memory_bytes"])
    if not size >= least:  # also nan
        raise UsageError(f"GPU memory size {number[:20]}{unit} is less than hfvram's bound of {least / GIB:g} GiB")
    if size > limit:  # also inf: float("1" * 400) overflows
        raise UsageError(
            f"GPU memory size {number[:20]}{'…' if len(number) > 20 else ''}{unit} is more than {limit:,} bytes"
        )
    size = int(size)
    label = f"{number}{'GiB' if _RAW_UNITS[unit] == GIB else unit.upper()}"
    gbs = None
    if bandwidth is not None:
        gbs = float(bandwidth) * (1000.0 if bw_unit == "tb/s" else 1.0)
        if not 0 < gbs <= _MAX_RAW_BANDWIDTH_GBS:
            raise UsageError(
                f"GPU memory bandwidth {bandwidth}{bw_unit or 'GB/s'} must be above 0 and at most "
                f"{_MAX_RAW_BANDWIDTH_GBS:,.0f} GB/s"
            )
        label += f"@{gbs:g}GB/s"
    return GPU(
        id=label, name=f"unlisted GPU with {label}", vendor="unknown", memory_bytes=size, memory_bandwidth_gbs=gbs
    )


def _parse_single(text: str, unified_fraction: float | None) -> GPU | None:
    """A catalogue name or raw size without count, or None when it is neither."""
    if _lookup(text) is not None:
        return find_gpu(text, unified_fraction=unified_fraction)
    raw = _RAW_SIZE.match(text.replace(" ", ""))
    if raw:
        return _raw_size_gpu(raw["number"], raw["unit"], raw["bandwidth"], raw["bw_unit"])
    return None


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
    """``rtx4090``, ``rtx4090x2``, ``2xh100``, ``h100-sxm x8``, ``24GiB``, ``80GBx4``, ``rtx4090+rtx3090`` -> Hardware.

    A trailing ``x<N>`` (or leading ``<N>x``) is a count only when what remains is a known id, alias or
    raw size (gpus/README.md caveat 6); the whole text is tried first. A raw size has no bandwidth unless it names
    one (``8GiB@448GB/s``). A board
    that software sees as several devices is counted in those devices (``mi250x`` = 2 x ``mi250x-gcd``).
    ``a+b`` is one mixed set (:func:`parse_mixed_set`); a comma list (``rtx4090,h100``) is several sets, which only
    the comparison takes (:func:`parse_gpu_sets`): here it is a usage error.
    """
    _validate_fraction(unified_fraction)
    spec = _normalise(text)
    if not spec:
        raise UsageError("empty --gpu spec")
    hardware = _parse_one_kind(spec, text, unified_fraction)
    if hardware is not None:
        return hardware
    if LIST_SEPARATOR in spec:
        raise UsageError(
            f"--gpu {_shown(text)!r} is a comma list of GPU sets: only `hfvram check` (a comparison) and "
            "`hfvram fit --cheapest` take one; give one GPU set here, e.g. --gpu rtx4090x2 or --gpu rtx4090+rtx3090"
        )
    if MIXED_SEPARATOR in spec:  # after the names: an alias may hold a "+" (ryzen-ai-max+-395)
        return parse_mixed_set(spec, text, unified_fraction)
    raise _unknown(text)


def _shown(text: str, limit: int = 80) -> str:
    text = text.strip()
    return text[:limit] + ("…" if len(text) > limit else "")


def _parse_one_kind(spec: str, text: str, unified_fraction: float | None) -> Hardware | None:
    """One catalogue GPU or raw size with an optional count, or None when ``spec`` is neither."""
    single = _parse_single(spec, unified_fraction)
    if single is not None:
        return _exposed(single, 1, text, unified_fraction)
    for pattern in (_COUNT_SUFFIX, _COUNT_PREFIX, _COUNT_AFTER_X_ID):
        match = pattern.match(spec)
        if match:
            gpu = _parse_single(match["rest"].strip(), unified_fraction)
            if gpu is not None:
                return _exposed(gpu, _count(match["count"], text), text, unified_fraction)
    return None


def parse_mixed_set(spec: str, text: str, unified_fraction: float | None = None) -> Hardware:
    """``rtx4090+rtx3090`` (``rtx3090x2+rtx4090``): one set of different cards, in the order given (the device
    order the engine sees). Unified-memory machines and cards of different vendors do not mix (one backend);
    a set of one kind (``rtx3090+rtx3090``) is the uniform ``rtx3090x2``."""
    parts = [part.strip() for part in spec.split(MIXED_SEPARATOR)]
    if any(not part for part in parts):
        raise UsageError(
            f"--gpu {_shown(text)!r}: a mixed set needs a GPU on each side of every '+', e.g. --gpu rtx4090+rtx3090"
        )
    devices: list[GPU] = []
    for index, part in enumerate(parts, 1):
        one = _parse_one_kind(part, part, unified_fraction)
        if one is None:
            raise UsageError(f"in the mixed set --gpu {_shown(text)!r}, GPU {index}: {_unknown(part)}")
        devices += [one.gpu] * one.count
        if len(devices) > max_gpu_count():
            raise UsageError(f"--gpu {_shown(text, 60)!r} is more than {max_gpu_count():,} GPUs")
    unified = [gpu.id for gpu in devices if gpu.unified_memory]
    if unified:
        raise UsageError(
            f"--gpu {_shown(text)!r}: {unified[0]} is a unified-memory machine; it does not pool memory with other "
            "GPUs (give it alone)"
        )
    vendors = sorted({gpu.vendor for gpu in devices if gpu.vendor != "unknown"})
    if len(vendors) > 1:
        raise UsageError(
            f"--gpu {_shown(text)!r} mixes {' and '.join(vendors)} cards: one engine process runs on one vendor's "
            "backend; give cards of one vendor"
        )
    if len({gpu.id for gpu in devices}) == 1:
        return Hardware(gpu=devices[0], count=len(devices))
    return mixed_hardware(devices)


def mixed_hardware(devices: list[GPU] | tuple[GPU, ...]) -> Hardware:
    """A mixed set: ``gpu`` is the card with the least memory (it sets the budget of every equal shard), with the
    slowest memory bandwidth and compute of the set (tensor-parallel ranks wait for the slowest)."""
    from dataclasses import replace

    smallest = min(devices, key=lambda gpu: gpu.gpu_memory_bytes)
    bandwidths = [gpu.memory_bandwidth_gbs for gpu in devices]
    flops = [gpu.bf16_tflops_dense for gpu in devices]
    fp16 = [gpu.fp16_tensor_tflops for gpu in devices]
    budget = replace(
        smallest,
        memory_bandwidth_gbs=min(bandwidths) if None not in bandwidths else None,  # type: ignore[type-var]
        bf16_tflops_dense=min(flops) if None not in flops else None,  # type: ignore[type-var]
        fp16_tensor_tflops=min(fp16) if None not in fp16 else None,  # type: ignore[type-var]
    )
    return Hardware(gpu=budget, count=len(devices), devices=tuple(devices))


def max_compared_sets() -> int:
    """The most GPU sets one comparison names (hfvram/data/bounds.toml [hardware] maximum_compared_sets)."""
    return int(data_table("bounds.toml")["hardware"]["maximum_compared_sets"])


def split_gpu_list(text: str) -> list[str]:
    """The items of a comma list (``rtx4090,rtx5090,rtx3090x2``), each checked for being there: an empty item
    (``--gpu ,``, ``rtx4090,,h100``, a trailing comma) is a usage error, and so is more than the bound."""
    items = [item.strip() for item in text.split(LIST_SEPARATOR)]
    if not any(items):
        raise UsageError(f"--gpu {_shown(text)!r} lists no GPU: give sets separated by commas, e.g. rtx4090,h100")
    for index, item in enumerate(items, 1):
        if not item:
            raise UsageError(
                f"--gpu {_shown(text)!r}: item {index} of the comma list is empty (a doubled or trailing comma?)"
            )
    if len(items) > max_compared_sets():
        raise UsageError(f"--gpu lists {len(items):,} GPU sets: a comparison takes at most {max_compared_sets()}")
    return items


def is_gpu_list(text: str | None) -> bool:
    """Whether ``--gpu`` names several sets (a comma list) rather than one: a catalogue name never holds a comma."""
    return text is not None and LIST_SEPARATOR in text


def parse_gpu_sets(text: str, *, unified_fraction: float | None = None) -> tuple[Hardware, ...]:
    """A comma list of GPU sets (each a :func:`parse_gpu_spec`), in the order given; a set named twice is a usage
    error (it would be compared with itself)."""
    sets: list[Hardware] = []
    for index, item in enumerate(split_gpu_list(text), 1):
        try:
            hardware = parse_gpu_spec(item, unified_fraction=unified_fraction)
        except UsageError as error:
            raise UsageError(f"--gpu list item {index} ({_shown(item, 40)!r}): {error}") from None
        if any(known.label == hardware.label for known in sets):
            raise UsageError(f"--gpu {_shown(text)!r} names {hardware.label} twice: list each GPU set once")
        sets.append(hardware)
    return tuple(sets)


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
