"""Shared fixtures: a tiny model, a seeded rng, a fake executor for policy tests, and a profile
cache of the test session's own (profiles and one-time notes never touch the user's cache).
Hypothesis runs without its per-example deadline: a stall of a loaded machine is no failure.

The fake executor samples a token that is a pure function of the sequence's identity and its
position, so a sequence recomputed after a preemption samples the same tokens again, and it
checks the executor contract on every plan it receives (room reserved for every KV row written,
decodes only for sequences whose KV is complete but for the last token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import settings

from engine.model import ModelConfig, init_params

pytest_plugins = ("helpers.fake_openai",)  # `fake` and `bench_scenario`: bench's fake server

settings.register_profile("servesim", deadline=None)
settings.load_profile("servesim")


@pytest.fixture(autouse=True, scope="session")
def private_profile_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SERVESIM_CACHE", str(tmp_path_factory.mktemp("servesim-cache")))
        yield


TINY_MODEL = ModelConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=2, d_ff=64,
                         max_seq_len=256, seed=0)


@dataclass(frozen=True)
class FakeStepResult:
    tokens: dict | None
    duration_s: float


class FakeExecutor:
    """Executes plans without a model: checks them, then samples `token_of(seq)`."""

    def __init__(self, block_manager, *, vocab_size: int = 48, with_tokens: bool = True,
                 step_s: float = 0.01):
        self.block_manager = block_manager
        self.vocab_size = vocab_size
        self.with_tokens = with_tokens
        self.step_s = step_s
        self.plans = []

    def token_of(self, seq) -> int:
        return (7 * seq.seq_id + 3 * seq.num_output_tokens + 1) % self.vocab_size

    def execute(self, plan) -> FakeStepResult:
        capacity = self.block_manager.capacity
        tokens = {}
        for seq, n in plan.prefills:
            assert n >= 1 and capacity(seq.seq_id) >= seq.num_computed_tokens + n
            assert seq.num_computed_tokens + n <= seq.num_tokens
            if seq.num_computed_tokens + n == seq.num_tokens:
                tokens[seq.seq_id] = self.token_of(seq)
        for seq in plan.decodes:
            assert seq.num_computed_tokens == seq.num_tokens - 1
            assert capacity(seq.seq_id) >= seq.num_tokens
            tokens[seq.seq_id] = self.token_of(seq)
        self.plans.append(plan)
        return FakeStepResult(tokens if self.with_tokens else None, self.step_s)


@pytest.fixture(scope="session")
def fake_executor():
    """The `FakeExecutor` class: `fake_executor(block_manager)`."""
    return FakeExecutor


@pytest.fixture(scope="session")
def tiny_config() -> ModelConfig:
    return TINY_MODEL


@pytest.fixture(scope="session")
def tiny_params() -> dict:
    return init_params(TINY_MODEL)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
