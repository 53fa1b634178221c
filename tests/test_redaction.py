"""hfvram.sources.redaction.redact is the one place secrets are hidden: the Hub endpoint in error messages and
what a pasted engine command line had that hfvram did not use. Through the real CLI: tests/test_faults.py
(HF_ENDPOINT) and tests/test_cli_check.py / test_cli_qa.py (--engine-args)."""

from __future__ import annotations

import pytest

from hfvram.sources.redaction import redact

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
