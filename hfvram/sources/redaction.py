"""Secrets kept out of every message: :func:`redact` is the one place hfvram hides them, for the Hub endpoint
(``HF_ENDPOINT`` in network and usage errors) and for what a pasted engine command line had that hfvram did not
use (``--engine-args`` warnings). Light on purpose (the standard library's ``re`` and ``urllib.parse`` only)."""

from __future__ import annotations

import re

#: a flag or environment variable whose value is a secret (``--api-key``, ``HF_TOKEN``, ``--ssl-keyfile``, …)
SECRET_NAME = r"[\w.-]*(?:key(?![a-z])|keyfile|token(?![a-z])|secret|password|passwd|auth|credential)[\w.-]*"
#: well-known token shapes, hidden wherever they appear (Hugging Face, OpenAI-style, GitHub)
SECRET_VALUE = re.compile(r"\b(hf_|sk-|ghp_|github_pat_)[A-Za-z0-9_-]{4,}")
#: a URL: a scheme, ``://`` and everything up to the next white space (the punctuation that ends a sentence or an
#: item, ``--api-base http://…: reason``, is given back by :func:`_url_match`)
URL = re.compile(r"(?<![\w+.-])[A-Za-z][A-Za-z0-9+.-]*://\S*")
TRAILING = ":;,.)]'\""


def redact(text: str) -> str:
    """``text`` with what may be a secret hidden, before it enters a message:

    - in each URL, the user info (``user:token@`` -> ``***@``) and the query (``?token=…`` -> ``?***``); the
      fragment is dropped and a URL that cannot be parsed becomes ``<malformed URL>``;
    - the whole value of a secret-looking flag (``--api-key a b`` -> ``--api-key ***``) or environment variable
      (``HF_TOKEN=x`` -> ``HF_TOKEN=***``) when the text is one such item, ``FLAG VALUE…: reason``; one word
      each inside a longer text (a launcher or program segment);
    - any token-shaped word (``hf_…``, ``sk-…``, ``ghp_…``).
    """
    text = URL.sub(_url_match, text)
    body, sep, reason = text.rpartition(": ") if ": " in text else (text, "", "")
    flag = re.match(rf"^(--?{SECRET_NAME})([ =])(.+)$", body, flags=re.IGNORECASE)
    env = re.match(rf"^({SECRET_NAME})=(.+)$", body, flags=re.IGNORECASE)
    if flag:
        body = f"{flag[1]}{flag[2]}***"
    elif env:
        body = f"{env[1]}=***"
    else:
        body = re.sub(
            rf"((?<!\S)--?{SECRET_NAME}[ =]|(?<![\w-]){SECRET_NAME}=)(\S+)", r"\1***", body, flags=re.IGNORECASE
        )
    body = SECRET_VALUE.sub(lambda m: m[1] + "***", body)
    return body + sep + SECRET_VALUE.sub(lambda m: m[1] + "***", reason)


def _url_match(match: re.Match[str]) -> str:
    url = match[0].rstrip(TRAILING)
    return _url_without_secrets(url) + match[0][len(url) :]


def _url_without_secrets(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<malformed URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{port}" if port is not None else "")
    if parts.username is not None or parts.password is not None:
        netloc = "***@" + netloc
    query = "***" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
