"""Plain-language descriptions of a resolved config, for the report's "What was run" table.

Every run is described from its own resolved config, so what the report says a variant ran is
what it ran: a setting all the runs share is described once; one the variants set differently
says so, and the Variants table gives each variant's own value (`variant_table`).
"""

from __future__ import annotations

from scenarios.overrides import toml_text

from .section_text import cluster_text, engine_text, hardware_text, kernels_text, model_text, \
    replicas_text, scheduler_text, settings_text, slo_text, step_costs, workload_text

# The setting of the "What was run" table a dotted key's first part belongs to.
FIELD_OF = {"seed": "seed", "mode": "mode", "cost": "step costs", "model": "model",
            "cluster": "cluster", "hardware": "hardware", "engine": "engine",
            "scheduler": "scheduler", "workload": "workload", "slo": "SLO (goodput)"}
# The keys whose setting is the kernels row, where a run has one (a cluster of pools gives
# each pool's kernels in its hardware row)
KERNEL_KEYS = ("hardware.kernels", "hardware.framework", "hardware.framework_version")
# The rows of `config_rows`, in order; a run may lack some (a cluster, the hardware model's)
ROWS = ("seed", "mode", "step costs", "model", "cluster", "hardware", "kernels", "engine",
        "scheduler", "workload", "SLO (goodput)")
# What a run without a row has instead
ABSENT = {"cluster": "none: one server", "hardware": "none (not the hardware model)",
          "kernels": "in each pool's hardware"}


def config_rows(config) -> dict[str, str]:
    """{setting: description} of one resolved config, in the report's order. A cluster of
    pools describes each pool's hardware and engine (`hardware.derived["pools"]`)."""
    derived = config.hardware.derived if config.hardware is not None else None
    pooled = config.pool_configs()
    if pooled:  # each pool's own engine (its set applied) and, with the hardware model, GPU
        described = (derived or {}).get("pools") or [None] * len(pooled)
        hardware = "; ".join(f"pool `{pool.name}` ({replicas_text(pool.replicas)}): "
                             f"{hardware_text(own)}; {kernels_text(own)}"
                             for (pool, _), own in zip(pooled, described) if own) or None
        kernels = None  # each pool's with its hardware
        engine = "; ".join(
            f"pool `{pool.name}`: " + engine_text(
                pool_config.engine,
                own["kv_blocks"] if own else pool_config.engine.num_kv_blocks,
                bool(own and own["kv_blocks_auto"]), _ranks(pool_config))
            for (pool, pool_config), own in zip(pooled, described))
    else:
        hardware = hardware_text(derived) if derived else None
        kernels = kernels_text(derived) if derived else None
        engine = engine_text(config.engine, config.engine.num_kv_blocks, _auto(config),
                             _ranks(config))
    return {
        "seed": str(config.seed),
        "mode": config.mode,
        "step costs": step_costs(config),
        "model": model_text(config.model),
        **({"cluster": cluster_text(config)} if config.cluster is not None else {}),
        **({"hardware": hardware} if hardware else {}),
        **({"kernels": kernels} if kernels else {}),
        "engine": engine,
        "scheduler": scheduler_text(config.scheduler),
        "workload": workload_text(config.workload),
        "SLO (goodput)": slo_text(config.slo),
    }


def _ranks(config) -> int:
    """The data-parallel ranks the engine settings are each of."""
    return config.hardware.dp if config.hardware is not None else 1


def _auto(config) -> bool:
    return config.hardware is not None and config.hardware.num_kv_blocks_auto


def first_runs(specs) -> list:
    """One run per variant, in variant order: its first (at the first sweep point, where the
    variants differ only by what they set)."""
    first: dict = {}
    for spec in specs:
        first.setdefault(spec.variant, spec)
    return list(first.values())


def row_text(rows: dict, field: str) -> str:
    """A run's description of `field` (`config_rows`), or what it has instead (`ABSENT`; a
    run without a kernels row has them in each pool's hardware row, or has no hardware
    model)."""
    if field in rows:
        return rows[field]
    if field == "kernels" and "hardware" not in rows:
        return ABSENT["hardware"]
    return ABSENT.get(field, "none")


def field_of(key: str, rows: dict) -> str:
    """The row of the "What was run" table a dotted key sets, for a run described by
    `rows`."""
    if key in KERNEL_KEYS and "kernels" in rows:
        return "kernels"
    return FIELD_OF.get(key.split(".")[0], key)


def differing_settings(specs) -> list[str]:
    """The settings the variants set differently (compared at the first sweep point), in
    `ROWS` order; a row some variants lack (a cluster, a kernels row) is one."""
    described = [config_rows(spec.config) for spec in first_runs(specs)]
    fields = {field for rows in described for field in rows}
    return [field for field in ROWS if field in fields
            and len({row_text(rows, field) for rows in described}) > 1]


def varying_by_sweep(specs) -> list[str]:
    """The settings whose description changes from one sweep point to another in some
    variant (what a swept key sets, and what follows from it: a GPU's KV blocks)."""
    seen: dict = {}
    for spec in specs:
        for field, text in config_rows(spec.config).items():
            seen.setdefault((spec.variant, field), set()).add(text)
    fields = {field for (_, field), texts in seen.items() if len(texts) > 1}
    return [field for field in ROWS if field in fields]


def what_was_run(scenario, specs) -> list[list[str]]:
    """[setting, description] rows for the runs `specs` of `scenario`."""
    runs = first_runs(specs)
    shared = config_rows(runs[0].config)
    differing = differing_settings(specs)
    swept: dict = {}
    for key in scenario.sweep:
        swept.setdefault(field_of(key, shared), []).append(f"`{key}`")
    varying = varying_by_sweep(specs) if scenario.sweep else []
    rows = [["scenario", f"{scenario.name} (`{scenario.source}`)"]]
    for field in ROWS:
        if field not in shared and field not in differing:
            continue
        text = row_text(shared, field)
        if field in differing:
            text = "differs by variant: see Variants below"
        if field in swept:
            text += (f" (at the first sweep point; {', '.join(swept[field])} is swept: see "
                     f"Sweep below)")
        elif field in varying:
            text += " (at the first sweep point; it changes with the sweep: see Sweep below)"
        rows.append([field, text])
    rows.append(["runs", _runs_text(len(specs), len(scenario.variants), bool(scenario.sweep))])
    if scenario.overrides:
        rows.append(["overrides (--set)", ", ".join(f"`{k} = {toml_text(v)}`"
                                                    for k, v in scenario.overrides)])
    return rows


def variant_table(scenario, specs) -> tuple[list[str], list[list[str]]]:
    """(header, rows): each variant, what it sets, and its own value of every setting the
    variants set differently."""
    differing = differing_settings(specs)
    varying = set(varying_by_sweep(specs)) if scenario.sweep else set()
    sets = {variant.name: variant.set for variant in scenario.variants}
    rows = []
    for spec in first_runs(specs):
        described = config_rows(spec.config)
        rows.append([spec.variant, settings_text(sets.get(spec.variant, {}))]
                    + [row_text(described, field) + (" (at the first sweep point)"
                                                     if field in varying else "")
                       for field in differing])
    return ["variant", "sets", *differing], rows


# The rows that say more than the keys set (a model's shape, a GPU's memory and KV blocks)
DERIVED_ROWS = ("model", "cluster", "hardware", "kernels", "engine")


def sweep_table(scenario, specs) -> tuple[list[str], list[list[str]]] | None:
    """(header, rows): each run's own value of every setting that changes with the sweep,
    but the rows that only restate a swept key (a swept rate's workload row); the rows that
    say more than their keys (`DERIVED_ROWS`: a swept model's shape, a swept GPU's memory and
    KV blocks) are listed whatever is swept, so that a figure only a later sweep point has is
    in the report. None when nothing is left."""
    first = config_rows(specs[0].config)
    swept = {field_of(key, first) for key in scenario.sweep}
    varying = [field for field in (varying_by_sweep(specs) if scenario.sweep else [])
               if field in DERIVED_ROWS or field not in swept]
    if not varying:
        return None
    rows = [[spec.label] + [row_text(config_rows(spec.config), field) for field in varying]
            for spec in specs]
    return ["run", *varying], rows


def _runs_text(num_runs: int, num_variants: int, swept: bool) -> str:
    variants = f"{num_variants} variant{'s' if num_variants > 1 else ''}"
    if not swept:
        return f"{num_runs} ({variants})"
    return f"{num_runs} ({variants} x {num_runs // num_variants} sweep points)"
