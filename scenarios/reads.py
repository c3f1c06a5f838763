"""Keys a run reads only under another key's setting: the linear cost model's coefficients, a
fitted profile's file, static batching's batch size and timeout, swap preemption's host blocks
and copy bandwidth (`READ_WITH`), and whether a run reads one (`reads`). Given where no run
of a scenario reads them (in the file, an override, a variant or a sweep), they are refused in
one line, never silently ignored (`effects.check_keys_read`): `cost.prefill_token_s` under the
fitted profile changes nothing, and a user who wrote it expects it to.
"""

from __future__ import annotations

from dataclasses import replace

# dotted key -> (the key whose setting it is read under, that setting)
READ_WITH = {
    **{f"cost.{name}": ("cost.model", "linear") for name in
       ("step_overhead_s", "prefill_token_s", "decode_seq_s", "context_token_s")},
    "cost.profile": ("cost.model", "profile"),
    "scheduler.max_batch_size": ("scheduler.policy", "static"),
    "scheduler.batch_timeout_s": ("scheduler.policy", "static"),
    "engine.swap_blocks": ("scheduler.preemption", "swap"),
    "cost.swap_bandwidth_gbs": ("scheduler.preemption", "swap"),
}
# dotted key -> (a key whose setting makes it unread even so, that setting, what is read then)
UNREAD_WITH = {
    "cost.swap_bandwidth_gbs": ("cost.model", "hardware", "the GPU's host_bandwidth_gbs"),
}


def reads(config, key: str) -> bool:
    """Whether a run of `config` (one of its pools' servers, in a cluster of pools) reads
    `key` of READ_WITH."""
    setting, value = READ_WITH[key]
    other, unread, _ = UNREAD_WITH.get(key, (None, None, None))
    servers = [pooled for _, pooled in config.pool_configs()] or [config]
    return any(setting_of(server, setting) == value
               and (other is None or setting_of(server, other) != unread) for server in servers)


def unread_cleared(config):
    """`config` with each key of READ_WITH that its runs do not read set to None: two configs
    that differ only there run alike (`effects.check_overrides_matter`)."""
    for key in READ_WITH:
        if not reads(config, key):
            section, name = key.split(".")
            config = replace(config, **{section: replace(getattr(config, section),
                                                         **{name: None})})
    return config


def setting_of(config, dotted: str):
    """The value of a dotted key of a resolved config ("cost.model")."""
    value = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value
