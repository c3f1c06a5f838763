"""Keys a run reads only under another key's setting: the linear cost model's coefficients, a
fitted profile's file, static batching's batch size and timeout. Given where no run
of a scenario reads them (in the file, an override, a variant or a sweep), they are refused in
one line, never silently ignored: `cost.prefill_token_s` under the fitted profile changes
nothing, and a user who wrote it expects it to.
"""

from __future__ import annotations

from .effects import given_by, overlap, swept_writes, writes
from .errors import ScenarioError

# dotted key -> (the key whose setting it is read under, that setting)
READ_WITH = {
    **{f"cost.{name}": ("cost.model", "linear") for name in
       ("step_overhead_s", "prefill_token_s", "decode_seq_s", "context_token_s")},
    "cost.profile": ("cost.model", "profile"),
    "scheduler.max_batch_size": ("scheduler.policy", "static"),
    "scheduler.batch_timeout_s": ("scheduler.policy", "static"),
}


def check_keys_read(shown: str, file_raw: dict, pairs, sources: dict, variants, sweep: dict,
                    flag_sweep: set, specs) -> None:
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
        where = "--sweep: " if swept in flag_sweep else "[sweep]: "
        given += [(where, key, specs) for key in swept_writes(swept, values)]
    given = [(where, key, runs) for where, key, runs in given
             if key in READ_WITH and not any(overlap(READ_WITH[key][0], setting)
                                             for setting in settings)]
    given += [(given_by([(key, value)], sources), written, specs)
              for key, value in pairs for written in writes({key: value})]
    for where, key, runs in given:
        if key in READ_WITH and runs and not any(reads(spec.config, key) for spec in runs):
            setting, value = READ_WITH[key]
            actual = sorted({repr(setting_of(spec.config, setting)) for spec in runs})
            raise ScenarioError(f"{shown}: {where}{key}: read with {setting} = {value!r} only, "
                                f"and no run has it ({setting} is {', '.join(actual)}); drop "
                                f"it, or set {setting} = {value!r}")


def reads(config, key: str) -> bool:
    """Whether a run of `config` (one of its pools' servers, in a cluster of pools) reads
    `key` of READ_WITH."""
    setting, value = READ_WITH[key]
    servers = [pooled for _, pooled in config.pool_configs()] or [config]
    return any(setting_of(server, setting) == value for server in servers)


def setting_of(config, dotted: str):
    """The value of a dotted key of a resolved config ("cost.model")."""
    value = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value
