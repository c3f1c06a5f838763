"""What settings write, as dotted keys, in the order `overrides.apply` applies them: the keys
a variant's `set`, an override or a sweep writes (`writes`, `swept_writes`, with what they drop,
`dropped`), whether later settings write over all of earlier ones (`covered`, `undoes`), and
whether two keys set the same value (`overlap`). The loader's refusals are built on them
(`effects.py`, `collisions.py`).
"""

from __future__ import annotations

from . import overrides as ov


def writes(settings: dict) -> dict:
    """{dotted key: value} of what `settings` (dotted keys, as a variant's `set`) write, as
    `overrides.apply` writes them: an untagged table merges, so its values are written one by
    one; a value or a table naming its kind (`dist`, `process`) replaces what was there."""
    out: dict = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value and not ov.replaces(key, value):
            out.update(writes({f"{key}.{k}": v for k, v in value.items()}))
        else:
            out[key] = value
    return out


def swept_writes(key: str, values) -> set:
    """The dotted keys that sweeping `key` over `values` writes (`writes`), over all values,
    and those it drops (`dropped`)."""
    written = {w for value in values for w in writes({key: value})}
    return written | dropped(written)


def dropped(written) -> set:
    """The dotted keys that writing `written` drops (`overrides.apply`): a model's `name` and
    `config` replace each other, and a trace's `name` and `path` (a name its `format` too)."""
    out = set()
    model = {f"{ov.MODEL_KEY}.{kind}" for kind in ov.MODEL_KINDS}
    if len(model & set(written)) == 1:
        out |= model - set(written)
    for kind in ov.TRACE_KINDS:
        if f"{ov.TRACE_KEY}.{kind}" in written:
            out |= {f"{ov.TRACE_KEY}.{other}" for other in ov.TRACE_KINDS if other != kind}
            if kind == "name":
                out.add(f"{ov.TRACE_KEY}.format")
    return out


def covered(written, later: dict) -> bool:
    """Whether settings writing `later` (`writes`) write over every key of `written`: the
    same key again, or a table holding it replaced."""
    return all(any(w == k or w.startswith(k + ".") for k in later) for w in written)


def overlap(a: str, b: str) -> bool:
    """Whether two dotted keys set the same value: equal, or one a table holding the other."""
    return a == b or b.startswith(a + ".") or a.startswith(b + ".")


def undoes(settings: dict, pairs) -> bool:
    """Whether settings applied after the overrides `pairs` (a variant's `set`) write over all
    that they write."""
    written = {w for key, value in pairs for w in writes({key: value})}
    return covered(written, writes(settings))
