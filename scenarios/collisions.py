"""Overrides and sweep keys that would write over one another, refused in one line before
anything resolves (docs/scenarios/cli.md): a flag written over by a later one
(`check_not_written_over`), an override of a key the sweep sets (`check_not_swept`), a swept
key written over by a later one (`check_sweep_keys_apart`), and an override, a sweep or a
variant's setting written over by every pool of a `[cluster]`, or a sweep that leaves the
variants differing in name only (`check_not_shadowed`). How each override was given names it
(`given_as`, `given_by`).
"""

from __future__ import annotations

from . import overrides as ov
from .errors import FieldError, ScenarioError
from .writes import covered, overlap, swept_writes, undoes, writes


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
            if all(covered(written, writes({later: value})) for value in sweep[later]):
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
            if all(pools and all(covered(written, pool) for pool in pools)
                   for _, pools in pooled):
                raise ScenarioError(f"{shown}: {what}: every pool of [cluster] sets {key} "
                                    f"again (a pool's set applies last), so it changes no "
                                    f"run; set it in the pools")
        for variant, pools in pooled:
            for key, value in variant.set.items() if pools else ():
                if all(covered(writes({key: value}), pool) for pool in pools):
                    raise ScenarioError(f"{shown}: variant {variant.name!r}: {key}: every "
                                        f"pool of [cluster] sets it again (a pool's set "
                                        f"applies last), so the variant's value changes no "
                                        f"run; set it in the pools")
    variant_writes = [writes(variant.set) for variant in variants]
    if sweep and len(variants) > 1 and any(w != variant_writes[0] for w in variant_writes):
        all_swept = {w for key, values in sweep.items() for w in swept_writes(key, values)}
        rest = [{w: v for w, v in each.items() if not covered({w}, all_swept)}
                for each in variant_writes]
        if all(r == rest[0] for r in rest):
            keys = ", ".join(sweep)
            raise ScenarioError(f"{shown}: the sweep of {keys} replaces all that the variants "
                                f"set ({', '.join(v.name for v in variants)}), leaving them "
                                f"differing in name only; drop the variants or that sweep key")
    for variant in variants:  # a sweep setting the variant's own key is plain to see
        for key in writes(variant.set):
            swept = next((swept for swept, values in sweep.items()
                          if all(covered({key}, swept_writes(swept, [point]))
                                 and not covered({key}, writes({swept: point}))
                                 for point in values)), None)
            if swept is not None:
                what = "trace's name and path" if key.startswith(ov.TRACE_KEY) else \
                    "model's name and config"
                raise ScenarioError(f"{shown}: variant {variant.name!r}: {key}: "
                                    f"{_swept_name(swept, origins)} replaces it at every "
                                    f"point (a {what} replace each other; a sweep applies "
                                    f"after the variants), so the variant's value changes no "
                                    f"run; drop it, or sweep {key} instead")


def _swept_name(key: str, origins: dict) -> str:
    """How a swept key was given: `--sweep KEY`, `search.grid KEY` or `[sweep] KEY`
    (`origins`: {key: "--sweep" or "search.grid"}; the file's own keys are absent)."""
    return f"{origins.get(key, '[sweep]')} {key}"
