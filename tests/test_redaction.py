"""hfvram.redaction.redact is the one place secrets are hidden: the Hub endpoint in error messages and
what a pasted engine command line had that hfvram did not use. Through the real CLI: tests/test_faults.py
(HF_ENDPOINT) and tests/test_cli_check.py / test_cli_qa.py (--engine-args)."""

from __future__ import annotations

import pytest

from hfvram.redaction import is_secret_name, redact, redact_document

SECRET = "hf_s3cretTOKENvalue"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"http://user:{SECRET}@127.0.0.1:8080", "http://***@127.0.0.1:8080"),
        (f"http://{SECRET}@hub.example", "http://***@hub.example"),
        (f"http://hub.example/?token={SECRET}", "http://hub.example/?***"),
        ("http://[::1]:9/api#fragment", "http://[::1]:9/api"),
        ("HTTPS://Hub.Example/a?b=c", "https://hub.example/a?***"),
        ("https://huggingface.co", "https://huggingface.co"),
        ("http://[::1", "<malformed URL>"),
        (f"http://u:{SECRET}@host:port", "<malformed URL>"),
        ("not a url", "not a url"),
    ],
)
def test_urls_lose_their_user_info_query_and_fragment(text, shown):
    assert redact(text) == shown


@pytest.mark.parametrize(
    ("item", "shown"),
    [
        ("--api-key abc def: not used", "--api-key ***: not used"),
        ("--ssl-keyfile /k.pem: not used", "--ssl-keyfile ***: not used"),
        ("HF_TOKEN=xyz: environment", "HF_TOKEN=***: environment"),
        ("env HF_TOKEN=x --api-key=y python -m sglang: launcher", "env HF_TOKEN=*** --api-key=*** python -m sglang: launcher"),
        (f"--served-model-name {SECRET}: not modelled", "--served-model-name hf_***: not modelled"),
        ("--api-base http://me:pw@proxy.example/v1?sig=1: not modelled", "--api-base http://***@proxy.example/v1?***: not modelled"),
        ("--port 8000: not modelled", "--port 8000: not modelled"),
        ("--tokenizer-mode auto: not modelled", "--tokenizer-mode auto: not modelled"),
        ("CUDA_VISIBLE_DEVICES=0,1: not modelled", "CUDA_VISIBLE_DEVICES=0,1: not modelled"),
    ],
)  # fmt: skip
def test_secret_flags_variables_and_token_shapes_are_hidden(item, shown):
    assert redact(item) == shown


def test_a_long_hostile_text_is_handled_in_one_pass():
    text = "http://" + ":" * 200_000 + "x " + "--api-key " * 20_000 + SECRET
    assert SECRET not in redact(text)


@pytest.mark.parametrize(
    "name",
    ["--api-key", "HF_TOKEN", "ACCESS_TOKENS", "--hf-tokens", "PGPASS", "DB_PASS", "--api-kye", "--toekn", "pgPassword",
     "--ssl-keyfile", "X_AUTH", "--session-cookie", "CLIENT_SECRET", "aws_credentials", "--Hf_Token"],
)  # fmt: skip
def test_secret_names_in_any_case_plural_prefix_or_one_typo(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["--max-num-batched-tokens", "num_key_value_heads", "--tokenizer", "--tokenizer-mode", "--port", "--kv-cache-dtype",
     "--enable-auto-tool-choice", "--served-model-name", "--revision", "--hf-overrides", "--author", "--path",
     "--max-prefill-tokens", "mem-fraction-static", "--keep"],
)  # fmt: skip
def test_counts_and_ordinary_flags_are_not_secret_names(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ('--header "Authorization: Bearer abcdef123": not read', "abcdef123"),
        ("curl -H 'Cookie: session=abcdef' x", "abcdef"),
        ("got Bearer abc.def.ghi back", "abc.def.ghi"),
        ("Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("-u alice:pw123 x", "pw123"),
        ("SOURCE alice:pw123@host.example/x is not a repo", "pw123"),
        ('--hf-overrides {"token": "abcd1234", "x": 1}: not read', "abcd1234"),
        ('{"kv_connector_extra_config":{"api_key":"zzzz"}}', "zzzz"),
        ("password: hunter2", "hunter2"),
        ("DB_PASS=x9 PGPASS=y9", "y9"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl here", "eyJzdWIiOiIxIn0"),
        ("key 0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
        ("blob AbCdEfGh1234567890AbCdEfGhIj end", "AbCdEfGh1234567890AbCdEfGhIj"),
        ("sk-proj-abcdef and ghp_abcdef12", "abcdef12"),
    ],
)  # fmt: skip
def test_headers_user_info_json_values_and_token_shapes_are_hidden(text, hidden):
    assert hidden not in redact(text)


@pytest.mark.parametrize(
    "text",
    [
        "max(sampler 15.3 B × 1024 seqs, forward 8192 tokens = 0.84 GiB)",
        "fixtures/headers/SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf",
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 not found",
        "org/model:Q4_K_M@main not found",
        "hub/models--org--name/snapshots/0123456789abcdef0123456789abcdef01234567/config.json",
        "config.json: num_key_value_heads: 0 is not a positive count",
        "the basic settings",
        "convert_hf_to_gguf.py --outtype F16",
        "task-sk-level",
    ],
)
def test_ordinary_text_is_left_as_it_is(text):
    assert redact(text) == text


def test_documents_keep_their_own_commit_ids_and_hide_secret_keys():
    sha = "0123456789abcdef0123456789abcdef01234567"
    document = {"source": {"revision": sha}, "settings": {"api-key": "abc", "port": "8000"}, "warnings": ["hf_abcdef"]}
    shown = redact_document(document)
    assert shown["source"]["revision"] == sha
    assert shown["settings"] == {"api-key": "***", "port": "8000"}
    assert shown["warnings"] == ["hf_***"]
