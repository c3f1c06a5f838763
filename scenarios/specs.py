"""The building blocks of a scenario's schema: a leaf value (`Spec`), a table of named specs
(`Table`) and a table whose keys depend on one tag (`Tagged`, as `dist` in
`{dist = "lognormal", median, sigma, ...}`), and `check_table`, which walks a parsed TOML table
against one and raises a `FieldError` naming the dotted key of the first unknown key, wrong type
or bad value. The scenario's own schema is `schema.SCENARIO`; the workload's processes and
distributions declare their tables themselves (`arrival.py`, `lengths.py`)."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Callable

from .defaults import MAX_TOKENS
from .errors import FieldError


@dataclass(frozen=True)
class Spec:
    """A leaf value: `allowed` completes "must be ...", `accepts` says whether a value is."""

    allowed: str
    accepts: Callable[[object], bool]

    def check(self, key: str, value) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_MAX:
            raise FieldError(key, f"must be at most 2^63 - 1 (what NumPy's int64 holds), got "
                                  f"{value}")
        if not self.accepts(value):
            raise FieldError(key, f"must be {self.allowed}, got {value!r}")


@dataclass(frozen=True)
class Table:
    fields: dict
    required: tuple = ()


@dataclass(frozen=True)
class Tagged:
    """A table whose allowed keys depend on the value of its `tag` key."""

    tag: str
    options: dict = field(default_factory=dict)  # tag value -> Table of the other keys


INT_MAX = 2**63 - 1  # the largest integer NumPy's int64 holds


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= INT_MAX


def is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


@dataclass(frozen=True)
class Choice(Spec):
    """One of a few strings; a near miss is named (`dtype = "bf61"`: did you mean 'bf16'?)."""

    options: tuple = ()

    def check(self, key: str, value) -> None:
        if isinstance(value, str) and value in self.options:
            return
        near = nearest_option(value, self.options) if isinstance(value, str) else None
        hint = f" (did you mean {near!r}?)" if near else ""
        raise FieldError(key, f"must be {self.allowed}, got {value!r}{hint}")


def did_you_mean(value: str, options) -> str:
    """"did you mean 'x'? " for the option `value` most likely meant (`nearest_option`), or ""
    when none is near: the start of an error's list of what is allowed."""
    near = nearest_option(value, options)
    return f"did you mean {near!r}? " if near else ""


def nearest_option(value: str, options) -> str | None:
    """The option `value` most likely meant: the same but for case ("BF16": 'bf16'), the
    most alike, or one it begins with ("fp8_e4m3": 'fp8'); None if none is near."""
    lowered = {o.lower(): o for o in options}
    key = value.lower()
    near = difflib.get_close_matches(key, list(lowered), n=1)
    if near:
        return lowered[near[0]]
    starts = [o for o in lowered if len(o) >= 3 and key.startswith(o)]
    return lowered[max(starts, key=len)] if starts else None


def choice(options) -> Spec:
    options = tuple(options)
    return Choice("one of " + ", ".join(options), lambda v: isinstance(v, str) and v in options,
                  options)


POSITIVE_INT = Spec("a positive integer", lambda v: is_int(v) and v >= 1)
NON_NEGATIVE_INT = Spec("a non-negative integer", lambda v: is_int(v) and v >= 0)
TOKENS = Spec(f"a whole number of tokens from 1 to {MAX_TOKENS:,}",
              lambda v: is_int(v) and 1 <= v <= MAX_TOKENS)
# a length distribution's bound: tokens of a prompt or a reply, or turns of a conversation
LENGTH_BOUND = Spec(f"a whole number from 1 to {MAX_TOKENS:,}",
                    lambda v: is_int(v) and 1 <= v <= MAX_TOKENS)
TOKENS_OR_NONE = Spec(f"a whole number of tokens from 0 to {MAX_TOKENS:,}",
                      lambda v: is_int(v) and 0 <= v <= MAX_TOKENS)
POSITIVE_NUMBER = Spec("a positive number", lambda v: is_number(v) and v > 0)
NON_NEGATIVE_NUMBER = Spec("a non-negative number", lambda v: is_number(v) and v >= 0)
BOOL = Spec("true or false", lambda v: isinstance(v, bool))
# an SLO's limit in seconds, or false: none on this metric (to turn a default SLO off)
SLO_LIMIT = Spec("a positive number of seconds, or false (no SLO on this metric)",
                 lambda v: v is False or is_number(v) and v > 0)
TEXT = Spec("a string", lambda v: isinstance(v, str))
NON_EMPTY_TEXT = Spec("a non-empty string", lambda v: isinstance(v, str) and v.strip() != "")
INT_LIST = Spec("a non-empty list of integers",
                lambda v: isinstance(v, list) and len(v) > 0 and all(is_int(x) for x in v))
WEIGHT_LIST = Spec("a non-empty list of non-negative numbers",
                   lambda v: isinstance(v, list) and len(v) > 0
                   and all(is_number(x) and x >= 0 for x in v))


def check_table(value, schema: Table | Tagged, key: str = "", elsewhere=None) -> None:
    """Raise FieldError at the first key of `value` that `schema` does not allow.
    `elsewhere(name)`: the whole key an unknown name most likely meant when none of its own
    table's is near (another section's, or a name another tool gives it), else None."""
    if not isinstance(value, dict):
        raise FieldError(key, f"must be a table, got {value!r}")
    if isinstance(schema, Tagged):
        schema, value, key = _select_option(value, schema, key)
    for name, item in value.items():
        sub = f"{key}.{name}" if key else name
        if name not in schema.fields:
            allowed = ", ".join(schema.fields) or "nothing"
            hint = did_you_mean(name, schema.fields)
            meant = elsewhere(name) if elsewhere is not None and not hint else None
            if meant and meant != sub:
                hint = f"did you mean {meant!r}? "
            raise FieldError(sub, f"unknown key ({hint}allowed: {allowed})")
        spec = schema.fields[name]
        if isinstance(spec, Spec):
            spec.check(sub, item)
        else:
            check_table(item, spec, sub, elsewhere)
    for name in schema.required:
        if name not in value:
            spec = schema.fields[name]
            what = spec.allowed if isinstance(spec, Spec) else "a table"
            raise FieldError(f"{key}.{name}" if key else name, f"required ({what})")


def _select_option(value: dict, schema: Tagged, key: str):
    """The option table chosen by the tag, and the value without its tag."""
    allowed = ", ".join(schema.options)
    if schema.tag not in value:
        raise FieldError(f"{key}.{schema.tag}", f"required (one of {allowed})")
    tag = value[schema.tag]
    if not isinstance(tag, str) or tag not in schema.options:
        raise FieldError(f"{key}.{schema.tag}", f"must be one of {allowed}, got {tag!r}")
    option = schema.options[tag]
    fields = {schema.tag: choice(tuple(schema.options))} | option.fields
    rest = {k: v for k, v in value.items() if k != schema.tag}
    for name in rest:
        if name not in option.fields:
            names = ", ".join(fields)
            raise FieldError(f"{key}.{name}", f"unknown key for {schema.tag} = {tag!r} "
                                              f"({did_you_mean(name, fields)}allowed: {names})")
    return Table(option.fields, option.required), rest, key
