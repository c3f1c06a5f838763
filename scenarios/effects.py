"""What an override or a sweep changes: refused in one line when it would change no run, or
leave the variants differing in name only (docs/scenarios/cli.md). An override of a key the
sweep also sets (the sweep would replace it), one every variant undoes (variants apply after
overrides), either written over by every pool of a `[cluster]` (a pool's `set` applies last),
two sweep keys writing the same value, and a sweep after which the variants set nothing else."""

from __future__ import annotations

from pathlib import Path

from . import overrides as ov
from .errors import FieldError, ScenarioError
from .resolve import resolve


def check_overrides_matter(shown: str, file_raw: dict, pairs, variants, sweep: dict,
                            path: Path, sources: dict, specs: list) -> None:
    """ScenarioError when an override changes the file's config but no run: every variant's
    run at the first sweep point resolves the same without it (the variants, applied after
    it, set again all it changes: `--request-rate R` where every variant sets the rate of the
    file's own Poisson arrivals). One restating the file's own value is harmless."""
    if not pairs:
        return
    try:
        overridden = resolve(ov.apply_all(file_raw, dict(pairs)), path)
    except FieldError:  # the file needs a variant's settings (`scenario._base_config`): whether
        return  # an override restates its own value or a variant undoes it cannot be told
    first = ov.grid(sweep)[0]
    runs = {spec.variant: spec.config for spec in specs if spec.sweep == first}
    for key, _ in pairs:
        others = dict(pair for pair in pairs if pair[0] != key)
        try:
            without = ov.apply_all(file_raw, others)
            if resolve(without, path) == overridden:
                continue  # it restates the file's own value: harmless
            same = all(resolve(ov.apply_all(ov.apply_all(without, v.set), first), path)
                       == runs[v.name] for v in variants)
        except FieldError:
            continue  # needed: without it the file or a run would not resolve
        if same:
            what = sources.get(key, f"--set {key}")
            names = ", ".join(v.name for v in variants)
            raise ScenarioError(f"{shown}: {what}: changes no run: every variant ({names}) "
                                f"sets again what it sets, after it; drop it, or set it in "
                                f"the variants")


def check_not_swept(shown: str, pairs, sweep: dict, flag_sweep: set, sources: dict) -> None:
    """ScenarioError when an override sets a key the sweep sets too (the same key, or one
    table holding the other), naming both."""
    swept_writes = {swept: {w for value in values for w in _writes({swept: value})}
                    for swept, values in sweep.items()}
    for key, value in pairs:
        for swept in sweep:
            if any(_overlap(x, y) for x in _writes({key: value}) for y in swept_writes[swept]):
                given = sources.get(key, f"--set {key}")
                where = "--sweep" if swept in flag_sweep else "the scenario's [sweep]"
                raise ScenarioError(f"{shown}: {given} sets {key}, which {where} also sets "
                                    f"({swept} = {sweep[swept]!r}); give one of them")


def check_sweep_keys_apart(shown: str, sweep: dict, flag_sweep: set) -> None:
    """ScenarioError when two swept keys write the same value (one a table holding the other:
    `workload.arrival` beside `workload.arrival.rate`): the one applied later writes over the
    other at every point, leaving runs that differ in name only."""
    keys = list(sweep)
    writes = {key: {w for value in sweep[key] for w in _writes({key: value})} for key in keys}
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if any(_overlap(x, y) for x in writes[a] for y in writes[b]):
                def named(key):
                    return f"--sweep {key}" if key in flag_sweep else f"[sweep] {key}"
                raise ScenarioError(f"{shown}: {named(b)} and {named(a)} set the same value "
                                    f"(one holds the other), so one would write over the "
                                    f"other at every point; sweep one of them")


def check_not_shadowed(shown: str, pairs, sweep: dict, flag_sweep: set, sources: dict,
                        variants, raw: dict) -> None:
    """ScenarioError when an override or a sweep is written over by every pool of `[cluster]`
    (a pool's `set` applies last, at build time: every value it sets set again, or in a table
    the pool replaces), or when a sweep leaves two or more variants setting nothing else (it
    applies after them, replacing what each sets). An override every variant undoes is
    `check_overrides_matter`'s."""
    cluster = raw.get("cluster")
    pools = cluster.get("pools") if isinstance(cluster, dict) else None
    pool_writes = [_writes(pool["set"]) for pool in pools or ()
                   if isinstance(pool, dict) and isinstance(pool.get("set"), dict)]
    if len(pool_writes) != len(pools or ()):
        pool_writes = []  # a malformed pool: the schema says so, naming it
    given = [(sources.get(key, f"--set {key}"), key, [value]) for key, value in pairs] + \
        [(f"--sweep {key}" if key in flag_sweep else f"[sweep] {key}", key, values)
         for key, values in sweep.items()]
    for what, key, values in given:
        written = {w for value in values for w in _writes({key: value})}
        if pool_writes and all(_covered(written, pool) for pool in pool_writes):
            raise ScenarioError(f"{shown}: {what}: every pool of [cluster] sets {key} again "
                                f"(a pool's set applies last), so it changes no run; set it "
                                f"in the pools")
    variant_writes = [_writes(variant.set) for variant in variants]
    if sweep and len(variants) > 1 and any(w != variant_writes[0] for w in variant_writes):
        swept_writes = {w for key, values in sweep.items() for value in values
                        for w in _writes({key: value})}
        rest = [{w: v for w, v in writes.items() if not _covered({w}, swept_writes)}
                for writes in variant_writes]
        if all(r == rest[0] for r in rest):
            keys = ", ".join(sweep)
            raise ScenarioError(f"{shown}: the sweep of {keys} replaces all that the variants "
                                f"set ({', '.join(v.name for v in variants)}), leaving them "
                                f"differing in name only; drop the variants or that sweep key")


def _writes(settings: dict) -> dict:
    """{dotted key: value} of what `settings` (dotted keys, as a variant's `set`) write, as
    `overrides.apply` writes them: an untagged table merges, so its values are written one by
    one; a value or a table naming its kind (`dist`, `process`) replaces what was there."""
    out: dict = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value and not any(t in value for t in ov.TAG_KEYS):
            out.update(_writes({f"{key}.{k}": v for k, v in value.items()}))
        else:
            out[key] = value
    return out


def _covered(written, later: dict) -> bool:
    """Whether settings writing `later` (`_writes`) write over every key of `written`: the
    same key again, or a table holding it replaced."""
    return all(any(w == k or w.startswith(k + ".") for k in later) for w in written)


def _overlap(a: str, b: str) -> bool:
    """Whether two dotted keys set the same value: equal, or one a table holding the other."""
    return a == b or b.startswith(a + ".") or a.startswith(b + ".")
