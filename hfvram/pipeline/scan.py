"""Many models: a scan list read, each source checked (an error row, never a raise), sorted, the exit code;
the ``models`` command's query and the catalogue's rows."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hfvram.errors import UsageError
from hfvram.pipeline.check import check_report
from hfvram.pipeline.request import (
    EXIT_UNREADABLE,
    Request,
    RunOptions,
    exit_code_for,
    parse_gpu_option,
    resolve_request,
)

#: the most sources one scan reads
SCAN_MAX_SOURCES = 100_000


#: what a line of a scan list may name: a Hub repo id (``org/name[@rev][:QUANT]``, with Ollama's ``hf.co/``), a
#: path (``./…``, ``/…``, ``~/…``, no white space) or a ``.gguf`` file
SCAN_LINE = re.compile(
    r"(?:(?:https?://)?(?:www\.)?(?:hf\.co|huggingface\.co)/)?[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}"
    r"(?:@[\w./-]{1,256})?(?::[\w.-]{1,200})?|[.~/]\S{0,4095}|\S{1,4091}\.gguf",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SourceList:
    """A scan list as read: the sources in order, each once, and how many lines repeated one."""

    sources: list[str]
    duplicates: int = 0


def read_source_list(text: str) -> list[str]:
    """One SOURCE per line; ``#`` starts a comment; blank lines are skipped; a repeated source is kept once."""
    return read_scan_list(text).sources


#: how a scan list line that is not a SOURCE is passed on: this prefix and its line number (its text is dropped)
NOT_A_SOURCE = "\x00line "


def read_scan_list(text: str) -> SourceList:
    """:func:`read_source_list` with the count of repeated lines. A line that is not a SOURCE (:data:`SCAN_LINE`)
    is kept by its line number only (``NOT_A_SOURCE`` + the number), so that its error row never shows its text:
    the list may be any file."""
    text = text.removeprefix("\ufeff")
    sources: dict[str, None] = {}
    lines = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if not SCAN_LINE.fullmatch(line):
            line = f"{NOT_A_SOURCE}{number}"
        lines += 1
        if lines > SCAN_MAX_SOURCES:
            raise UsageError(f"more than {SCAN_MAX_SOURCES:,} sources in the list: a scan reads at most that many")
        sources[line] = None
    return SourceList(list(sources), lines - len(sources))


#: the request a scan's options make, parsed once per options (RunOptions -> a Request for the first source)
_SCAN_REQUESTS: dict[RunOptions, Request] = {}


def scan_request(options: RunOptions, source: str) -> Request:
    """:func:`resolve_request` for one source of a scan. Without a pasted command line (which may name a model to
    compare with the source) the options parse to the same request for every source: parsed once (the GPU spec,
    the KV type, the settings), then only the source differs."""
    if options.engine_args or not source:
        return resolve_request(options, source)
    template = _SCAN_REQUESTS.get(options)
    if template is None:
        template = resolve_request(options, source)  # a usage error is raised, and parsed again, for every source
        if len(_SCAN_REQUESTS) >= 16:
            _SCAN_REQUESTS.clear()
        _SCAN_REQUESTS[options] = template
    if template.source == source:
        return template
    from dataclasses import replace

    return replace(template, source=source, settings=dict(template.settings))


def scan_one(source: str, options: RunOptions) -> dict[str, Any]:
    """A check/1 object for one source, or an error row; never raises for a model problem."""
    from hfvram.report.jsonout import error_dict

    if source.startswith(NOT_A_SOURCE):
        shown = source.removeprefix("\x00")
        why = f"scan list {shown}: not a SOURCE (org/name[@rev][:QUANT], ./folder, a .gguf file); its text is not shown"
        return error_dict(shown, UsageError(why))
    try:
        request = scan_request(options, source)
        from hfvram.pipeline.listed import listed_row

        listed = listed_row(request, options)  # weights alone too large, from the owner's listing: nothing read
        if listed is not None:
            return listed
        return check_report(request, options, whole_gguf_repo=False)  # one row per source: name the quant
    except Exception as error:  # one broken source must not stop the others
        from hfvram.redaction import redact_document

        return redact_document(error_dict(source, error))


VERDICT_ORDER = {"fits": 0, "tight": 1, "offload": 2, "does_not_fit": 3, None: 4}


def scan_sort_key(report: dict[str, Any]) -> tuple[int, int, str]:
    """Sorted by verdict (fits first, errors last) then by memory per GPU."""
    if "error" in report:
        return (4, 0, report["source"].get("text") or "")
    return (
        VERDICT_ORDER.get(report.get("verdict"), 4),
        report["per_gpu"]["total"],
        report["source"].get("repo_id") or "",
    )


def scan_exit_code(reports: Sequence[dict[str, Any]], fail_on: str | bool | None = None) -> int:
    if any("error" in report for report in reports):
        return EXIT_UNREADABLE
    return exit_code_for((report.get("verdict") for report in reports), fail_on)


def models_query(options: RunOptions, *, family: str | None, sort: str) -> dict[str, Any]:
    """The ``models`` query, checked before any model is read: a missing, empty or unknown ``--gpu``, a bad number
    or engine is one usage error (exit 2), not an error row per model."""
    from hfvram.sources.catalog import catalog_date, catalog_repos

    if options.gpu is None:
        raise UsageError("models needs --gpu (a GPU or Mac such as --gpu m4-max-64; `hfvram gpus` lists them)")
    parse_gpu_option(options.gpu, options.unified_fraction)
    repos = catalog_repos()
    request = resolve_request(options, repos[0] if repos else "catalogue")
    query: dict[str, Any] = {
        "gpu": options.gpu,
        "engine": options.engine,
        "context": request.context,
        "concurrency": request.concurrency,
        "family": family,
        "sort": sort,
        "catalogue_built": catalog_date(),
    }
    if options.quant is not None:
        query["quant"] = options.quant  # an addition: only with --quant
    return query


def models_rows(
    options: RunOptions, *, family: str | None, sort: str, progress: Callable[[int, int], None] | None = None
) -> list[dict[str, Any]]:
    """One check/1 row per repo of the embedded catalogue (offline: never the network), filtered by family and
    sorted (hfvram.report.models). ``progress(done, total)`` after each repo (the CLI's progress bar)."""
    from dataclasses import replace

    from hfvram.report.models import select_rows
    from hfvram.sources.catalog import catalog_repos

    offline = replace(options, offline=True)
    # only the repos whose stored config could name the family are checked (a check with --quant auto sizes every
    # quant of every repo); select_rows still keeps exactly the rows whose architecture or model type holds it
    repos = [repo for repo in catalog_repos() if may_hold_family(repo, family)]

    def checked() -> Iterator[dict[str, Any]]:
        for done, repo in enumerate(repos, 1):
            row = scan_one(repo, offline)
            if progress is not None:
                progress(done, len(repos))
            yield row

    return select_rows(checked(), family=family, sort=sort)


def may_hold_family(repo_id: str, family: str | None) -> bool:
    """Whether the catalogue's stored config.json of ``repo_id`` could give a row of ``family``: any of its
    architectures or model types (the text model's too) holds it, or the config does not say (it is then checked)."""
    import json

    from hfvram.sources.catalog import load_catalog

    if not family:
        return True
    repos = load_catalog().get("repos")
    entry = repos.get(repo_id) if isinstance(repos, dict) else None
    text = (entry.get("files") or {}).get("config.json") if isinstance(entry, dict) else None
    try:
        config = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        config = None
    if not isinstance(config, dict):
        return True
    names: list[str] = []
    for part in (config, config.get("text_config")):
        if isinstance(part, dict):
            architectures = part.get("architectures")
            names += [str(a) for a in architectures] if isinstance(architectures, list) else []
            names.append(str(part.get("model_type") or ""))
    if not config.get("architectures") or not config.get("model_type"):
        return True
    wanted = family.strip().lower()
    return any(wanted in name.lower() for name in names)


def catalogue_params(repos: Sequence[str]) -> dict[str, int | None]:
    """Total parameters of catalogue repos, as the readers derive them from the stored files (None if unread)."""
    from hfvram.sources.catalog import load_from_catalog

    sizes: dict[str, int | None] = {}
    for repo in repos:
        try:
            loaded = load_from_catalog(repo, reason="listing the catalogue")
            sizes[repo] = None if loaded is None else loaded.spec.params_total
        except Exception:  # one unreadable entry must not stop the listing
            sizes[repo] = None
    return sizes
