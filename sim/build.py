"""Building a server from a resolved config: the engine's scheduler and block manager, the cost
model, the executor and the sequences it serves. The runner, the cluster, the HTTP server,
profiling and validation all build through here (docs/architecture.md, "From a scenario file to
a chart").

`build_server(config, mode, streams)` is the one entry point: in simulate mode a
`CostModelExecutor` on the config's cost model, else the real `NumpyExecutor`.
`sequence_maker` makes each request's `Sequence` for that server.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from engine.model import ModelConfig, init_params
from engine.prefix_cache import make_block_manager
from engine.scheduler import Scheduler
from engine.sequence import SamplingParams, Sequence
from engine.swap import SwapSpace
from scenarios import RunConfig
from scenarios.config import CostSettings

from .costs import CostModelExecutor, cost_model
from .costs.jitter import SpeedProcess
from .fastpath import SteadyScheduler
from .workloads import SessionTokens, Workload
from .workloads.block_keys import own_block_keys

MODES = ("simulate", "cosimulate", "serve")
# Real-engine runs sample with temperature 1 and ignore EOS, so every request generates exactly
# its `output_tokens` (as vLLM's benchmarks do).
REAL_SAMPLING = SamplingParams(temperature=1.0)


class Server(NamedTuple):
    """One engine of a config: its scheduler, its executor and (on the NumPy engine) the
    model it runs."""

    scheduler: Scheduler
    executor: object  # a CostModelExecutor or the real NumpyExecutor
    model: ModelConfig | None


def run_mode(config: RunConfig) -> str:
    """The mode a config runs in (simulate with cost.model "live" cosimulates)."""
    mode = config.mode
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "simulate" and config.cost.model == "live":
        mode = "cosimulate"
    return mode


def build_server(config: RunConfig, mode: str, streams: dict, cost=None, jitter_rng=None,
                 steady: bool = False, params=None) -> Server:
    """The server of one engine of a resolved config: in simulate mode a `CostModelExecutor`
    (`cost`: instead of the config's cost model; `jitter_rng`: instead of the seed's "jitter"
    stream), else the real `NumpyExecutor`. `steady`: a simulation's scheduler counts its
    steady decoders in bulk (`sim.fastpath.SteadyScheduler`; continuous batching with mixed
    chunks, under a capacity policy other than SGLang's). `params`: the real engine's weights,
    when already built."""
    hardware = hardware_of(config)
    model = None if hardware is not None else config.model
    simulated = mode == "simulate"
    max_seq_len, blocks = (model.max_seq_len, None) if hardware is None else \
        (hardware.arch.max_seq_len, hardware.kv_blocks)
    scheduler = build_scheduler(config, max_seq_len, blocks, steady=steady and simulated,
                                state_blocks=hardware.state_blocks if hardware else 0)
    if mode != "simulate":
        executor = numpy_executor(model, scheduler, streams["sampling"], params)
        return Server(scheduler, executor, model)
    cost = cost or build_cost(config, hardware)
    speed = speed_process(config.cost, cost, jitter_rng or streams["jitter"])
    executor = CostModelExecutor(cost, speed, scheduler.block_manager.block_size,
                                 swap_block_s(config, cost),
                                 every_step_decodes=scheduler.config.enable_mixed_chunk)
    return Server(scheduler, executor, model)


def build_scheduler(config: RunConfig, max_seq_len: int, num_kv_blocks: int | None = None,
                    prefix_caching: bool | None = None, steady: bool = False,
                    state_blocks: int = 0) -> Scheduler:
    """The engine's scheduler and block manager for a resolved config (`num_kv_blocks`: the
    derived count of an "auto" config; `prefix_caching`: instead of the config's
    `engine.enable_prefix_caching`; `steady`: a `sim.fastpath.SteadyScheduler` under continuous
    batching with mixed chunks, under a capacity policy other than SGLang's, for simulated
    sequences; `state_blocks`: the KV blocks a running sequence's linear-attention state takes,
    `HardwareSetup.state_blocks`). With attention data-parallel ranks (`hardware.dp`) the
    blocks and the engine's limits are one rank's, pooled over the ranks."""
    engine = config.engine
    if prefix_caching is None:
        prefix_caching = engine.enable_prefix_caching
    ranks = config.hardware.dp if config.on_hardware else 1
    block_manager = make_block_manager((num_kv_blocks or engine.num_kv_blocks) * ranks,
                                       engine.block_size, prefix_caching, state_blocks)
    scheduler_config = config.scheduler.engine_config(engine, max_seq_len)
    if ranks > 1:
        scheduler_config = replace(scheduler_config, data_parallel_size=ranks)
    kind = SteadyScheduler if steady and scheduler_config.policy == "continuous" \
        and scheduler_config.enable_mixed_chunk \
        and not scheduler_config.reserves_new_tokens else Scheduler
    swap = SwapSpace(engine.swap_blocks) if engine.swap_blocks else None
    return kind(scheduler_config, block_manager, swap)


def numpy_executor(model: ModelConfig, scheduler: Scheduler, rng, params=None):
    """The real engine's executor of `model` (its weights `params`, else new ones) over the
    scheduler's KV blocks (and swap space)."""
    from engine.executor import NumpyExecutor

    swap = scheduler.swap
    params = params if params is not None else init_params(model)
    return NumpyExecutor(params, scheduler.block_manager, rng=rng,
                         swap_blocks=swap.num_blocks if swap is not None else 0)


def speed_process(cost_config: CostSettings, cost, rng) -> SpeedProcess | None:
    """The machine's speed process when `cost.jitter` is on (the profile's measured jitter)."""
    if not cost_config.jitter:
        return None
    if cost.jitter is None:
        raise ValueError(f"cost.jitter = true needs a profile with a jitter measurement; "
                         f"{cost.source} has none (profile again with `servesim profile`, or "
                         f"set cost.jitter = false)")
    return SpeedProcess(cost.jitter, rng)


def swap_block_s(config: RunConfig, cost) -> float:
    """Simulated seconds to copy one KV block to or from host memory (swap preemption): the
    cost model's own (a hardware model's: over the GPU's host link), else a memcpy of the NumPy
    engine's float32 block at cost.swap_bandwidth_gbs."""
    block_size = config.engine.block_size
    own = cost.swap_block_s(block_size)
    if own is not None:
        return own
    model = config.model
    block_bytes = 2 * model.n_layers * block_size * model.d_model * 4  # K and V
    return block_bytes / (config.cost.swap_bandwidth_gbs * 1e9)


def hardware_of(config: RunConfig):
    """The `sim.costs.hardware.HardwareSetup` of a config whose cost.model is "hardware"
    (its model, GPU, memory plan and KV blocks), else None."""
    if not config.on_hardware:
        return None
    from .costs.hardware import hardware_setup

    return hardware_setup(config)


def build_cost(config: RunConfig, hardware=None):
    """The cost model a resolved simulate config selects."""
    if config.on_hardware:
        from .costs.hardware import HardwareCost

        return HardwareCost(hardware or hardware_of(config), config.hardware.step_overhead_s,
                            config.hardware.seq_overhead_s,
                            async_scheduling=config.hardware.async_scheduling,
                            prefill_overhead_s=config.hardware.prefill_overhead_s)
    return cost_model(config.cost, config.model, config.engine.block_size)


def resolved_spec(spec):
    """A run's spec as run: with cost.model "hardware", its config also says what the hardware
    came to (`hardware.derived`: the model, GPU, memory and the KV blocks "auto" gave; with
    `cluster.pools`, each pool's too, under "pools"); with a
    trace, what its file held that a user should know (`workload.trace.notes`)."""
    from scenarios.model_spec import ModelSpec
    from scenarios.defaults import (LINEAR_MODEL_KEYS, MLA_MODEL_KEYS, MOE_MODEL_KEYS,
                                    SPARSE_MODEL_KEYS, WINDOW_MODEL_KEYS)

    from .workloads.traces import trace_notes

    config = spec.config
    pooled = config.pool_configs()
    # a cluster of pools runs its pools' hardware, never the base's (which may not even fit):
    # the model and KV blocks as run are the first pool's, each pool's in `derived["pools"]`
    hardware = hardware_of(pooled[0][1] if pooled else config)
    trace = config.workload.trace
    notes = trace_notes(trace) if trace is not None else []
    if hardware is None and not notes:
        return spec
    if notes:
        config = replace(config, workload=replace(config.workload,
                                                  trace=replace(trace, notes=tuple(notes))))
    if hardware is not None:
        arch = hardware.arch
        config = replace(
            config, engine=replace(config.engine, num_kv_blocks=hardware.kv_blocks),
            model=ModelSpec(name=arch.name, config=config.model.config, **{
                k: getattr(arch, k) for k in ("n_layers", "d_model", "n_heads", "n_kv_heads",
                                              "d_ff", "vocab_size", "max_seq_len")},
                **{k: getattr(arch, k) for k in (*MOE_MODEL_KEYS, *MLA_MODEL_KEYS,
                                                 *SPARSE_MODEL_KEYS, *WINDOW_MODEL_KEYS,
                                                 *LINEAR_MODEL_KEYS, "attn_gate")
                   if getattr(arch, k)},
                **({"state_dtype": arch.state_dtype} if arch.linear_layers else {})),
            hardware=replace(config.hardware, derived=hardware.describe() | _pools(pooled),
                             num_kv_blocks_auto=spec.config.engine.num_kv_blocks == "auto"))
    return replace(spec, config=config)


def _pools(pooled: list) -> dict:
    """{"pools": [each pool's name, replicas and hardware (`HardwareSetup.describe`)]} of a
    cluster of pools (`RunConfig.pool_configs`), whose replicas run their pool's hardware, not
    the base's; else {}."""
    return {"pools": [{"pool": pool.name, "replicas": pool.replicas,
                       "kv_blocks_auto": pool_config.engine.num_kv_blocks == "auto",
                       **hardware_of(pool_config).describe()}
                      for pool, pool_config in pooled]} if pooled else {}


def sequence_maker(workload: Workload, mode: str, streams: dict, model, block_manager):
    """`sequence_factory` for a run's mode: simulated sequences carry the workload's block
    keys (with prefix caching), real ones random token ids."""
    if mode == "simulate":
        return sequence_factory(workload, block_size=block_manager.block_size
                                if block_manager.prefix_caching else None)
    return sequence_factory(workload, streams["tokens"], model.vocab_size)


def sequence_factory(workload: Workload, token_rng=None, vocab_size: int | None = None,
                     block_size: int | None = None):
    """(index, arrival_s) -> the Sequence of request `index`; with `token_rng`, its prompt gets
    random token ids (drawn when the request is created, so in request order; a conversation's
    turn extends its previous turn's ids, `SessionTokens`). With `block_size` (a simulated run
    with prefix caching), it carries the workload's block keys (`Workload.block_keys`) as its
    `block_hashes`, or keys of its own where the workload shares no prefix: as a real
    request's random tokens, its blocks match no other request's, but it finds its own again
    when it is readmitted after a preemption by recompute."""
    prompts, outputs, priorities = workload.prompt_tokens, workload.output_tokens, workload.priority
    keys = None if block_size is None else workload.block_keys or (
        lambda index, size: own_block_keys(index, int(prompts[index] + outputs[index]) // size))

    def new(index: int, arrival_s: float, ids: list | None = None) -> Sequence:
        return Sequence(index, int(prompts[index]), int(outputs[index]), prompt_token_ids=ids,
                        priority=int(priorities[index]), arrival_s=arrival_s,
                        sampling=REAL_SAMPLING, ignore_eos=True, seq_id=index,
                        block_hashes=None if keys is None else keys(index, block_size))

    if token_rng is None:
        return new
    if workload.sessions is not None:
        return SessionTokens(workload.sessions, token_rng, vocab_size, new).make

    def make(index: int, arrival_s: float) -> Sequence:
        if workload.prompt_ids is not None:  # a trace's shared prefixes
            return new(index, arrival_s, workload.prompt_ids(index, vocab_size, token_rng))
        size = int(prompts[index])
        return new(index, arrival_s, token_rng.integers(0, vocab_size, size=size).tolist())

    return make
