"""The options the commands share (``run_options`` for check / scan / fit / models, ``--debug``, the output
format flags) and the command class that refuses an option where a value belongs.

Light on purpose (every command imports it at start-up): click and hfvram.completion only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import click

from hfvram.completion import complete_engine, complete_gpu, complete_host_memory, complete_kv_dtype, complete_quant
from hfvram.errors import UsageError
from hfvram.pipeline import RunOptions

DEBUG_META = "hfvram.debug"
FORMATS = ("table", "json", "markdown")
SCAN_FORMATS = ("table", "jsonl", "json", "csv", "markdown")
MODEL_SORTS = ("verdict", "total", "params", "context", "speed")
#: `models --hub` also sorts as the Hub's listing does
HUB_MODEL_SORTS = ("downloads", "likes", "trending")
DEFAULT_JOBS = 8


#: options whose value is itself a command line, so it may start like one of hfvram's options
COMMAND_LINE_VALUES = frozenset({"--engine-args"})


class HfvramCommand(click.Command):
    """A command whose option values are never another of its options: ``--gpu --context 32k`` is a usage error
    naming ``--gpu``, not a GPU called ``--context``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        options = [param for param in self.params if isinstance(param, click.Option)]
        known = {name for option in options for name in (*option.opts, *option.secondary_opts)}
        takes_value = {
            name
            for option in options
            if not option.is_flag and not option.count
            for name in option.opts
            if name not in COMMAND_LINE_VALUES
        }
        for word, following in itertools.pairwise(args):
            if word == "--":
                break
            if ctx.resilient_parsing:  # shell completion parses half-typed lines
                break
            if word in takes_value and following.split("=", 1)[0] in known and following.startswith("-"):
                raise click.UsageError(f"{word} needs a value; {following} is an option", ctx=ctx)
        return super().parse_args(ctx, args)


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[DEBUG_META] = True
    return value


debug_option = click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_set_debug,
    help="Show Python tracebacks on errors.",
)


UNIFIED_FRACTION_HELP = (
    "Apple Silicon / unified-memory devices: the share of RAM the GPU may use, 0 < F <= 1 (default: the "
    "catalogue's measured share, else macOS's rule: 2/3 of RAM up to 32 GiB, 3/4 above; raise it on a Mac with "
    "`sudo sysctl iogpu.wired_limit_mb=…`). Ignored, with a warning, for discrete GPUs."
)


#: the contract's shared options (check / scan / fit), in the order ``--help`` lists them
_RUN_OPTIONS = [
    click.option(
        "--gpu",
        "gpu",
        metavar="SPEC",
        shell_complete=complete_gpu,
        help="GPU id or alias with optional count (rtx4090, h100x8, 24GiB); a mixed set rtx4090+rtx3090; "
        "check and fit --cheapest: a comma list of sets to compare (rtx4090,rtx3090x2,h100).",
    ),
    click.option(
        "--engine",
        "engine",
        metavar="NAME[@VER]",
        shell_complete=complete_engine,
        help="vllm, sglang, llama.cpp, ollama, … (default: vllm; llama.cpp for GGUF).",
    ),
    click.option(
        "--context",
        "context",
        metavar="N",
        help="Tokens per sequence: 8k, 32k, 131072 (default: the engine's); vLLM: auto, the length it would pick.",
    ),
    click.option(
        "--prompt",
        "prompt",
        metavar="N",
        help="Prompt tokens per request: adds the prefill / time-to-first-token bound (check).",
    ),
    click.option(
        "--max-context-cap",
        "max_context_cap",
        metavar="N",
        help="With --context auto (vLLM's --max-model-len auto): the longest length it may pick.",
    ),
    click.option(
        "--concurrency",
        "concurrency",
        metavar="N",
        help="Sequences held at full context (default 1); max: the largest batch that starts.",
    ),
    click.option(
        "--kv-dtype",
        "kv_dtype",
        metavar="T",
        shell_complete=complete_kv_dtype,
        help="KV cache type: auto, bf16, fp16, fp8, q8_0, q4_0, …",
    ),
    click.option(
        "--set",
        "settings",
        metavar="NAME=VALUE",
        multiple=True,
        help="An engine setting under the engine's own name (repeatable).",
    ),
    click.option(
        "--engine-args", "engine_args", metavar='"…"', help="A pasted engine command line (vllm serve … -tp 2)."
    ),
    click.option(
        "--quant",
        "quant",
        metavar="Q|auto",
        shell_complete=complete_quant,
        help="What-if: size the weights as another format (GGUF Q4_K_M, Q8_0, IQ4_XS, …; Hub awq, "
        "gptq-int4-g128, fp8, fp8-block, nvfp4, mxfp4, bnb-nf4, w8a8-int8, …; `auto`: the largest that fits "
        "--gpu). Every other fact is read from the real files.",
    ),
    click.option("--tp", "tp", type=click.IntRange(min=1), help="Tensor-parallel degree."),
    click.option("--pp", "pp", type=click.IntRange(min=1), help="Pipeline-parallel degree."),
    click.option(
        "--gpu-util",
        "gpu_util",
        type=click.FloatRange(0.0, 1.0, min_open=True),
        help="The engine's memory fraction.",
    ),
    click.option(
        "--unified-fraction",
        "unified_fraction",
        type=click.FloatRange(0.0, 1.0, min_open=True),
        metavar="F",
        help=UNIFIED_FRACTION_HELP,
    ),
    click.option(
        "--host-memory",
        "host_memory",
        metavar="MEM",
        shell_complete=complete_host_memory,
        help="llama.cpp with layers in RAM: the host memory (ddr5-6000x2, epyc-9004, apple-m4-max, 90GB/s; "
        "default ddr5-5600x2).",
    ),
    click.option("--ram", "ram", metavar="SIZE", help="llama.cpp offload plan: the RAM there is (64GiB)."),
    click.option("--revision", "revision", metavar="R", help="Hub revision (branch, tag, commit)."),
    click.option("--token", "token", metavar="T", help="Hub token (else HF_TOKEN / the saved token). Never printed."),
    click.option("--offline", "offline", is_flag=True, default=None, help="Never touch the network."),
    click.option("--explain", "explain", is_flag=True, help="List every input figure with where it came from."),
    click.option(
        "--calibration",
        "calibration",
        metavar="FILE",
        type=click.Path(dir_okay=False),
        help="A calibration file from `hfvram calibrate --save`.",
    ),
    debug_option,
]


def run_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a command with the contract's shared options (check / scan / fit)."""
    for option in reversed(_RUN_OPTIONS):
        function = option(function)
    return function


def _run_options(kwargs: dict[str, Any]) -> RunOptions:
    names = RunOptions.__dataclass_fields__.keys()
    values = {name: kwargs.pop(name) for name in list(kwargs) if name in names}
    values["settings"] = tuple(values.get("settings") or ())
    return RunOptions(**values)


def _output_format(fmt: str | None, as_json: bool, default: str = "table", as_markdown: bool = False) -> str:
    if as_json and as_markdown:
        raise UsageError("--json and --markdown are exclusive: pick one output format")
    for flag, on, implied in (("--json", as_json, ("json", "jsonl")), ("--markdown", as_markdown, ("markdown",))):
        if on and fmt and fmt not in implied:
            raise UsageError(f"--format {fmt} and {flag} disagree: pick one output format")
    if as_json:
        return "json"
    if as_markdown:
        return "markdown"
    return fmt or default


markdown_option = click.option("--markdown", "as_markdown", is_flag=True, help="Same as --format markdown.")
price_option = click.option(
    "--price",
    "price_kind",
    type=click.Choice(("any", "new", "used")),
    default="any",
    show_default=True,
    help="GPU lists: which published price counts (any: the lowest, new or used; hfvram/data/gpu_prices.toml).",
)
