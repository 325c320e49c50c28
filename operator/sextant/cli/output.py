"""How the CLI prints: aligned tables like kubectl's and -o json|yaml for scripts (ages and durations are written
by resources/common.py, for the dashboard too)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
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
