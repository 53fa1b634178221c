"""ExLlamaV2 through TabbyAPI: its ``config.yml`` model section and the same settings as TabbyAPI's command line
(``python main.py --model-dir D --model-name M --max-seq-len N --cache-mode Q4``; TabbyAPI's argparse is built from
its config model, ``common/args.py``; docs/engines/launch.md#launch-exllamav2)."""

from __future__ import annotations

from pathlib import PurePath

from hfvram.estimate.launch import Launch, ModelRef, join, number
from hfvram.estimate.types import EngineChoice, Estimate


def model_place(ref: ModelRef) -> tuple[str, str]:
    """(model_dir, model_name): TabbyAPI loads ``model_dir/model_name``; a Hub repo is downloaded there first."""
    if ref.path:
        path = PurePath(ref.path)
        return str(path.parent), path.name
    return "models", (ref.repo_id or "MODEL").split("/")[-1]


def launch(est: Estimate, choice: EngineChoice, ref: ModelRef) -> Launch:
    engine = est.engine
    model_dir, name = model_place(ref)
    values = {
        "model-dir": model_dir,
        "model-name": name,
        "max-seq-len": number(engine.get("max_seq_len")),
        "cache-mode": str(engine.get("cache_mode")),
    }
    batch = engine.get("max_batch_size")
    if isinstance(batch, int) and batch > 1:
        values["max-batch-size"] = str(batch)
    split = engine.get("gpu_split")
    user_split = next((v for k, v in choice.settings.items() if k.replace("_", "-") == "gpu-split"), None)
    if user_split is not None:
        values["gpu-split"] = user_split
        values["gpu-split-auto"] = "false"
    words = ["python", "main.py"]
    for flag, value in values.items():
        words += [f"--{flag}", value]
    config = ["model:"] + [f"  {flag.replace('-', '_')}: {value}" for flag, value in values.items()]
    notes = []
    if ref.hub:
        notes.append(f"TabbyAPI loads a local folder: download {ref.repo_id} into {model_dir}/{name} first")
    if isinstance(split, list) and len(split) > 1 and user_split is None:
        notes.append("TabbyAPI splits across the GPUs by itself (gpu_split_auto)")
    return Launch("exllamav2", join(words), files={"config.yml": tuple(config)}, notes=tuple(notes))
