"""Requests and one sequence generated on its own: the engine's part 5 single-sequence steps.

A request is a plain dict (`make_request`). `init_sequence_state` prefills the prompt's keys and
values into a paged cache of its own, `sequence_decode_step` then computes one token's K/V,
samples the next token and appends it, until `is_sequence_done`. Every step is a one-sequence
`StepPlan` run by the same `NumpyExecutor` that runs batched steps, so one sequence generated
alone and the same sequence generated in a batch follow the same code and, greedily, the same ids.
"""

from __future__ import annotations

import numpy as np

from .block_manager import BlockManager, blocks_needed
from .executor import NumpyExecutor
from .model import normalize_params
from .step_plan import StepPlan
from .sequence import Sequence, SamplingParams, SequenceStatus

SAMPLING_KEYS = ("temperature", "top_k", "top_p", "greedy")
DEFAULT_BLOCK_SIZE = 16  # tokens per KV block, vLLM's default


def sampling_params_from(spec) -> SamplingParams:
    """A `SamplingParams` from None, a SamplingParams, or a dict with keys temperature, top_k,
    top_p and greedy (True means temperature 0). Unknown keys or bad values raise ValueError."""
    if spec is None:
        return SamplingParams()
    if isinstance(spec, SamplingParams):
        return spec
    if not isinstance(spec, dict):
        raise ValueError(f"sampling_params must be a dict or SamplingParams, "
                         f"got {type(spec).__name__}")
    unknown = sorted(set(spec) - set(SAMPLING_KEYS))
    if unknown:
        raise ValueError(f"sampling_params: unknown key(s) {', '.join(unknown)}; allowed: "
                         f"{', '.join(SAMPLING_KEYS)}")
    temperature = 0.0 if spec.get("greedy", False) else spec.get("temperature", 1.0)
    return SamplingParams(temperature, spec.get("top_k", 0), spec.get("top_p", 1.0))


def make_request(request_id, prompt_token_ids, max_new_tokens: int, sampling_params=None) -> dict:
    """A request record: {"request_id", "prompt_token_ids" (list of int), "max_new_tokens",
    "sampling_params" (dict, {} for defaults)}. An empty prompt, a negative or non-int token id,
    or max_new_tokens < 0 raises ValueError; max_new_tokens 0 is a request that is done at once."""
    ids = [int(t) for t in prompt_token_ids]
    if not ids:
        raise ValueError(f"request {request_id}: prompt_token_ids must hold at least one token")
    if any(t != raw or t < 0 for t, raw in zip(ids, prompt_token_ids)):
        raise ValueError(f"request {request_id}: prompt_token_ids must be non-negative integers")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) \
            or max_new_tokens < 0:
        raise ValueError(f"request {request_id}: max_new_tokens must be an integer >= 0, "
                         f"got {max_new_tokens!r}")
    spec = {} if sampling_params is None else sampling_params
    sampling_params_from(spec)  # validate now, not at the first decode step
    return {"request_id": request_id, "prompt_token_ids": ids,
            "max_new_tokens": int(max_new_tokens),
            "sampling_params": dict(spec) if isinstance(spec, dict) else spec}


def init_sequence_state(request: dict, params: dict, *, rng: np.random.Generator | None = None,
                        block_size: int = DEFAULT_BLOCK_SIZE) -> dict:
    """Prefill the request's prompt into a paged cache of its own and return the state dict
    {"request_id", "sequence", "executor", "params", "generated", "max_new_tokens"}.

    The prompt's last token is left for the first decode step, which computes its K/V and samples
    the first output token. Prompt + max_new_tokens beyond the model's max_seq_len raises
    ValueError. `rng` (default: a Generator seeded with 0) draws the tokens but those of a
    decode step that passes its own.
    """
    p = normalize_params(params)
    prompt, max_new = request["prompt_token_ids"], request["max_new_tokens"]
    if len(prompt) + max_new > p["max_seq_len"]:
        raise ValueError(f"request {request['request_id']}: prompt ({len(prompt)}) + "
                         f"max_new_tokens ({max_new}) exceeds the model's max_seq_len "
                         f"({p['max_seq_len']})")
    state = {"request_id": request["request_id"], "sequence": None, "executor": None,
             "params": params, "generated": [], "max_new_tokens": max_new}
    if max_new == 0:
        return state
    seq = Sequence(request["request_id"], len(prompt), max_new, prompt_token_ids=list(prompt),
                   sampling=sampling_params_from(request.get("sampling_params")))
    bm = BlockManager(max(1, blocks_needed(len(prompt) + max_new - 1, block_size)), block_size)
    executor = NumpyExecutor(p, bm, rng=np.random.default_rng(0) if rng is None else rng)
    seq.set_status(SequenceStatus.RUNNING)
    if len(prompt) > 1:
        _run(executor, StepPlan(prefills=[(seq, len(prompt) - 1)]))
    state.update(sequence=seq, executor=executor, generated=seq.output_token_ids)
    return state


def _run(executor: NumpyExecutor, plan: StepPlan) -> dict:
    """Reserve blocks, execute a one-sequence plan and advance its computed-token count; a
    sampling failure raises."""
    (seq, n), = plan.prefills or [(plan.decodes[0], 1)]
    executor.block_manager.ensure_capacity(seq.seq_id, seq.num_computed_tokens + n)
    result = executor.execute(plan)
    if result.failed:
        raise result.failed[seq.seq_id]
    seq.num_computed_tokens += n
    return result.tokens


def sequence_decode_step(state: dict, params: dict, rng: np.random.Generator | None = None):
    """Compute the last token's K/V, sample the next token with the request's sampling params
    and append it: returns (token id, state). `params` must be the dict the state was built
    from; a state that already holds max_new_tokens tokens raises ValueError."""
    if params is not state["params"]:
        raise ValueError("sequence_decode_step: params are not the ones the state was built with")
    if len(state["generated"]) >= state["max_new_tokens"]:
        raise ValueError(f"sequence {state['request_id']}: already generated its "
                         f"{state['max_new_tokens']} max_new_tokens")
    seq, executor = state["sequence"], state["executor"]
    own = executor.rng
    executor.rng = own if rng is None else rng  # a step's own generator draws its token only
    try:
        token = _run(executor, StepPlan(decodes=[seq]))[seq.seq_id]
    finally:
        executor.rng = own
    seq.append_token(token)
    return token, state


def is_sequence_done(state: dict, eos_id: int | None = None) -> bool:
    """Done when max_new_tokens tokens exist (at once for 0) or the last one is `eos_id`."""
    generated = state["generated"]
    if len(generated) >= state["max_new_tokens"]:
        return True
    return eos_id is not None and bool(generated) and generated[-1] == eos_id


def release_sequence_state(state: dict) -> int:
    """Free the state's KV blocks; returns how many were freed."""
    if state["sequence"] is None:
        return 0
    return state["executor"].block_manager.free_sequence(state["sequence"].seq_id)


def generate_single_sequence(request: dict, params: dict, eos_id: int | None,
                             rng: np.random.Generator | None = None) -> list[int]:
    """Generate one request to completion on its own; returns the generated ids only (the EOS
    token included when it was sampled)."""
    state = init_sequence_state(request, params, rng=rng)
    while not is_sequence_done(state, eos_id):
        sequence_decode_step(state, params)
    release_sequence_state(state)
    return list(state["generated"])
