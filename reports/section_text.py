"""One line of plain language per section of a resolved config (model, cluster, hardware and
kernels, engine, scheduler, workload, SLO, step costs), the cells of the report's "What was run"
table (`describe.config_rows`) and of `servesim search`'s report.
"""

from __future__ import annotations

from pathlib import Path

from scenarios.defaults import KV_TRANSFER_GBPS
from scenarios.overrides import toml_text


def engine_text(engine, blocks, auto: bool, ranks: int = 1) -> str:
    """The KV blocks (`blocks`: derived where "auto"; still "auto" in a config not resolved
    against its GPU, a benchmark of a remote server's), batch limits and prefix caching: each
    data-parallel rank's where there are `ranks`."""
    kv = f"{blocks:,} KV blocks of {engine.block_size} tokens" if isinstance(blocks, int) \
        else f"KV blocks of {engine.block_size} tokens: {blocks!r} (from the GPU's memory)"
    text = (kv + (" (derived from the GPU's memory)" if auto else "")
            + f", max_num_seqs {engine.max_num_seqs}, "
            f"max_num_batched_tokens {engine.max_num_batched_tokens}, prefix caching "
            + ("on" if engine.enable_prefix_caching else "off"))
    return f"each of {ranks} data-parallel ranks: {text}" if ranks > 1 else text


def cluster_text(config) -> str:
    """The replicas, their pools or roles, the routers and the KV link."""
    cluster = config.cluster
    late = (f"; load reported {cluster.report_delay_s * 1e3:g} ms late"
            if cluster.report_delay_s else "")
    if cluster.prefill_replicas:
        if cluster.kv_transfer_gbps:
            link = f"{cluster.kv_transfer_gbps:g} GB/s"
        elif config.on_hardware:
            link = "the GPU's interconnect"
        else:
            link = f"{KV_TRANSFER_GBPS:g} GB/s (the default)"
        if cluster.kv_transfer_latency_s is not None:
            link += f" after {cluster.kv_transfer_latency_s * 1e3:g} ms"
        return (f"prefill/decode disaggregation: {replicas_text(cluster.prefill_replicas)} "
                f"prefill behind a `{cluster.router}` router, "
                f"{replicas_text(cluster.decode_replicas)} decode behind a "
                f"`{cluster.decode_router}` router, the KV cache moved over {link}{late}")
    if cluster.pools:
        pools = ", ".join(f"`{pool.name}` ({pool.replicas})" for pool in cluster.pools)
        below = "hardware and engine" if config.on_hardware else "engine"
        return (f"{replicas_text(cluster.size)} in pools {pools} behind a `{cluster.router}` "
                f"router (each pool's {below} below){late}")
    return f"{replicas_text(cluster.replicas)} of one server behind a `{cluster.router}` " \
        f"router{late}"


def replicas_text(count: int) -> str:
    return f"{count} replica{'s' * (count != 1)}"


def model_text(model) -> str:
    """The model's name (a catalog model) and shape: its experts, latent attention, sliding
    window and linear attention where it has them."""
    kv_heads, name = getattr(model, "n_kv_heads", None), getattr(model, "name", None)
    if model.vocab_size is None:  # a real model not resolved: a bench's (the server's is run)
        return f"`{name or model.config}`"

    def get(key: str):  # keys only a hardware model has
        return getattr(model, key, None)

    shape = (f"vocab {model.vocab_size}, d_model {model.d_model}, "
             f"{model.n_layers} layers, {model.n_heads} heads"
             + (f" ({kv_heads} key-value heads)" if kv_heads not in (None, model.n_heads)
                and not get("kv_lora_rank") else "")
             + (f", latent attention (kv_lora_rank {get('kv_lora_rank')})"
                if get("kv_lora_rank") else "")
             + (f", sparse attention ({get('index_topk')} keys a query)"
                if get("index_topk") else "")
             + f", d_ff {model.d_ff}"
             + (f", {get('n_experts')} experts of width {get('moe_d_ff')}, "
                f"{get('experts_per_token')} a token" if get("n_experts") else "")
             + (f", {get('sliding_layers')} layers with a {get('sliding_window')}-token window"
                if get("sliding_window") else "")
             + (f", {get('linear_layers')} linear-attention layers ({get('linear_v_heads')} "
                f"state matrices of {get('linear_k_dim')} x {get('linear_v_dim')})"
                if get("linear_layers") else "")
             + f", max_seq_len {model.max_seq_len}")
    return f"`{name}`: {shape}" if name else shape


def hardware_text(derived: dict) -> str:
    """The GPU, its parallel layout (TP, attention DP, EP), dtypes and the memory per GPU
    (`hardware.derived`); where the operators' times come from is `kernels_text`'s."""
    tp, ranks = derived["tp"], derived.get("dp", 1)
    layout = f"TP {tp}"
    if ranks > 1:  # attention data parallelism: each rank its own requests and KV cache
        layout += f" x DP {ranks} (attention data-parallel ranks of {tp} GPU{'s' * (tp > 1)})"
    if derived["ep"] > 1:
        layout += f", EP {derived['ep']}"
    scheme = derived.get("activation_scheme")
    scales = " (block-scaled)" if scheme == "block" else \
        f" ({scheme} activation scales)" if scheme else ""
    return (f"{tp * ranks} x {derived['gpu_name']} (`{derived['gpu']}`): {layout}, "
            f"{derived['dtype']} weights{scales}, {derived['kv_dtype']} KV cache; per GPU: "
            f"{derived['weights_gib_per_gpu']:.1f} GiB of "
            f"weights, {derived['kv_gib_per_gpu']:.1f} GiB of KV cache "
            f"({derived['kv_tokens']:,} tokens, {derived['kv_bytes_per_token_per_gpu'] / 1024:g}"
            f" KiB a token)"
            + (f", {derived['states_gib_per_gpu']:.1f} GiB of linear-attention states"
               if derived.get("states_gib_per_gpu") else "")
            + (f", a running sequence's linear-attention state taking "
               f"{derived['state_blocks']:,} of its blocks" if derived.get("state_blocks")
               else ""))


def kernels_text(derived: dict) -> str:
    """Which operators were costed from measured kernels and which by the roofline."""
    sources = derived.get("kernel_sources") or {}
    measured = [op for op, source in sources.items() if source == "measured"]
    if not measured:
        return "every operator costed by the roofline"
    roofline = [op for op, source in sources.items() if source != "measured"]
    experts = derived.get("moe_kernel")  # where `moe_backend` chose the experts' kernel
    return (f"{derived['kernels']}: " + ", ".join(f"`{op}`" for op in measured)
            + (f" (`moe_experts` on {experts})" if experts else "")
            + (", roofline for " + ", ".join(f"`{op}`" for op in roofline) if roofline else "")
            + "; the other elementwise kernels (norms, rotary embedding, activation, "
              "residual adds, embedding) by the roofline")


def scheduler_text(sched) -> str:
    """The batching policy with the settings it reads, the queue order, and the capacity
    policy and the steps' mixing where they are not the defaults."""
    queue = ("priority queue (lowest priority value first)" if sched.queue == "priority"
             else "first-come-first-served queue")
    if sched.capacity_scheduler_policy == "guaranteed_no_evict":
        queue += ("; guaranteed no evict (a request is admitted only where the KV cache holds "
                  "it to its last token beside every running one; nothing is preempted)")
    elif sched.capacity_scheduler_policy == "new_token_ratio":
        queue += ("; SGLang's admission (a request is admitted only where the KV cache holds "
                  "it beside a decaying share of the running requests' future tokens)")
    if sched.policy == "static":
        timeout = (f", waits up to {sched.batch_timeout_s:g} s for a full batch"
                   if sched.batch_timeout_s else "")
        return (f"static batching of up to {sched.max_batch_size} requests{timeout}, each "
                f"batch prefilled whole (max_num_batched_tokens does not apply); {queue}")
    chunked = "on" if sched.chunked_prefill else "off"
    unmixed = ("" if sched.enable_mixed_chunk else
               ", prefills run alone (no decode in a step with a prefill, as SGLang's default)")
    interval = sched.scheduler_recv_interval
    if interval > 1:
        unmixed += (f", new requests read every {interval} steps of decodes (SGLang's "
                    f"receive interval)")
    return f"continuous batching, chunked prefill {chunked}{unmixed}; {queue}"


def slo_text(slo) -> str:
    names = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}
    limits = [f"{names[key]} <= {value:g} s" for key, value in slo.limits().items()
              if key in names and value is not None]
    return " and ".join(limits) if limits else "none (every finished request counts)"


def step_costs(config) -> str:
    cost = config.cost
    if config.mode != "simulate" or cost.model == "live":
        return "measured: the real NumPy engine runs every step"
    if cost.model == "hardware":
        hardware = config.hardware
        kernels = "measured kernels where the tables have them, else the roofline" \
            if hardware.derived and hardware.derived.get("kernel_sources") else \
            "roofline of every operator with efficiencies calibrated on measured A100 and " \
            "H100 kernels"
        server = (f"{hardware.step_overhead_s * 1e3:g} ms a step and "
                  f"{hardware.seq_overhead_s * 1e6:g} us a sequence of server time")
        if hardware.prefill_overhead_s:
            kernels += (f", plus {hardware.prefill_overhead_s * 1e3:g} ms each step with a "
                        f"prefill (hardware.prefill_overhead_s)")
        if hardware.async_scheduling:
            return (f"hardware: {kernels}; {server}, overlapping the GPU's (async "
                    f"scheduling: a newcomer joins the step after the one planned)")
        return f"hardware: {kernels}, plus {server} (no async scheduling)"
    if cost.model == "profile":
        return f"predicted by the fitted profile `{cost.profile}`"
    coefficients = {"step_overhead_s": cost.step_overhead_s,
                    "prefill_token_s": cost.prefill_token_s, "decode_seq_s": cost.decode_seq_s,
                    "context_token_s": cost.context_token_s}
    return "linear: " + ", ".join(f"{name} {value:g}" for name, value in coefficients.items())


def workload_text(workload, rate: str | None = None) -> str:
    """`rate`: words in place of a rate process's rate (a search varies it)."""
    parts = []
    arrival = workload.arrival.describe(rate) if rate and workload.arrival.at_rate \
        else workload.arrival.describe()
    if workload.trace is not None:
        trace = workload.trace
        limit = (f"first {trace.max_requests} requests" if trace.max_requests
                 else "every request")
        source = f"`{trace.name}`" if trace.name else f"`{Path(trace.path).name}`"
        if trace.tokenizer is None:  # a timed trace (an untimed one, ShareGPT, has a tokenizer)
            parts.append(f"trace replay of {source} ({trace.format} format, {limit}, "
                         f"inter-arrival gaps x{trace.time_scale:g})")
        else:  # lengths from the file, arrivals from the workload
            order = "shuffled with the seed" if trace.shuffle else "in file order"
            parts.append(f"lengths from {source} ({trace.format} format, {limit} "
                         f"{order}, tokens counted by `{trace.tokenizer}`), arrivals " + arrival)
        parts += trace.notes  # fewer requests than asked for, skipped entries
    elif workload.sessions is not None:
        sessions = workload.sessions
        turns = sessions.turns
        turns = f"{turns}" if isinstance(turns, int) else turns.describe()
        system = sessions.system_prompt_tokens
        parts.append(f"{sessions.conversations} multi-turn conversations starting "
                     + arrival.replace(" req/s", "/s"))
        parts.append(f"turns {turns}, each resending "
                     + (f"a {system}-token system prompt and " if system else "")
                     + f"the conversation so far, {sessions.think_time_s:g} s of thinking "
                       f"between a reply and the next turn")
        parts.append("user messages " + workload.prompt_tokens.describe())
        parts.append("replies " + workload.output_tokens.describe())
    else:
        parts.append(f"{workload.num_requests} requests, arrivals " + arrival)
        parts.append("prompt tokens " + workload.prompt_tokens.describe())
        parts.append("output tokens " + workload.output_tokens.describe())
    if workload.max_concurrency is not None:
        cap = workload.max_concurrency
        parts.append(f"at most {cap} request{'s' if cap != 1 else ''} in flight (the others "
                     f"wait for a slot; latencies start when a request is sent)")
    if workload.max_seconds is not None and workload.sessions is not None:
        parts.append(f"no conversation started more than {workload.max_seconds:g} s after the "
                     f"first (each started is sent whole)")
    elif workload.max_seconds is not None:
        parts.append(f"no request sent more than {workload.max_seconds:g} s after the first "
                     f"(those due later are not sent)")
    if workload.warmup_s:
        parts.append(f"the requests sent in the first {workload.warmup_s:g} s are a warm-up: "
                     f"served, left out of the requests' figures (`counted` false in "
                     f"requests.csv); ITL and the token peak count every gap and token after "
                     f"{workload.warmup_s:g} s")
    if workload.priority is not None:
        p = workload.priority
        pairs = ", ".join(f"{v} (weight {w:g})" for v, w in zip(p.values, p.weights))
        parts.append(f"priorities {pairs}")
    return "; ".join(parts)


def settings_text(settings: dict) -> str:
    """A variant's `set` table as `key = value` pairs."""
    if not settings:
        return "(the base config)"
    return ", ".join(f"`{key} = {toml_text(value)}`" for key, value in settings.items())
