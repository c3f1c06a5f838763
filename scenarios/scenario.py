"""A loaded scenario: its resolved base config, its variants and its sweep, expanded into the
list of runs to simulate.

`load(name_or_path, overrides)` reads a built-in scenario by name (`kv-pressure`) or any TOML
file by path, applies command-line overrides, and validates the base and every run (each
variant at each sweep point) before anything runs. Every problem is one `ScenarioError` line:
`<file>: [variant 'x': | sweep ...: | --set:] <dotted key>: <what is wrong and what is allowed>`.
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from . import overrides as ov
from .errors import FieldError, ScenarioError
from .config import RunConfig
from .resolve import resolve

BUILTIN_DIR = Path(__file__).resolve().parent
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
        point = ", ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in self.sweep.items())
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

    def error(self, problem: str, spec: RunSpec | None = None,
              by_override: bool = False) -> ScenarioError:
        """The one-line error of a problem found after loading (where the simulator builds a
        run), placed as the loader places its own: in the file, in an override, or in a
        variant at a sweep point."""
        where = "--set: " if by_override else ""
        if spec is not None:
            variant = next(v for v in self.variants if v.name == spec.variant)
            where = _where(variant, spec.sweep)
        return ScenarioError(f"{_display(self.path)}: {where}{problem}")

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


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def list_builtin() -> list[tuple[str, str]]:
    """(name, description) of every built-in scenario, by name (read, not validated: listing
    works even where a scenario could not run)."""
    listing = []
    for name in builtin_names():
        path = BUILTIN_DIR / f"{name}.toml"
        raw = _parse(path, _display(path))
        listing.append((name, str(raw.get("description", ""))))
    return listing


def find(name_or_path) -> Path:
    if not isinstance(name_or_path, (str, Path)):
        raise ScenarioError(f"{name_or_path!r}: a scenario is a built-in name or a path, got "
                            f"{type(name_or_path).__name__}")
    path = Path(name_or_path)
    if path.is_dir():
        raise ScenarioError(f"{path}: is a folder, not a scenario file")
    if path.is_file():
        return path.resolve()
    builtin = BUILTIN_DIR / f"{name_or_path}.toml"
    if builtin.is_file():
        return builtin
    raise ScenarioError(f"{name_or_path}: no such scenario file or built-in scenario "
                        f"(built-ins: {', '.join(builtin_names())})")


def load(name_or_path, overrides=(), sweep: dict | None = None,
         sources: dict | None = None, variant: str | None = None) -> Scenario:
    """Load and validate a scenario. `overrides`: "KEY=VALUE" strings or (key, value) pairs,
    applied to the base before the variants and the sweep. `sweep`: {dotted key: [values]}
    added to the file's sweep (replacing a key it sweeps too). An override of a key the
    sweep also sets (the same key, or one inside the other) is refused: the sweep would
    silently replace it. `sources`: {dotted key: the command-line flag that gave the
    override}, to name it in that refusal (default: --set). `variant`: load that variant alone
    (--variant NAME), the others neither resolved nor checked."""
    path = find(name_or_path)
    shown = _display(path)
    raw = _parse(path, shown)
    variants = _guarded(shown, "", _variants, raw.pop("variants", None))
    if variant is not None:
        names = [v.name for v in variants]
        if variant not in names:
            raise ScenarioError(f"{shown}: --variant {variant}: the scenario's variants are "
                                f"{', '.join(names)}")
        variants = [v for v in variants if v.name == variant]
    file_sweep = raw.pop("sweep", None)
    if sweep:
        file_sweep = (ov.flatten(file_sweep) if isinstance(file_sweep, dict) else {}) | sweep
    flag_sweep = set(sweep or ())
    sweep = _guarded(shown, "--sweep: " if sweep else "", _sweep, file_sweep)
    pairs = tuple(_guarded(shown, "--set: ", _pairs, overrides))
    _check_not_swept(shown, pairs, sweep, flag_sweep, sources or {})
    _check_not_shadowed(shown, pairs, sweep, flag_sweep, sources or {}, variants, raw)
    file_base = None
    alone = variants[0] if len(variants) == 1 else None  # every run is this variant's
    file_raw = raw
    if pairs:
        raw = _guarded(shown, "--set: ", _apply_all, raw, dict(pairs))
        file_base, file_error = _resolved(file_raw, path, alone)
    try:
        base = _base_config(raw, path, alone)
    except FieldError as exc:  # the file's own mistake, its variant's, or one the override made?
        where = _where(alone, {}) if getattr(exc, "in_variant", False) else ""
        if pairs and str(exc) != file_error:
            where = "--set: "
        raise ScenarioError(f"{shown}: {where}{exc}") from None
    specs = []
    for variant in variants:
        variant_raw = _guarded(shown, _where(variant, {}), _apply_all, raw, variant.set)
        for point in _grid(sweep):
            config = _guarded(shown, _where(variant, point),
                              lambda: resolve(_apply_all(variant_raw, point), path))
            specs.append(RunSpec(variant.name, point, config))
    _check_overrides_matter(shown, file_raw, pairs, variants, sweep, path, sources or {},
                            specs)
    return Scenario(base.name, base.description, base.seed, path, base,
                    tuple(variants), sweep, tuple(specs), pairs, file_base)


def _check_overrides_matter(shown: str, file_raw: dict, pairs, variants, sweep: dict,
                            path: Path, sources: dict, specs: list) -> None:
    """ScenarioError when an override changes the file's config but no run: every variant's
    run at the first sweep point resolves the same without it (the variants, applied after
    it, set again all it changes: `--request-rate R` where every variant sets the rate of the
    file's own Poisson arrivals). One restating the file's own value is harmless."""
    if not pairs:
        return
    try:
        overridden = resolve(_apply_all(file_raw, dict(pairs)), path)
    except FieldError:  # the file needs a variant's settings (`_base_config`), so whether an
        return  # override restates its own value or a variant undoes it cannot be told
    first = _grid(sweep)[0]
    runs = {spec.variant: spec.config for spec in specs if spec.sweep == first}
    for key, _ in pairs:
        others = dict(pair for pair in pairs if pair[0] != key)
        try:
            without = _apply_all(file_raw, others)
            if resolve(without, path) == overridden:
                continue  # it restates the file's own value: harmless
            same = all(resolve(_apply_all(_apply_all(without, v.set), first), path)
                       == runs[v.name] for v in variants)
        except FieldError:
            continue  # needed: without it the file or a run would not resolve
        if same:
            what = sources.get(key, f"--set {key}")
            names = ", ".join(v.name for v in variants)
            raise ScenarioError(f"{shown}: {what}: changes no run: every variant ({names}) "
                                f"sets again what it sets, after it; drop it, or set it in "
                                f"the variants")


def _check_not_swept(shown: str, pairs, sweep: dict, flag_sweep: set, sources: dict) -> None:
    """ScenarioError when an override sets a key the sweep sets too (the same key, or one
    table holding the other), naming both."""
    for key, _ in pairs:
        for swept in sweep:
            if _overlap(key, swept):
                given = sources.get(key, f"--set {key}")
                where = "--sweep" if swept in flag_sweep else "the scenario's [sweep]"
                raise ScenarioError(f"{shown}: {given} sets {key}, which {where} also sets "
                                    f"({swept} = {sweep[swept]!r}); give one of them")


def _check_not_shadowed(shown: str, pairs, sweep: dict, flag_sweep: set, sources: dict,
                        variants, raw: dict) -> None:
    """ScenarioError when an override or a sweep is written over by every pool of `[cluster]`
    (a pool's `set` applies last, at build time: every value it sets set again, or in a table
    the pool replaces), or when a sweep leaves two or more variants setting nothing else (it
    applies after them, replacing what each sets). An override every variant undoes is
    `_check_overrides_matter`'s."""
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


def _where(variant: Variant, point: dict) -> str:
    """Where in a scenario a run's mistake lies: "variant 'x': sweep k=v: " (either part only
    when the variant sets something, or the run is a sweep point)."""
    where = f"variant {variant.name!r}: " if variant.set else ""
    return where + (f"sweep {_point_text(point)}: " if point else "")


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
        return resolve(_apply_all(raw, alone.set), path)
    except FieldError as with_variant:
        try:
            resolve(raw, path)
            with_variant.in_variant = True  # the file alone resolves: the variant's problem
        except FieldError as alone_error:  # the variant's too, unless the file fails the same
            with_variant.in_variant = str(alone_error) != str(with_variant)
        raise with_variant from None


def _resolved(raw: dict, path: Path,
              alone: Variant | None = None) -> tuple[RunConfig | None, str | None]:
    """(`_base_config`, None) when `raw` resolves, else (None, its error)."""
    try:
        return _base_config(raw, path, alone), None
    except FieldError as exc:
        return None, str(exc)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _parse(path: Path, shown: str) -> dict:
    """The file's TOML table; every way the file can be unreadable is one line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{shown}: cannot read it: {exc.strerror or exc}") from None
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark: not part of the text
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{shown}: not UTF-8 text (byte {exc.start} is "
                            f"{data[exc.start:exc.start + 1].hex()}); a scenario is a TOML "
                            f"file") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{shown}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ScenarioError(f"{shown}: not valid TOML: nested too deeply") from None


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


def _apply_all(raw: dict, settings: dict) -> dict:
    for key, value in settings.items():
        raw = ov.apply(raw, key, value)
    return raw


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
                raise FieldError(f"{key}.{name}", "unknown key (allowed: name, set)")
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


def _sweep(table) -> dict:
    if table is None:
        return {}
    if not isinstance(table, dict) or not table:
        raise FieldError("sweep", "must be a table of dotted key = [values]")
    sweep = ov.flatten(table)
    for key, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise FieldError(f"sweep.{key}", f"must be a non-empty list of values, got {values!r}")
        repeated = next((v for i, v in enumerate(values)
                         if any(isinstance(w, bool) == isinstance(v, bool) and w == v
                                for w in values[:i])), None)
        if repeated is not None:
            raise FieldError(f"sweep.{key}", f"gives {repeated!r} twice (each value is one "
                                             f"sweep point)")
    return sweep


def _grid(sweep: dict) -> list[dict]:
    keys = list(sweep)
    return [dict(zip(keys, values)) for values in itertools.product(*sweep.values())]


def _point_text(point: dict) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in point.items())
