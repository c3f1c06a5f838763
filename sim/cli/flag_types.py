"""The types of the command line's flag values: each turns the text given into a value or
refuses it in one line, in one style, saying what is allowed ("argument --num-prompts: must be
a whole number >= 1, got '0'"); argparse adds the flag's name.
"""

from __future__ import annotations

import math


class FlagError(ValueError):
    """A flag's value that cannot be used; one line."""


def rate(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise _refused("a positive number of requests a second, or inf (every request at "
                       "once)", text)
    return value


def positive_number(text: str) -> float:
    value = _float(text)
    if not 0 < value < math.inf:
        raise _refused("a finite number above 0", text)
    return value


def non_negative_number(text: str) -> float:
    value = _float(text)
    if not 0 <= value < math.inf:
        raise _refused("a finite number >= 0", text)
    return value


def positive_integer(text: str) -> int:
    value = _int(text)
    if value is None or value < 1:
        raise _refused("a whole number >= 1", text)
    return value


def seconds_or_inf(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise _refused("a number of seconds above 0, or inf (no limit)", text)
    return value


def port_number(text: str) -> int:
    value = _int(text)
    if value is None or not 0 <= value <= 65535:
        raise _refused("a port from 0 to 65535 (0: any free port)", text)
    return value


def _float(text) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _int(text) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _refused(allowed: str, text):
    from argparse import ArgumentTypeError

    return ArgumentTypeError(f"must be {allowed}, got {text!r}")


def range_ratio(text: str) -> float:
    value = _float(text)
    if not 0 <= value < 1:
        raise _refused("a number from 0 to below 1 (vLLM's range)", text)
    return value


def seed_value(text: str) -> int:
    value = _int(text)
    if value is None or value < 0:
        raise _refused("a whole number >= 0", text)
    return value
