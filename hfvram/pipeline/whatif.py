"""The ``--quant`` what-if: a GGUF repo's own file of that quant, ``--quant auto``'s search, the ``what_if``
object."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hfvram.errors import UsageError
from hfvram.pipeline.gguf_repo import gguf_repo_wanted
from hfvram.pipeline.model import engine_choice, with_quant, workload
from hfvram.pipeline.request import Request

if TYPE_CHECKING:
    from hfvram.spec import LoadedModel


def gguf_repo_quant(request: Request) -> Request:
    """A GGUF repo named without ``:QUANT`` and ``--quant Q``: the repo's own file of that quant (real, not a
    what-if), as ``org/repo:Q``; ``--quant auto`` answers for every quant of the repo (its recommendation)."""
    if request.quant is None or not gguf_repo_wanted(request.source):
        return request
    from dataclasses import replace

    if request.quant == "auto":
        return replace(request, quant=None)
    return replace(request, source=f"{request.source}:{request.quant.name}", quant=None)


def auto_quant(request: Request, loaded: LoadedModel) -> tuple[Request, LoadedModel, list[dict[str, Any]]]:
    """``--quant auto``: the largest candidate (by weight bytes) that fits, else the largest that is tight, else
    the smallest; each candidate under the engine asked for (or the one its format gets by default), candidates
    that engine refuses left out. Returns the request with the chosen quant, the model as it, and the candidates
    the search estimated (quant, weights bytes, verdict), largest first."""
    from dataclasses import replace

    from hfvram import quant
    from hfvram.engines import parse_engine_name
    from hfvram.estimate.core import estimate_memory

    if request.hardware is None:
        raise UsageError("--quant auto needs --gpu: the best quant is the largest that fits a GPU")
    sized = []
    for choice in quant.auto_candidates(request.engine, request.hardware):
        model = with_quant(loaded, choice)
        engine = engine_choice(request, model)
        if quant.engine_rule(choice, parse_engine_name(engine.name)[0], request.hardware)[0] is None:
            sized.append((model.spec.weights_bytes or 0, choice, model, engine))
    if not sized:
        engine_name = request.engine or "the default engine"
        raise UsageError(f"--quant auto: {engine_name} runs none of the what-if formats; name one with --quant")
    sized.sort(key=lambda item: -item[0])
    verdicts: dict[int, str | None] = {}

    def verdict(index: int) -> str | None:
        if index not in verdicts:
            _, _, model, engine = sized[index]
            verdicts[index] = estimate_memory(model.spec, request.hardware, engine, workload(request)).verdict
        return verdicts[index]

    # memory grows with the weights: a binary search finds the largest that fits (else is tight)
    pick = _first_index(len(sized), lambda i: verdict(i) == "fits")
    if pick is None:
        pick = _first_index(len(sized), lambda i: verdict(i) in ("fits", "tight"))
    if pick is None and request.hardware.ram_bytes is not None:
        # none runs on the GPUs alone: with --ram, the largest whose engine placement into RAM fits that RAM
        # (llama.cpp --fit, Ollama); without --ram the RAM is unknown and every quant would "offload"
        from hfvram.estimate.core import with_offload

        def offloaded(index: int) -> str | None:
            _, _, model, engine = sized[index]
            wl = workload(request)
            est = with_offload(estimate_memory(model.spec, request.hardware, engine, wl), engine, wl)
            verdicts[index] = est.verdict
            return est.verdict

        pick = _first_index(len(sized), lambda i: offloaded(i) == "offload")
    if pick is None:
        pick = len(sized) - 1
    tried = [
        {"quant": quant.label(sized[i][1]), "weights_bytes": sized[i][0], "verdict": verdicts.get(i)}
        for i in sorted(verdicts)
    ]
    return replace(request, quant=sized[pick][1]), sized[pick][2], tried


def _first_index(count: int, good: Any) -> int | None:
    """The first index in ``range(count)`` where ``good`` holds, for a ``good`` that holds from some index on."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if good(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo if lo < count and good(lo) else None


def what_if_dict(choice: Any, loaded: LoadedModel, tried: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The check document's ``what_if`` object: which quant, from which family, sized how."""
    from hfvram import quant

    weights = loaded.spec.weights
    out: dict[str, Any] = {
        "quant": quant.label(choice),
        "family": getattr(choice, "family", None),
        "weights_bytes": weights.total_bytes if weights else None,
        "weights_source": weights.source if weights else None,
        "bytes_by_type": dict(weights.bytes_by_dtype) if weights else {},
        "auto": None,
    }
    if tried is not None:
        out["auto"] = {"chosen": quant.label(choice), "candidates": tried}
    return out
