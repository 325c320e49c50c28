"""The archive's settings: where it is (a DSN), how much of a payload it keeps, how long it keeps a record. Read
from the environment by the process that opens it; each default is one constant here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from ..resources.common import parse_duration

ENV_DSN = "SEXTANT_ARCHIVE_DSN"
ENV_PAYLOAD_MAX_BYTES = "SEXTANT_ARCHIVE_PAYLOAD_MAX_BYTES"
ENV_RETENTION = "SEXTANT_ARCHIVE_RETENTION"

# A payload larger than this (as compact JSON) is not archived, only its size and a note: most payloads are small,
# and a few at the API's own cap (256 KiB) would otherwise make most of the archive's bytes. 0 keeps none.
PAYLOAD_MAX_BYTES = 64 * 1024
# How long a record stays in the archive after its job finished (docs/archive.md, "Retention").
RETENTION = timedelta(days=30)
# The embedded archive of `make run` and a laptop, beside the local control plane's cache.
DEFAULT_SQLITE_PATH = Path.home() / ".cache" / "sextant" / "archive.sqlite"

SCHEMES = ("postgresql://", "postgres://", "sqlite:///")


class SettingsError(ValueError):
    """A setting that cannot be read; the message names it and what it takes."""


def check_dsn(dsn: str) -> str:
    if not dsn.startswith(SCHEMES):
        raise SettingsError(f"{dsn.split('://')[0][:40]!r} is not an archive's DSN: use postgresql://USER@HOST/DB "
                            "or sqlite:///PATH")
    return dsn


def default_dsn() -> str:
    return f"sqlite:///{DEFAULT_SQLITE_PATH}"


@dataclass(frozen=True)
class ArchiveSettings:
    dsn: str
    payload_max_bytes: int = PAYLOAD_MAX_BYTES
    retention: timedelta = RETENTION

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ArchiveSettings:
        dsn = check_dsn(environ.get(ENV_DSN) or default_dsn())
        text = environ.get(ENV_PAYLOAD_MAX_BYTES, "").strip()
        if text and not (text.isascii() and text.isdigit()):
            raise SettingsError(f"{ENV_PAYLOAD_MAX_BYTES}: {text[:40]!r} is not a number of bytes (0 keeps none)")
        try:
            retention = parse_duration(environ[ENV_RETENTION]) if environ.get(ENV_RETENTION) else RETENTION
        except ValueError as exc:
            raise SettingsError(f"{ENV_RETENTION}: {exc}") from None
        return cls(dsn=dsn, payload_max_bytes=int(text) if text else PAYLOAD_MAX_BYTES, retention=retention)
