"""GPU prices (hfvram/data/gpu_prices.toml): one published figure per row, each with its kind (new / used), date
and source. A GPU without a row has no price; nothing is guessed. The price of a set is the sum of its cards'."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from hfvram.datafiles import data_table
from hfvram.errors import UsageError

PRICE_KINDS = ("any", "new", "used")


@dataclass(frozen=True)
class Price:
    gpu: str
    usd: float
    kind: str
    date: str
    basis: str
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "usd": self.usd,
            "kind": self.kind,
            "date": self.date,
            "basis": self.basis,
            "source": self.source,
        }


@lru_cache(maxsize=1)
def price_rows() -> tuple[Price, ...]:
    rows: Sequence[Mapping[str, Any]] = data_table("gpu_prices.toml").get("price", [])
    return tuple(
        Price(
            gpu=str(row["gpu"]),
            usd=float(row["usd"]),
            kind=str(row["kind"]),
            date=str(row["date"]),
            basis=str(row["basis"]),
            source=str(row["source"]),
        )
        for row in rows
    )


def check_price_kind(kind: str) -> str:
    if kind not in PRICE_KINDS:
        raise UsageError(f"price kind {kind!r}: use one of {', '.join(PRICE_KINDS)}")
    return kind


def price_of(gpu_id: str, kind: str = "any") -> Price | None:
    """The price of one card: of that kind (``new`` / ``used``), or the lowest published (``any``); None if none."""
    found = [row for row in price_rows() if row.gpu == gpu_id and (kind == "any" or row.kind == kind)]
    return min(found, key=lambda row: (row.usd, row.date)) if found else None


def set_price(gpu_ids: Sequence[str], kind: str = "any") -> dict[str, Any] | None:
    """The price of a GPU set (one id per card): the sum, each card's row, the kinds and dates; None when any card
    has no price (a partial sum would understate the set)."""
    prices = [price_of(gpu_id, kind) for gpu_id in gpu_ids]
    if not prices or any(price is None for price in prices):
        return None
    known = [price for price in prices if price is not None]
    cards: list[Price] = list({(p.gpu, p.kind, p.usd): p for p in known}.values())
    return {
        "usd": round(sum(price.usd for price in known), 2),
        "kind": "/".join(sorted({price.kind for price in known})),
        "date": max(price.date for price in known),
        "cards": [price.as_dict() for price in cards],
    }


def priced_gpu_ids() -> frozenset[str]:
    return frozenset(row.gpu for row in price_rows())
