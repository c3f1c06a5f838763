"""What an override or a sweep changes: refused in one line when it would change no run, or
leave the variants differing in name only (docs/scenarios/cli.md). An override of a key the
sweep also sets (the sweep would replace it), one every variant undoes (variants apply after
overrides) or does not read, either written over by every pool of a `[cluster]` (a pool's
`set` applies last), a swept key written over by a later one, a sweep after which the variants
set nothing else, and a key that no run reads (`reads.READ_WITH`)."""

from __future__ import annotations

from pathlib import Path

from . import overrides as ov
from .errors import FieldError, ScenarioError
from .reads import READ_WITH, UNREAD_WITH, reads, setting_of, unread_cleared
from .resolve import resolve


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


def undoes(settings: dict, pairs) -> bool:
    """Whether settings applied after the overrides `pairs` (a variant's `set`) write over all
    that they write."""
    written = {w for key, value in pairs for w in writes({key: value})}
    return _covered(written, writes(settings))


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


def check_not_written_over(shown: str, pairs, names: list[str]) -> None:
    """ScenarioError when a flag writes over an override given before it (`--set
    workload.num_requests=7 --num-prompts 5`): two spellings of one setting, one of them lost.
    A later --set of a key wins over an earlier one, as on most command lines. `names`: how
    each pair was given (`--set KEY`, `--num-prompts`)."""
    for j, flag in enumerate(names):
        if flag.startswith("--set "):
            continue
        for i in range(j):
            if undoes(dict([pairs[j]]), [pairs[i]]):
                raise ScenarioError(f"{shown}: {names[i]} is written over by {flag}, which "
                                    f"applies after it; give one of them")


def given_as(overrides, pairs, sources: dict) -> list[str]:
    """How each override was given: `--set KEY` for a KEY=VALUE string, else the flag that
    `sources` names (`--num-prompts`), so a --set and a flag of one key are told apart."""
    items = [overrides] if isinstance(overrides, str) else list(overrides)
    return [f"--set {key}" if isinstance(item, str) else sources.get(key, f"--set {key}")
            for item, (key, _) in zip(items, pairs)]


def given_by(pairs, sources: dict) -> str:
    """The prefix of an error the overrides `pairs` made (those at its key, else all): how they
    were given, `--request-rate: `, `--set: `, or `--max-seconds, --set: `."""
    return ", ".join(sorted({sources.get(key, "--set") for key, _ in pairs})) + ": "


def check_not_swept(shown: str, pairs, sweep: dict, origins: dict, sources: dict) -> None:
    """ScenarioError when an override sets a key the sweep sets too (the same key, or one
    table holding the other), naming both."""
    writes_of = {swept: swept_writes(swept, values) for swept, values in sweep.items()}
    for key, value in pairs:
        for swept in sweep:
            if any(overlap(x, y) for x in writes({key: value}) for y in writes_of[swept]):
                given = sources.get(key, f"--set {key}")
                where = origins.get(swept, "the scenario's [sweep]")
                raise ScenarioError(f"{shown}: {given} sets {key}, which {where} also sets "
                                    f"({swept} = {ov.toml_text(sweep[swept])}); give one of "
                                    f"them")


def check_sweep_keys_apart(shown: str, sweep: dict, origins: dict) -> None:
    """ScenarioError when a swept key writes over all that an earlier one sets, at every point
    (`load-sweep --sweep workload.arrival={rate = 2},{rate = 3}`: the file's sweep of
    `workload.arrival.rate` applies after the tables, which set only the rate): the points of
    the earlier key would differ in name only. A table's key sweeps before the keys inside it
    (`overrides.wider_first`), which then refine its values."""
    keys = list(sweep)
    for i, earlier in enumerate(keys):
        written = swept_writes(earlier, sweep[earlier])
        for later in keys[i + 1:]:
            if all(_covered(written, writes({later: value})) for value in sweep[later]):
                raise ScenarioError(
                    f"{shown}: {_swept_name(later, origins)} applies after "
                    f"{_swept_name(earlier, origins)} and writes over all it sets, so its "
                    f"points would differ in name only; sweep one of them")


def _pool_writes(raw: dict) -> list:
    """What each pool of `raw`'s `[cluster]` writes (its `set`, none without one); [] without
    pools, or with a malformed one (the schema says so, naming it)."""
    cluster = raw.get("cluster")
    pools = cluster.get("pools") if isinstance(cluster, dict) else None
    if not isinstance(pools, list):
        return []
    written = [writes(pool.get("set", {})) for pool in pools
               if isinstance(pool, dict) and isinstance(pool.get("set", {}), dict)]
    return written if len(written) == len(pools) else []


def check_not_shadowed(shown: str, pairs, sweep: dict, origins: dict, sources: dict,
                       variants, raw: dict) -> None:
    """ScenarioError when an override or a sweep is written over by every pool of the cluster
    every variant runs (a pool's `set` applies last, at build time: every value it sets set
    again, or in a table the pool replaces), or a variant's own setting by every pool of its
    cluster (the file's pools, or those an override or the variant gives), or when a sweep
    leaves two or more variants setting nothing else (it applies after them, replacing what
    each sets), or replaces at every point a key a variant sets that is not its own (a model's
    `config` where it sweeps `name`). An override every variant undoes is
    `check_overrides_matter`'s."""
    given = [(sources.get(key, f"--set {key}"), key, [value]) for key, value in pairs] + \
        [(_swept_name(key, origins), key, values) for key, values in sweep.items()]
    swept_pools = any(overlap(w, "cluster.pools") for key, values in sweep.items()
                      for w in swept_writes(key, values))
    try:
        with_pairs = ov.apply_all(raw, dict(pairs))
        pooled = [(variant, _pool_writes(ov.apply_all(with_pairs, variant.set)))
                  for variant in variants]
    except (FieldError, ValueError, TypeError):  # refused where the overrides are applied
        pooled = []
    if pooled and not swept_pools:  # the pools each variant runs with, the same at every point
        for what, key, values in given:
            written = swept_writes(key, values)
            if all(pools and all(_covered(written, pool) for pool in pools)
                   for _, pools in pooled):
                raise ScenarioError(f"{shown}: {what}: every pool of [cluster] sets {key} "
                                    f"again (a pool's set applies last), so it changes no "
                                    f"run; set it in the pools")
        for variant, pools in pooled:
            for key, value in variant.set.items() if pools else ():
                if all(_covered(writes({key: value}), pool) for pool in pools):
                    raise ScenarioError(f"{shown}: variant {variant.name!r}: {key}: every "
                                        f"pool of [cluster] sets it again (a pool's set "
                                        f"applies last), so the variant's value changes no "
                                        f"run; set it in the pools")
    variant_writes = [writes(variant.set) for variant in variants]
    if sweep and len(variants) > 1 and any(w != variant_writes[0] for w in variant_writes):
        all_swept = {w for key, values in sweep.items() for w in swept_writes(key, values)}
        rest = [{w: v for w, v in each.items() if not _covered({w}, all_swept)}
                for each in variant_writes]
        if all(r == rest[0] for r in rest):
            keys = ", ".join(sweep)
            raise ScenarioError(f"{shown}: the sweep of {keys} replaces all that the variants "
                                f"set ({', '.join(v.name for v in variants)}), leaving them "
                                f"differing in name only; drop the variants or that sweep key")
    for variant in variants:  # a sweep setting the variant's own key is plain to see
        for key in writes(variant.set):
            swept = next((swept for swept, values in sweep.items()
                          if all(_covered({key}, swept_writes(swept, [point]))
                                 and not _covered({key}, writes({swept: point}))
                                 for point in values)), None)
            if swept is not None:
                what = "trace's name and path" if key.startswith(ov.TRACE_KEY) else \
                    "model's name and config"
                raise ScenarioError(f"{shown}: variant {variant.name!r}: {key}: "
                                    f"{_swept_name(swept, origins)} replaces it at every "
                                    f"point (a {what} replace each other; a sweep applies "
                                    f"after the variants), so the variant's value changes no "
                                    f"run; drop it, or sweep {key} instead")


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


def _swept_name(key: str, origins: dict) -> str:
    """How a swept key was given: `--sweep KEY`, `search.grid KEY` or `[sweep] KEY`
    (`origins`: {key: "--sweep" or "search.grid"}; the file's own keys are absent)."""
    return f"{origins.get(key, '[sweep]')} {key}"


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


def _covered(written, later: dict) -> bool:
    """Whether settings writing `later` (`writes`) write over every key of `written`: the
    same key again, or a table holding it replaced."""
    return all(any(w == k or w.startswith(k + ".") for k in later) for w in written)


def overlap(a: str, b: str) -> bool:
    """Whether two dotted keys set the same value: equal, or one a table holding the other."""
    return a == b or b.startswith(a + ".") or a.startswith(b + ".")
