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
    # gpus/README.md: "111 [[device]] tables"; issues 10 and 23 added the rows of NEW_ROWS below
    assert len(catalog) == 111 + len(NEW_ROWS)
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
        ("mi250x", "mi250x-gcd", 2),  # ends in x but is an id, not a count; ROCm shows the board as 2 GCDs
        ("rx7900xtx", "rx7900xtx", 1),
        ("mi325x2", "mi325x", 2),  # "mi325" is no alias: the id ending in x takes the count directly
        ("mi250x2", "mi250x-gcd", 4),  # two boards = four ROCm devices
        ("2xmi250x", "mi250x-gcd", 4),
        ("mi250x-gcd", "mi250x-gcd", 1),
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


# ---- issue 10 item 5: the cards people own, and search by memory size ----------------------------------------------

MIB_ROW = 1 << 20

#: id -> (memory_bytes, memory_bytes_basis). Measured totals: nvidia-smi lines in public GitHub files and issues
#: (exact-string code search, quoted in each row's memory_source): 3060 Ti / 3070 '/ 8192MiB', 2080 Ti
#: '/ 11264MiB', 4060 '/ 8188MiB', 5060 '/ 8151MiB', P40 '/ 23040MiB' (ECC on; 24576 ECC off), P100 PCIe
#: '/ 16280MiB'; one MI250X GCD: a HIP runtime log 'Total GPU memory 68702699520'. Nominal: vendor GB as GiB.
NEW_ROWS = {
    "rtx3060ti": (8192 * MIB_ROW, "nvidia-smi"),
    "rtx3070": (8192 * MIB_ROW, "nvidia-smi"),
    "rtx2080ti": (11264 * MIB_ROW, "nvidia-smi"),
    "rtx4060": (8188 * MIB_ROW, "nvidia-smi"),
    "rtx5060": (8151 * MIB_ROW, "nvidia-smi"),
    "rtx5060ti-8g": (8151 * MIB_ROW, "nvidia-smi-inferred"),
    "p40": (23040 * MIB_ROW, "nvidia-smi"),
    "p100-16g": (16280 * MIB_ROW, "nvidia-smi"),
    "arc-b580": (12 * GIB, "nominal-gib"),
    "rx7800xt": (16 * GIB, "nominal-gib"),
    "rx7600": (8 * GIB, "nominal-gib"),
    "mi250x-gcd": (68_702_699_520, "hip-runtime"),
    # issue 23: the Turing cards people still own (nvidia.com product pages; no nvidia-smi total seen)
    "rtx2080-super": (8 * GIB, "nominal-gib"),
    "rtx2080": (8 * GIB, "nominal-gib"),
    "rtx2070-super": (8 * GIB, "nominal-gib"),
    "rtx2070": (8 * GIB, "nominal-gib"),
    "rtx2060-super": (8 * GIB, "nominal-gib"),
    "rtx2060": (6 * GIB, "nominal-gib"),
}


def _row(gpu_id):
    from hfvram.estimate.hardware import catalog_row

    return catalog_row(gpu_id)


@pytest.mark.parametrize(("gpu_id", "expected"), sorted(NEW_ROWS.items()))
def test_new_rows_load_with_their_exposed_memory_and_a_source(gpu_id, expected):
    size, basis = expected
    gpu = find_gpu(gpu_id)
    row = _row(gpu_id)
    assert (gpu.memory_bytes, row["memory_bytes_basis"]) == (size, basis)
    assert row["memory_bytes_nominal"] == row["memory_gb"] * GIB
    assert gpu.memory_bandwidth_gbs and gpu.memory_bandwidth_gbs > 0
    assert row["source"] and all(url.startswith("https://") for url in row["source"])
    assert row["memory_source"]
    if basis.startswith("nvidia-smi"):
        assert row["nvidia_smi_total_mib"] * MIB_ROW == size
        assert str(row["nvidia_smi_total_mib"]) in row["memory_source"]  # the total the search found
    if basis == "nominal-gib":
        assert "nominal" in row["memory_source"]
    assert basis in memory_provenance(gpu)


#: launch MSRP as huggingface.js packages/tasks/src/hardware*.ts list it at commit fe42e68 (2026-08-21), the
#: catalogue's price source: RTX 3060 Ti 400, 3070 500, 2080 Ti 1_000, 4060 300, 5060 300, 5060 Ti 450 (one figure
#: for 8 and 16 GB), P40 5_700, P100 7_000, RX 7800 XT 500, Arc B580 250. RX 7600 and the MI250X are not listed there.
NEW_PRICES = {
    "rtx3060ti": 400,
    "rtx3070": 500,
    "rtx2080ti": 1000,
    "rtx4060": 300,
    "rtx5060": 300,
    "rtx5060ti-8g": 450,
    "p40": 5700,
    "p100-16g": 7000,
    "rx7800xt": 500,
    "arc-b580": 250,
}


def test_new_rows_carry_the_catalogue_price_with_its_date_and_source():
    """Prices live in one table (hfvram/data/gpu_prices.toml); the catalogue rows hold none."""
    from hfvram.prices import price_rows

    for gpu_id in NEW_ROWS:
        assert not any(key.startswith("price") for key in _row(gpu_id)), gpu_id
        rows = [row for row in price_rows() if row.gpu == gpu_id and "huggingface.js" in row.source]
        if gpu_id in NEW_PRICES and rows:
            assert [row.usd for row in rows] == [NEW_PRICES[gpu_id]], gpu_id
            assert rows[0].date == "2026-08-21"
            assert "huggingface.js/blob/fe42e68017ffc76d09922ea8f9b38a6964345710" in rows[0].source
        elif gpu_id in NEW_PRICES:  # a launch MSRP from the vendor's announcement took its place
            assert any(row.gpu == gpu_id and row.kind == "new" for row in price_rows()), gpu_id
        else:
            assert not rows, gpu_id


def test_every_catalogue_row_names_a_source():
    from hfvram.estimate.hardware import _catalog_rows

    assert all(row.get("source") and row.get("memory_source") for row in _catalog_rows())


@pytest.mark.parametrize(
    ("alias", "gpu_id"),
    [
        ("RTX 4060", "rtx4060"),
        ("4060", "rtx4060"),
        ("4060ti", "rtx4060ti-8g"),  # bare family name: the 8 GB card (gpus/README.md "aliases")
        ("rtx-4060-ti-16gb", "rtx4060ti-16g"),
        ("3060", "rtx3060"),
        ("3060ti", "rtx3060ti"),
        ("rtx 3070", "rtx3070"),
        ("3080", "rtx3080"),
        ("rtx-3080-12gb", "rtx3080-12g"),
        ("2080ti", "rtx2080ti"),
        ("5060", "rtx5060"),
        ("5060ti", "rtx5060ti-16g"),  # bare name: the 16 GB card
        ("5060ti-8gb", "rtx5060ti-8g"),
        ("tesla-p40", "p40"),
        ("p100", "p100-16g"),
        ("v100", "v100-16g"),
        ("v100-32gb", "v100-32g"),
        ("b580", "arc-b580"),
        ("rx 7600", "rx7600"),
        ("7800xt", "rx7800xt"),
        ("mi250x-64gb", "mi250x-gcd"),
    ],
)
def test_aliases_of_the_cards_people_own(alias, gpu_id):
    assert find_gpu(alias).id == gpu_id


def test_new_aliases_take_a_count():
    assert parse_gpu_spec("p40x2").label == "p40x2"
    assert parse_gpu_spec("2x3060").label == "rtx3060x2"
    assert parse_gpu_spec("rx7600 x4").label == "rx7600x4"


def test_mi250x_is_the_two_64gb_devices_rocm_shows():
    hardware = parse_gpu_spec("mi250x")
    assert (hardware.gpu.id, hardware.count) == ("mi250x-gcd", 2)
    assert hardware.gpu.memory_bytes == 68_702_699_520  # HIP "Total GPU memory" of one MI250X device
    assert hardware.gpu.memory_bandwidth_gbs == pytest.approx(1638.4)  # half the module's 3276.8 GB/s
    assert _row("mi250x")["memory_gb"] == 128  # the module as sold
    with pytest.raises(UsageError, match="mi250x-gcd devices"):
        parse_gpu_spec(f"mi250x{MAX_GPUS}")  # 2 x the bound in devices


#: every catalogue row whose nominal memory is 24 GB, read by hand from hfvram/data/gpus.toml (memory_gb = 24)
CATALOGUE_24GB = {
    "rtx3090",
    "rtx3090ti",
    "rtx4090",
    "rtx-a5000",
    "l4",
    "a10",
    "a10g",
    "p40",
    "rx7900xtx",
    "m2-24",
    "m3-24",
    "m4-24",
    "m4-pro-24",
    "m5-24",
    "m5-pro-24",
}


@pytest.mark.parametrize("query", ["24GB", "24G", "24gb", "24 GB", "24GiB", "24 gib", " 24Gb "])
def test_size_search_lists_exactly_the_24gb_cards(query):
    from hfvram.estimate.hardware import _catalog_rows

    found = {gpu.id for gpu in search_catalog(query)}
    assert found == CATALOGUE_24GB
    assert found == {row["id"] for row in _catalog_rows() if row["memory_gb"] == 24}


def test_size_search_is_not_an_alias_match():
    # "24gb" as text is in no 24 GB row's alias here, and "24 gb" would match names such as a 624 GB part;
    # the size search compares memory_gb, so neither a 624 GB nor a 240 GB device can come back
    from hfvram.estimate.hardware import size_query_gb

    assert size_query_gb("624GB") == 624 and search_catalog("624GB") == ()
    assert size_query_gb("4090") is None and size_query_gb("rtx4090") is None and size_query_gb("") is None
    assert {gpu.id for gpu in search_catalog("4090")} == {"rtx4090"}  # a name is still a name search
    sixteen = {gpu.id for gpu in search_catalog("16GiB", vendor="nvidia")}
    assert {"rtx4060ti-16g", "rtx5060ti-16g", "p100-16g", "v100-16g", "t4"} <= sixteen
    assert all(_row(gpu_id)["memory_gb"] == 16 for gpu_id in sixteen)
    assert {gpu.id for gpu in search_catalog("64gb", vendor="amd")} == {"mi210", "mi250x-gcd"}
    assert {gpu.id for gpu in search_catalog("8GB", vendor="amd")} == {"rx7600"}


# ---- GPU lists and mixed sets: tests/test_gpu_sets.py ------------------------------------------------------------


def test_an_alias_with_a_plus_is_still_a_name():
    assert parse_gpu_spec("ryzen-ai-max+-395").gpu.id == "ryzen-ai-max-395-128"


# ---- the CLI --------------------------------------------------------------------------------------------------------


def test_cli_gpus_24gb_lists_the_24gb_cards():
    import json

    from cli_support import run_hfvram

    table = run_hfvram("gpus", "24GB")
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith(f"{len(CATALOGUE_24GB)} accelerators")
    ids = {line.split()[0] for line in table.stdout.splitlines()[3:] if line and not line.startswith("*")}
    assert ids == CATALOGUE_24GB
    listed = run_hfvram("gpus", "24 GB", "--vendor", "nvidia", "--json")
    assert {gpu["id"] for gpu in json.loads(listed.stdout)} == {
        "rtx3090",
        "rtx3090ti",
        "rtx4090",
        "rtx-a5000",
        "l4",
        "a10",
        "a10g",
        "p40",
    }
