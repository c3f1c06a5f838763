"""Streaming demo: a few dozen prompts served together by continuous batching.

The first request's tokens are printed the moment each is sampled, while the other requests
share every step with it; each completion is then printed as it finishes, followed by the run's
latency and throughput figures. The weights are random, so the text is nonsense: what is real is
the path from prompt to streamed token and the timing of it.

    python -m examples.stream_demo            # the default model shape (~13 M parameters)
    python -m examples.stream_demo --small    # a small model, a few seconds on any machine
"""

from __future__ import annotations

import os

# One BLAS thread, set before NumPy loads (BLAS reads it once): on a machine with few cores,
# BLAS threads compete with each other and a step's time swings tenfold (docs/executor/).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import sys
import time

from engine.benchmark import summarize
from engine.model import ModelConfig, init_params
from engine.scheduler import SchedulerConfig
from engine.sequence import SamplingParams
from engine.server import Server, build_completion_response
from engine.tokenizer import build_vocab

CORPUS = [
    "the quick brown fox jumps over the lazy dog.",
    "a server batches requests so that every step does more useful work.",
    "keys and values of past tokens live in blocks of a paged cache.",
    "continuous batching admits new requests at every iteration.",
    "time to first token, inter-token latency, throughput and goodput.",
]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=36, help="prompts to serve (default 36)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--small", action="store_true", help="a 2-layer d_model 128 model")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def build_server(args) -> Server:
    vocab = build_vocab(CORPUS, ["<bos>", "<eos>", "<unk>"])
    shape = {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 512} if args.small else {}
    config = ModelConfig(vocab_size=len(vocab["id_to_token"]), max_seq_len=512, seed=args.seed,
                         **shape)
    scheduler = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=1024, max_seq_len=512)
    return Server(init_params(config), vocab, scheduler_config=scheduler, block_size=16,
                  num_kv_blocks=256)


def main(argv=None) -> None:
    args = parse_args(argv)
    server = build_server(args)
    sampling = SamplingParams(temperature=0.8, top_p=0.95)
    prompts = [CORPUS[i % len(CORPUS)][: 12 + 3 * (i % 7)] for i in range(args.requests)]
    ids = [server.submit(p, args.max_new_tokens, sampling=sampling, ignore_eos=True)
           for p in prompts]
    t0 = time.perf_counter()
    print(f"{len(ids)} requests queued; streaming {ids[0]} ({prompts[0]!r}):\n")
    for chunk in server.stream(ids[0]):  # every step also advances the other requests
        sys.stdout.write(chunk["text"])
        sys.stdout.flush()
    print("\n\ncompletions as they finish:")
    shown = set()
    while len(shown) < len(ids):
        server.step()
        for rid in ids:
            if rid not in shown and server.requests[rid].is_finished:
                shown.add(rid)
                choice = build_completion_response(server, rid)["choices"][0]
                print(f"  {rid:>6} [{choice['finish_reason']}] {choice['text']!r}")
    summary = summarize(server.recorder)
    print(f"\nserved {summary['completed']} requests in {time.perf_counter() - t0:.1f} s: "
          f"TTFT p50 {summary['ttft_p50_s'] * 1e3:.0f} ms, "
          f"ITL mean {summary['itl_mean_s'] * 1e3:.1f} ms, "
          f"{summary['output_throughput']:.0f} output tokens/s, "
          f"mean batch {summary['mean_batch_size']:.1f}")


if __name__ == "__main__":
    main()
