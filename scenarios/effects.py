"""Whether an override changes a run: refused in one line, once the runs are resolved, where
every variant undoes it (variants apply after overrides) or does not read it
(`check_overrides_matter`), and a key given where no run reads it (`check_keys_read`,
`reads.READ_WITH`; docs/scenarios/cli.md). What would write over another before anything
resolves is `collisions.py`'s."""

from __future__ import annotations

from pathlib import Path

from . import overrides as ov
from .collisions import given_by
from .errors import FieldError, ScenarioError
from .reads import READ_WITH, UNREAD_WITH, reads, setting_of, unread_cleared
from .resolve import resolve
from .writes import overlap, swept_writes, undoes, writes


def check_overrides_matter(shown: str, file_raw: dict, pairs, variants, sweep: dict,
                            path: Path, sources: dict, specs: list) -> None:
    """ScenarioError when an override changes the file's config but no run: every variant's
    run at the first sweep point resolves the same without it (the variants, applied after it,
    set again all it changes: `--request-rate R` where every variant sets the rate of the
    file's own Poisson arrivals), or, for a key read only under another's setting
    (`reads.READ_WITH`), every run at every sweep point does but for the keys it does not read
    (`--set scheduler.max_batch_size=8` where the static variant sets its own and the
    continuous one reads none). One restating the file's own value is harmless."""
    if not pairs:
        return
    try:
        overridden = resolve(ov.apply_all(file_raw, dict(pairs)), path)
    except FieldError:  # the file needs a variant's settings (`scenario._base_config`): the
        for key, value in pairs:  # resolved runs cannot be compared; what is written can
            if all(undoes(variant.set, [(key, value)]) for variant in variants):
                _refuse_undone(shown, key, variants, sources)
        return
    first = ov.grid(sweep)[0]
    runs = {spec.variant: spec.config for spec in specs if spec.sweep == first}
    by_name = {variant.name: variant for variant in variants}
    for key, value in pairs:
        others = dict(pair for pair in pairs if pair[0] != key)
        try:
            without = ov.apply_all(file_raw, others)
            if resolve(without, path) == overridden:
                continue  # it restates the file's own value: harmless
            at_first = {v.name: resolve(ov.apply_all(ov.apply_all(without, v.set), first), path)
                        for v in variants}
            if all(at_first[v.name] == runs[v.name] for v in variants):
                _refuse_undone(shown, key, variants, sources)
            conditions = _conditions(writes({key: value}))
            if not conditions or _searched_over(file_raw, pairs, conditions, crossed=sweep):
                continue  # read by every run it reaches, or known only once the grid is in
            if any(unread_cleared(at_first[v.name]) != unread_cleared(runs[v.name])
                   for v in variants):
                continue  # a run reads it: it matters
            alike = [(spec, resolve(ov.apply_all(ov.apply_all(without, by_name[spec.variant].set),
                                                 spec.sweep), path)) for spec in specs]
        except FieldError:
            continue  # needed: without it the file or a run would not resolve
        # every run the same but for keys it does not read, and some variant sets it again
        unread = list(dict.fromkeys(spec.variant for spec, run in alike if run != spec.config))
        if len(unread) < len(variants) and all(
                unread_cleared(run) == unread_cleared(spec.config) for spec, run in alike):
            _refuse_undone(shown, key, [v for v in variants if v.name not in unread], sources,
                           [by_name[name] for name in unread])


def _conditions(written) -> tuple:
    """The settings that decide whether the dotted keys `written` are read (`READ_WITH`,
    `UNREAD_WITH`)."""
    found = [READ_WITH[w][0] for w in written if w in READ_WITH]
    found += [UNREAD_WITH[w][0] for w in written if w in UNREAD_WITH]
    return tuple(dict.fromkeys(found))


def _searched_over(file_raw: dict, pairs, settings, crossed=()) -> bool:
    """Whether `search.grid` (the file's, or an override's) sets one of `settings`, unless it
    is `crossed` in already (a sweep key): `servesim search` crosses the grid in after loading,
    so what a run reads is known only then."""
    grid = set(ov.flatten((file_raw.get("search") or {}).get("grid") or {}))
    grid |= {k.removeprefix("search.grid.") for k in writes(dict(pairs))
             if k.startswith("search.grid.")}
    grid -= set(crossed)
    return any(overlap(setting, key) for setting in settings for key in grid)


def _refuse_undone(shown: str, key: str, variants, sources: dict, unread=()):
    """`variants` set again what the override at `key` sets; the `unread` ones do not read it."""
    what = sources.get(key, f"--set {key}")
    names = ", ".join(v.name for v in variants)
    if not unread:
        raise ScenarioError(f"{shown}: {what}: changes no run: every variant ({names}) sets "
                            f"again what it sets, after it; drop it, or set it in the variants")
    again = f"{names} set{'s' if len(variants) == 1 else ''} it again after it, " \
        if variants else ""
    raise ScenarioError(f"{shown}: {what}: changes no run: {again}"
                        f"{', '.join(v.name for v in unread)} "
                        f"{'does' if len(unread) == 1 else 'do'} not read it; drop it, or set "
                        f"it in the variants")


def check_keys_read(shown: str, file_raw: dict, pairs, sources: dict, variants, sweep: dict,
                    origins: dict, specs) -> None:
    """ScenarioError naming the first key of READ_WITH that the file, an override, a variant
    or the sweep gives and that none of the runs it reaches reads. The file's, a variant's and
    the sweep's keys are judged so only where neither an override nor a search grid sets what
    they are read under: `--set cost.model=linear` on a file with a `cost.profile` leaves that
    key unread, as asked, and a `search.grid` over `scheduler.policy` makes some points read
    the static batch size."""
    settings = set(writes(dict(pairs)))
    settings |= {key.removeprefix("search.grid.") for key in settings
                 if key.startswith("search.grid.")}
    settings |= set((file_raw.get("search") or {}).get("grid") or {})
    given = [("", key, specs) for key in writes(file_raw)]
    for variant in variants:
        own = [spec for spec in specs if spec.variant == variant.name]
        given += [(f"variant {variant.name!r}: ", key, own) for key in writes(variant.set)]
    for swept, values in sweep.items():
        where = f"{origins.get(swept, '[sweep]')}: "
        given += [(where, key, specs) for key in swept_writes(swept, values)]
    given = [(where, key, runs) for where, key, runs in given
             if key in READ_WITH and not any(overlap(condition, setting)
                                             for condition in _conditions([key])
                                             for setting in settings)]
    given += [(given_by([(key, value)], sources), written, specs)
              for key, value in pairs for written in writes({key: value})
              if not _searched_over(file_raw, pairs, _conditions([written]), crossed=sweep)]
    for where, key, runs in given:
        if key in READ_WITH and runs and not any(reads(spec.config, key) for spec in runs):
            setting, value = READ_WITH[key]
            actual = sorted({repr(setting_of(spec.config, setting)) for spec in runs})
            if repr(value) in actual and key in UNREAD_WITH:  # those are another's
                other, unread, instead = UNREAD_WITH[key]
                raise ScenarioError(f"{shown}: {where}{key}: read with {setting} = {value!r} "
                                    f"only, and not with {other} = {unread!r} ({instead} is "
                                    f"read instead): no run reads it; drop it")
            raise ScenarioError(f"{shown}: {where}{key}: read with {setting} = {value!r} only, "
                                f"and no run has it ({setting} is {', '.join(actual)}); drop "
                                f"it, or set {setting} = {value!r}")
