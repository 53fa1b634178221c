"""Human-readable sizes and counts for the text reports (JSON always carries plain bytes)."""

from __future__ import annotations

GIB = 1024**3
MIB = 1024**2


def gib(value: int | float | None, digits: int = 2) -> str:
    """Bytes as GiB (``16.00 GiB``); ``—`` for an unknown figure."""
    if value is None:
        return "—"
    return f"{value / GIB:.{digits}f} GiB"


def tokens_short(tokens: int | None) -> str:
    """``32768`` -> ``32k``, ``131072`` -> ``128k``, ``1048576`` -> ``1M``; other values as a grouped integer."""
    if tokens is None:
        return "—"
    if tokens >= 1024 * 1024 and tokens % (1024 * 1024) == 0:
        return f"{tokens // (1024 * 1024)}M"
    if tokens >= 1024 and tokens % 1024 == 0:
        return f"{tokens // 1024}k"
    return f"{tokens:,}"


def count(value: int | float | None, digits: int = 0) -> str:
    """A grouped number (``411,420``) or ``—``."""
    if value is None:
        return "—"
    if digits:
        return f"{value:,.{digits}f}"
    return f"{int(value):,}"


def params(value: int | None) -> str:
    """Parameter count as ``8.03B`` / ``135M``."""
    if value is None:
        return "—"
    if value >= 1e9:
        return f"{value / 1e9:.2f}B"
    if value >= 1e6:
        return f"{value / 1e6:.0f}M"
    return f"{value:,}"


def percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{fraction * 100:.0f}%"
