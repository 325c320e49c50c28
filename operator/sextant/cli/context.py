"""What every CLI command shares: the parsed flags, the connection (made only when a command needs it), the
namespace, and the error that ends a command (an API answer in words is client.py's Refused)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from functools import cached_property
from typing import TextIO

from ..resources import inputs
from ..kube import kubeconfig
from ..client import Client
from ..history import History, HistoryError, archive_dsn
from ..kube.clock import utcnow


def archive_flag(parser: argparse.ArgumentParser) -> None:
    """--archive DSN: the commands that read jobs show archived ones too (docs/archive.md, "Readers")."""
    parser.add_argument("--archive", metavar="DSN", default=None,
                        help="also read finished jobs' history from this archive (postgresql://... or "
                             "sqlite:///PATH; default: $SEXTANT_ARCHIVE_DSN; without either, live jobs only)")


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

    @cached_property
    def history(self) -> History:
        """Live jobs, and archived ones when an archive is configured (--archive, SEXTANT_ARCHIVE_DSN)."""
        try:
            return History(self.client, archive_dsn(getattr(self.args, "archive", None)))
        except HistoryError as exc:
            raise CliError(str(exc)) from None

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
        if "history" in self.__dict__:
            self.history.close()
        if "client" in self.__dict__:
            self.client.close()
