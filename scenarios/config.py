"""The resolved configuration of one run, typed: `RunConfig` and its sections, frozen dataclasses
whose fields are the scenario file's keys (docs/scenarios/format.md), every default filled in
(`defaults.py` states each default once) and every value checked.

    config = scenarios.load("kv-pressure").base        # a RunConfig
    config.engine.num_kv_blocks, config.workload.arrival.describe()
    config.updated({"engine.num_kv_blocks": 64})      # a changed copy, as `--set` would give

The workload's processes and distributions are classes of their own (`arrival.py`,
`lengths.py`). A config converts to the plain nested dict of its keys and back (`to_dict`,
`RunConfig.from_dict`), which is how a dotted key changes a resolved config (`updated`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace

from engine.model import ModelConfig
from engine.scheduler_config import SchedulerConfig

from .model_spec import ModelSpec
from .overrides import apply
from .arrival import ArrivalProcess, arrival_of
from .lengths import Choice, Fixed, LengthDist, length_of, priority_of


@dataclass(frozen=True)
class EngineSettings:
    block_size: int
    num_kv_blocks: int | str  # "auto": from the GPU's memory (cost.model "hardware")
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_prefix_caching: bool
    swap_blocks: int


@dataclass(frozen=True)
class SchedulerSettings:
    policy: str
    queue: str
    chunked_prefill: bool
    max_batch_size: int
    batch_timeout_s: float
    preemption: str
    batch_wait_timeout_iters: int = 0  # TensorRT-LLM's batch waiting (engine.scheduler_config)
    batch_wait_max_tokens_ratio: float = 0.0
    capacity_scheduler_policy: str = "max_utilization"  # guaranteed_no_evict, new_token_ratio
    enable_mixed_chunk: bool = True  # False: prefills run alone (SGLang's default)
    scheduler_recv_interval: int = 1  # SGLang's: new requests read every that many decode steps

    def engine_config(self, engine: EngineSettings, max_seq_len: int) -> SchedulerConfig:
        """The engine's `SchedulerConfig` of these settings and the engine's limits."""
        return SchedulerConfig(max_num_seqs=engine.max_num_seqs,
                               max_num_batched_tokens=engine.max_num_batched_tokens,
                               max_seq_len=max_seq_len,
                               **{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class CostSettings:
    model: str  # profile, live, linear or hardware
    profile: str
    jitter: bool
    swap_bandwidth_gbs: float
    step_overhead_s: float  # the linear model's coefficients (model = "linear")
    prefill_token_s: float
    decode_seq_s: float
    context_token_s: float


@dataclass(frozen=True)
class HardwareSettings:
    gpu: str | dict  # a catalog id, or a table defining a GPU
    tp: int
    dtype: str
    gpu_memory_utilization: float
    step_overhead_s: float
    seq_overhead_s: float
    prefill_overhead_s: float = 0.0  # a step with a prefill, beyond its kernels (GPU waiting)
    framework: str = "vllm"  # whose measured kernels: vllm, sglang or trtllm
    framework_version: str | None = None  # None: the newest the tables have
    kernels: str | None = None  # "measured", "roofline"; None: measured where tables exist
    cost_per_hour: float | None = None  # dollars a GPU-hour (None: the catalog's)
    ep: int = 1  # expert parallelism: 1 or tp x dp
    dp: int = 1  # attention data-parallel ranks (models with experts), tp GPUs each
    kv_dtype: str = "auto"  # the KV cache's dtype ("auto": vLLM's, the activations')
    activation_scheme: str = "static"  # fp8 scales: static, dynamic, block; mxfp4's: mxfp8
    moe_backend: str = "auto"  # the fused MoE kernel: auto, marlin or triton
    async_scheduling: bool = True  # the server's own time overlaps the GPU's (one step ahead)
    # What the hardware came to, filled in for reports (`sim.build.resolved_spec`)
    derived: dict | None = None
    num_kv_blocks_auto: bool = False


@dataclass(frozen=True)
class SloSettings:
    """Each limit in seconds, or None: no SLO on that metric."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def limits(self) -> dict:
        """{metric key: limit or None}."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def any(self) -> bool:
        return any(limit is not None for limit in self.limits().values())


@dataclass(frozen=True)
class TraceSettings:
    name: str | None  # a shipped trace, or None for a file
    path: str  # absolute (a shipped trace's packaged file)
    format: str
    time_scale: float
    max_requests: int | None
    tokenizer: str | None = None  # a ShareGPT file's only
    shuffle: bool | None = None
    notes: tuple = ()  # what the file held that a user should know (`sim.build.resolved_spec`)


@dataclass(frozen=True)
class SessionSettings:
    conversations: int
    turns: int | LengthDist
    system_prompt_tokens: int
    think_time_s: float

    @property
    def turn_counts(self) -> LengthDist:
        """The distribution of turns a conversation has (a fixed count as `Fixed`)."""
        return Fixed(self.turns) if isinstance(self.turns, int) else self.turns


@dataclass(frozen=True)
class WorkloadSettings:
    num_requests: int | None  # None: a trace's requests
    max_seconds: float | None  # None: every request arrives
    max_concurrency: int | None  # None: no cap on requests in flight
    warmup_s: float
    arrival: ArrivalProcess
    prompt_tokens: LengthDist | None
    output_tokens: LengthDist | None
    priority: Choice | None
    trace: TraceSettings | None
    sessions: SessionSettings | None

    @property
    def count_key(self) -> str:
        """The dotted key that sets how many requests are sent (what --num-prompts sets): the
        request count, a trace's max_requests, or the number of conversations."""
        if self.trace is not None:
            return "workload.trace.max_requests"
        if self.sessions is not None:
            return "workload.sessions.conversations"
        return "workload.num_requests"


@dataclass(frozen=True)
class Pool:
    name: str
    replicas: int
    set: dict  # dotted key -> value, applied to the scenario's config


@dataclass(frozen=True)
class ClusterSettings:
    router: str
    report_delay_s: float
    replicas: int | None = None
    pools: tuple[Pool, ...] = ()
    prefill_replicas: int = 0  # > 0: prefill/decode disaggregation
    decode_replicas: int = 0
    decode_router: str | None = None
    kv_transfer_gbps: float | None = None  # None: the GPU catalog's interconnect
    kv_transfer_latency_s: float | None = None

    @property
    def size(self) -> int:
        """How many replicas the cluster has."""
        if self.pools:
            return sum(pool.replicas for pool in self.pools)
        if self.prefill_replicas:
            return self.prefill_replicas + self.decode_replicas
        return self.replicas


@dataclass(frozen=True)
class SearchSettings:
    target: float
    tolerance: float
    rate: dict  # {"low": requests/s, "high": requests/s}
    grid: dict = field(default_factory=dict)  # dotted key -> values


@dataclass(frozen=True)
class RunConfig:
    name: str
    description: str
    seed: int
    mode: str
    model: ModelConfig | ModelSpec  # ModelSpec with cost.model = "hardware"
    engine: EngineSettings
    scheduler: SchedulerSettings
    cost: CostSettings
    slo: SloSettings
    workload: WorkloadSettings
    hardware: HardwareSettings | None = None  # with cost.model = "hardware"
    cluster: ClusterSettings | None = None
    search: SearchSettings | None = None

    @property
    def on_hardware(self) -> bool:
        return self.cost.model == "hardware"

    def with_mode(self, mode: str) -> "RunConfig":
        return replace(self, mode=mode)

    def updated(self, changes: dict) -> "RunConfig":
        """This config with dotted keys set, e.g. {"engine.num_kv_blocks": 64}, as `--set`
        sets them (a table naming its kind replaces the old one)."""
        table = self.to_dict()
        for key, value in changes.items():
            table = apply(table, key, value)
        return RunConfig.from_dict(table)

    def pool_configs(self) -> list[tuple["Pool", "RunConfig"]]:
        """Each pool of `cluster.pools` with the config its replicas run (its `set` applied);
        [] without pools."""
        pools = self.cluster.pools if self.cluster is not None else ()
        return [(pool, self.updated(pool.set)) for pool in pools]

    def to_dict(self) -> dict:
        """The plain nested dict of this config's keys (what `from_dict` reads back)."""
        return as_table(self)

    @classmethod
    def from_dict(cls, config: dict) -> "RunConfig":
        """A resolved config dict (every key checked and present) as a `RunConfig`."""
        hardware = config.get("hardware")
        on_hardware = config["cost"]["model"] == "hardware"
        return cls(
            name=config["name"], description=config["description"], seed=config["seed"],
            mode=config["mode"],
            model=ModelSpec(**config["model"]) if on_hardware else ModelConfig(**config["model"]),
            engine=EngineSettings(**config["engine"]),
            scheduler=SchedulerSettings(**config["scheduler"]),
            cost=CostSettings(**config["cost"]),
            slo=SloSettings(**config["slo"]),
            workload=_workload(config["workload"]),
            hardware=HardwareSettings(**hardware) if on_hardware else None,
            cluster=_cluster(config["cluster"]) if config.get("cluster") else None,
            search=SearchSettings(**config["search"]) if config.get("search") else None)


def _workload(table: dict) -> WorkloadSettings:
    trace, sessions = table.get("trace"), table.get("sessions")
    lengths = {name: None if table.get(name) is None else length_of(table[name],
                                                                     f"workload.{name}")
               for name in ("prompt_tokens", "output_tokens")}
    return WorkloadSettings(
        num_requests=table.get("num_requests"), max_seconds=table.get("max_seconds"),
        max_concurrency=table.get("max_concurrency"), warmup_s=table.get("warmup_s", 0.0),
        arrival=arrival_of(table.get("arrival") or {"process": "trace"}), **lengths,
        priority=None if table.get("priority") is None else priority_of(table["priority"]),
        trace=None if trace is None else TraceSettings(**{k: tuple(v) if k == "notes" else v
                                                          for k, v in trace.items()}),
        sessions=None if sessions is None else _sessions(sessions))


def _sessions(table: dict) -> SessionSettings:
    turns = table["turns"]
    if isinstance(turns, dict):
        turns = length_of(turns, "workload.sessions.turns")
    return SessionSettings(**(table | {"turns": turns}))


def _cluster(table: dict) -> ClusterSettings:
    pools = tuple(Pool(p["name"], p["replicas"], dict(p.get("set", {})))
                  for p in table.get("pools", ()))
    return ClusterSettings(**(table | {"pools": pools}))


def as_table(value):
    """A config value as plain data, the keys a scenario file gives: dataclasses as dicts (a
    process or a distribution with its tag; the NumPy model without its weights' seed), tuples
    as lists."""
    if isinstance(value, (ArrivalProcess, LengthDist, Choice)):
        return value.to_dict()
    if is_dataclass(value):
        return {f.name: as_table(getattr(value, f.name)) for f in fields(value)
                if f.name != "seed" or not isinstance(value, ModelConfig)}
    if isinstance(value, (list, tuple)):
        return [as_table(item) for item in value]
    if isinstance(value, dict):
        return {key: as_table(item) for key, item in value.items()}
    return value
