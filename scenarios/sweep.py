"""A sweep: its table checked into {dotted key: [values]} (`checked`; a value given twice is
refused, `first_repeated`), and a point's values named, in a run's label (`point_text`), as the
TOML a --sweep takes (`point_toml`) and as their keys were given (`point_label`: the sweep's
or a capacity search's grid's).
"""

from __future__ import annotations

from . import overrides as ov
from .errors import FieldError


def point_text(value) -> str:
    """A swept value in a run's label: a table or a list as TOML writes it, else as is."""
    return ov.toml_text(value) if isinstance(value, (dict, list)) else str(value)


def point_label(point: dict, origins: dict) -> str:
    """A sweep point as its keys were given: "sweep k=v", "search.grid k=v" or both."""
    grid = {k: v for k, v in point.items() if origins.get(k) == "search.grid"}
    swept = {k: v for k, v in point.items() if k not in grid}
    return ", ".join(f"{name} {point_toml(part)}" for name, part in
                     (("sweep", swept), ("search.grid", grid)) if part)


def checked(table, name: str = "sweep") -> dict:
    """{dotted key: [values]} of a `[sweep]` (or a search's grid, `name`), checked, a table's
    key before the keys inside it."""
    if table is None:
        return {}
    if not isinstance(table, dict) or not table:
        raise FieldError(name, "must be a table of dotted key = [values]")
    sweep = ov.flatten(table)
    for key, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise FieldError(f"{name}.{key}", f"must be a non-empty list of values, got "
                                              f"{values!r}")
        repeated = first_repeated(values)
        if repeated is not None:
            raise FieldError(f"{name}.{key}", f"gives {repeated!r} twice (each value is one "
                                              f"point)")
    return ov.wider_first(sweep)


def first_repeated(values: list):
    """The first value equal to one before it (True is not 1), or None; in one pass over
    the hashable values, as a sweep may hold many thousands of points."""
    seen, unhashable = set(), []
    for value in values:
        key = (isinstance(value, bool), value)
        try:
            if key in seen:
                return value
            seen.add(key)
        except TypeError:  # a table or a list: compared with the earlier ones of its kind
            if any(key == other for other in unhashable):
                return value
            unhashable.append(key)
    return None


def point_toml(point: dict) -> str:
    """A sweep point as the TOML a --sweep takes."""
    return ", ".join(f"{key}={ov.toml_text(value)}" for key, value in point.items())
