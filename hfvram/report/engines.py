"""``hfvram engines``: every engine, its rule sets with their dates, and the newest release known."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from hfvram.report.fitwidth import print_wrapped
from hfvram.report.text import safe


def _date(row: Mapping[str, Any] | None) -> str:
    if not row or not row.get("date"):
        return "date unknown"
    return f"by {row['date']}" if row.get("date_bound") == "by" else str(row["date"])


def render_engine_list(console: Console, document: Mapping[str, Any]) -> None:
    """A block per engine: its rule sets (version, and the date of the release each was filed under), the newest
    release whose changes were reviewed and the newest known to exist. Plain lines, wrapped, never cut."""
    for engine in document["engines"]:
        sets = ", ".join(
            f"{rule['version']} ({_date(rule)})" if rule.get("release") else str(rule["version"])
            for rule in engine["rule_sets"]
        )
        reviewed, known = engine.get("newest_reviewed"), engine.get("newest_known")
        console.print(Text(safe(engine["engine"]), style="bold"), highlight=False)
        print_wrapped(console, Text(f"  rule sets: {safe(sets or 'unversioned (one rule set)')}"))
        print_wrapped(
            console,
            Text(
                "  newest reviewed: "
                + (safe(f"{reviewed['version']} ({_date(reviewed)})") if reviewed else "not recorded")
                + "; newest known: "
                + (safe(f"{known['version']} ({_date(known)})") if known else "not recorded")
            ),
        )
        tags = engine.get("semver_tags") or []
        if tags:
            mapped = ", ".join(f"v{tag['version']} = b{tag['build']}" for tag in tags)
            print_wrapped(console, Text(f"  semantic versions: {safe(mapped)}"))
    print_wrapped(
        console,
        Text(
            "A release above the newest reviewed one gets the newest rules and a warning naming that release; "
            "docs/engines/README.md says how a release is reviewed."
        ),
    )
