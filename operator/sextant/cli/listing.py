"""`sextant jobs list`'s pages of live and archived jobs (sextant.history, archive/merged.py): its filters from
its flags, and every page, or one."""

from __future__ import annotations

from typing import Any

from ..archive import merged
from ..archive.objects import is_archived
from ..resources import inputs
from .context import CliError, Context


def sort_key(job: dict[str, Any]) -> tuple[str, str, str]:
    meta = job["metadata"]
    return meta.get("namespace", ""), meta.get("creationTimestamp", ""), meta["name"]


# The list's filters by name, and the flags that give them (merged.list_filters' error names the flag).
LIST_FLAGS = {"queue": "--queue", "state": "--state", "handler": "--handler", "label": "--label", "since": "--since",
              "until": "--until"}
PAGE = 500  # jobs per request while walking the whole list


def list_filters(ctx: Context) -> merged.ListFilters:
    return merged.list_filters({k: getattr(ctx.args, k, None) for k in LIST_FLAGS}, ctx.now(), LIST_FLAGS)


def pages(ctx: Context, ns: str | None, filters: merged.ListFilters) -> tuple[list[dict[str, Any]], str | None]:
    """The jobs to show and the cursor of what follows (None: nothing). With --limit or --continue, one page;
    else every page, the live jobs sorted as the table always was (by namespace, age), the archived ones after
    them, newest first."""
    a = ctx.args
    if a.limit is not None and not 1 <= a.limit <= merged.MAX_PAGE:
        raise inputs.InputError("--limit", f"must be between 1 and {merged.MAX_PAGE}, got {a.limit}")
    try:
        if a.limit is not None or a.cursor:
            return ctx.history.list_page(ns, filters, a.cursor, a.limit or merged.DEFAULT_PAGE, ctx.now())
        found: list[dict[str, Any]] = []
        cursor = None
        while True:
            items, cursor = ctx.history.list_page(ns, filters, cursor, PAGE, ctx.now())
            found.extend(items)
            if cursor is None:
                break
    except merged.BadListCursor as exc:
        raise inputs.InputError("--continue", str(exc)) from None
    except merged.WriterBehind as exc:
        raise CliError(f"{exc}: the archive's writer is catching up; list again in a few seconds") from None
    live = sorted((j for j in found if not is_archived(j)), key=sort_key)
    return live + [j for j in found if is_archived(j)], None
