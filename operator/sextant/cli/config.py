"""`sextant config apply -f sextant.toml`: server-side apply of the Queues and Handlers the config file declares
(resources/config.py reads it), or, with --dry-run=client, print them for a GitOps repository.

All or nothing as far as the API server's checks go: every object is first applied with dryRun=All (the CRD's rules
and CEL checks, field conflicts), then for real, so a refused one leaves the namespace as it was. Objects the file no
longer declares are left alone (no pruning)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..client import refused
from ..kube.client import ApiError
from ..resources import GROUP, config, contract
from . import output
from .context import CliError, Context

FIELD_MANAGER = "sextant-config"
DRY_RUN = ("none", "client", "server")


def register(sub: argparse._SubParsersAction, flags: argparse.ArgumentParser) -> None:
    group = sub.add_parser("config", parents=[flags], help="apply the Queues and Handlers of a sextant.toml")
    cmds = group.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    apply = cmds.add_parser(
        "apply", parents=[flags], help="server-side apply the Queues and Handlers a sextant.toml declares",
        description="Server-side apply (field manager sextant-config) of every [queues.NAME] as a Queue and every "
                    "[handlers.NAME] as a worker-mode Handler (its command: spec.worker.command) in the namespace. "
                    "Keys are the CRD fields in snake_case (max_attempts is spec.maxAttempts). A bad key or value "
                    "is an error naming it, and nothing is applied. Queues and Handlers the file does not declare "
                    "are not touched.")
    apply.add_argument("-f", "--filename", required=True, metavar="FILE", help="the config file (- for stdin)")
    apply.add_argument("--dry-run", choices=DRY_RUN, default="none",
                       help="client: print the objects, send nothing; server: have the API server check them, "
                            "apply nothing")
    apply.add_argument("-o", "--output", choices=output.FORMATS, help="print the objects as json or yaml")
    apply.add_argument("--force-conflicts", action="store_true",
                       help="take over fields another manager (kubectl apply, Helm) owns")
    apply.set_defaults(func=apply_cmd, cli=True)


def _read(name: str, ctx: Context) -> str:
    if name == "-":
        return sys.stdin.read()
    try:
        return Path(name).read_text()
    except OSError as exc:
        raise CliError(f"-f {name}: {exc.strerror or exc}", 2) from None


def _path(obj: dict[str, Any]) -> str:
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    return (contract.queues_path(namespace, name) if obj["kind"] == "Queue"
            else contract.handlers_path(namespace, name))


def _label(obj: dict[str, Any]) -> str:
    return f"{obj['kind'].lower()}.{GROUP}/{obj['metadata']['name']}"


def apply_cmd(ctx: Context) -> int:
    text = _read(ctx.args.filename, ctx)
    namespace = ctx.single_namespace("config apply")
    try:
        objects = config.parse(text, namespace)
    except config.ConfigError as exc:
        raise CliError(f"{ctx.args.filename}: {exc}", 2) from None
    if ctx.args.dry_run == "client":
        results = objects
    else:
        results = _apply(ctx, objects, dry_run=True)
        if ctx.args.dry_run == "none":
            results = _apply(ctx, objects, dry_run=False)
    if ctx.args.output:
        output.dump(results[0] if len(results) == 1 else {"apiVersion": "v1", "kind": "List", "items": results},
                    ctx.args.output, ctx.out)
    elif ctx.args.dry_run == "client" and not objects:
        ctx.note(f"{ctx.args.filename} declares no queues or handlers")
    else:
        suffix = {"none": "", "client": " (dry run)", "server": " (server dry run)"}[ctx.args.dry_run]
        for obj in objects:
            ctx.say(f"{_label(obj)} serverside-applied{suffix}")
    return 0


def _apply(ctx: Context, objects: list[dict[str, Any]], *, dry_run: bool) -> list[dict[str, Any]]:
    params: dict[str, str] = {"fieldManager": FIELD_MANAGER}
    if ctx.args.force_conflicts:
        params["force"] = "true"
    if dry_run:
        params["dryRun"] = "All"
    out = []
    for obj in objects:
        try:
            out.append(ctx.client.request("PATCH", _path(obj), params=params, json=obj,
                                          headers={"Content-Type": "application/apply-patch+yaml"}))
        except ApiError as exc:
            # The real apply follows a dry run of every object, so it fails only on a race (a change in between).
            done = "nothing was applied" if dry_run else "the objects before it were applied"
            raise CliError(f"{_label(obj)}: {refused(exc)}; {done}") from None
    return out
