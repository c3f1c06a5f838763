"""Short names for a scenario's runs, for chart axes and legends.

A run's full label says everything (`continuous (rate=4.0)`); eight of them side by side
overlap. `short_labels` keeps only what differs between the runs, and says once what it is:
for a sweep of one variant over the arrival rate, the labels are `1`, `2`, ... and their title
"request rate (requests/s)".
"""

from __future__ import annotations

from scenarios.overrides import toml_key, toml_text

UNITS = {"workload.arrival.rate": "request rate (requests/s)",
         "workload.arrival.concurrency": "concurrent users",
         "workload.trace.time_scale": "trace time scale (x slower)"}


def axis_label(key: str) -> str:
    """A sweep key as an axis title, with its unit where known."""
    return UNITS.get(key, key)


def value_text(value) -> str:
    """A swept value as written on a chart: 4.0 as "4", 0.25 as "0.25", names as they are, a
    table as TOML writes it (`{process = "poisson", rate = 2}`)."""
    if isinstance(value, bool):
        return "true" if value else "false"  # as TOML writes it
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {_inner(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_inner, value)) + "]"
    return str(value)


def _inner(value) -> str:
    """A value inside a table or list: a name in quotes, as TOML has it."""
    return toml_text(value) if isinstance(value, (str, bool)) else value_text(value)


def varying_keys(specs) -> list[str]:
    """The sweep keys whose value differs between the runs, in sweep order."""
    return [key for key in dict.fromkeys(k for spec in specs for k in spec.sweep)
            if len({repr(spec.sweep.get(key)) for spec in specs}) > 1]


def short_labels(specs) -> tuple[list[str], str | None]:
    """(one label per run, their title or None): the variant when variants differ, and the
    swept values that differ between runs."""
    keys = varying_keys(specs)
    show_variant = len({spec.variant for spec in specs}) > 1 or not keys
    if not show_variant and len(keys) == 1:
        return [value_text(spec.sweep[keys[0]]) for spec in specs], axis_label(keys[0])
    labels = []
    for spec in specs:
        parts = [spec.variant] if show_variant else []
        parts += [f"{key.rsplit('.', 1)[-1]}={value_text(spec.sweep.get(key))}" for key in keys]
        labels.append(", ".join(parts))
    return labels, None


def is_ordered_sweep(specs) -> bool:
    """One variant along one numeric swept value: runs that read best in ordered colours."""
    keys = varying_keys(specs)
    return (len(keys) == 1 and len({spec.variant for spec in specs}) == 1
            and all(_is_number(spec.sweep[keys[0]]) for spec in specs))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
