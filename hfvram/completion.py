"""Shell completion of option values: ``--gpu`` (catalogue ids and aliases, ``x2``/``x4``/``x8`` counts, the last
item of a comma list or mixed set),
``--engine`` (names, then ``@version`` of the accounting rules) and ``--kv-dtype`` (the cache types hfvram
knows). Enabled with ``eval "$(_HFVRAM_COMPLETE=bash_source hfvram)"`` (``zsh_source``, ``fish_source``).

Imported by hfvram.cli at start-up, so this module imports click only; the catalogue and the engine tables are
read when a word is being completed.
"""

from __future__ import annotations

import re

import click
from click.shell_completion import CompletionItem

#: counts offered after ``<gpu>x``
GPU_COUNTS = (2, 4, 8)
_WITH_COUNT = re.compile(r"^(?P<name>.+?)x(?P<count>\d*)$")


def complete_gpu(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """A GPU name (with ``x<N>``); in a comma list (``rtx4090,h1``) or a mixed set (``rtx4090+rtx30``) the last
    item, after what is already typed."""
    items = _complete_one_gpu(incomplete)
    cut = max(incomplete.rfind(","), incomplete.rfind("+"))
    if cut >= 0:
        head = incomplete[: cut + 1]
        items += [
            CompletionItem(head + item.value, help=item.help) for item in _complete_one_gpu(incomplete[cut + 1 :])
        ]
    return items


def _complete_one_gpu(incomplete: str) -> list[CompletionItem]:
    from hfvram.estimate.hardware import load_catalog

    names: dict[str, str] = {}
    for gpu in load_catalog():
        for name in (gpu.id, *gpu.aliases):
            names.setdefault(name.lower(), gpu.name)
    text = incomplete.lower()
    items = [CompletionItem(name, help=label) for name, label in sorted(names.items()) if name.startswith(text)]
    match = _WITH_COUNT.match(text)
    if match and match["name"] in names:
        label = names[match["name"]]
        items += [
            CompletionItem(f"{match['name']}x{count}", help=f"{count} × {label}")
            for count in GPU_COUNTS
            if str(count).startswith(match["count"])
        ]
    return items


def complete_engine(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from hfvram.engines import engine_names, get_profile
    from hfvram.errors import HfvramError

    name, at, version = incomplete.partition("@")
    if not at:
        return [CompletionItem(engine) for engine in sorted(engine_names()) if engine.startswith(name.lower())]
    try:
        profile = get_profile(name)
    except HfvramError:
        return []
    return [
        CompletionItem(f"{name}@{rules}", help=f"{profile.name} accounting rules {rules}")
        for rules in profile.rule_versions
        if rules.startswith(version)
    ]


def complete_kv_dtype(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from hfvram.estimate.common import KV_DTYPE_BYTES

    return [CompletionItem(name) for name in ("auto", *KV_DTYPE_BYTES) if name.startswith(incomplete.lower())]


def complete_quant(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """``--quant``: every what-if name (GGUF file types, Hub formats) and ``auto``."""
    from hfvram import quant

    wanted = incomplete.lower()
    return [CompletionItem(name) for name in (*quant.names(), quant.AUTO) if name.lower().startswith(wanted)]


def complete_host_memory(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """``--host-memory``: the named systems of hfvram/data/host_memory.toml."""
    from hfvram.estimate.host_memory import host_memory_names

    return [CompletionItem(name) for name in host_memory_names() if name.startswith(incomplete.lower())]


def complete_family(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """``models --family``: the model types of the embedded catalogue (the text model's too, for a multimodal
    config), which ``--family`` matches against (a family matches the architectures and model types holding it)."""
    import json

    from hfvram.sources.catalog import load_catalog

    types: set[str] = set()
    repos = load_catalog().get("repos")
    for entry in repos.values() if isinstance(repos, dict) else ():
        text = (entry.get("files") or {}).get("config.json") if isinstance(entry, dict) else None
        try:
            config = json.loads(text) if isinstance(text, str) else {}
        except ValueError:
            continue
        for part in (config, config.get("text_config")):
            if isinstance(part, dict) and isinstance(part.get("model_type"), str):
                types.add(part["model_type"].lower())
    wanted = incomplete.lower()
    return [CompletionItem(name) for name in sorted(types) if name.startswith(wanted)]
