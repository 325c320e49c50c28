"""Argument types shared by the CLI's subcommands (operator, worker, dashboard)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def port(text: str, *, zero: bool = False) -> int:
    """A TCP port, 1-65535; with zero=True also 0 (the system picks a free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    low = 0 if zero else 1
    if not low <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port ({low} to 65535" + ("; 0 picks a free one)" if zero else ")"))
    return value


def port_or_zero(text: str) -> int:
    return port(text, zero=True)
