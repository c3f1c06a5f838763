"""Static batching: the engine's part 5 batched steps and `static_batch_generate`.

`build_batch_step_input` flattens a step's sequences into one token matrix and
`batched_decode_step` runs it (one matmul per weight for the whole batch, then one sampled token
per sequence); both live in `model_runner`, where `NumpyExecutor` calls them every step.
`static_batch_generate` drives the one engine loop (`LLMEngine.step`: schedule, execute,
postprocess) with the shared `Scheduler` under the "static" policy: the batch is prefilled
together and decodes in lockstep until its last sequence finishes, finished ones staying in the
batch as padding rows.
"""

from __future__ import annotations

import numpy as np

from .block_manager import BlockManager
from .kv_reservation import peak_blocks
from .executor import NumpyExecutor
from .llm_engine import LLMEngine
from .model import normalize_params
from .model_runner import StepInput, batched_decode_step, build_batch_step_input
from .scheduler import Scheduler, SchedulerConfig
from .sequence import Sequence
from .sequences import DEFAULT_BLOCK_SIZE, SAMPLING_KEYS, sampling_params_from

__all__ = ["StepInput", "build_batch_step_input", "batched_decode_step", "static_batch_generate"]

CONFIG_KEYS = SAMPLING_KEYS + ("rng", "eos_token_id", "block_size", "max_batch_size")


def _check_config(config: dict) -> None:
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"static_batch_generate: unknown config key(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(CONFIG_KEYS)}")
    rng = config.get("rng")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise ValueError(f"static_batch_generate: config['rng'] must be a numpy.random.Generator, "
                         f"got {type(rng).__name__}")


def _sequences(requests, config: dict, max_new_tokens: int) -> list[Sequence | None]:
    """One Sequence per request (None for a request allowed no new token). Sampling keys of a
    request's own sampling_params override the config's."""
    base = {k: config[k] for k in SAMPLING_KEYS if k in config}
    eos = config.get("eos_token_id")
    seqs = []
    for req in requests:
        n_new = min(req["max_new_tokens"], max_new_tokens)
        if n_new == 0:
            seqs.append(None)
            continue
        sampling = sampling_params_from({**base, **(req.get("sampling_params") or {})})
        seqs.append(Sequence(req["request_id"], len(req["prompt_token_ids"]), n_new,
                             prompt_token_ids=list(req["prompt_token_ids"]), sampling=sampling,
                             ignore_eos=eos is None, eos_token_id=eos))
    return seqs


def static_batch_generate(params: dict, requests, config: dict, max_new_tokens: int) -> list[dict]:
    """Generate every request with static batching; returns [{"request_id", "output_ids"}] in
    request order. Each request gets min(its max_new_tokens, max_new_tokens) tokens, fewer when
    config["eos_token_id"] is sampled (EOS included).

    config: temperature / top_k / top_p / greedy (defaults for every request), rng (a
    np.random.Generator; default seeded with 0), eos_token_id (default: none, run to length),
    block_size (default 16), max_batch_size (default: all requests in one batch). A request that
    cannot fit the model's max_seq_len raises ValueError before anything runs.
    """
    _check_config(config)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or max_new_tokens < 0:
        raise ValueError(f"static_batch_generate: max_new_tokens must be an integer >= 0, "
                         f"got {max_new_tokens!r}")
    p = normalize_params(params)
    seqs = _sequences(requests, config, max_new_tokens)
    live = [s for s in seqs if s is not None]
    block_size = config.get("block_size", DEFAULT_BLOCK_SIZE)
    num_blocks = max(1, sum(peak_blocks(s, block_size) for s in live))
    bm = BlockManager(num_blocks, block_size)
    scheduler = Scheduler(SchedulerConfig(policy="static", max_seq_len=p["max_seq_len"],
                                          max_batch_size=config.get("max_batch_size",
                                                                    max(1, len(live)))), bm)
    for seq in live:
        if not scheduler.add(seq):
            raise ValueError(f"request {seq.request_id}: {seq.reject_reason}")
    rng = config.get("rng")
    executor = NumpyExecutor(p, bm, rng=np.random.default_rng(0) if rng is None else rng)
    engine = LLMEngine(scheduler, executor)
    while engine.has_unfinished():
        engine.step()
    return [{"request_id": req["request_id"],
             "output_ids": [] if seq is None else [int(t) for t in seq.output_token_ids]}
            for req, seq in zip(requests, seqs)]
