"""vLLM speculative decoding with a draft checkpoint (docs/engines/vllm.md#vllm-features): the pipeline reads the
draft named in ``--speculative-config`` through the same sources as the model (here the local test Hub serving
fixtures/hub), and the estimate adds its weights (at the draft's TP) and its own attention layers to the one KV
pool. Expected figures come from the draft's own config (fixtures/hub/meta-llama/Llama-3.2-1B/config.json) and from
hfvram's estimate of the draft served alone, never typed in.

No published vLLM start-up log with a draft model or EAGLE head on a model the fixtures hold was found (searched the
issue corpus for "speculative_config draft model Model loading took GiB" and "eagle3 Model loading took"), so there
is no golden "Model loading took" figure here."""

from __future__ import annotations

import json

import pytest
from cli_support import validate
from click.testing import CliRunner
from spec_support import config_of, derived_spec

from hfvram.cli import cli
from hfvram.engines.vllm import features as vllm_features
from hfvram.engines.vllm import profile as vllm_profile
from hfvram.errors import UsageError
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import DraftModel, EngineChoice, Workload

TARGET = "meta-llama/Llama-3.1-70B-Instruct"
DRAFT = "meta-llama/Llama-3.2-1B"
DRAFT_CONFIG = json.dumps({"model": DRAFT, "num_speculative_tokens": 5})


def check(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["check", *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    return document


def draft_kv_bytes_per_token(repo: str, kv_bytes: int = 2) -> int:
    """K+V bytes one token takes in every layer of ``repo``, from its config.json (all layers full attention)."""
    config = config_of(repo)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * head_dim * kv_bytes


def test_a_draft_model_adds_its_weights_and_its_kv_layers(hub):
    """Llama-3.1-70B-Instruct on 4 × H100 with Llama-3.2-1B drafting 5 tokens: the weights grow by the draft's at
    TP 4 (what hfvram gives for the draft served alone at TP 4: its "Model loading took"), the KV per token by the
    draft's 16 layers × 8 KV heads × head_dim 64 (K and V, bfloat16), split over the 4 GPUs as the target's."""
    common = [TARGET, "--gpu", "h100x4", "--engine", "vllm", "--context", "8k"]
    base = check(*common)
    drafted = check(*common, "--engine-args", f"--speculative-config '{DRAFT_CONFIG}'")
    alone = check(DRAFT, "--gpu", "h100x4", "--engine", "vllm", "--context", "8k", "--tp", "4")

    term = drafted["engine"]["speculative_draft"]
    assert drafted["engine"]["speculative_method"] == "draft_model"
    assert term["model"] == DRAFT and term["method"] == "draft_model" and term["tensor_parallel_size"] == 4
    assert term["shared_with_target"] == []
    assert term["weights_bytes"] == alone["per_gpu"]["weights"]
    assert drafted["per_gpu"]["weights"] - base["per_gpu"]["weights"] == term["weights_bytes"]

    per_token = draft_kv_bytes_per_token(DRAFT)
    assert term["kv_layers"] == config_of(DRAFT)["num_hidden_layers"]
    assert term["kv_bytes_per_token"] == per_token == alone["model"]["kv_bytes_per_token"]
    assert term["kv_bytes_per_token_per_gpu"] == per_token // 4
    # the pool's page is the mean of 80 target and 16 draft layer pages (one group, UniformTypeKVCacheSpecs), kept
    # in whole bytes: the 8192-token request's cache grows by the draft's bytes to a few parts in 10^4
    grown = drafted["per_gpu"]["kv_cache"] - base["per_gpu"]["kv_cache"]
    assert grown == pytest.approx(8192 * per_token // 4, rel=1e-3)
    assert drafted["capacity"]["kv_tokens"] < base["capacity"]["kv_tokens"]
    assert base["engine"]["speculative_draft"] is None

    text = "\n".join(drafted["warnings"])
    assert "the draft meta-llama/Llama-3.2-1B's weights (TP 4)" in text and "are counted" in text
    assert "CUDA graphs are not" in text and "has not read" not in text


def test_explain_narrates_the_draft_from_the_same_values(hub):
    drafted = check(
        TARGET,
        "--gpu",
        "h100x4",
        "--engine",
        "vllm",
        "--engine-args",
        f"--speculative-config '{DRAFT_CONFIG}'",
        "--explain",
    )
    term = drafted["engine"]["speculative_draft"]
    line = drafted["explain"]["terms"]["speculative"]
    assert f"draft {DRAFT} (hub {DRAFT}" in line
    assert f"{term['weights_bytes'] / 2**30:.3f} GiB per GPU" in line
    assert f"its {term['kv_layers']} attention layer(s)" in line and f"{term['kv_bytes_per_token_per_gpu']:g} B" in line
    assert f"+{term['weights_bytes'] / 2**30:.3f} GiB draft {DRAFT}" in drafted["explain"]["terms"]["weights"]


def test_the_old_speculative_model_flag_reads_the_draft_too(hub):
    common = [TARGET, "--gpu", "h100x4", "--engine", "vllm", "--context", "8k"]
    new = check(*common, "--engine-args", f"--speculative-config '{DRAFT_CONFIG}'")
    old = check(*common, "--engine-args", f"--speculative-model {DRAFT} --num-speculative-tokens 5")
    assert old["per_gpu"] == new["per_gpu"]
    assert old["engine"]["speculative_draft"] == new["engine"]["speculative_draft"]


@pytest.mark.parametrize(
    "config,method",
    [
        ({"model": "nobody/no-such-draft", "num_speculative_tokens": 5}, "draft_model"),
        # vLLM reads the method from the name: "eagle3" in it is an EAGLE-3 head
        ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", "num_speculative_tokens": 3}, "eagle3"),
    ],
)
def test_a_draft_that_cannot_be_read_keeps_the_warning_and_the_old_figures(hub, config, method):
    common = [TARGET, "--gpu", "h100x4", "--engine", "vllm", "--context", "8k"]
    base = check(*common)
    drafted = check(*common, "--engine-args", f"--speculative-config '{json.dumps(config)}'")
    assert drafted["per_gpu"] == base["per_gpu"] and drafted["capacity"] == base["capacity"]
    assert drafted["engine"]["speculative_method"] == method
    assert drafted["engine"]["speculative_draft"] is None
    text = "\n".join(drafted["warnings"])
    assert (
        f"speculative decoding ({method}" in text
        and f"{config['model']} is a second checkpoint hfvram has not read" in text
    )


def test_a_draft_with_another_vocabulary_is_refused_by_vllm(hub):
    """``verify_equal_vocab_size_if_draft_model``: Qwen3-0.6B (vocab 151936) cannot draft for Llama (128256)."""
    qwen = json.dumps({"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3})
    drafted = check(TARGET, "--gpu", "h100x4", "--engine", "vllm", "--engine-args", f"--speculative-config '{qwen}'")
    vocab = config_of("Qwen/Qwen3-0.6B")["vocab_size"]
    assert any(f"vocabulary ({vocab}) is not the target's" in w for w in drafted["warnings"])
    # the refusal is the verdict: vLLM does not start (exit 1 with the engine's reason)
    assert drafted["verdict"] == "does_not_fit"
    assert drafted["verdict_reason"].startswith("engine rule: vLLM refuses the draft model: its vocabulary")


def test_other_engines_read_no_draft(hub):
    """SGLang keeps its warning: the draft is not read (and nothing of it is counted)."""
    result = CliRunner().invoke(
        cli,
        [
            "check",
            TARGET,
            "--gpu",
            "h100x4",
            "--engine",
            "sglang",
            "--json",
            "--set",
            "speculative-algorithm=EAGLE3",
            "--set",
            f"speculative-draft-model-path={DRAFT}",
        ],
    )
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    assert "speculative_draft" not in document["engine"]
    assert any("EAGLE3" in w for w in document["warnings"])


# ---- the rules on the specs (no Hub) ---------------------------------------------------------------------------

H100X4 = parse_gpu_spec("h100x4")


def run(settings: dict[str, str], draft: DraftModel | None = None, tp: int = 4):
    choice = EngineChoice("vllm", None, settings, tp=tp, draft=draft)
    return estimate(derived_spec(TARGET), H100X4, choice, Workload(context=8192))


def read_draft(repo: str = DRAFT) -> DraftModel:
    return DraftModel(name=repo, spec=derived_spec(repo), source=f"fixtures/hub/{repo}")


def test_draft_tensor_parallel_size_follows_vllm():
    """``_verify_and_get_draft_tp``: 1 or the target's TP; a draft model only at the target's (DraftModelProposer);
    ``tensor_parallel_size`` in the speculative config is refused."""
    for size in (1, 2):
        config = json.dumps({"model": DRAFT, "num_speculative_tokens": 5, "draft_tensor_parallel_size": size})
        with pytest.raises(UsageError, match="draft_tensor_parallel_size"):
            run({"speculative-config": config}, read_draft())
    with pytest.raises(UsageError, match="draft_tensor_parallel_size"):
        run({"speculative-config": json.dumps({"model": DRAFT, "tensor_parallel_size": 4})}, read_draft())


def test_an_eagle_head_at_draft_tp_1_holds_its_whole_kv_heads_on_every_rank():
    """An EAGLE-3 head run at draft_tensor_parallel_size 1 under TP 4: its weights whole on every GPU (the draft
    alone at TP 1) and every rank caches all of its KV heads. The head here is Llama-3.2-1B's config (a real
    fixture standing in for a head's layers: the rule is the same arithmetic on any config)."""
    at_one = json.dumps(
        {"model": DRAFT, "method": "eagle3", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1}
    )
    at_four = json.dumps({"model": DRAFT, "method": "eagle3", "num_speculative_tokens": 3})
    one, four = run({"speculative-config": at_one}, read_draft()), run({"speculative-config": at_four}, read_draft())
    alone = estimate(derived_spec(DRAFT), H100X4, EngineChoice("vllm", None, {}, tp=1), Workload(context=8192))
    assert one.engine["speculative_draft"]["weights_bytes"] == alone.per_gpu.weights
    assert one.engine["speculative_draft"]["kv_bytes_per_token_per_gpu"] == draft_kv_bytes_per_token(DRAFT)
    assert four.engine["speculative_draft"]["kv_bytes_per_token_per_gpu"] == draft_kv_bytes_per_token(DRAFT) // 4
    # sized from config shapes, the head's own embed_tokens / lm_head are unknown: nothing is taken as shared
    assert one.engine["speculative_draft"]["shared_with_target"] == []
    assert any("sized from its config shapes, embed_tokens and lm_head included" in w for w in one.warnings)


def test_an_eagle_head_read_from_tensor_headers_counts_the_embeddings_it_holds(hub):
    """Read from real safetensors headers (the Llama-3.1-8B-Instruct fixture's, standing in for a head that ships
    its own embed_tokens and lm_head): both are counted, with a warning that vLLM shares them when they equal the
    target's (it compares the tensors while loading, which no header says)."""
    config = json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "method": "eagle", "num_speculative_tokens": 3})
    drafted = check(TARGET, "--gpu", "h100x4", "--engine", "vllm", "--engine-args", f"--speculative-config '{config}'")
    term = drafted["engine"]["speculative_draft"]
    assert term["method"] == "eagle" and term["shared_with_target"] == []
    alone = check("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100x4", "--engine", "vllm", "--tp", "4")
    assert term["weights_bytes"] == alone["per_gpu"]["weights"]
    assert any("own embeddings and lm_head are counted; vLLM shares" in w for w in drafted["warnings"])


def test_vllm_names_the_method_from_the_draft():
    """``SpeculativeConfig.__post_init__``: "eagle-" / "eagle3" in the model name pick EAGLE / EAGLE-3 even when the
    method says draft_model; a dotted name without a slash is a proposer class."""
    rules = vllm_profile.PROFILE.constants(None)[1]
    spec = derived_spec(TARGET)
    resolve = vllm_features.resolve_speculative
    assert resolve(None, "yuhuili/EAGLE-LLaMA3-Instruct-8B", 3, spec, rules).method == "eagle"
    assert resolve("draft_model", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 3, spec, rules).method == "eagle3"
    assert resolve(None, DRAFT, 3, spec, rules).method == "draft_model"
    assert resolve(None, "my_pkg.MyProposer", 3, spec, rules).method == "custom_class"


def test_v0_does_not_size_the_draft():
    """V0 ran the draft in its own worker with its own cache: the draft read for V1 is not counted there."""
    spec = derived_spec(TARGET)
    config = {"speculative-config": DRAFT_CONFIG}
    with_draft = estimate(
        spec, H100X4, EngineChoice("vllm", "0.6", config, tp=4, draft=read_draft()), Workload(context=8192)
    )
    without = estimate(spec, H100X4, EngineChoice("vllm", "0.6", config, tp=4), Workload(context=8192))
    assert with_draft.per_gpu == without.per_gpu


def test_a_comparison_of_gpu_sets_counts_the_draft_on_each(hub):
    """``check --gpu A,B`` (hfvram.compare/1) reads the draft once and counts it on every set as a single check."""
    args = ["--engine", "vllm", "--context", "8k", "--engine-args", f"--speculative-config '{DRAFT_CONFIG}'"]
    result = CliRunner().invoke(cli, ["check", TARGET, "--gpu", "h100x4,h200x4", *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    comparison = json.loads(result.stdout)
    validate(comparison, "compare")
    single = check(TARGET, "--gpu", "h100x4", *args)
    row = comparison["sets"][0]
    assert row["total_per_gpu"] == single["per_gpu"]["total"]
    assert single["engine"]["speculative_draft"]["model"] == DRAFT
    assert not any("has not read" in w for w in row["warnings"])


def test_fit_reads_the_draft_too(hub):
    args = ["--gpu", "h100", "--engine", "vllm", "--engine-args", f"--speculative-config '{DRAFT_CONFIG}'", "--json"]
    result = CliRunner().invoke(cli, ["fit", TARGET, *args])
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document, "fit")
    text = "\\n".join(document["warnings"])
    assert f"the draft {DRAFT}'s weights" in text and "has not read" not in text


@pytest.mark.parametrize("kind", [None, "status", "gzip_bomb_error"])
def test_a_draft_the_hub_fails_to_serve_is_a_warning_not_a_crash(hub, kind):
    """The draft is read with the model's own deadlines, retries and caps: a Hub that keeps answering 503, or sends a
    gzip bomb for an error body, for the draft's repo (Llama-3.2-1B under a name the embedded catalogue does not
    hold, so nothing falls back) ends in the warning and the figures without the draft; served (no fault), the
    same name is read and counted."""
    alias = "hfvram-test/Llama-3.2-1B-draft"
    hub.files.aliases[alias] = DRAFT
    try:
        if kind is not None:
            hub.fault(alias, kind, status=503, times=None)
        common = [TARGET, "--gpu", "h100x4", "--engine", "vllm", "--context", "8k"]
        config = json.dumps({"model": alias, "num_speculative_tokens": 5})
        drafted = check(*common, "--engine-args", f"--speculative-config '{config}'")
        base = check(*common)
    finally:
        hub.files.aliases.pop(alias, None)
    if kind is None:
        assert drafted["engine"]["speculative_draft"]["model"] == alias
        assert drafted["per_gpu"]["weights"] > base["per_gpu"]["weights"]
        return
    assert drafted["per_gpu"] == base["per_gpu"] and drafted["engine"]["speculative_draft"] is None
    assert any(f"{alias} is a second checkpoint hfvram has not read (" in w for w in drafted["warnings"])


@pytest.mark.parametrize(
    "broken,reason",
    [
        (None, "not valid JSON"),
        ({"num_hidden_layers": 10**12}, "implausible value"),
        ({"num_key_value_heads": "x"}, "expected an integer"),
    ],
)
def test_a_hostile_local_draft_is_a_warning_with_its_reason(hub, tmp_path, broken, reason):
    """A draft folder is read by the local source with the model's bounds: a config that is not JSON, a layer count
    past hfvram's bound or a field of the wrong type ends in the warning naming why, the figures without the draft
    (the config is the Llama-3.2-1B fixture's, broken at test time)."""
    config = config_of(DRAFT)
    text = "{" if broken is None else json.dumps({**config, **broken})
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    common = [TARGET, "--gpu", "h100x4", "--engine", "vllm", "--context", "8k"]
    settings = json.dumps({"model": str(tmp_path), "num_speculative_tokens": 5})
    drafted = check(*common, "--engine-args", f"--speculative-config '{settings}'")
    assert drafted["per_gpu"] == check(*common)["per_gpu"] and drafted["engine"]["speculative_draft"] is None
    assert any("hfvram has not read (" in w and reason in w for w in drafted["warnings"])


def test_set_with_underscores_reads_the_draft(hub):
    """``--set speculative_config=…`` (underscores, as vLLM's Python names) is the same setting."""
    common = [TARGET, "--gpu", "h100x4", "--engine", "vllm", "--context", "8k"]
    pasted = check(*common, "--engine-args", f"--speculative-config '{DRAFT_CONFIG}'")
    typed = check(*common, "--set", f"speculative_config={DRAFT_CONFIG}")
    assert typed["engine"]["speculative_draft"] == pasted["engine"]["speculative_draft"]
    assert typed["per_gpu"] == pasted["per_gpu"]
