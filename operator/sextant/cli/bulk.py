"""`sextant jobs create --from-file jobs.ndjson` and `sextant jobs cancel|retry --queue Q --state S ...`: many jobs
in one command. Thin adapters over client.py (create_many, select_jobs, bulk) and lifecycle/selection.py; the
lines of a file are checked as the HTTP API checks the body of POST /v2/jobs (its CreateJob), every line before
anything is created."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO, cast

from pydantic import ValidationError

from .. import client
from ..client import JobRequest, create_warnings, refused
from ..kube import jsontext
from ..kube.client import ApiError
from ..lifecycle import selection
from ..resources import inputs, request
from ..resources.common import json_depth
from ..resources.job import MAX_PAYLOAD_DEPTH
from .context import CliError, Context

LINE_DEPTH = MAX_PAYLOAD_DEPTH + 1  # a line is a body of POST /v2/jobs: its payload nests one level deeper
PROBLEMS_SHOWN = 20  # bad lines reported one by one; the rest are counted
# The flags of a single create that a file's lines carry instead (--queue and --handler are the lines' defaults).
LINE_FLAGS = (("payload", "--payload"), ("run_at", "--run-at"), ("delay", "--in"),
              ("idempotency_key", "--idempotency-key"), ("priority", "--priority"), ("output", "-o"))
SELECTOR_FLAGS = {"queue": "--queue", "state": "--state", "handler": "--handler", "labels": "--selector"}


class BadLines(CliError):
    """Lines of a file that are not jobs: each named by its number and field; nothing was created."""

    def __init__(self, problems: list[str], total: int) -> None:
        self.problems = problems
        shown = problems[:PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        lines = [*shown, *([f"... and {more} more"] if more else []),
                 f"{len(problems)} of {total} lines are not valid jobs: nothing was created"]
        super().__init__("\nerror: ".join(lines), 2)


# --- pure parts ----------------------------------------------------------------------------------------------
def job_line(line: str, defaults: Mapping[str, str | None]) -> JobRequest:
    """One line of an ndjson file: a JSON object with the fields of POST /v2/jobs (queue, handler, payload, run_at,
    idempotency_key, priority); `defaults` fill in a queue or handler the line lacks. InputError naming the field."""
    try:
        data = jsontext.loads(line)
    except ValueError:
        raise inputs.InputError("line", "not valid JSON") from None
    if json_depth(data, LINE_DEPTH) > LINE_DEPTH:
        raise inputs.InputError("payload", f"nests deeper than {MAX_PAYLOAD_DEPTH} levels")
    if not isinstance(data, dict):
        raise inputs.InputError("line", 'a JSON object is required, e.g. {"queue": "emails", "handler": '
                                        '"send-receipt", "payload": {"orderId": 42}}')
    missing = {k: v for k, v in defaults.items() if v is not None and k not in data}
    try:  # in JSON mode, as the HTTP API reads it: strict types, run_at an RFC 3339 string
        spec = request.CreateJob.model_validate_json(json.dumps({**data, **missing}) if missing else line)
    except ValidationError as exc:
        raise inputs.InputError(*request.validation_problem(exc)) from None
    return cast(JobRequest, spec.model_dump())


def parse_ndjson(text: str, source: str, defaults: Mapping[str, str | None] | None = None) -> list[JobRequest]:
    """Every job of an ndjson text (blank lines skipped), or BadLines naming each bad line's number and field."""
    jobs: list[JobRequest] = []
    problems: list[str] = []
    total = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        total += 1
        try:
            jobs.append(job_line(line, defaults or {}))
        except inputs.InputError as exc:
            problems.append(f"{source} line {number}: {exc}")
    if problems:
        raise BadLines(problems, total)
    if not jobs:
        raise inputs.InputError("--from-file", f"{source} holds no jobs: one JSON object per line, e.g. "
                                               '{"queue": "emails", "handler": "send-receipt"}')
    return jobs


def line_numbers(text: str) -> list[int]:
    """The line number of each job of an ndjson text (blank lines hold none)."""
    return [number for number, line in enumerate(text.splitlines(), 1) if line.strip()]


def confirm(question: str, *, yes: bool, stdin: TextIO, err: TextIO) -> None:
    """Ask once on a terminal; without one, only --yes confirms (a script must say so). CliError: nothing done."""
    if yes:
        return
    if not stdin.isatty():
        raise CliError(f"{question} Not asked: standard input is not a terminal; add --yes to confirm "
                       "(nothing changed)")
    err.write(f"{question} [y/N] ")
    err.flush()
    if stdin.readline().strip().lower() not in ("y", "yes"):
        raise CliError("not confirmed: nothing changed")


# --- commands ------------------------------------------------------------------------------------------------
def _read(path: str) -> tuple[str, str]:
    """(text, the name used in messages) of --from-file PATH, or of stdin for -."""
    if path == "-":
        return sys.stdin.read(), "stdin"
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(), path
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise inputs.InputError("--from-file", f"cannot read {path}: {why}") from None


def create_from_file(ctx: Context) -> int:
    """Check every line, then create them all (client.create_many): one id per job on stdout, in the file's
    order (an empty line for a job not created: its error, naming the line, is on stderr)."""
    a = ctx.args
    for name, flag in LINE_FLAGS:
        if getattr(a, name, None) is not None:
            raise CliError(f"{flag} cannot be used with --from-file: give it on each line "
                           f"({request.CREATE_FIELDS})", 2)
    defaults = {"queue": inputs.object_name("--queue", a.queue, "queue name") if a.queue is not None else None,
                "handler": inputs.object_name("--handler", a.handler, "handler name") if a.handler is not None
                else None}
    text, source = _read(a.from_file)
    jobs = parse_ndjson(text, source, defaults)
    ns = ctx.single_namespace("jobs create")
    results = ctx.client.create_many(ns, jobs)
    failed = replayed = 0
    for number, result in zip(line_numbers(text), results):
        ctx.say(result.id or "")
        if result.job is None:
            failed += 1
            why = refused(result.error) if isinstance(result.error, ApiError) else result.error  # KeyConflict
            ctx.note(f"error: {source} line {number}: {why}")
        elif not result.created:
            replayed += 1
    for queue, handler in dict.fromkeys((j["queue"], j["handler"]) for j in jobs):
        for warning in create_warnings(ctx.client, ns, queue, handler):
            ctx.note(f"Warning: {warning}")
    if replayed:
        ctx.note(f"{replayed} of {len(jobs)} jobs were already created with their idempotency key (their ids are "
                 "those of the first jobs)")
    if failed:
        ctx.note(f"error: {failed} of {len(jobs)} jobs were not created")
    return 1 if failed else 0


def act_on_selection(ctx: Context, verb: selection.Verb) -> int:
    """`jobs cancel|retry --queue Q --state S ...`: count what the selection matches (and the verb applies to),
    confirm, then ask for each job as `jobs cancel|retry ID` does (client.bulk)."""
    a = ctx.args
    ns = ctx.single_namespace(f"jobs {verb}")
    chosen = selection.selector(verb, queue=a.queue, state=a.state, handler=a.handler, labels=a.selector,
                                names=SELECTOR_FLAGS)
    try:
        matched = selection.targets(ctx.client.select_jobs(ns, chosen), verb)
    except ApiError as exc:
        raise refused(exc) from None
    what = f"{chosen.words()}, in namespace {ns}"
    if not matched:
        ctx.note(f"no job to {verb}: none that match ({what}) is in a state that allows it")
        return 0
    confirm(selection.question(verb, len(matched), what), yes=a.yes, stdin=sys.stdin, err=ctx.err)
    outcome = client.bulk(ctx.client, verb, [(ns, j["metadata"]["name"]) for j in matched])
    ctx.say(outcome.words(what))
    for _, why in outcome.refused:
        ctx.note(f"error: {why}")
    return 1 if outcome.refused else 0


def selection_flags(parser: Any) -> None:
    """The flags that select jobs for `jobs cancel|retry` (instead of an ID)."""
    parser.add_argument("-q", "--queue", help="act on the jobs of this queue")
    parser.add_argument("--state", help=f"act on the jobs in this state ({', '.join(inputs.STATES)})")
    parser.add_argument("--handler", help="act on the jobs of this handler")
    parser.add_argument("-l", "--selector", metavar="SELECTOR", help="act on the jobs with these labels (a "
                                                                     "Kubernetes label selector, e.g. team=mail)")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation (required when "
                                                                 "standard input is not a terminal)")
