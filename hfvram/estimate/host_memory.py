"""Host (CPU) memory bandwidth and the PCIe link, for the speed of layers kept in RAM (``--host-memory``).

``--host-memory`` takes a row of ``hfvram/data/host_memory.toml`` (``ddr5-6000x2``, ``epyc-9004``, ``apple-m4-max``),
a memory type with its transfer rate and channel count (``ddr5-6000x2``, ``ddr4-3200x4``: MT/s x 8 bytes x
channels, JEDEC's 64-bit channel), or a bandwidth (``90GB/s``). Without it the table's ``default`` is used and the
output says so. Pure: no I/O beyond the packaged table.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from hfvram.datafiles import data_table
from hfvram.errors import UsageError

_TYPED = re.compile(r"^(?P<type>ddr4|ddr5|lpddr5x?)-(?P<rate>\d{3,5})(?:x(?P<channels>\d{1,2}))?$")
_RATE = re.compile(r"^(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>gb/s|gbps|gib/s|tb/s)$")


@dataclass(frozen=True)
class HostMemory:
    """A host memory system: its theoretical bandwidth and where the figure comes from."""

    id: str
    name: str
    bandwidth_gbs: float
    source: str
    #: True when the user did not give --host-memory (the table's default row)
    assumed: bool = False

    def describe(self) -> str:
        if self.source == "--host-memory":
            return f"{self.bandwidth_gbs:g} GB/s (--host-memory)"
        basis = ", default" if self.assumed else ""
        return f"{self.bandwidth_gbs:g} GB/s ({self.id}{basis})"


def _table() -> dict[str, Any]:
    return data_table("host_memory.toml")


def _rows() -> dict[str, dict[str, Any]]:
    return {str(row["id"]): row for row in _table().get("system", [])}


def _source(row: dict[str, Any]) -> str:
    source = str(row.get("source", ""))
    formula = _table().get("formula", {})
    return str(formula.get(source, source))


def _from_row(row: dict[str, Any], assumed: bool = False) -> HostMemory:
    return HostMemory(str(row["id"]), str(row["name"]), float(row["bandwidth_gbs"]), _source(row), assumed)


def host_memory_names() -> list[str]:
    return sorted(_rows())


def parse_host_memory(text: str | None) -> HostMemory:
    """``--host-memory``: a catalogue row, ``TYPE-MTs[xCHANNELS]`` or ``N GB/s``; None -> the default row.
    UsageError (exit 2) with a did-you-mean for anything else."""
    rows = _rows()
    if text is None or not text.strip():
        return _from_row(rows[str(_table()["default"])], assumed=True)
    key = text.strip().lower().replace(" ", "")
    if key in rows:
        return _from_row(rows[key])
    rate = _RATE.match(key)
    if rate:
        value = float(rate["value"])
        gbs = value * (1.073741824 if rate["unit"] == "gib/s" else 1000.0 if rate["unit"] == "tb/s" else 1.0)
        if not 0 < gbs <= 100_000:
            raise UsageError(f"--host-memory {text!r}: bandwidth must be between 0 and 100000 GB/s")
        return HostMemory(f"{gbs:g}GB/s", "host memory bandwidth given on the command line", gbs, "--host-memory")
    typed = _TYPED.match(key)
    if typed:
        formula = _table()["formula"]
        channels = int(typed["channels"] or 2)
        transfer = int(typed["rate"])
        if not 1 <= channels <= int(formula["max_channels"]) or not 100 <= transfer <= int(
            formula["max_transfer_rate"]
        ):
            raise UsageError(
                f"--host-memory {text!r}: channels 1-{formula['max_channels']} and 100-{formula['max_transfer_rate']} MT/s"
            )
        kind = typed["type"]
        gbs = transfer * int(formula["bytes_per_channel_transfer"]) * channels / 1000
        source_key = {"ddr4": "ddr4_source", "ddr5": "ddr5_source"}.get(kind, "lpddr5_source")
        return HostMemory(
            f"{kind}-{transfer}x{channels}",
            f"{kind.upper()}-{transfer}, {channels} channels",
            gbs,
            f"{transfer} MT/s × 8 B × {channels} channels; {formula[source_key]}",
        )
    close = difflib.get_close_matches(key, sorted(rows), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise UsageError(
        f"unknown --host-memory {text!r}{hint} (a system such as ddr5-5600x2, epyc-9004 or apple-m4-max, "
        "TYPE-MT/s x CHANNELS such as ddr5-6000x2, or a bandwidth such as 90GB/s)"
    )


def pcie_bandwidth_gbs(name: str | None = None) -> tuple[float, str]:
    """(GB/s per direction, label) of a PCIe link; the table's default (gen4 x16) when not given."""
    pcie = _table()["pcie"]
    key = (name or str(pcie["default"])).strip().lower()
    if key not in pcie or key in ("default", "source"):
        links = sorted(k for k in pcie if k not in ("default", "source"))
        raise UsageError(f"unknown PCIe link {name!r}: use one of {', '.join(links)}")
    return float(pcie[key]), f"PCIe {key.replace('gen', '').replace('x', ' x')} {float(pcie[key]):g} GB/s"


_SIZE = re.compile(r"^(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>gib|gb|g|tib|tb|t)$")


def parse_ram(text: str) -> int:
    """``--ram 64GiB`` / ``64GB`` / ``64G`` / ``1TB`` -> bytes (RAM is sold in binary sizes: GB = GiB here)."""
    match = _SIZE.match(text.strip().lower().replace(" ", ""))
    if not match:
        raise UsageError(f"--ram {text!r}: give a size such as 64GiB, 64GB or 1TB")
    scale = 2**40 if match["unit"].startswith("t") else 2**30
    value = float(match["value"]) * scale
    if not 2**30 <= value <= 2**52:
        raise UsageError(f"--ram {text!r}: between 1 GiB and 4096 TiB")
    return int(value)
