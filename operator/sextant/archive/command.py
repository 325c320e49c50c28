"""`sextant archive migrate --dsn DSN`: bring an archive's schema to this Sextant's (creating it in an empty
database). The operator refuses an archive behind its code and names this command; it never migrates on its own."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from .settings import ENV_DSN, check_dsn, default_dsn

# The database libraries are imported when the command runs, so that every other command starts fast.


def register(sub: argparse._SubParsersAction) -> None:
    archive = sub.add_parser("archive", help="the archive of finished jobs (docs/archive.md)")
    commands = archive.add_subparsers(dest="archive_command", required=True, metavar="COMMAND")
    migrate = commands.add_parser("migrate", help="create or migrate the archive's schema to this version's",
                                  description=__doc__)
    migrate.add_argument("--dsn", default=None, help=f"postgresql://USER@HOST/DB or sqlite:///PATH (default: "
                                                     f"${ENV_DSN}, else {default_dsn()})")
    migrate.set_defaults(func=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    from .errors import SchemaMismatch
    from .migrations import head
    from .store import ArchiveUnavailable, shown

    try:
        dsn = check_dsn(args.dsn or os.environ.get(ENV_DSN) or default_dsn())
        asyncio.run(_open(dsn))
    except (ValueError, SchemaMismatch, ArchiveUnavailable) as exc:  # SettingsError is a ValueError too
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"the archive at {shown(dsn)} is at schema revision {head()}")
    return 0


async def _open(dsn: str) -> None:
    from .store import Archive

    archive = await Archive.open(dsn, migrate=True)
    await archive.close()
