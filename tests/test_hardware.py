"""The GPU catalogue and the --gpu SPEC syntax (figures as hfvram/data/gpus.toml records them, with their basis)."""

from __future__ import annotations

import pytest

from hfvram.errors import UsageError
from hfvram.estimate.hardware import (
    find_gpu,
    load_catalog,
    memory_provenance,
    parse_gpu_spec,
    search_catalog,
    unified_fraction_rule,
)

MIB = 1 << 20
GIB = 1 << 30


def test_catalog_loads_every_device_with_unique_names():
    catalog = load_catalog()
    assert len(catalog) == 111  # gpus/README.md: "111 [[device]] tables"
    names = [name for gpu in catalog for name in (gpu.id, *gpu.aliases)]
    assert len(names) == len(set(names))


def test_memory_is_the_exposed_total_not_the_marketing_number():
    # gpus/README.md "Measured": 4090 24564 MiB, H100 SXM 81559 MiB, H200 143771 MiB, B300 275040 MiB
    assert find_gpu("rtx4090").memory_bytes == 24564 * MIB
    assert find_gpu("h100-sxm").memory_bytes == 81559 * MIB
    assert find_gpu("h200").memory_bytes == 143771 * MIB
    assert find_gpu("b300").memory_bytes == 275040 * MIB
    assert find_gpu("b300").memory_bytes < 288 * GIB  # sold as 288 GB, shows 268.6 GiB


@pytest.mark.parametrize(
    ("spec", "gpu_id", "count"),
    [
        ("rtx4090", "rtx4090", 1),
        ("rtx4090x2", "rtx4090", 2),
        ("RTX 4090", "rtx4090", 1),
        ("2xh100", "h100-sxm", 2),  # bare family name goes to the common SKU (README "aliases")
        ("h100-sxm x8", "h100-sxm", 8),
        ("h100x8", "h100-sxm", 8),
        ("2 x a100", "a100-80g-sxm", 2),
        ("4090", "rtx4090", 1),
        ("mi250x", "mi250x", 1),  # ends in x but is an id, not a count
        ("rx7900xtx", "rx7900xtx", 1),
        ("mi325x2", "mi325x", 2),  # "mi325" is no alias: the id ending in x takes the count directly
        ("mi250x2", "mi250x", 2),
    ],
)
def test_parse_catalogue_specs(spec, gpu_id, count):
    hardware = parse_gpu_spec(spec)
    assert (hardware.gpu.id, hardware.count) == (gpu_id, count)


@pytest.mark.parametrize(
    ("spec", "size", "count"),
    [
        ("24GiB", 24 * GIB, 1),
        ("80GB", 80 * GIB, 1),  # vendors' GB are binary (README caveat 1)
        ("80GBx4", 80 * GIB, 4),
        ("24g", 24 * GIB, 1),
        ("2x48GB", 48 * GIB, 2),
    ],
)
def test_raw_sizes_have_no_bandwidth(spec, size, count):
    hardware = parse_gpu_spec(spec)
    assert hardware.gpu.memory_bytes == size
    assert hardware.count == count
    assert hardware.gpu.memory_bandwidth_gbs is None
    assert "raw size" in memory_provenance(hardware.gpu)


@pytest.mark.parametrize("spec", ["rtx4999", "h100x0", "", "mi9999x2", "24 parsecs"])
def test_unknown_specs_are_usage_errors(spec):
    with pytest.raises(UsageError):
        parse_gpu_spec(spec)


def test_unknown_name_lists_three_closest_devices():
    with pytest.raises(UsageError) as raised:
        parse_gpu_spec("rtx4999")
    message = str(raised.value)
    assert "rtx4090" in message
    assert raised.value.exit_code == 2


def test_apple_measured_share_from_catalogue():
    # gpus/README.md: 16 GiB -> 10922.67 MiB (2/3); "a 128 GB Mac exposes ~96 GB" (3/4)
    m4 = parse_gpu_spec("m4-16").gpu
    assert m4.unified_memory
    assert abs(m4.gpu_memory_bytes / MIB - 10922.67) < 0.01
    mac = parse_gpu_spec("m3-max-128").gpu
    assert mac.gpu_memory_bytes == 96 * GIB
    assert "gpu_addressable_bytes_default" in memory_provenance(mac)


def test_unified_rule_without_measurement_and_override():
    assert unified_fraction_rule(32 * GIB) == pytest.approx(2 / 3)
    assert unified_fraction_rule(36 * GIB) == pytest.approx(3 / 4)
    spark = parse_gpu_spec("dgx-spark").gpu  # row carries no measured share
    assert spark.gpu_memory_bytes == int(spark.memory_bytes * 0.75)
    assert "derived" in memory_provenance(spark)
    overridden = parse_gpu_spec("m4-max-128", unified_fraction=0.84).gpu  # macOS 26 report: 107.52 GiB
    assert overridden.gpu_memory_bytes / GIB == pytest.approx(107.52, abs=0.01)
    assert "override" in memory_provenance(overridden)
    discrete = parse_gpu_spec("rtx4090", unified_fraction=0.5).gpu
    assert discrete.gpu_memory_bytes == discrete.memory_bytes
    with pytest.raises(UsageError):
        parse_gpu_spec("m4-16", unified_fraction=1.5)


def test_search_catalog_by_query_and_vendor():
    assert {gpu.id for gpu in search_catalog("h100")} == {"h100-pcie", "h100-sxm", "h100-nvl"}
    amd = search_catalog(vendor="amd")
    assert amd and all(gpu.vendor == "amd" for gpu in amd)
    assert len(search_catalog()) == len(load_catalog())
    assert search_catalog("no-such-gpu") == ()


# ---- issue 17 case 12: GPU counts and sizes are bounded (hfvram/data/bounds.toml [hardware]) -------------------

from hfvram.datafiles import data_table  # noqa: E402
from hfvram.estimate.engine_rules import tp_accepted, valid_tp_hint  # noqa: E402

MAX_GPUS = data_table("bounds.toml")["hardware"]["maximum_gpu_count"]


@pytest.mark.parametrize("text", ["h100x100000000", "h100x" + "1" * 5000, f"{MAX_GPUS + 1}xh100", "80GBx99999"])
def test_gpu_count_over_the_bound_is_a_usage_error(text):
    with pytest.raises(UsageError, match="GPU count"):
        parse_gpu_spec(text)


def test_gpu_count_at_the_bound_is_accepted():
    assert parse_gpu_spec(f"h100x{MAX_GPUS}").count == MAX_GPUS
    assert parse_gpu_spec("h100x0008").count == 8


@pytest.mark.parametrize("text", ["1" * 400 + "GiB", "9" * 30 + "TB"])
def test_implausible_raw_gpu_size_is_a_usage_error(text):
    with pytest.raises(UsageError, match="GPU memory size"):
        parse_gpu_spec(text)


def _spec_with_heads(heads: int, kv: int):
    from hfvram.spec import Layer, LayerKind, ModelSpec

    layer = Layer(kind=LayerKind.FULL, num_kv_heads=kv, head_dim_k=128, head_dim_v=128)
    return ModelSpec(
        architecture="X",
        model_type="llama",
        dtype="bfloat16",
        num_layers=2,
        layers=(layer, layer),
        num_attention_heads=heads,
    )


@pytest.mark.parametrize(("heads", "kv", "tp"), [(32, 8, 12), (40, 8, 100_000_000), (96, 8, 10**12), (28, 4, 3)])
def test_valid_tp_hint_lists_exactly_the_accepted_sizes(heads, kv, tp):
    """The hint walks the divisors of the heads, not range(1, tp); it lists what tp_accepted accepts below tp."""
    spec = _spec_with_heads(heads, kv)
    expected = [size for size in range(1, min(tp, heads + 1)) if tp_accepted(spec, size)]
    hint = valid_tp_hint(spec, tp)
    assert hint == f"it accepts {', '.join(map(str, expected))} below {tp} (pass --tp)"


@pytest.mark.parametrize(
    ("engine", "option"),
    [("vllm", ["--tp", "100000000"]), ("vllm", ["--pp", "100000000"]), ("transformers", ["--pp", "100000000"])],
)
def test_parallel_sizes_over_the_gpu_bound_exit_2(engine, option):
    """--pp 100000000 without --gpu walked every pipeline stage (minutes); a parallel size is a GPU count."""
    from cli_support import LLAMA_FOLDER, run_hfvram

    result = run_hfvram("check", str(LLAMA_FOLDER), "--engine", engine, *option, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "hfvram's bound" in result.stderr and len(result.stderr.strip().splitlines()) == 1
