"""Build a frozen config dataclass from a plain config table, with one-line errors that name the
dotted key: an unknown key, a missing required key, or the dataclass's own validation message."""

from __future__ import annotations

from dataclasses import MISSING, fields


def from_table(cls, table: dict, key: str, tag: str):
    """`cls(**table without its tag key, key=key)`; `tag` is the selecting key ("dist", ...)."""
    args = {k: v for k, v in table.items() if k != tag}
    allowed = [f.name for f in fields(cls) if f.name != "key"]
    for name in args:
        if name not in allowed:
            raise ValueError(f"{key}.{name}: unknown key for {tag} = {table[tag]!r} "
                             f"(allowed: {', '.join(allowed)})")
    for f in fields(cls):
        if f.name in allowed and f.default is MISSING and f.name not in args:
            raise ValueError(f"{key}.{f.name}: required for {tag} = {table[tag]!r}")
    return cls(**args, key=key)
