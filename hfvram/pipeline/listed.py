"""A scan's row answered from the owner's Hub listing alone: a repo whose weights (the listing's per-dtype counts,
``safetensors.parameters``) outweigh the GPUs is does-not-fit, with no further request for it, when the engine
holds every weight on its GPUs (``[weights_on_gpu]`` of its engine.toml, none of its ``unless`` settings given)
and no ``--quant`` what-if is asked (docs/architecture.md, "Talking to the Hub")."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hfvram.pipeline.request import Request, RunOptions

#: off while a caller needs every row's architecture (``models --hub --family``: the listing's row has none)
_OFF: list[bool] = []


@contextmanager
def listed_rows_off() -> Iterator[None]:
    """No row answered from the listing alone within (a scan's worker processes forked within inherit it)."""
    _OFF.append(True)
    try:
        yield
    finally:
        _OFF.pop()


def listed_row(request: Request, options: RunOptions) -> dict[str, Any] | None:
    """The does-not-fit ``hfvram.check/1`` row of ``request``'s repo from the listing, or None when the listing
    does not decide it (then the repo is read as usual)."""
    hub = sys.modules.get("hfvram.sources.hub")  # not loaded: no listing was read in this process
    if _OFF or hub is None or request.hardware is None or request.quant is not None or request.revision is not None:
        return None
    from hfvram.errors import HfvramError
    from hfvram.sources.resolve import HubSource, parse_source

    try:
        parsed = parse_source(request.source)
    except HfvramError:
        return None
    if not isinstance(parsed, HubSource) or parsed.revision is not None or parsed.gguf is not None:
        return None
    info = hub.listed_info(parsed.repo_id)
    if info is None or not info.dtype_parameters or any(name.lower().endswith(".gguf") for name in info.files):
        return None
    engine, note = _engine(request)
    if engine is None:
        return None
    from hfvram.estimate.listed import LISTING_PROVENANCE, listed_verdict

    verdict = listed_verdict(info.dtype_parameters, request.hardware)
    if verdict is None:
        return None
    from hfvram.estimate.types import Workload
    from hfvram.redaction import redact_document
    from hfvram.report.jsonout import listed_check_dict
    from hfvram.spec import SourceInfo

    weights = tuple(name for name in info.files if name.endswith(".safetensors"))
    source = SourceInfo(kind="hub", repo_id=parsed.repo_id, revision=info.sha, files=weights)
    workload = Workload(context=request.context, concurrency=request.concurrency, kv_dtype=request.kv_dtype)
    row = listed_check_dict(
        source,
        verdict,
        (request.hardware, engine, request.gpu_util, workload),
        params_total=sum(info.dtype_parameters.values()),
        provenance=LISTING_PROVENANCE,
        explain=options.explain,
    )
    if note:
        row["warnings"].append(note)
    hub.forget_listed(parsed.repo_id)
    return redact_document(row)


def _engine(request: Request) -> tuple[str | None, str | None]:
    """The engine of the row and the default engine's note; None when the engine may hold weights elsewhere than
    on its GPUs (no ``[weights_on_gpu]``, or one of its ``unless`` settings is given)."""
    from hfvram.engines import registry

    name, note = request.engine, None
    if name is None:
        from hfvram.estimate.defaults import default_engine_for

        chosen = default_engine_for("safetensors", request.hardware)
        name, note = chosen.name, chosen.note
    entry = registry().get(name)
    unless = None if entry is None else entry.weights_on_gpu_unless
    if unless is None or any(key in request.settings for key in unless):
        return None, None
    return name, note
