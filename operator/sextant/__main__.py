"""The `sextant` command (also `kubectl sextant` and `python -m sextant`): its composition root. The CLI's user
commands (cli/), the operator's (controller/command.py), dev's (dev/command.py, which runs the operator it is
handed) and the archive's (archive/command.py) meet here and nowhere else, so that no adapter imports the operator."""

from __future__ import annotations

import argparse
import sys

from .cli import main as cli


def build_parser() -> argparse.ArgumentParser:
    # Imported here: `sextant run` (an attempt pod's entrypoint) is dispatched before any parser is built.
    from .archive import command as archive_cmd
    from .controller import command as operator_cmd
    from .dev import command as dev_cmd

    return cli.build_parser(operator_cmd.register,
                            lambda sub: dev_cmd.register(sub, operator_cmd.flags, operator_cmd.run),
                            archive_cmd.register)


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, build_parser)


if __name__ == "__main__":
    sys.exit(main())
