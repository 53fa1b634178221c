"""Secrets kept out of every message: this module is the one place hfvram hides them, in everything the user typed
or a server sent before it is printed, written to a file or raised as an error.

What is hidden (README.md, "Security notes"):

- the value of a flag or variable whose *name* looks secret (:func:`is_secret_name`: ``token``, ``key``, ``pass``,
  ``secret``, ``auth``, ``credential``, ``cookie``, ``pwd``, in any case, plural, with a prefix or suffix, or one
  typing mistake away: ``--api-key``, ``HF_TOKEN``, ``ACCESS_TOKENS``, ``--hf-tokens``, ``PGPASS``, ``DB_PASS``,
  ``--api-kye``), in ``--flag VALUE``, ``--flag=VALUE``, ``NAME=VALUE``, ``"name": "value"`` and ``name: value``;
- header values (``--header`` / ``-H "Authorization: Bearer …"``, ``Cookie: …``) and ``Bearer`` / ``Basic`` credentials;
- ``-u user:password`` (curl's user option) and ``user:password@host`` with or without a scheme;
- in each URL, the user info (``user:token@`` -> ``***@``) and the query (``?token=…`` -> ``?***``);
- known token shapes wherever they appear: ``hf_…``, ``sk-…``, GitHub / Slack / AWS key shapes, JSON Web Tokens,
  long hexadecimal runs (32 digits and more) and long base64 runs (a piece of 24 characters and more that mixes
  upper case, lower case and digits; a 40- or 64-digit hash as a path component, the HF cache's
  ``snapshots/<sha>/``, is the Hub's own name and stays).

Light on purpose (the standard library's ``re`` and ``urllib.parse`` only) and linear in the text's length.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

MASK = "***"
#: words that make a name secret when a word of the name *is* one of them, or is one typing mistake away
_STEMS_TYPO = ("token", "tokens", "secret", "secrets", "password", "passwd", "credential", "credentials", "cookie",
               "cookies", "apikey", "apikeys", "passphrase", "authorization")  # fmt: skip
#: short words: secret when a word equals one, starts with one (``keyfile``, ``authtoken``) or ends with one
#: (``pgpass``, ``hftoken``, ``oauth``); too short to allow a typing mistake (``auto`` is one away from ``auth``)
_STEMS_SHORT = ("key", "keys", "pass", "auth", "pwd", "pat", "token", "tokens", "secret", "credential", "cookie")
#: name words that mean a count, not a credential (``max-num-batched-tokens``, ``num_key_value_heads``)
_COUNT_WORDS = frozenset({"max", "min", "num", "batched", "prefill", "total", "new", "speculative", "draft",
                          "lookahead", "context", "input", "output", "chunk", "chunked", "extra", "reserved", "long",
                          "sliding", "value", "values", "heads", "head", "n", "count", "per", "window", "budget",
                          "limit", "ubatch", "batch", "dim", "cache", "size", "tokenizer"})  # fmt: skip
#: flags whose value is a header or a user:password pair (curl's ``-H`` / ``-u``, docker's ``--header``)
HEADER_FLAGS = frozenset(
    {"-h", "--header", "--headers", "--extra-header", "--http-header", "-u", "--user", "--proxy-user"}
)
#: well-known token shapes
SECRET_VALUE = re.compile(
    r"(?<![A-Za-z0-9_-])(?:(hf_|api_org_|sk-|sk_|pk_|rk_|ghp_|gho_|ghs_|ghu_|ghr_|github_pat_|glpat-|xox[abposr]-|AKIA|ASIA)"
    r"[A-Za-z0-9_-]{4,}"
    r"|eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"
    r"|[0-9a-fA-F]{32,}(?![0-9a-zA-Z])"
    r"|[A-Za-z0-9+/_-]{24,}={0,2})"
)
#: a URL: a scheme, ``://`` and everything up to the next white space (the punctuation that ends a sentence or an
#: item, ``--api-base http://…: reason``, is given back by :func:`_url_match`)
URL = re.compile(
    r"(?<![\w+.-])[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s\[\]\"'<>{}|\\^`\x00-\x1f\x7f]*\[[0-9A-Fa-f:.]*\]?)?"
    r"[^\s\[\]\"'<>{}|\\^`\x00-\x1f\x7f]*"
)
TRAILING = ":;,.)]'\""
#: ``user:password@host`` without a scheme (after white space, a quote or the start)
_USERINFO = re.compile(r"(?<![^\s'\"(=,])[^\s:@/'\"]+:[^\s@/'\"]+@(?=[\w\[])")
#: a header line: ``Authorization: Bearer x`` (the value runs to a quote, a comma-free line end)
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|(?:set-)?cookie|x-[\w-]*?(?:key|token|auth|secret)[\w-]*|api-key|private-token)"
    r"(\s*:\s*)[^\"'\n]+"
)
_SCHEME_CREDENTIAL = re.compile(
    r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=:-]{4,}|\b(basic)\s+(?=[A-Za-z0-9+/]*[0-9=]|(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[A-Z])[A-Za-z0-9+/]{12})"
    r"[A-Za-z0-9+/]{8,}={0,2}"
)
#: ``--NAME VALUE`` / ``--NAME=VALUE`` and ``NAME=VALUE``, ``NAME: VALUE``, ``"NAME": "VALUE"``: the name is then
#: checked by is_secret_name
_VALUE = r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;(){}\[\]\"']+)"
_FLAG_VALUE = re.compile(r"(?<![\w.-])(?P<name>--?[A-Za-z_][\w.-]{0,63})(?P<sep>[ =])(?!-)" + _VALUE)
_NAME_VALUE = re.compile(r"(?<![\w.-])(?P<name>[A-Za-z_][\w.-]{0,63})(?P<quote>[\"']?)(?P<sep>\s*[:=]\s*)" + _VALUE)


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name.strip().lstrip("-"))
    return [word for word in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if word]


def _within_one(word: str, stem: str) -> bool:
    """Optimal string alignment distance <= 1 (one insertion, deletion, substitution or swap)."""
    if word == stem:
        return True
    if abs(len(word) - len(stem)) > 1:
        return False
    if len(word) == len(stem):
        diff = [i for i, (a, b) in enumerate(zip(word, stem, strict=True)) if a != b]
        if len(diff) == 1:
            return True
        return (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and word[diff[0]] == stem[diff[1]]
            and word[diff[1]] == stem[diff[0]]
        )
    short, long = (word, stem) if len(word) < len(stem) else (stem, word)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _secret_word(word: str) -> bool:
    if len(word) > 64:
        return False
    if any(word == s or word.endswith(s) for s in _STEMS_SHORT):
        return True
    if word.startswith(("key", "auth", "pass", "secret", "credential", "cookie")) and not word.startswith("author"):
        return True
    return len(word) >= 4 and any(_within_one(word, s) for s in _STEMS_TYPO)


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether the flag or variable ``name`` (``--api-key``, ``HF_TOKEN``, ``pgPass``) names a secret: a word of it,
    or two neighbouring words joined (``api`` + ``kye``), is or is one mistake from a secret word, and no word says
    it counts something (``max-num-batched-tokens``, ``num_key_value_heads``, ``--tokenizer``)."""
    words = _words(name)
    if not words or len(words) > 16 or any(word in _COUNT_WORDS for word in words):
        return False
    joined = [a + b for a, b in itertools.pairwise(words)]
    return any(_secret_word(word) for word in words + joined + ["".join(words)])


def redact(text: str) -> str:
    """``text`` with what may be a secret hidden (the module docstring lists what), before it enters a message.

    A text that is one item, ``FLAG VALUE…: reason`` with a secret flag, loses the whole value (``--api-key a b``
    -> ``--api-key ***``)."""
    text = str(text)
    text = URL.sub(_url_match, text)
    text = _USERINFO.sub(MASK + "@", text)
    text = _HEADER.sub(lambda m: m[1] + m[2] + MASK, text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: (m[1] or m[2]) + " " + MASK, text)
    body, sep, reason = text.rpartition(": ") if ": " in text else (text, "", "")
    item = re.match(r"^(--?[\w.-]+|[A-Za-z_][\w.-]*)([ =])(.+)$", body, flags=re.S)
    if item and is_secret_name(item[1]) and (item[1].startswith("-") or item[2] == "="):
        return f"{item[1]}{item[2]}{MASK}" + sep + _assignments(_shapes(reason))
    if item and item[1].lower() in HEADER_FLAGS and item[2] == " ":
        return f"{item[1]} {MASK}" + sep + _assignments(_shapes(reason))
    return _assignments(_shapes(text))


def _assignments(text: str) -> str:
    def flag(match: re.Match[str]) -> str:
        name = match["name"]
        if is_secret_name(name) or (name.lower() in HEADER_FLAGS and match["sep"] == " "):
            return f"{name}{match['sep']}{MASK}"
        return match[0]

    def assignment(match: re.Match[str]) -> str:
        # prose ("8192 tokens = 0.84 GiB", "tokens: 4096") is not an assignment: a short number after a spaced
        # separator stays; NAME=VALUE without spaces is always one
        prose = match["sep"].strip() != match["sep"] and not match["quote"]
        if prose and re.fullmatch(r"[\d.,]{1,11}", match["value"]):
            return match[0]
        if is_secret_name(match["name"]):
            return f"{match['name']}{match['quote']}{match['sep']}{MASK}"
        return match[0]

    text = re.sub(r"(?<!\S)(-u|--user|--proxy-user)([ =])\S*:\S*", r"\1\2" + MASK, text)
    return _NAME_VALUE.sub(assignment, _FLAG_VALUE.sub(flag, text))


def _shapes(text: str) -> str:
    def hide(match: re.Match[str]) -> str:
        word = match[0]
        if match[1]:
            return match[1] + MASK
        if word.startswith("eyJ"):
            return MASK
        if re.fullmatch(r"[0-9a-fA-F]{32,}", word) and re.search(r"[a-fA-F]", word) and re.search(r"\d", word):
            # a commit sha or blob hash as a path component (the HF cache's snapshots/<sha>/) is the Hub's own name
            around = match.string[match.start() - 1 : match.start()] + match.string[match.end() : match.end() + 1]
            return word if len(word) in (40, 64) and around == "//" else MASK
        pieces = re.split(r"[_/.-]", word.rstrip("="))
        if any(
            len(p) >= 24 and re.search(r"[a-z]", p) and re.search(r"[A-Z]", p) and re.search(r"\d", p) for p in pieces
        ):
            return MASK
        return word

    return SECRET_VALUE.sub(hide, text)


def redact_words(words: Iterable[str]) -> list[str]:
    """A command line's words with the secrets hidden: the word after a secret flag or a header flag (``-H``,
    ``-u``), the value of a secret ``NAME=VALUE``, and each word as :func:`redact` shows it."""
    shown: list[str] = []
    hide_next = False
    for word in words:
        if hide_next:
            shown.append(MASK)
            hide_next = False
            continue
        name, sep, _ = word.partition("=")
        if sep and (is_secret_name(name) or name.lower() in HEADER_FLAGS):
            shown.append(f"{name}={MASK}")
        elif word.startswith("-") and (is_secret_name(word) or word.lower() in HEADER_FLAGS):
            shown.append(word)
            hide_next = True
        else:
            shown.append(redact(word))
    return shown


#: document keys whose strings are hfvram's own identifiers (a commit sha is 40 hex digits, not a secret)
_OWN_KEYS = frozenset({"revision", "sha", "commit", "etag", "oid"})


def redact_document(document: Any, _key: str = "") -> Any:
    """A JSON-able document (report, scan row) with :func:`redact` applied to every string in it, and the value of
    every key whose name looks secret hidden; hfvram's own commit ids are kept."""
    if isinstance(document, str):
        return document if _key in _OWN_KEYS else redact(document)
    if isinstance(document, Mapping):
        return {
            key: (MASK if isinstance(key, str) and is_secret_name(key) and isinstance(value, str) else
                  redact_document(value, str(key)))
            for key, value in document.items()
        }  # fmt: skip
    if isinstance(document, tuple):
        return tuple(redact_document(item, _key) for item in document)
    if isinstance(document, list):
        return [redact_document(item, _key) for item in document]
    return document


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
