"""A loaded scenario: its resolved base config, its variants and its sweep, expanded into the
list of runs to simulate.

`load(name_or_path, overrides)` reads a built-in scenario by name (`kv-pressure`) or any TOML
file by path, applies command-line overrides, and validates the base and every run (each
variant at each sweep point) before anything runs. Every problem is one `ScenarioError` line:
`<file>: [variant 'x': | sweep ...: | --set:] <dotted key>: <what is wrong and what is allowed>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from . import collisions, effects
from . import overrides as ov
from .config import RunConfig
from .errors import FieldError, ScenarioError
from .files import BUILTIN_DIR, display, find, parse
from .resolve import resolve
from .specs import did_you_mean
from .sweep import checked, point_label, point_text, point_toml
from .writes import overlap, undoes

DEFAULT_SCENARIO = "static-vs-continuous"
DEFAULT_VARIANT = "default"  # the variant name of a scenario without [[variants]]


@dataclass(frozen=True)
class RunSpec:
    """One run: a variant at one sweep point ({dotted key: value}; empty without a sweep)."""

    variant: str
    sweep: dict
    config: RunConfig

    @property
    def label(self) -> str:
        point = ", ".join(f"{key.rsplit('.', 1)[-1]}={point_text(value)}"
                          for key, value in self.sweep.items())
        return f"{self.variant} ({point})" if point else self.variant


@dataclass(frozen=True)
class Variant:
    name: str
    set: dict  # dotted key -> value


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    path: Path
    base: RunConfig  # the resolved config before variants and sweep
    variants: tuple[Variant, ...]
    sweep: dict  # dotted key -> list of values
    specs: tuple[RunSpec, ...]
    overrides: tuple = ()  # the (key, value) pairs applied to the base, e.g. from --set
    file_base: RunConfig | None = None  # the base without the overrides (None: it does not resolve)
    file_variants: tuple[Variant, ...] = ()  # every variant of the file, --variant or not
    sources: dict = field(default_factory=dict)  # dotted key -> the flag that set it (--set)
    # swept key -> "--sweep" or "search.grid" where it came from there (not the file's [sweep])
    origins: dict = field(default_factory=dict)

    def error(self, problem: str, spec: RunSpec | None = None,
              by_override: bool = False) -> ScenarioError:
        """The one-line error of a problem found after loading (where the simulator builds a
        run), placed as the loader places its own: in the file, in an override (named as it
        was given: `--set: `, `--num-prompts: `), or in a variant at a sweep point."""
        where = ""
        if by_override:
            key = re.match(r"[\w.]*", problem).group()  # "hardware.tp = 3 ...", "slo.ttft_s: "
            at = [pair for pair in self.overrides if overlap(pair[0], key)] if key else []
            where = collisions.given_by(at or self.overrides or [("", None)], self.sources)
        if spec is not None:
            variant = next(v for v in self.variants if v.name == spec.variant)
            where = _where(variant, spec.sweep, self.origins)
        return ScenarioError(f"{display(self.path)}: {where}{problem}")

    def runs(self) -> list[RunSpec]:
        """Every variant at every sweep point (variant-major)."""
        return list(self.specs)

    @property
    def source(self) -> str:
        """The scenario's file as reports name it, the same from any working directory: a
        built-in one by its place in the package (`scenarios/<name>.toml`), any other by its
        absolute path."""
        path = Path(self.path).resolve()
        return f"scenarios/{path.name}" if path.parent == BUILTIN_DIR else str(path)

    @property
    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants]


def load(name_or_path, overrides=(), sweep: dict | None = None,
         sources: dict | None = None, variant: str | None = None,
         grid: dict | None = None) -> Scenario:
    """Load and validate a scenario. `overrides`: "KEY=VALUE" strings or (key, value) pairs,
    applied to the base before the variants and the sweep. `sweep`: {dotted key: [values]}
    added to the file's sweep (replacing a key it sweeps too). An override of a key the
    sweep also sets (the same key, or one inside the other) is refused: the sweep would
    silently replace it. `sources`: {dotted key: the command-line flag that gave the
    override}, to name it in that refusal (default: --set). `variant`: load that variant alone
    (--variant NAME), the others neither resolved nor checked. `grid`: {dotted key: [values]}
    of a capacity search's `search.grid`, crossed into the sweep after it and named so."""
    path = find(name_or_path)
    shown = display(path)
    raw = parse(path, shown)
    file_variants = _guarded(shown, "", _variants, raw.pop("variants", None))
    variants = _picked(shown, file_variants, variant)
    sweep, origins = _whole_sweep(shown, raw.pop("sweep", None), sweep, grid)
    sources = sources or {}
    pairs = tuple(_guarded(shown, "--set: ", _pairs, overrides))
    collisions.check_not_written_over(shown, pairs,
                                      collisions.given_as(overrides, pairs, sources))
    collisions.check_sweep_keys_apart(shown, sweep, origins)
    collisions.check_not_swept(shown, pairs, sweep, origins, sources)
    collisions.check_not_shadowed(shown, pairs, sweep, origins, sources, variants, raw)
    alone = variants[0] if len(variants) == 1 else None  # every run is this variant's
    file_raw, file_base, file_error = raw, None, None
    if pairs:
        raw = _guarded(shown, "--set: ", ov.apply_all, raw, dict(pairs))
        file_base, file_error = _resolved(file_raw, path, alone)
    try:
        base = _base_config(raw, path, alone)
    except FieldError as exc:  # the file's own mistake, its variant's, or one the override made?
        where = _where(alone, {}, origins) if getattr(exc, "in_variant", False) else ""
        hint = ""
        if pairs and str(exc) != file_error:
            at = [pair for pair in pairs if overlap(pair[0], getattr(exc, "key", ""))]
            where = collisions.given_by(at or pairs, sources)
            hint = _variants_that_take(raw, path, variants, at or pairs)
        raise ScenarioError(f"{shown}: {where}{exc}{hint}") from None
    specs = _run_specs(shown, raw, path, variants, sweep, origins)
    effects.check_overrides_matter(shown, file_raw, pairs, variants, sweep, path, sources, specs)
    effects.check_keys_read(shown, file_raw, pairs, sources, variants, sweep, origins, specs)
    return Scenario(base.name, base.description, base.seed, path, base,
                    tuple(variants), sweep, tuple(specs), pairs, file_base,
                    tuple(file_variants), dict(sources), origins)


def _picked(shown: str, variants: list, name: str | None) -> list:
    """The variants that run: all, or the one --variant names (the others neither resolved
    nor checked)."""
    if name is None:
        return variants
    names = [v.name for v in variants]
    if name not in names:
        raise ScenarioError(f"{shown}: --variant {name}: the scenario's variants are "
                            f"{', '.join(names)}")
    return [v for v in variants if v.name == name]


def _whole_sweep(shown: str, file_sweep, sweep: dict | None, grid: dict | None):
    """(the checked sweep: the file's, each key --sweep gives replacing the file's own, then a
    search's grid crossed in after it; {key: "--sweep" or "search.grid"} for the keys the
    flags and the grid gave)."""
    if sweep:  # the flags' keys after the file's, each replacing the file's own
        file_keys = ov.flatten(file_sweep) if isinstance(file_sweep, dict) else {}
        file_sweep = {k: v for k, v in file_keys.items() if k not in sweep} | sweep
    origins = dict.fromkeys(sweep or (), "--sweep") | dict.fromkeys(grid or (), "search.grid")
    whole = _guarded(shown, "--sweep: " if sweep else "", checked, file_sweep)
    if grid:  # crossed after the sweep
        whole = ov.wider_first(whole | _guarded(shown, "", checked, grid, "search.grid"))
    return whole, origins


def _run_specs(shown: str, raw: dict, path: Path, variants, sweep: dict,
               origins: dict) -> list[RunSpec]:
    """Every variant at every sweep point, resolved; two points of a variant that make the
    same run are refused."""
    specs = []
    for variant in variants:
        variant_raw = _guarded(shown, _where(variant, {}, origins), ov.apply_all, raw,
                               variant.set)
        seen = {}  # a run (its config's repr) -> the point that made it
        for point in ov.grid(sweep):
            config = _guarded(shown, _where(variant, point, origins),
                              lambda: resolve(ov.apply_all(variant_raw, point), path))
            same = seen.get(run := repr(config))
            if same is not None:
                raise ScenarioError(
                    f"{shown}: {_where(variant, {}, origins)}{point_label(same, origins)} "
                    f"and {point_toml(point)} make the same run (what they set differently is "
                    f"written over by another key, or is the value there already); sweep "
                    f"values that change the run")
            seen[run] = point
            specs.append(RunSpec(variant.name, point, config))
    return specs


def _where(variant: Variant, point: dict, origins: dict) -> str:
    """Where in a scenario a run's mistake lies: "variant 'x': sweep k=v: " (either part only
    when the variant sets something, or the run is a sweep point; a search grid's keys are
    named "search.grid k=v", `origins` saying which they are)."""
    where = f"variant {variant.name!r}: " if variant.set else ""
    return where + (f"{point_label(point, origins)}: " if point else "")


def _guarded(shown: str, where: str, func, *args):
    try:
        return func(*args)
    except FieldError as exc:
        raise ScenarioError(f"{shown}: {where}{exc}") from None


def _base_config(raw: dict, path: Path, alone: Variant | None) -> RunConfig:
    """The config every run shares: the file's (with its overrides), and where every run is one
    variant's (the file has one, or --variant picked it), with that variant's settings too, so
    that a key only the variant makes valid (a disaggregated cluster's KV link) is no error of
    the base. When that fails, the error is the one with the variant's settings, marked
    `in_variant` when it is the variant's own (the file alone resolves, or fails otherwise)."""
    if alone is None or not alone.set:
        return resolve(raw, path)
    try:
        return resolve(ov.apply_all(raw, alone.set), path)
    except FieldError as with_variant:
        try:
            resolve(raw, path)
            with_variant.in_variant = True  # the file alone resolves: the variant's problem
        except FieldError as alone_error:  # the variant's too, unless the file fails the same
            with_variant.in_variant = str(alone_error) != str(with_variant)
        raise with_variant from None


def _variants_that_take(raw: dict, path: Path, variants, pairs) -> str:
    """Where overrides the base refuses suit some of several variants (a disaggregated
    cluster's KV link beside a co-located variant): a hint naming them, for --variant. A
    variant that writes over them all, after them, does not take them."""
    if len(variants) < 2:
        return ""
    taken = [v.name for v in variants if v.set and not undoes(v.set, pairs)
             and _resolved(raw, path, v)[1] is None]
    if not taken:
        return ""
    return (f"; variant {taken[0]!r} takes it: run it alone with --variant {taken[0]}"
            if len(taken) == 1 else
            f"; variants {', '.join(taken)} take it: run one alone with --variant NAME")


def _resolved(raw: dict, path: Path,
              alone: Variant | None = None) -> tuple[RunConfig | None, str | None]:
    """(`_base_config`, None) when `raw` resolves, else (None, its error)."""
    try:
        return _base_config(raw, path, alone), None
    except FieldError as exc:
        return None, str(exc)


def _pairs(overrides) -> list[tuple[str, object]]:
    """Overrides as (key, value) pairs: "KEY=VALUE" strings or (key, value) pairs, in a list
    or tuple (a lone string is one override)."""
    if isinstance(overrides, str):
        overrides = [overrides]
    if not isinstance(overrides, (list, tuple)):
        raise FieldError("", f"overrides must be a list of KEY=VALUE strings or (key, value) "
                             f"pairs, got {type(overrides).__name__}")
    pairs = []
    for item in overrides:
        if isinstance(item, str):
            pairs.append(ov.parse_set(item))
        elif isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str):
            pairs.append(tuple(item))
        else:
            raise FieldError("", f"an override must be a KEY=VALUE string or a (key, value) "
                                 f"pair, got {item!r}")
    return pairs


def _variants(table) -> list[Variant]:
    if table is None:
        return [Variant(DEFAULT_VARIANT, {})]
    if not isinstance(table, list) or not table:
        raise FieldError("variants", "must be a non-empty array of tables ([[variants]])")
    variants = []
    for i, item in enumerate(table):
        key = f"variants[{i}]"
        if not isinstance(item, dict):
            raise FieldError(key, f"must be a table with name and set, got {item!r}")
        for name in item:
            if name not in ("name", "set"):
                hint = did_you_mean(name, ("name", "set"))
                raise FieldError(f"{key}.{name}", f"unknown key ({hint}allowed: name, set)")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise FieldError(f"{key}.name", f"required (a non-empty string), got {name!r}")
        if name in (v.name for v in variants):
            raise FieldError(f"{key}.name", f"must be unique, {name!r} is used twice")
        settings = item.get("set", {})
        if not isinstance(settings, dict):
            raise FieldError(f"{key}.set", f"must be a table of dotted keys, got {settings!r}")
        variants.append(Variant(name, settings))
    return variants
