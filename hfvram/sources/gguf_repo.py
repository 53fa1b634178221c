"""A GGUF repo as a whole: its file listing grouped into quants (split sets merged, ``mmproj`` files apart), and
each quant sized from the listing's file sizes with the architecture facts of one header read.

Kept free of the HTTP stack (the Hub side lives in ``hub.load_hub_gguf_repo``) so that the embedded catalogue
answers offline with the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from hfvram.errors import MalformedFileError
from hfvram.spec import LoadedModel, Weights

#: facts-cache entry holding a GGUF repo's file listing ([path, size] pairs) at a commit
LISTING = "gguf-listing"

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_TAG = re.compile(r"(?i)(?:^|[._\-])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32|MXFP4(?:_MOE)?)(?=[._\-]|$)")


@dataclass(frozen=True)
class Quant:
    """One quant of a repo: a single .gguf file or a merged split set."""

    name: str
    files: tuple[str, ...]
    #: the files' sizes summed (None when the listing gives no size for one of them)
    file_bytes: int | None


@dataclass(frozen=True)
class GgufListing:
    repo_id: str
    revision: str | None
    quants: tuple[Quant, ...]
    #: vision projectors (``mmproj*.gguf``): reported apart, never a quant
    mmproj: tuple[tuple[str, int | None], ...]
    #: where the listing came from ("Hub tree API at <sha>", "embedded catalogue …")
    origin: str
    #: True when the listing holds only some of the repo's files (a catalogue listing of the sizes on record)
    partial: bool = False


def _max_files() -> int:
    from hfvram.sources.limits import count_bound

    return count_bound("max_gguf_files")


def is_mmproj(path: str) -> bool:
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


_SPLIT_SUFFIX = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TRAILING_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


def quant_bits(path: str) -> int:
    """llama.cpp's ``extract_quant_bits``: the first number of the file name's trailing tag (``Q4_K_M`` → 4, ``F16`` →
    16, ``BF16`` → 16), 0 without one (common/download.cpp ``get_gguf_split_info``)."""
    if not path.lower().endswith(".gguf"):
        return 0
    prefix = path[: -len(".gguf")]
    split = _SPLIT_SUFFIX.match(prefix)
    if split:
        prefix = split.group(1)
    tag = _TRAILING_TAG.search(prefix)
    digits = re.search(r"[0-9]+", tag.group(1)) if tag else None
    return int(digits.group(0)) if digits else 0


def best_mmproj(files: Iterable[str], model: str) -> str | None:
    """The projector llama-server's ``-hf`` downloads with ``model`` (common/download.cpp ``find_best_mmproj`` →
    ``find_best_sibling``, docs/engines/llamacpp.md#llamacpp-extra-models): among the ``.gguf`` files whose path
    holds ``mmproj`` (case-sensitive) and whose folders lead to the model's, the deepest, then the one whose quant
    bits are nearest the model's (the first of a tie); None when there is none."""
    model_dirs = model.split("/")[:-1]
    bits = quant_bits(model)
    best: tuple[int, int] | None = None
    chosen = None
    for path in files:
        if not path.endswith(".gguf") or "mmproj" not in path:
            continue
        dirs = path.split("/")[:-1]
        if dirs != model_dirs[: len(dirs)]:
            continue
        rank = (len(dirs), -abs(quant_bits(path) - bits))
        if best is None or rank > best:
            best, chosen = rank, path
    return chosen


def quant_name(path: str) -> str:
    """The quant tag a file name carries (``Q4_K_M``, ``IQ4_XS``, ``BF16``), else the name without ``.gguf``."""
    base = _SPLIT.sub(".gguf", path.rsplit("/", 1)[-1])
    stem = base[: -len(".gguf")] if base.lower().endswith(".gguf") else base
    found = _TAG.findall(stem)
    return found[-1].upper() if found else stem


def group_listing(
    repo_id: str, entries: Iterable[tuple[str, int | None]], *, revision: str | None, origin: str
) -> GgufListing:
    """``(path, size)`` pairs of a repo → its quants (largest first) and its mmproj files."""
    bound = _max_files()
    ggufs: list[tuple[str, int | None]] = []
    for i, (path, size) in enumerate(entries):
        if i >= bound * 8:
            raise MalformedFileError(f"more than {bound * 8} files listed", file=f"{repo_id} (file listing)")
        if isinstance(path, str) and path.lower().endswith(".gguf"):
            ggufs.append((path, _plausible_size(size, repo_id, path)))
    if len(ggufs) > bound:
        raise MalformedFileError(
            f"{len(ggufs)} GGUF files, more than the {bound} hfvram reads (max_gguf_files in hfvram/data/limits.toml)",
            file=f"{repo_id} (file listing)",
        )
    mmproj = tuple(sorted((p, s) for p, s in ggufs if is_mmproj(p)))
    groups: dict[str, list[tuple[str, int | None]]] = {}
    for path, size in ggufs:
        if not is_mmproj(path):
            groups.setdefault(_SPLIT.sub("", path), []).append((path, size))
    quants = []
    for key, members in groups.items():
        members.sort()
        sizes = [s for _, s in members]
        total = None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)
        quants.append(
            Quant(
                quant_name(key if key.lower().endswith(".gguf") else key + ".gguf"), tuple(p for p, _ in members), total
            )
        )
    names = [q.name for q in quants]
    quants = [q if names.count(q.name) == 1 else replace(q, name=q.files[0].rsplit("/", 1)[-1]) for q in quants]
    quants.sort(key=lambda q: (-(q.file_bytes or 0), q.name))
    return GgufListing(repo_id, revision, tuple(quants), mmproj, origin)


def header_quant(listing: GgufListing) -> Quant:
    """The quant whose header is read for the architecture facts: the smallest sized one (all quants of a repo
    share the architecture), a single file before a split set of the same size."""
    sized = [q for q in listing.quants if q.file_bytes is not None] or list(listing.quants)
    return min(sized, key=lambda q: (len(q.files) > 1, q.file_bytes or 0, q.name))


def quant_model(read: LoadedModel, quant: Quant, *, header_bytes: int, listing: GgufListing) -> LoadedModel:
    """``read`` (the model of the header read) as ``quant``: the same architecture, the weights sized from the
    listing (file bytes minus the header's bytes, once per quant: the metadata with the vocabulary is in the first
    part of a split set only), the components scaled like the file read."""
    spec = read.spec
    if quant.files == read.source.files or spec.weights is None or quant.file_bytes is None:
        return LoadedModel(spec, replace(read.source, files=quant.files))
    weights = spec.weights
    total = max(quant.file_bytes - header_bytes, 0)
    factor = total / weights.total_bytes if weights.total_bytes else 0.0
    by_component = {name: round(value * factor) for name, value in weights.bytes_by_component.items()}
    if by_component:  # rounding: the components still sum to the total
        biggest = max(by_component, key=lambda k: by_component[k])
        by_component[biggest] += total - sum(by_component.values())
    basis = (
        f"{listing.origin}: {' + '.join(quant.files)} = {quant.file_bytes} bytes, minus {header_bytes} header bytes "
        f"(the metadata and tensor infos of {read.source.files[0]}, which every quant of the repo shares up to the "
        "tensor types)"
    )
    new_weights = Weights(
        total_bytes=total,
        params_total=weights.params_total,
        bytes_by_component=by_component,
        params_by_component=dict(weights.params_by_component),
        bytes_by_dtype={quant.name: total},
        exact=False,
        source=basis,
        num_tensors=weights.num_tensors,
    )
    quantization = spec.quantization
    if quantization is not None:
        quantization = replace(quantization, details={**quantization.details, "file_type": quant.name}, bits=None)
    provenance = {**spec.provenance, "weights": basis}
    extra = {**spec.extra, "file_type": quant.name}
    new_spec = replace(spec, weights=new_weights, quantization=quantization, provenance=provenance, extra=extra)
    return LoadedModel(new_spec, replace(read.source, files=quant.files))


def listing_from_json(repo_id: str, value: object, *, revision: str | None, origin: str) -> GgufListing | None:
    """A listing stored as ``[[path, size], …]`` (facts cache, embedded catalogue); None when it does not decode."""
    if not isinstance(value, list):
        return None
    pairs = [(p[0], p[1]) for p in value if isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)]
    return group_listing(repo_id, pairs, revision=revision, origin=origin)


def listing_to_json(entries: Iterable[tuple[str, int | None]]) -> list[list[object]]:
    return [[path, size] for path, size in entries]


def _plausible_size(size: object, repo_id: str, path: str) -> int | None:
    """A listed file size: a whole number of bytes up to bounds.toml [safetensors] maximum_bytes; None when none is given;
    a larger one (a 4,000-digit size) is a MalformedFileError, never a figure."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None
    from hfvram.readers.bounds import bound

    most = bound("safetensors", "maximum_bytes")  # one checkpoint at most
    if size > most:
        raise MalformedFileError(
            f"listed size of {path[:80]} is more than {most:,} bytes", file=f"{repo_id} (file listing)"
        )
    return size


def tree_entries(tree: object, repo_id: str) -> list[tuple[str, int | None]]:
    """The Hub tree API's answer (a list of ``{"type", "path", "size", "lfs": {"size"}}``) as (path, size) pairs."""
    if not isinstance(tree, list):
        raise MalformedFileError("tree listing is not a list", file=f"{repo_id} (Hub tree API)")
    bound = _max_files() * 8
    if len(tree) > bound:
        raise MalformedFileError(f"more than {bound} entries in the tree listing", file=f"{repo_id} (Hub tree API)")
    pairs: list[tuple[str, int | None]] = []
    for item in tree:
        if not isinstance(item, Mapping) or item.get("type") != "file" or not isinstance(item.get("path"), str):
            continue
        lfs = item.get("lfs")
        size = lfs.get("size") if isinstance(lfs, Mapping) else None
        if not isinstance(size, int):
            size = item.get("size")
        pairs.append((item["path"], size if isinstance(size, int) and not isinstance(size, bool) else None))
    return pairs
