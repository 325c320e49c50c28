"""How the CLI prints: aligned tables like kubectl's, ages like kubectl's, and -o json|yaml for scripts."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO

import yaml

FORMATS = ("json", "yaml")
# Strings that YAML 1.2 readers (kubectl, Go's YAML) take for numbers but PyYAML (YAML 1.1) writes unquoted, e.g.
# 1e5, 71e265, 0o17: quoted on output, so that `-o yaml | kubectl apply -f -` keeps them strings.
_NUMBER_LIKE = re.compile(r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)(?:[eE][-+]?[0-9]+)?|0x[0-9a-fA-F_]+|0o[0-7_]+"
                          r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")


class _Dumper(yaml.SafeDumper):
    def represent_str(self, data: str) -> yaml.ScalarNode:
        style = "'" if _NUMBER_LIKE.fullmatch(data) else None
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _Dumper.represent_str)
GAP = "   "  # kubectl separates columns by three spaces


def human_duration(delta: timedelta) -> str:
    """kubectl's duration.HumanDuration: 45s, 5m30s, 47m, 5h12m, 2d3h, 400d, 3y20d."""
    seconds = int(delta.total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(moment: datetime | None, now: datetime) -> str:
    """How long ago, kubectl-style; '<none>' when unknown."""
    return "<none>" if moment is None else human_duration(now - moment)


def until(moment: datetime | None, now: datetime) -> str:
    """A future time as 'in 4m' (or '4m ago' when it has passed)."""
    if moment is None:
        return "<none>"
    if moment >= now:
        return f"in {human_duration(moment - now)}"
    return f"{human_duration(now - moment)} ago"


def precise_duration(delta: timedelta) -> str:
    """A duration for a timeline: 850ms, 12.3s, 4m05s, 2h03m."""
    seconds = delta.total_seconds()
    if seconds < 0:
        return "<invalid>"
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Table:
    """Rows under upper-case headers, every column as wide as its widest cell (kubectl's printer)."""

    def __init__(self, headers: Sequence[str]) -> None:
        self.headers = [h.upper() for h in headers]
        self.widths = [len(h) for h in self.headers]

    def fit(self, rows: Sequence[Sequence[Any]]) -> None:
        for row in rows:
            for i, cell in enumerate(row):
                self.widths[i] = max(self.widths[i], len(_cell(cell)))

    def line(self, row: Sequence[Any]) -> str:
        cells = [_cell(c) for c in row]
        padded = [c.ljust(w) for c, w in zip(cells[:-1], self.widths)] + cells[-1:]
        return GAP.join(padded).rstrip()

    def render(self, rows: Sequence[Sequence[Any]]) -> str:
        self.fit(rows)
        return "\n".join([self.line(self.headers), *(self.line(r) for r in rows)])


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return Table(headers).render(rows)


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "<none>"
    return str(value)


def without_managed_fields(obj: Any) -> Any:
    """kubectl hides metadata.managedFields unless asked; so does the CLI."""
    if isinstance(obj, dict):
        if isinstance(obj.get("metadata"), dict) and "managedFields" in obj["metadata"]:
            obj = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}
        if isinstance(obj.get("items"), list):
            obj = {**obj, "items": [without_managed_fields(i) for i in obj["items"]]}
    return obj


def dump(obj: Any, fmt: str, out: TextIO) -> None:
    """-o json (indented, as kubectl) or -o yaml."""
    obj = without_managed_fields(obj)
    if fmt == "json":
        out.write(json.dumps(obj, indent=4, ensure_ascii=False) + "\n")
    else:
        out.write(yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000))
