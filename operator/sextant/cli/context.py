"""What every CLI command shares: the parsed flags, the connection (made only when a command needs it), the
namespace, and the translation of API answers into messages that say what and where."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from functools import cached_property
from typing import TextIO

from ..resources import inputs
from ..kube import kubeconfig
from ..client import Client, refusal_message
from ..kube.client import ApiError, NotFound
from ..kube.clock import utcnow


class CliError(Exception):
    """A failure to report in one line (no stack trace); `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Context:
    def __init__(self, args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.args = args
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    @cached_property
    def conn(self) -> kubeconfig.Connection:
        return kubeconfig.load(self.args.kubeconfig, self.args.context, getattr(self.args, "token", None))

    @cached_property
    def client(self) -> Client:
        return Client(self.conn)

    @property
    def all_namespaces(self) -> bool:
        return bool(getattr(self.args, "all_namespaces", False))

    @cached_property
    def namespace(self) -> str:
        """-n/--namespace, else the kubeconfig context's namespace (else "default")."""
        given = getattr(self.args, "namespace", None)
        if given is not None:
            return inputs.namespace("--namespace", given)
        return self.conn.namespace or "default"

    def list_namespace(self) -> str | None:
        """The namespace to list in; None with -A (all namespaces)."""
        return None if self.all_namespaces else self.namespace

    def single_namespace(self, command: str) -> str:
        if self.all_namespaces:
            raise CliError(f"-A/--all-namespaces cannot be used with `{command}`: it acts on one object, "
                           "looked up in one namespace (use -n NAMESPACE)", 2)
        return self.namespace

    @staticmethod
    def now() -> datetime:
        return utcnow()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def note(self, text: str) -> None:
        print(text, file=self.err, flush=True)

    def close(self) -> None:
        if "client" in self.__dict__:
            self.client.close()


_CRD_MISSING = "the server could not find the requested resource"


def api_error(exc: ApiError, *, kind: str | None = None, name: str | None = None,
              namespace: str | None = None) -> CliError:
    """An API answer as a message: not-found names the object and namespace, other errors carry the API
    server's own message, as kubectl prints it ("Error from server (Forbidden): ...")."""
    message = exc.message
    if isinstance(exc, NotFound) and _CRD_MISSING in message:
        return CliError("the Sextant CRDs are not installed in this cluster (the API server does not know "
                        "sextant.dev resources): kubectl apply -f crds/")
    if isinstance(exc, NotFound) and kind and name:
        return CliError(f"{kind} {name} not found in namespace {namespace}")
    if exc.status == 401:
        return CliError("You must be logged in to the server (Unauthorized): the API server did not accept the "
                        "credentials of the kubeconfig (or --token)")
    reason = exc.reason or {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
                            422: "Invalid"}.get(exc.status, str(exc.status))
    return CliError(f"Error from server ({reason}): {message}")


def refusal(exc: ApiError) -> str | None:
    """The CEL rule's words when the API server refused a cancel or retry for the job's state
    ("cannot cancel: the job is succeeded; ..."), else None."""
    return refusal_message(exc.message) if exc.status == 422 else None
