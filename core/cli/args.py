"""Argument types shared by the ``lectern`` subcommands: in a module of their own so that
core/cli/answer.py need not import core/cli/main.py, which imports it."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type for counts such as ``-k``: 0 or a negative number is a usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def percent(text: str) -> int:
    """argparse type for ``--cpu-share``: a whole percentage from 1 to 100."""
    value = positive_int(text)
    if value > 100:
        raise argparse.ArgumentTypeError(f"must be from 1 to 100, not {value}")
    return value
