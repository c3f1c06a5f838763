"""Multi-turn chat sessions (`workload.sessions`): conversations that start by an open arrival
process and send their turns one after another, each conversation a closed loop (turn t + 1 is
sent `think_time_s` after turn t finished). Turn t's prompt is the system prompt (shared by every
conversation) + every earlier turn's user message and reply + its own user message, so the turns
of a conversation share ever longer prefixes, which prefix caching reuses.

`plan_sessions(spec, rng)` draws the plan up front from the workload generator, in this order:
conversation start times, turns per conversation, user message lengths, reply lengths (the
builder draws priorities after). Requests are numbered conversation-major: conversation c's turn
t is request `offset[c] + t`.

- `SessionPlan.block_keys(index, block_size)`: a simulated request's prefix-cache keys (it has
  no token ids): the system prompt's full blocks are shared by every conversation, the others
  are its conversation's own, the same in each of its turns;
- `SessionTokens`: the real engine's prompt token ids, each turn's the previous turn's prompt and
  reply ids + the new message's, so the engine's own block hashes find the same prefixes;
- `check_turn_lengths`: refuses a conversation whose last turn passes the model's max_seq_len.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from engine.sequence import SequenceStatus
from scenarios.config import WorkloadSettings

KEY = "workload.sessions"

SYSTEM_BLOCK, CONVERSATION_BLOCK = 1, 2  # the first element of a simulated block's key
REJECTED_EARLIER = "an earlier turn of its conversation was rejected"


@dataclass(frozen=True)
class SessionPlan:
    """Every conversation's start and every turn's lengths, drawn before the run."""

    start_s: np.ndarray  # [N] float64 seconds, non-decreasing: each conversation's first turn
    offset: np.ndarray  # [N + 1] int64: conversation c's turns are offset[c] .. offset[c + 1] - 1
    message_tokens: np.ndarray  # [n] int64: each turn's new user message
    output_tokens: np.ndarray  # [n] int64: each turn's reply
    prompt_tokens: np.ndarray  # [n] int64: system prompt + earlier turns + the new message
    system_prompt_tokens: int
    think_time_s: float

    @property
    def num_conversations(self) -> int:
        return len(self.start_s)

    def requests(self, conversation: int) -> range:
        """The request indices of a conversation's turns, in order."""
        return range(int(self.offset[conversation]), int(self.offset[conversation + 1]))

    def locate(self, index: int) -> tuple[int, int]:
        """(conversation, turn) of request `index`."""
        conversation = int(np.searchsorted(self.offset, index, side="right")) - 1
        return conversation, index - int(self.offset[conversation])

    def first(self, k: int) -> SessionPlan:
        """The plan of the first k conversations."""
        n = int(self.offset[k])
        return replace(self, start_s=self.start_s[:k], offset=self.offset[:k + 1],
                       message_tokens=self.message_tokens[:n],
                       output_tokens=self.output_tokens[:n], prompt_tokens=self.prompt_tokens[:n])

    def block_keys(self, index: int, block_size: int) -> list[int]:
        """Prefix-cache keys of request `index`'s full KV blocks (prompt, then reply): block j
        is hash((1, j)) while it lies wholly inside the system prompt, else hash((2, c, j)) for
        its conversation c, whose every turn extends the same token stream."""
        conversation, _ = self.locate(index)
        blocks = int(self.prompt_tokens[index] + self.output_tokens[index]) // block_size
        shared = min(self.system_prompt_tokens // block_size, blocks)
        return [hash((SYSTEM_BLOCK, j)) for j in range(shared)] + \
            [hash((CONVERSATION_BLOCK, conversation, j)) for j in range(shared, blocks)]


def plan_sessions(spec: WorkloadSettings, rng: np.random.Generator) -> SessionPlan:
    """The conversations of a resolved workload with `sessions` (draw order: module)."""
    sessions = spec.sessions
    turns = sessions.turn_counts
    n_conv = int(sessions.conversations)
    start_s = spec.arrival.times(rng, n_conv)  # [N]
    offset = np.concatenate(([0], np.cumsum(turns.sample(rng, n_conv)))).astype(np.int64)
    n = int(offset[-1])
    message = spec.prompt_tokens.sample(rng, n)
    output = spec.output_tokens.sample(rng, n)
    prompt = _prompt_tokens(offset, message, output, sessions.system_prompt_tokens)
    return SessionPlan(start_s, offset, message, output, prompt,
                       int(sessions.system_prompt_tokens), float(sessions.think_time_s))


def _prompt_tokens(offset, message, output, system_tokens: int) -> np.ndarray:
    """Each turn's prompt: the system prompt, its conversation's earlier turns, its message."""
    turn_tokens = message + output  # [n]
    before = np.cumsum(turn_tokens) - turn_tokens  # [n] tokens of all earlier requests' turns
    own = before - np.repeat(before[offset[:-1]], np.diff(offset))  # [n] its conversation's only
    return system_tokens + own + message  # [n]


def check_turn_lengths(plan: SessionPlan, max_seq_len: int) -> None:
    """ValueError naming the `workload.sessions` keys when a conversation's last turn (its
    longest: prompt + reply) passes `max_seq_len`, saying which conversation and turn."""
    total = plan.prompt_tokens + plan.output_tokens  # [n]
    last = plan.offset[1:] - 1  # [N] each conversation's last turn
    over = np.flatnonzero(total[last] > max_seq_len)
    if not over.size:
        return
    conversation = int(over[0])
    turns = plan.requests(conversation)
    index = turns.start + int(np.argmax(total[turns.start:turns.stop] > max_seq_len))
    raise ValueError(
        f"{KEY}: conversation {conversation}'s turn {index - turns.start + 1} of {len(turns)} "
        f"(request {index}) would hold {total[index]:,} tokens (prompt "
        f"{plan.prompt_tokens[index]:,} + reply {plan.output_tokens[index]:,}), past the "
        f"model's max_seq_len of "
        f"{max_seq_len:,}; lower {KEY}.turns, {KEY}.system_prompt_tokens, "
        f"workload.prompt_tokens or workload.output_tokens")


class SessionTokens:
    """Prompt token ids of the conversations' turns on the real engine, drawn from the "tokens"
    stream: the system prompt's once (shared by every conversation), then each new user
    message's, in the order the requests are created. `make(index, arrival_s)` builds a turn's
    Sequence through `new_sequence(index, arrival_s, prompt_token_ids)`."""

    def __init__(self, plan: SessionPlan, rng: np.random.Generator, vocab_size: int,
                 new_sequence):
        self.plan, self.rng, self.vocab_size = plan, rng, vocab_size
        self.new_sequence = new_sequence
        self.system_ids = rng.integers(0, vocab_size, size=plan.system_prompt_tokens).tolist()
        self.previous: dict = {}  # conversation -> its latest turn's Sequence, until the next

    def make(self, index: int, arrival_s: float):
        conversation, turn = self.plan.locate(index)
        previous = self.previous.pop(conversation, None)
        if turn and previous.status is not SequenceStatus.FINISHED:
            ids = None  # never sent (an earlier turn was rejected): recorded without token ids
        else:
            head = self.system_ids if turn == 0 else previous.token_ids()
            message = self.plan.message_tokens[index]
            ids = head + self.rng.integers(0, self.vocab_size, size=int(message)).tolist()
            assert len(ids) == self.plan.prompt_tokens[index]  # replies are exactly their length
        seq = self.new_sequence(index, arrival_s, ids)
        if index + 1 < self.plan.offset[conversation + 1]:
            self.previous[conversation] = seq
        return seq
