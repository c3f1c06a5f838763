"""End to end: vocabulary -> prompts -> batched generation on the real engine -> text and timings.

A character vocabulary is built from a few sentences, four prompts are encoded and served by the
engine loop (`LLMEngine`: the shared `Scheduler` with continuous batching, a `BlockManager`, and
`NumpyExecutor` running the default model shape on paged KV), and the generated ids are decoded.
The weights are random and seeded, so the text is nonsense; the step timings are real.
Run from the repository root: `python -m examples.generate_demo [--policy static]`.
"""

from __future__ import annotations

import os

# One BLAS thread, set before NumPy loads (BLAS reads it once): on a machine with few cores,
# BLAS threads compete with each other and a step's time swings tenfold (docs/executor/).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse

import numpy as np

from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.llm_engine import LLMEngine
from engine.model import ModelConfig, init_params
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import SamplingParams, Sequence
from engine.tokenizer import build_vocab, decode_tokens, encode_prompt

CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world", "paged attention, batched!"]
PROMPTS = ["hello", "the quick brown fox", "paged", "a lazy dog jumps over"]
MAX_NEW_TOKENS = 24


def main(policy: str = "continuous") -> list[Sequence]:
    vocab = build_vocab(CORPUS, ["<bos>", "<eos>", "<unk>"])
    config = ModelConfig(vocab_size=len(vocab["id_to_token"]))  # the default shape, this vocab
    params = init_params(config)
    bm = BlockManager(num_blocks=64, block_size=16)
    scheduler = Scheduler(SchedulerConfig(policy=policy, max_num_seqs=8, max_batch_size=8,
                                          max_seq_len=config.max_seq_len), bm)
    executor = NumpyExecutor(params, bm, rng=np.random.default_rng(0))
    engine = LLMEngine(scheduler, executor)
    sampling = SamplingParams(temperature=0.8, top_p=0.95)
    seqs = []
    for i, text in enumerate(PROMPTS):
        ids = encode_prompt(text, vocab)
        seq = Sequence(f"req-{i}", len(ids), MAX_NEW_TOKENS - 4 * i, prompt_token_ids=ids,
                       sampling=sampling)
        engine.add_request(seq)
        seqs.append(seq)

    print(f"model {config.num_parameters / 1e6:.1f} M parameters, vocab {config.vocab_size}, "
          f"{policy} batching, KV {bm.num_blocks} blocks x {bm.block_size} tokens")
    print(f"{'step':>4} {'prefill_tokens':>14} {'decodes':>7} {'padding':>7} {'kv_blocks':>9} "
          f"{'step_ms':>8}")
    decode_ms = []
    now_s = 0.0
    while engine.has_unfinished():
        out = engine.step(now_s)
        now_s = out.end_s
        plan, step_ms = out.plan, (out.end_s - out.start_s) * 1e3
        if not plan.prefills:
            decode_ms.append(step_ms)
        print(f"{plan.step:>4} {plan.num_prefill_tokens:>14} {plan.num_decode_seqs:>7} "
              f"{plan.padding_seqs:>7} {plan.kv_blocks_used:>9} {step_ms:>8.2f}")

    print()
    for seq in seqs:
        prompt = decode_tokens(seq.prompt_token_ids, vocab)
        print(f"{seq.request_id}: {prompt!r} -> {decode_tokens(seq.output_token_ids, vocab)!r} "
              f"({seq.num_output_tokens} tokens, {seq.finish_reason})")
    total = sum(s.num_output_tokens for s in seqs)
    print(f"\n{total} tokens in {now_s:.3f} s ({total / now_s:.0f} tokens/s); "
          f"decode-only steps: mean {np.mean(decode_ms):.2f} ms over {len(decode_ms)} steps")
    return seqs


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=["continuous", "static"], default="continuous")
    main(parser.parse_args().policy)
