"""argparse value types the commands share: a bad value is reported by argparse as bad input
about its flag (exit 2), naming what was expected."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive(unit: str) -> Callable[[str], float]:
    """A positive number of `unit` (seconds, minutes...)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {unit} (not {text!r})") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number of {unit} (not {text!r})")
        return value

    parse.__name__ = unit  # argparse names the type in its message
    return parse
