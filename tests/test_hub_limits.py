"""The Hub's rate limits (hub-docs ``rate-limits.md``: fixed windows per bucket, ``api`` for /api/ calls and
``resolvers`` for /resolve/ URLs, the RateLimit / RateLimit-Policy headers, 429 over quota) as the test Hub
enforces them at scaled-down windows, read by huggingface_hub's own client and by hfvram: a request waits for the
window to reset rather than fail, says so on stderr, and one budget is spent by every process on the same Hub.
The listing endpoint (``GET /api/models``) is read with huggingface_hub's ``list_models``, which follows its
``Link`` pages. Nothing here is timed: windows are counted on the server's grid."""

from __future__ import annotations

import httpx2
import pytest
from huggingface_hub import HfApi
from huggingface_hub.utils import parse_ratelimit_headers

from hfvram.sources import load_model
from hfvram.sources.limits import QuotaBudget

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
#: fixtures/README.md: all-MiniLM-L6-v2 model.safetensors row (file size less its 8 + 11,408-byte header)
MINILM_DATA_BYTES = 90_868_376 - (8 + 11_408)


def test_every_answer_states_its_bucket_and_over_quota_is_429(hub):
    hub.set_rate_limits(api=2, resolvers=3, window=60)
    answers = [httpx2.get(f"{hub.url}/api/models/{MINILM}") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    infos = [parse_ratelimit_headers(a.headers) for a in answers]
    assert all(i is not None and i.resource_type == "api" for i in infos)
    assert [i.remaining for i in infos if i] == [1, 0, 0]
    assert {(i.limit, i.window_seconds) for i in infos if i} == {(2, 60)}
    assert "retry-after" not in answers[2].headers  # a rate-limited answer need not carry one
    resolved = httpx2.get(f"{hub.url}/{MINILM}/resolve/main/config.json")
    info = parse_ratelimit_headers(resolved.headers)
    assert resolved.status_code == 200 and info is not None
    assert (info.resource_type, info.remaining, info.limit) == ("resolvers", 2, 3)
    # the LFS redirect is a resolver answer too; the CDN it points to counts in no bucket
    weights = httpx2.head(f"{hub.url}/{MINILM}/resolve/main/model.safetensors")
    assert weights.status_code == 302 and parse_ratelimit_headers(weights.headers).remaining == 1
    cdn = httpx2.head(weights.headers["location"])
    assert cdn.status_code == 200 and "ratelimit" not in cdn.headers


def test_listing_pages_filters_sorts_and_expands(hub):
    names = hub.files.alias_many("lister", 7, targets=[MINILM, "meta-llama/Llama-3.1-8B-Instruct"])
    api = HfApi(endpoint=hub.url)
    listed = list(api.list_models(author="lister", expand=["sha", "siblings", "safetensors", "config", "gated"]))
    assert sorted(m.id for m in listed) == names
    model = next(m for m in listed if m.id == "lister/repo-000")
    assert model.sha == hub.files.get("lister/repo-000").sha
    assert set(model.safetensors.parameters) == {"F32", "I64"}  # from the real header, as the model info has it
    assert {s.rfilename for s in model.siblings} >= {"config.json", "model.safetensors"}
    assert model.config["architectures"] == ["BertModel"]
    hub.records.clear()
    paged = list(api.list_models(author="lister", limit=7, expand=["sha"]))
    assert len(paged) == 7 and len(hub.records) == 1
    # pages of 3 (the Hub's `limit` is a page size; huggingface_hub follows the Link header)
    hub.records.clear()
    answer = httpx2.get(f"{hub.url}/api/models", params={"author": "lister", "limit": 3})
    assert len(answer.json()) == 3 and 'rel="next"' in answer.headers["link"]
    by_downloads = [m.downloads for m in api.list_models(author="lister", sort="downloads")]
    assert by_downloads == sorted(by_downloads, reverse=True)
    assert [m.id for m in api.list_models(author="lister", search="REPO-00", filter="text-generation")] != []
    found = {m.id for m in api.list_models(search="all-minilm")}  # (other tests may alias the repo)
    assert MINILM in found and all("all-minilm" in name.lower() for name in found)
    with pytest.raises(Exception, match="expand"):
        list(api.list_models(author="lister", expand=["nonsense"]))  # type: ignore[list-item]


def test_a_check_waits_for_the_window_instead_of_failing(hub, capfd):
    hub.files.aliases["limits/minilm"] = MINILM
    hub.set_rate_limits(api=1, resolvers=1, window=2)
    loaded = load_model("limits/minilm", need_split=True)
    assert loaded.spec.weights.total_bytes == MINILM_DATA_BYTES
    counted = [r for r in hub.records if r.bucket and not r.limited]
    limited = [r for r in hub.records if r.limited]
    # one resolver request a window: config.json and the header's Range could not share one
    assert len({r.window for r in counted if r.bucket == "resolvers"}) == len(
        [r for r in counted if r.bucket == "resolvers"]
    )
    # the first wave (config.json, the index, the header: resolver-first) goes out before any answer has stated
    # the quota
    assert len(limited) <= 3
    assert not [r for r in hub.records if r.bucket == "api"]  # resolver-first: no API request
    err = capfd.readouterr().err
    assert "rate limit" in err and "waiting" in err and "to reset" in err


def test_one_budget_for_every_holder_of_the_state_file(tmp_path):
    path = tmp_path / "ratelimit.state"
    said: list[str] = []
    first, second = QuotaBudget(path, say=said.append), QuotaBudget(path, say=said.append)
    first.after("api", 3, 15.0, 50, 20.0)  # one process reads an answer
    assert second.before("api") == 0.0  # another spends from the same window
    assert second.before("api") == 0.0
    state = first.snapshot()["api"]
    assert (state["r"], state["q"], state["w"], state["sent"]) == (1, 50, 20.0, 2)
    # a later answer of the same window cannot raise what is left; a new window replaces it
    first.after("api", 40, 14.0, 50, 20.0)
    assert first.snapshot()["api"]["r"] == 1
    first.after("api", 45, 20.0, 50, 20.0)  # past that reset: the next window
    assert first.snapshot()["api"]["r"] == 45
    assert not said


SCAN_TARGETS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "google/gemma-2-9b-it",
    "openai/gpt-oss-20b",
    MINILM,
    "Qwen/Qwen3-8B",
    "TheBloke/Llama-2-13B-chat-GPTQ",
]


def test_a_scan_of_300_repos_of_one_owner_at_the_hubs_limits(hub):
    """Issue 25's target: api 50 / resolvers 150 a window, 300 repos of one owner: every row answered, at most 0.1
    API requests a repo, at most 5 % of the requests answered 429, and no more windows than the quota needs plus
    one. The window is 4 s here instead of 20 s (benchmarks/hub_cost.py --limits runs the full-size one)."""
    import json
    import math

    from cli_support import run_hfvram

    names = hub.files.alias_many("quota", 300, targets=SCAN_TARGETS)
    hub.set_rate_limits(api=50, resolvers=150, window=4)
    result = run_hfvram(
        "scan", "-", "--json", "--gpu", "rtx4090", "--context", "8k", stdin="\n".join(names) + "\n", timeout=300
    )
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 300 and not [r for r in rows if "error" in r], result.stderr[-2000:]
    assert sorted(r["source"]["repo_id"] for r in rows) == names
    records = [r for r in hub.records if r.bucket is not None]
    api = [r for r in records if r.bucket == "api"]
    limited = [r for r in records if r.limited]
    assert len(api) <= 0.1 * len(names), len(api)  # the owner's listing, not one model info per repo
    assert len(limited) <= 0.05 * len(records), (len(limited), len(records))
    for bucket, quota in (("api", 50), ("resolvers", 150)):
        served = [r.window for r in records if r.bucket == bucket and not r.limited]
        needed = math.ceil(len(served) / quota)  # the fewest windows the quota allows for these requests
        assert max(served) - min(served) + 1 <= needed + 1, (bucket, len(served), sorted(set(served)))


def test_listing_is_read_only_where_it_pays_and_its_failure_costs_no_row(hub):
    import json

    from cli_support import run_hfvram

    few = hub.files.alias_many("few", 3, targets=SCAN_TARGETS)
    many = hub.files.alias_many("many", 12, targets=SCAN_TARGETS)
    hub.fault("/api/models", "status", status=503, times=1)  # the listing's first try fails, its retry answers
    result = run_hfvram("scan", "-", "--json", "--gpu", "rtx4090", stdin="\n".join(few + many) + "\n")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 15 and not [r for r in rows if "error" in r], result.stderr[-2000:]
    listings = [r for r in hub.records if r.path == "/api/models"]
    infos = [r.path for r in hub.records if r.path.startswith("/api/models/")]
    assert [r.status for r in listings] == [503, 200]  # one owner has enough repos for a listing
    # the others are read through the resolver: a model info only for a repo whose weights it alone lists (the
    # config-only Qwen/Qwen3-8B fixture: no model.safetensors, no index)
    config_only = [name for name in few if hub.files.aliases[name] == "Qwen/Qwen3-8B"]
    assert sorted(p.removeprefix("/api/models/") for p in infos) == config_only


def test_a_quota_that_never_opens_ends_in_one_clean_error_after_bounded_waits(hub):
    from hfvram.errors import NetworkError
    from hfvram.sources.http import RATE_LIMIT_WAITS

    hub.files.aliases["limits/closed"] = MINILM
    hub.set_rate_limits(api=10, resolvers=0, window=1)  # every resolver request over quota, each window
    with pytest.raises(NetworkError, match="429"):
        load_model("limits/closed")
    info_requests = [r for r in hub.records if r.path == "/limits/closed/resolve/main/config.json"]
    assert all(r.limited for r in info_requests)
    # each 429 waited out (one a window) at most RATE_LIMIT_WAITS times, then the usual bounded retries
    assert RATE_LIMIT_WAITS < len(info_requests) <= RATE_LIMIT_WAITS + 4
    assert len({r.window for r in info_requests}) >= RATE_LIMIT_WAITS


def test_a_stated_reset_past_its_window_is_not_believed(tmp_path):
    budget = QuotaBudget(tmp_path / "state")
    budget.after("api", 0, 86_400.0, 50, 20.0)  # "reset in a day" for a 20 s window
    state = budget.snapshot()["api"]
    import time

    assert state["reset"] - time.time() <= 20.0
