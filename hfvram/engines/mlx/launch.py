"""mlx-lm's launch line: ``mlx_lm.server --model MODEL``, or ``mlx_lm.generate`` with the cache settings only it takes
(``--kv-bits``, ``--kv-group-size``, ``--max-kv-size``; docs/engines/launch.md#launch-mlx). mlx-lm has no context
setting: its cache grows with each request, so the context judged is the request's."""

from __future__ import annotations

from hfvram.estimate.launch import Launch, ModelRef, carried, join, number
from hfvram.estimate.types import EngineChoice, Estimate

#: hfvram's MLX settings that are not mlx-lm flags (the macOS wired limit is a sysctl)
NOT_FLAGS = ("wired-limit-mb", "iogpu.wired-limit-mb")

ENGINE = "mlx"


def launch(est: Estimate, choice: EngineChoice, ref: ModelRef) -> Launch:
    engine = est.engine
    cache_flags: list[str] = []
    if engine.get("kv_bits") is not None:
        cache_flags += ["--kv-bits", number(engine["kv_bits"]), "--kv-group-size", number(engine.get("kv_group_size"))]
    if engine.get("max_kv_size") is not None:
        cache_flags += ["--max-kv-size", number(engine["max_kv_size"])]
    program = "mlx_lm.generate" if cache_flags else "mlx_lm.server"
    words = [program, "--model", ref.name, *cache_flags]
    words += carried(choice, ENGINE, ["kv-bits", "kv-group-size", "max-kv-size", "model"], skip=NOT_FLAGS)
    context = est.workload.context
    notes = (f"mlx-lm sizes its cache by the request: {context} tokens were judged (paste back with --context)",)
    return Launch("mlx", join(words), notes=notes)
