"""The model loaded (a ``--quant`` what-if applied), the engine choice and workload, the estimate with its
engine rules and a saved calibration applied; the estimate for a start-up log's run (``calibrate --model``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hfvram.errors import HfvramError, UsageError
from hfvram.pipeline.request import Request, RunOptions

if TYPE_CHECKING:
    from hfvram.estimate.types import EngineChoice, Estimate, Hardware, Workload
    from hfvram.spec import LoadedModel


def load(request: Request, options: RunOptions, *, need_split: bool = False) -> LoadedModel:
    from hfvram.sources import load_model

    # every tensor header only for --explain: otherwise the exact total is split like the config shapes
    loaded = load_model(
        request.source,
        revision=request.revision,
        token=options.token,
        offline=options.offline,
        need_split=need_split or options.explain,
    )
    if request.quant is None or isinstance(request.quant, str):
        return loaded  # as the files are; "auto" is applied per candidate (auto_quant)
    return with_quant(loaded, request.quant)


def with_quant(loaded: LoadedModel, choice: Any) -> LoadedModel:
    """The loaded model as if its weights were stored as ``choice`` (hfvram.quant): a what-if."""
    from dataclasses import replace

    from hfvram import quant
    from hfvram.errors import UnsupportedLayoutError

    try:
        spec = quant.apply(loaded.spec, choice)
    except HfvramError:
        raise
    except ValueError as error:
        raise UnsupportedLayoutError(f"--quant {quant.label(choice)}: {error}") from error
    return replace(loaded, spec=spec)


def parse_engine(name: str) -> str:
    from hfvram.engines import parse_engine_name

    return parse_engine_name(name)[0]


def engine_choice(request: Request, loaded: LoadedModel) -> EngineChoice:
    from hfvram.estimate.types import EngineChoice

    name = request.engine
    if name is None:
        from hfvram.estimate.defaults import default_engine

        name = default_engine(loaded.spec, loaded.source.kind, request.hardware).name
    if request.context_auto and parse_engine(name) != "vllm":
        raise UsageError(f"--context auto is vLLM's automatic length (--max-model-len auto); {name} has none: give N")
    return EngineChoice(
        name=name,
        version=request.engine_version,
        settings=dict(request.settings),
        tp=request.tp,
        pp=request.pp,
        gpu_util=request.gpu_util,
        draft=request.draft,
        projector=request.projector,
    )


def with_projector(request: Request, loaded: LoadedModel, options: RunOptions | None = None) -> Request:
    """The request with the projector of a llama.cpp line read from its GGUF header (metadata and tensor infos only,
    the model's own caps): ``--mmproj FILE`` (a local file, else a file of the model's Hub repo, read by range
    requests), or — for a model read from a Hub GGUF repo, without ``--mmproj`` / ``--no-mmproj`` — the
    ``mmproj-*.gguf`` that llama-server's ``-hf`` downloads with it (:func:`hub_mmproj_choice`). The bytes of its
    tensors are what llama.cpp's clip code loads on the GPU (docs/engines/llamacpp.md#llamacpp-extra-models). A file
    that cannot be read is kept as its error (the estimate warns and counts nothing of it); other engines read none."""
    from dataclasses import replace

    from hfvram.engines import parse_engine_name

    named = {key.replace("_", "-").lstrip("-").lower(): value for key, value in request.settings.items()}
    name = (named.get("mmproj") or named.get("mm") or "")[:200]
    if request.projector is not None or parse_engine_name(engine_choice(request, loaded).name)[0] != "llama.cpp":
        return request
    source = loaded.source
    on_hub = source.kind == "hub" and bool(source.repo_id) and bool(source.revision)
    origin = "file"
    if not name:
        if "no-mmproj" in named or not on_hub or not source.files:
            return request
        # llama-server -hf: download_mmproj = !no_mmproj && no --mmproj / --mmproj-url (common/arg.cpp)
        name = hub_mmproj_choice(request, loaded, options) or ""
        origin = "hub-auto"
        if not name:
            return request
    from pathlib import Path

    from hfvram.estimate.types import ProjectorFile

    local = Path(name).expanduser()
    if origin == "file" and on_hub and not local.exists() and name.lower().endswith(".gguf"):
        origin = "hub"
    try:
        header = _projector_header(local, name, origin, loaded, options)
    except (HfvramError, OSError) as error:
        from hfvram.redaction import redact

        why = redact(str(error).splitlines()[0][:200]) if str(error) else type(error).__name__
        return replace(request, projector=ProjectorFile(name=name, error=why, origin=origin))
    arch = header.metadata.get("general.architecture")
    return replace(
        request,
        projector=ProjectorFile(
            name=name,
            weight_bytes=sum(tensor.nbytes for tensor in header.tensors),
            tensors=len(header.tensors),
            arch=arch[:40] if isinstance(arch, str) else None,
            origin=origin,
            repo_id=source.repo_id if origin != "file" else None,
        ),
    )


def _projector_header(local, name: str, origin: str, loaded: LoadedModel, options: RunOptions | None):
    """The projector's GGUF header: from the local file, else by range requests on the model's Hub repo at the
    commit the model was read at (the same reader and caps as a Hub GGUF model)."""
    if origin == "file":
        from hfvram.sources.local import read_gguf_file_header

        return read_gguf_file_header(local)
    from hfvram.sources import hub
    from hfvram.sources.limits import source_deadline

    source = loaded.source
    assert source.repo_id is not None and source.revision is not None
    with source_deadline():
        return hub.fetch_gguf_header(source.repo_id, source.revision, name, options.token if options else None)[0]


def hub_mmproj_choice(request: Request, loaded: LoadedModel, options: RunOptions | None) -> str | None:
    """The projector llama-server's ``-hf`` downloads with a Hub GGUF: the repo's file listing (the facts cache's,
    which the model's own read stored with its ref, else one model-info request), then ``find_best_mmproj``
    (:func:`hfvram.sources.gguf_repo.best_mmproj`); None when the repo has none, or offline without a cached one."""
    from hfvram.sources.cache import FactsCache
    from hfvram.sources.gguf_repo import best_mmproj
    from hfvram.sources.repo_files import MODEL_INFO, RepoInfo
    from hfvram.sources.resolve import HubSource, parse_source

    source = loaded.source
    assert source.repo_id is not None and source.revision is not None
    cache = FactsCache()
    parsed = parse_source(request.source)
    asked = parsed.revision if isinstance(parsed, HubSource) else None
    # the facts of a commit are bundled with the ref that named it: load that ref's bundle first
    for revision in dict.fromkeys(r for r in (request.revision, asked, "main") if r):
        if cache.resolve(source.repo_id, revision, allow_stale=True) == source.revision:
            break
    cached = cache.get(source.repo_id, source.revision, MODEL_INFO)
    info = RepoInfo.from_json(source.repo_id, cached) if isinstance(cached, dict) else None
    if info is None or info.partial:
        if options is not None and options.offline:
            return None
        from hfvram.sources import hub
        from hfvram.sources.limits import source_deadline

        try:
            with source_deadline():
                info = hub.fetch_repo_info(source.repo_id, source.revision, options.token if options else None)
        except HfvramError:
            return None
    return best_mmproj(info.files, source.files[0])


def with_draft(request: Request, options: RunOptions, loaded: LoadedModel) -> Request:
    """The request with the speculative draft checkpoint its vLLM settings name (``--speculative-config
    '{"model": …}'`` for a draft model / EAGLE head, or ``--speculative-model``) read through the same sources as the
    model (Hub, local folder, HF cache; the same caps, deadlines and errors). A draft that cannot be read is kept as
    its error (the estimate warns and counts nothing of it); other engines read no draft (they warn). A llama.cpp
    line's ``--mmproj`` file is read here too (:func:`with_projector`)."""
    request = with_projector(request, loaded, options)
    named = {key.replace("_", "-").lstrip("-").lower(): value for key, value in request.settings.items()}
    llama_draft = (named.get("model-draft") or named.get("md") or "")[:200]
    if request.draft is not None or not (llama_draft or any(key.startswith("speculative-") for key in named)):
        return request
    from dataclasses import replace

    from hfvram.engines import parse_engine_name

    choice = engine_choice(request, loaded)
    engine = parse_engine_name(choice.name)[0]
    if engine not in ("vllm", "llama.cpp"):
        return request
    from hfvram.engines.vllm.profile import speculative_draft_name
    from hfvram.estimate.types import DraftModel
    from hfvram.sources import load_model

    # llama.cpp: ``-md FILE`` is a second GGUF, read like the model's own file (docs/engines/llamacpp.md#llamacpp-draft-model)
    name = (llama_draft or None) if engine == "llama.cpp" else speculative_draft_name(choice)
    if name is None:
        return request
    try:
        draft = load_model(name, token=options.token, offline=options.offline, need_split=options.explain)
    except HfvramError as error:
        from hfvram.redaction import redact

        why = redact(str(error).splitlines()[0][:200]) if str(error) else type(error).__name__
        return replace(request, draft=DraftModel(name=name, error=why))
    where = draft.source
    shown = " ".join(part for part in (where.kind, where.repo_id, where.revision and f"@{where.revision[:12]}") if part)
    return replace(request, draft=DraftModel(name=name, spec=draft.spec, source=shown or where.kind))


def workload(request: Request, *, context: int | None = None, kv_dtype: str | None = None) -> Workload:
    from hfvram.estimate.types import Workload

    return Workload(
        context=context if context is not None else request.context,
        concurrency=request.concurrency,
        kv_dtype=kv_dtype or request.kv_dtype,
        context_cap=request.context_cap,
    )


def run_estimate(request: Request, options: RunOptions, loaded: LoadedModel) -> Estimate:
    """The estimate for one loaded model, with a calibration applied when one matches (engine + GPU)."""
    from hfvram.estimate.core import estimate

    choice = engine_choice(request, loaded)
    est = estimate(loaded.spec, request.hardware, choice, workload(request))
    est = quant_engine_rule(est, request, choice.name)
    return calibrate_estimate(est, options, choice.name)


def quant_engine_rule(est: Estimate, request: Request, engine: str) -> Estimate:
    """The ``--quant`` format's engine rule: a refusal (verdict does_not_fit, ``engine rule: …``) or warnings."""
    if request.quant is None or isinstance(request.quant, str):
        return est
    from hfvram import quant
    from hfvram.engines import parse_engine_name
    from hfvram.estimate.engine_rules import with_refusals

    reason, notes = quant.engine_rule(request.quant, parse_engine_name(engine)[0], request.hardware)
    return with_refusals(est, [reason] if reason else [], list(notes))


def calibrate_estimate(est: Estimate, options: RunOptions, engine: str) -> Estimate:
    """A saved calibration replaces the activation / overhead terms only where it was measured with this engine's
    rule set (release range), on this GPU, on a model of this family and size; one that does not match is named in
    a warning and not applied. ``--calibration FILE`` is applied as asked, its mismatches said in warnings."""
    if est.hardware is None:
        return est
    from dataclasses import replace
    from pathlib import Path

    if options.calibration:
        from hfvram import calibrate

        record = calibrate.load_calibration_file(Path(options.calibration))
        return calibrate.apply_calibration(est, record, options.calibration)
    from hfvram.calibrate.files import calibration_files

    if est.hardware.mixed or not calibration_files(engine, est.hardware.gpu.id):
        # the common case: no calibration saved (the log patterns and the apply code are not imported); a calibration
        # is measured on one kind of GPU, never on a mixed set
        return est
    from hfvram import calibrate

    notes = []
    for path, record in calibrate.find_calibrations(engine, est.hardware.gpu.id):
        reasons = calibrate.calibration_match(est, record)
        if not reasons:
            return calibrate.apply_calibration(est, record, str(path))
        notes.append(calibrate.not_applied_warning(path, reasons))
    return replace(est, warnings=tuple(est.warnings) + tuple(notes)) if notes else est


def default_engine_notes(request: Request, loaded: LoadedModel) -> list[str]:
    """Say when no --engine was given and the engine was chosen for the hardware rather than by the plain default
    (the ``note`` of the engine.toml ``[[default_when]]`` rule that chose it)."""
    if request.engine is not None:
        return []
    from hfvram.estimate.defaults import default_engine

    note = default_engine(loaded.spec, loaded.source.kind, request.hardware).note
    return [note] if note else []


def calibration_prediction(
    measured: Any,
    model: str,
    hardware: Hardware | None,
    engine_name: str | None,
    engine_version: str | None,
    settings: tuple[str, ...],
    offline: bool | None,
    token: str | None,
) -> Estimate:
    """hfvram's estimate for the run the log describes (context, memory fraction, TP and KV dtype from the log)."""
    from hfvram.estimate.core import estimate
    from hfvram.estimate.engine_args import parse_set_options
    from hfvram.estimate.types import EngineChoice, Workload
    from hfvram.sources import load_model

    loaded = load_model(model, token=token, offline=offline, need_split=True)
    version = engine_version or measured.engine_version
    notes: list[str] = []
    if version is None and (engine_name or measured.engine) == "vllm" and measured.engine_generation == "v0":
        # the log's own lines are V0's: the newest release that runs V0 by default, not the newest (V1) rules
        from hfvram.engines.vllm.profile import newest_release_running

        version = newest_release_running("v0")
        if version:
            notes.append(
                f"the log's lines are vLLM V0's and name no release: compared with the vllm@{version} rules, the "
                "newest release that runs V0 by default (--engine vllm@X to name the release)"
            )
    choice = EngineChoice(
        name=engine_name or measured.engine,
        version=version,
        settings=parse_set_options(list(settings)),
        tp=measured.tp,
        gpu_util=measured.gpu_util,
    )
    kv_dtype = measured.kv_dtype or "auto"
    if kv_dtype in ("f16",):
        kv_dtype = "fp16"
    from dataclasses import replace

    est = estimate(loaded.spec, hardware, choice, Workload(context=measured.context, kv_dtype=kv_dtype))
    return replace(est, warnings=(*notes, *est.warnings)) if notes else est
