"""How a checkpoint's weights are quantized, from config.json `quantization_config` and its companions
(`hf_quant_config.json` of NVIDIA ModelOpt, `quantize_config.json` of AutoGPTQ)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hfvram.errors import MalformedFileError
from hfvram.spec import Quantization

HF_QUANT_CONFIG = "hf_quant_config.json"
QUANTIZE_CONFIG = "quantize_config.json"

#: nominal weight bits of ModelOpt / config quant algorithms (docs/engines/common.md#hf-quant-formats)
_ALGO_BITS = {
    "FP8": 8.0,
    "FP8_PB_WO": 8.0,
    "NVFP4": 4.0,
    "W4A8_AWQ": 4.0,
    "W4A16_AWQ": 4.0,
    "INT8_SQ": 8.0,
    "MXFP4": 4.0,
}


def _bits(value: Any, file: str, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise MalformedFileError(f"expected a positive number of bits, got {value!r:.40}", file=file, field=path)
    return float(value)


def _group(value: Any, file: str, path: str) -> int | None:
    """Group size; -1 (one group per column) and null are None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedFileError(f"expected an integer group size, got {value!r:.40}", file=file, field=path)
    if value == -1:
        return None
    if value <= 0:
        raise MalformedFileError(f"expected a positive group size or -1, got {value}", file=file, field=path)
    return value


def _keep(qc: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, object]:
    return {key: qc[key] for key in keys if key in qc and qc[key] is not None}


def _fp8(qc: Mapping[str, Any], file: str, path: str) -> Quantization:
    block = qc.get("weight_block_size")
    if block is not None and (
        not isinstance(block, list) or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        raise MalformedFileError("expected a list of positive integers", file=file, field=f"{path}.weight_block_size")
    details = _keep(
        qc, ("weight_block_size", "activation_scheme", "fmt", "scale_fmt", "modules_to_not_convert", "ignored_layers")
    )
    return Quantization("fp8", 8.0, None, details, f"{file}: {path}.quant_method")


def _mxfp4(qc: Mapping[str, Any], file: str, path: str) -> Quantization:
    details = _keep(qc, ("modules_to_not_convert",))
    details["scale"] = "E8M0 per 32 weights"
    return Quantization("mxfp4", 4.0, 32, details, f"{file}: {path}.quant_method")


def _gptq(qc: Mapping[str, Any], file: str, path: str) -> Quantization:
    bits = _bits(qc.get("bits"), file, f"{path}.bits")
    group = _group(qc.get("group_size"), file, f"{path}.group_size")
    details = _keep(qc, ("desc_act", "sym", "checkpoint_format", "modules_to_not_convert"))
    if qc.get("group_size") == -1:
        details["group_size"] = -1
    return Quantization("gptq", bits, group, details, f"{file}: {path}.bits")


def _awq(qc: Mapping[str, Any], file: str, path: str) -> Quantization:
    bits_key = "w_bit" if "w_bit" in qc else "bits"
    group_key = "q_group_size" if "q_group_size" in qc else "group_size"
    bits = _bits(qc.get(bits_key), file, f"{path}.{bits_key}")
    group = _group(qc.get(group_key), file, f"{path}.{group_key}")
    details = _keep(qc, ("version", "zero_point", "modules_to_not_convert"))
    if qc.get(group_key) == -1:
        details["group_size"] = -1
    return Quantization("awq", bits, group, details, f"{file}: {path}.{bits_key}")


def _compressed_tensors(qc: Mapping[str, Any], file: str, path: str) -> Quantization:
    groups = qc.get("config_groups")
    if groups is not None and not isinstance(groups, Mapping):
        raise MalformedFileError("expected an object", file=file, field=f"{path}.config_groups")
    schemes: list[dict[str, object]] = []
    for name, group in (groups or {}).items():
        if not isinstance(group, Mapping):
            raise MalformedFileError("expected an object", file=file, field=f"{path}.config_groups.{name}")
        weights = group.get("weights")
        if weights is None:
            continue
        if not isinstance(weights, Mapping):
            raise MalformedFileError("expected an object", file=file, field=f"{path}.config_groups.{name}.weights")
        wpath = f"{path}.config_groups.{name}.weights"
        schemes.append(
            {
                "group": name,
                "num_bits": _bits(weights.get("num_bits"), file, f"{wpath}.num_bits"),
                "type": weights.get("type"),
                "strategy": weights.get("strategy"),
                "group_size": _group(weights.get("group_size"), file, f"{wpath}.group_size"),
                "targets": group.get("targets"),
                # a mixed-precision checkpoint names each group's format (nvfp4-pack-quantized, float-quantized ...)
                **({"format": str(group["format"])[:64]} if isinstance(group.get("format"), str) else {}),
            }
        )
    details: dict[str, object] = _keep(qc, ("format", "kv_cache_scheme", "quantization_status"))
    details["schemes"] = schemes
    ignore = qc.get("ignore")
    if isinstance(ignore, list):
        details["ignore"] = ignore
    first = schemes[0] if schemes else {}
    bits = first.get("num_bits")
    group = first.get("group_size")
    return Quantization(
        "compressed-tensors",
        bits if isinstance(bits, float) else None,
        group if isinstance(group, int) else None,
        details,
        f"{file}: {path}.config_groups",
    )


def _bitsandbytes(qc: Mapping[str, Any], file: str, path: str) -> Quantization:
    four = qc.get("load_in_4bit", qc.get("_load_in_4bit"))
    eight = qc.get("load_in_8bit", qc.get("_load_in_8bit"))
    details = _keep(
        qc,
        (
            "bnb_4bit_quant_type",
            "bnb_4bit_use_double_quant",
            "bnb_4bit_compute_dtype",
            "bnb_4bit_quant_storage",
            "llm_int8_skip_modules",
        ),
    )
    if four is True:
        details.setdefault("bnb_4bit_quant_type", "fp4")  # bitsandbytes' default quant type
        return Quantization("bitsandbytes", 4.0, 64, details, f"{file}: {path}.load_in_4bit")
    if eight is True:
        return Quantization("bitsandbytes", 8.0, None, details, f"{file}: {path}.load_in_8bit")
    return Quantization("bitsandbytes", None, None, details, f"{file}: {path}.quant_method")


def _modelopt(quant: Mapping[str, Any], file: str, path: str) -> Quantization:
    algo = quant.get("quant_algo")
    if algo is not None and not isinstance(algo, str):
        raise MalformedFileError("expected a string", file=file, field=f"{path}.quant_algo")
    details: dict[str, object] = {"producer": "modelopt"}
    details.update(_keep(quant, ("quant_algo", "kv_cache_quant_algo", "exclude_modules")))
    group = _group(quant.get("group_size"), file, f"{path}.group_size")
    method = {"FP8": "fp8", "NVFP4": "nvfp4", "MXFP4": "mxfp4"}.get(algo or "", "modelopt")
    if algo == "NVFP4" and group is None:
        group = 16  # NVFP4 scales one FP8 factor per 16 weights by definition of the format
    return Quantization(method, _ALGO_BITS.get(algo or ""), group, details, f"{file}: {path}.quant_algo")


def _from_quantization_config(qc: Mapping[str, Any], file: str, path: str) -> tuple[Quantization, list[str]]:
    method = qc.get("quant_method")
    if method is not None and not isinstance(method, str):
        raise MalformedFileError("expected a string", file=file, field=f"{path}.quant_method")
    method = (method or "").lower()
    if not method and ("load_in_4bit" in qc or "load_in_8bit" in qc):
        method = "bitsandbytes"
    if method == "fp8":
        return _fp8(qc, file, path), []
    if method == "mxfp4":
        return _mxfp4(qc, file, path), []
    if method in ("gptq", "gptq_marlin"):
        return _gptq(qc, file, path), []
    if method in ("awq", "awq_marlin"):
        return _awq(qc, file, path), []
    if method == "compressed-tensors":
        return _compressed_tensors(qc, file, path), []
    if method == "bitsandbytes":
        return _bitsandbytes(qc, file, path), []
    if method == "modelopt":
        return _modelopt(qc, file, path), []
    bits = qc.get("bits", qc.get("w_bit"))
    bits_value = _bits(bits, file, f"{path}.bits") if isinstance(bits, (int, float)) else None
    warning = f"quantization: method {method or '(none)'!r} is not one hfvram knows; bits {bits_value} as stated, weights from headers decide"
    return Quantization(method or "unknown", bits_value, None, dict(qc), f"{file}: {path}"), [warning]


def read_quantization(
    quantization_config: Mapping[str, Any] | None,
    quantization_path: str,
    filename: str,
    companions: Mapping[str, Mapping[str, Any]],
) -> tuple[Quantization | None, list[str]]:
    """The checkpoint's quantization, preferring config.json and filling from the companion files."""
    warnings: list[str] = []
    if quantization_config is not None:
        quant, warnings = _from_quantization_config(quantization_config, filename, quantization_path)
        gptq_companion = companions.get(QUANTIZE_CONFIG)
        if quant.method == "gptq" and quant.bits is None and isinstance(gptq_companion, Mapping):
            quant = _gptq(gptq_companion, QUANTIZE_CONFIG, "quantize_config")
        return quant, warnings
    modelopt = companions.get(HF_QUANT_CONFIG)
    if modelopt is not None:
        section = modelopt.get("quantization") if isinstance(modelopt, Mapping) else None
        if not isinstance(section, Mapping):
            raise MalformedFileError("expected an object", file=HF_QUANT_CONFIG, field="quantization")
        return _modelopt(section, HF_QUANT_CONFIG, "quantization"), warnings
    gptq = companions.get(QUANTIZE_CONFIG)
    if gptq is not None:
        if not isinstance(gptq, Mapping):
            raise MalformedFileError("expected an object", file=QUANTIZE_CONFIG)
        method = gptq.get("quant_method", "gptq")
        if method == "awq" or "w_bit" in gptq:
            return _awq(gptq, QUANTIZE_CONFIG, "quantize_config"), warnings
        return _gptq(gptq, QUANTIZE_CONFIG, "quantize_config"), warnings
    return None, warnings
