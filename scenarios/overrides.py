"""Dotted keys: how variants, sweeps and `--set` change a scenario.

`apply(raw, "workload.arrival.rate", 8)` sets one value in a parsed scenario table, creating
intermediate tables as needed. A table value merges into the table already there, except a
table that names its kind (`dist` or `process`): it replaces the old one whole, since another
kind has other keys; a model's catalog `name` and its `config` file replace each other.
`parse_set("scheduler.policy=static")` reads a command-line override; the
value is parsed as TOML (`8`, `2.5`, `true`, `[1, 2]`, `{dist = "fixed", value = 64}`) and
taken as a plain string when it is not TOML.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import tomllib

from .errors import FieldError

TAG_KEYS = ("dist", "process")
# a trace is a shipped one's `name` or a file's `path`: a table naming either replaces the
# trace, and setting either leaf drops the other (`name` also the file's `format`: a shipped
# trace comes with its own)
TRACE_KEY, TRACE_KINDS = "workload.trace", ("name", "path")
# a model is a catalog `name` or a `config` file: setting either (a leaf, or in a table merged
# into the model's) drops the other
MODEL_KEY, MODEL_KINDS = "model", ("name", "config")
NOT_OVERRIDABLE = ("variants", "sweep")


def apply(raw: dict, key: str, value) -> dict:
    """A copy of `raw` with the dotted `key` set to `value`."""
    parts = key.split(".")
    if not all(parts):
        raise FieldError(key, "is not a dotted key such as workload.arrival.rate")
    if parts[0] in NOT_OVERRIDABLE:
        raise FieldError(key, "variants and sweep cannot be overridden")
    raw = copy.deepcopy(raw)
    table = raw
    for depth, part in enumerate(parts[:-1]):
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise FieldError(".".join(parts[:depth + 1]), f"is a value, not a table; cannot set {key}")
    leaf, old = parts[-1], table.get(parts[-1])
    if isinstance(value, dict) and isinstance(old, dict) and not replaces(key, value):
        table[leaf] = merge(old, value)
    else:
        table[leaf] = copy.deepcopy(value)
    if ".".join(parts[:-1]) == TRACE_KEY and leaf in TRACE_KINDS:
        for other in TRACE_KINDS + (("format",) if leaf == "name" else ()):
            if other != leaf:
                table.pop(other, None)
    model = raw.get(MODEL_KEY)
    given = [kind for kind in MODEL_KINDS if key == f"{MODEL_KEY}.{kind}" or (
        key == MODEL_KEY and isinstance(value, dict) and kind in value)]
    if isinstance(model, dict) and len(given) == 1:
        for other in MODEL_KINDS:
            if other != given[0]:
                model.pop(other, None)
    return raw


def replaces(key: str, value: dict) -> bool:
    """Whether a table set at `key` replaces the table there rather than merging into it: it
    names its kind (an arrival `process`, a distribution `dist`, a trace's `name` or `path`)."""
    kinds = TAG_KEYS + (TRACE_KINDS if key == TRACE_KEY else ())
    return any(kind in value for kind in kinds)


def apply_all(raw: dict, settings: dict) -> dict:
    """A copy of `raw` with every dotted key of `settings` set, in order."""
    for key, value in settings.items():
        raw = apply(raw, key, value)
    return raw


def grid(sweep: dict) -> list[dict]:
    """Every point of a sweep ({dotted key: [values]}), keys crossed in order."""
    keys = list(sweep)
    return [dict(zip(keys, values)) for values in itertools.product(*sweep.values())]


def merge(base: dict, extra: dict) -> dict:
    """`extra` merged into a copy of `base`, table by table, under the same rule as `apply`."""
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        merged = apply(merged, key, value)
    return merged


def dotted_key(text: str) -> str:
    """A dotted key from the command line, quoted as in a file (`"workload.arrival.rate"`) or
    not."""
    key = text.strip()
    if len(key) >= 2 and key[0] == key[-1] and key[0] in "\"'":
        return key[1:-1].strip()
    return key


def parse_set(text: str) -> tuple[str, object]:
    """`KEY=VALUE` from the command line -> (key, value)."""
    key, sep, value = text.partition("=")
    key = dotted_key(key)
    if not sep or not key:
        raise FieldError(text, "--set expects KEY=VALUE, e.g. workload.arrival.rate=8")
    return key, parse_value(value.strip())


def parse_value(text: str):
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except (tomllib.TOMLDecodeError, RecursionError):
        return text


def wider_first(sweep: dict) -> dict:
    """A sweep's keys in their order, except that a table's key comes before the keys inside
    it (`workload.arrival` before `workload.arrival.rate`), which then refine its values."""
    keys: list[str] = []
    for key in sweep:
        inside = [i for i, k in enumerate(keys) if k.startswith(key + ".")]
        keys.insert(inside[0] if inside else len(keys), key)
    return {key: sweep[key] for key in keys}


def toml_key(key: str) -> str:
    """A table's key as TOML reads it back: bare where it may be, else quoted (a dotted key
    such as a search grid's "engine.max_num_seqs" would otherwise be read as nested tables)."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def toml_text(value) -> str:
    """`value` written as TOML (inline tables and arrays), as a file or --set takes it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string, escaped
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    return str(value)


def flatten(table: dict, prefix: str = "") -> dict:
    """{"workload": {"arrival": {"rate": [1, 2]}}} -> {"workload.arrival.rate": [1, 2]}: for a
    sweep written with unquoted dotted keys, which TOML reads as nested tables."""
    flat = {}
    for key, value in table.items():
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            flat.update(flatten(value, full))
        else:
            flat[full] = value
    return flat
