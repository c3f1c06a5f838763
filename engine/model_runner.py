"""One batched forward pass over paged KV: the step input, decode attention and the model run.

A step's tokens (one per decoding sequence, then every prefill chunk, then static batching's
padding rows) are stacked into one [T, D] matrix, so each weight is one matmul for the whole step.
Only attention looks at sequences one at a time: decodes attend in groups over key/value blocks
gathered by block table, each prefill chunk attends over its own context. Embedding, projections,
attention maths, MLP and logits are `engine.model`'s, as in full recomputation, so paged results
equal it within float32 rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .block_manager import BlockManager
from .model import attend, attention_input, attention_output, embed, final_logits
from .paged_kv_cache import PagedKVStorage, slot_ids
from .sampling import sample_token
from .sequence import Sequence

GATHER_GROUP_BYTES = 4 << 20  # keys (or values) gathered per group: stays in the last-level cache


@dataclass
class PrefillChunk:
    """Rows [row, row + n_tokens) compute positions [start, start + n_tokens) of one sequence."""

    row: int
    n_tokens: int
    start: int
    context_slots: np.ndarray  # [start + n_tokens] slots of every token the chunk attends to


@dataclass
class StepInput:
    """Everything the forward pass needs, flattened: decode rows first, then prefill chunks."""

    token_ids: np.ndarray  # [T] int64, the tokens whose K/V this step computes
    positions: np.ndarray  # [T] int64
    slots: np.ndarray  # [T] int64, storage slot each new K/V row is written to
    num_decodes: int  # rows [0, B) are single-token decodes
    decode_block_tables: np.ndarray  # [B, max_blocks] int64, padded with block 0 (masked)
    decode_context_lens: np.ndarray  # [B] tokens each decode attends to, itself included
    prefills: list[PrefillChunk]
    sample_rows: np.ndarray  # [S] rows whose logits are sampled
    sample_seqs: list[Sequence]  # aligned with sample_rows
    padding_rows: int  # zero rows appended to every matmul (static batching's empty slots)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def _token_ids(seq: Sequence, start: int, stop: int) -> list[int]:
    """Token ids [start, stop) of prompt + generated tokens."""
    if seq.prompt_token_ids is None:
        raise ValueError(f"request {seq.request_id}: no prompt token ids (a simulated request "
                         "cannot run on the NumPy engine)")
    prompt, n_prompt = seq.prompt_token_ids, seq.prompt_len
    head = list(prompt[start:min(stop, n_prompt)])
    return head + seq.output_token_ids[max(start - n_prompt, 0):max(stop - n_prompt, 0)]


def build_batch_step_input(decodes, block_manager: BlockManager, *, prefills=(),
                           padding_seqs: int = 0) -> StepInput:
    """Flatten one step: each decode computes token num_tokens - 1 and samples; each prefill
    `(seq, n)` computes tokens [num_computed, num_computed + n) and samples when that reaches
    the sequence's last token. Block tables must already hold every token computed."""
    bs, tables = block_manager.block_size, block_manager.block_tables
    ids, positions, slots, sample_rows, sample_seqs = [], [], [], [], []
    context_lens = np.array([seq.num_tokens for seq in decodes], dtype=np.int64)  # [B]
    max_blocks = -(-int(context_lens.max()) // bs) if len(decodes) else 0
    block_table_arr = np.zeros((len(decodes), max_blocks), dtype=np.int64)  # [B, max_blocks]
    for row, seq in enumerate(decodes):
        pos = seq.num_tokens - 1
        assert seq.num_computed_tokens == pos, f"{seq} is not ready to decode"
        table = tables.get(seq.seq_id, [])
        n_blocks = -(-(pos + 1) // bs)
        if len(table) < n_blocks:
            raise ValueError(f"request {seq.request_id}: its block table holds {len(table) * bs} "
                             f"tokens, position {pos} has no KV slot (reserve blocks first)")
        block_table_arr[row, :n_blocks] = table[:n_blocks]
        ids += _token_ids(seq, pos, pos + 1)
        positions.append(pos)
        slots.append(table[pos // bs] * bs + pos % bs)
        sample_rows.append(row)
        sample_seqs.append(seq)
    chunks, row = [], len(decodes)
    for seq, n in prefills:
        start = seq.num_computed_tokens
        context = slot_ids(tables.get(seq.seq_id, []), 0, start + n, bs)  # [start + n]
        chunks.append(PrefillChunk(row, n, start, context))
        ids += _token_ids(seq, start, start + n)
        positions += range(start, start + n)
        slots += context[start:].tolist()
        row += n
        if start + n == seq.num_tokens:
            sample_rows.append(row - 1)
            sample_seqs.append(seq)
    return StepInput(np.array(ids, dtype=np.int64), np.array(positions, dtype=np.int64),
                     np.array(slots, dtype=np.int64), len(decodes), block_table_arr,
                     context_lens, chunks, np.array(sample_rows, dtype=np.int64), sample_seqs,
                     padding_seqs)


class Workspace:
    """Scratch buffers reused from step to step (grown on demand, never shrunk)."""

    def __init__(self):
        self._flat: dict[str, np.ndarray] = {}

    def get(self, name: str, shape: tuple) -> np.ndarray:
        size = int(np.prod(shape))
        buf = self._flat.get(name)
        if buf is None or buf.size < size:
            buf = self._flat[name] = np.empty(size, np.float32)
        return buf[:size].reshape(shape)


def softmax_masked_(scores: np.ndarray, beyond: np.ndarray | None) -> np.ndarray:
    """In-place softmax over the last axis of scores [B, H, 1, L], with keys where `beyond`
    [B, L] is True excluded (weight exactly 0)."""
    if beyond is not None:
        np.copyto(scores, np.float32(-np.inf), where=beyond[:, None, None, :])
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


def _beyond(lengths: np.ndarray, max_len: int) -> np.ndarray | None:
    """[B, max_len] True for key positions past each sequence's length (None: no such key)."""
    if (lengths >= max_len).all():
        return None
    return np.arange(max_len)[None, :] >= lengths[:, None]


def decode_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                     lengths: np.ndarray) -> np.ndarray:
    """One query per sequence over its first `lengths[b]` keys: q [B, H, hd], k/v [B, L, H, hd],
    lengths [B] -> [B, H, hd]. `model.attend`'s maths for a single query, batched."""
    scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
    scores = np.matmul((q * scale)[:, :, None, :], k.transpose(0, 2, 3, 1))  # [B, H, 1, L]
    softmax_masked_(scores, _beyond(lengths, k.shape[1]))
    return np.matmul(scores, v.transpose(0, 2, 1, 3))[:, :, 0, :]  # [B, H, hd]


def decode_groups(lengths, block_size: int, slot_bytes: int) -> list[tuple[int, int, int]]:
    """How `paged_decode_attention` splits a decode batch of context `lengths` (in batch order):
    (first, last + 1, blocks gathered per sequence) for each group of consecutive sequences. A
    group holds as many sequences as GATHER_GROUP_BYTES fits at the batch's longest block count
    (`slot_bytes`: bytes of one token's keys in one layer), and gathers and scores every one of
    them up to the group's longest, so its work depends on the batch's order, not just its
    lengths. The simulator's cost model counts the same groups (`sim.costs.shape`)."""
    n = len(lengths)
    if not n:
        return []
    max_blocks = -(-int(max(lengths)) // block_size)
    group = max(1, GATHER_GROUP_BYTES // (block_size * slot_bytes * max(max_blocks, 1)))
    return [(g0, min(g0 + group, n), -(-int(max(lengths[g0:g0 + group])) // block_size))
            for g0 in range(0, n, group)]


def paged_decode_attention(q: np.ndarray, storage: PagedKVStorage, layer: int, inp: StepInput,
                           ws: Workspace, out: np.ndarray) -> None:
    """`decode_attention` reading keys and values through block tables: q [B, H, hd] ->
    out [B, H, hd]. Groups of sequences have their key blocks gathered into one scratch buffer
    (sized to stay in cache) and scored; one softmax runs over the whole batch; then the value
    blocks are gathered the same way and weighted. Each block is read from memory once."""
    _, _, bs, n_heads, head_dim = storage.shape
    tables, lengths = inp.decode_block_tables, inp.decode_context_lens
    n_seqs, max_len = len(lengths), tables.shape[1] * bs
    scores = ws.get("scores", (n_seqs, n_heads, 1, max_len))  # [B, H, 1, L]
    q_scaled = q * np.float32(1.0 / np.sqrt(head_dim))  # [B, H, hd]
    # (first, last + 1, blocks to gather, key positions covered) per group
    spans = [(g0, g1, n_blocks, n_blocks * bs) for g0, g1, n_blocks
             in decode_groups(lengths, bs, n_heads * head_dim * storage.k.itemsize)]

    def gather(blocks: np.ndarray, g0: int, g1: int, n_blocks: int) -> np.ndarray:
        buf = ws.get("gather", (g1 - g0, n_blocks, bs, n_heads, head_dim))
        # mode="clip" skips take's buffered bounds check; ids come from the block manager
        np.take(blocks, tables[g0:g1, :n_blocks], axis=0, out=buf, mode="clip")
        return buf.reshape(g1 - g0, n_blocks * bs, n_heads, head_dim)  # [g, span, H, hd]

    for g0, g1, n_blocks, span in spans:
        keys = gather(storage.k[layer], g0, g1, n_blocks)
        np.matmul(q_scaled[g0:g1, :, None, :], keys.transpose(0, 2, 3, 1),
                  out=scores[g0:g1, :, :, :span])  # [g, H, 1, span]
    # columns past a group's span lie past all its lengths: masked, never stale
    softmax_masked_(scores, _beyond(lengths, max_len))
    for g0, g1, n_blocks, span in spans:
        values = gather(storage.v[layer], g0, g1, n_blocks)
        np.matmul(scores[g0:g1, :, :, :span], values.transpose(0, 2, 1, 3),
                  out=out[g0:g1, :, None, :])  # [g, H, 1, hd]


def forward_step(params: dict, storage: PagedKVStorage, inp: StepInput,
                 ws: Workspace | None = None) -> np.ndarray:
    """Run the model over a step's tokens, writing their K/V into `storage`; returns the logits of
    the sampled rows [S, V]. `params` is the layered dict (`model.normalize_params`)."""
    ws = ws or Workspace()
    n_heads, n_dec, n_tok = params["n_heads"], inp.num_decodes, inp.num_tokens
    if n_tok and int(inp.positions.max()) >= params["max_seq_len"]:
        raise ValueError(f"position {int(inp.positions.max())} is beyond the model's max_seq_len "
                         f"{params['max_seq_len']}")
    if n_tok and not 0 <= int(inp.token_ids.min()) <= int(inp.token_ids.max()) < len(params["E"]):
        raise ValueError(f"token ids must lie in [0, {len(params['E'])}) (the vocabulary), got "
                         f"{int(inp.token_ids.min())} .. {int(inp.token_ids.max())}")
    x = embed(inp.token_ids, inp.positions, params)  # [T, D]
    if inp.padding_rows:
        x = np.concatenate([x, np.zeros((inp.padding_rows, x.shape[1]), x.dtype)])  # [T+P, D]
    for index, layer in enumerate(params["layers"]):
        q, k, v = attention_input(x, layer, n_heads)  # [T+P, H, hd] each
        storage.write(index, inp.slots, k[:n_tok], v[:n_tok])
        attn = np.zeros_like(q)  # [T+P, H, hd]; padding rows attend to nothing
        if n_dec:
            paged_decode_attention(q[:n_dec], storage, index, inp, ws, attn[:n_dec])
        for chunk in inp.prefills:
            rows = slice(chunk.row, chunk.row + chunk.n_tokens)
            if chunk.start == 0:  # the whole context is this step's own keys and values
                keys, values = k[rows], v[rows]  # [n, H, hd]
            else:
                keys, values = storage.gather(index, chunk.context_slots)  # [start + n, H, hd]
            attn[rows] = attend(q[rows], keys, values)
        x = attention_output(x, attn, layer)  # [T+P, D]
    return final_logits(x[inp.sample_rows], params)  # [S, V]


def sample_tokens(seqs: list[Sequence], logits: np.ndarray,
                  rng: np.random.Generator) -> tuple[dict[int, int], dict[int, Exception]]:
    """One token per sequence from its row of `logits` [S, V], with its own `seq.sampling`
    (and its own `seq.generator`, when it has one, instead of `rng`). Returns ({seq_id: token},
    {seq_id: exception}): a sequence whose sampling raises gets no token and its exception
    instead, so one request's failure leaves the others' tokens standing."""
    tokens, failed = {}, {}
    for seq, row in zip(seqs, logits):
        try:
            tokens[seq.seq_id] = sample_token(row, seq.sampling,
                                              rng if seq.generator is None else seq.generator)
        except Exception as exc:  # handed to the caller, never swallowed
            failed[seq.seq_id] = exc
    return tokens, failed


def batched_decode_step(params: dict, storage: PagedKVStorage, inp: StepInput,
                        rng: np.random.Generator, ws: Workspace | None = None):
    """One synchronized step for the whole batch: the forward pass, then one token per sampling
    sequence (`sample_tokens`). Returns ({seq_id: token}, logits [S, V]); raises the first
    sampling failure, if any."""
    logits = forward_step(params, storage, inp, ws)  # [S, V]
    tokens, failed = sample_tokens(inp.sample_seqs, logits, rng)
    if failed:
        raise next(iter(failed.values()))
    return tokens, logits
