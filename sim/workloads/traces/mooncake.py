"""Format "mooncake": the Mooncake traces (Qin et al., "Mooncake", FAST 2025), JSON lines

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}

with `timestamp` in milliseconds from the start of the recording (in arrival order),
`input_length` the prompt's tokens and `output_length` the tokens to generate. `hash_ids` name
the prompt's 512-token blocks, the last one possibly partial, so a row has ceil(input_length /
512) of them: a chained hash, so two requests with the same first k ids share their first
k x 512 prompt tokens (a reusable KV prefix). A row without `hash_ids` shares nothing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .table import Columns, read_json_lines
from .trace import PrefixBlocks, Trace, shorten

COLUMNS = Columns("mooncake", "timestamp", "input_length", "output_length", unit_s=1e-3)
KIND = "a JSON-lines file"
BLOCK_TOKENS = 512  # prompt tokens a hash id names


def read(path, f, max_rows: int | None) -> Trace:
    """The first `max_rows` requests (all when None) of the open file `f`."""
    dense: dict = {}  # hash id -> 0, 1, ... in order of first appearance
    ids: list[int] = []
    offsets = [0]

    def hash_ids(line: int, row: dict, prompt_tokens: int) -> None:
        given = row.get("hash_ids", [])
        if not isinstance(given, list) or \
                any(isinstance(x, bool) or not isinstance(x, int) for x in given):
            raise ValueError(f"{path}: line {line}: hash_ids must be a list of integers, got "
                             f"{shorten(repr(given))}")
        blocks = -(-prompt_tokens // BLOCK_TOKENS)
        if given and len(given) != blocks:
            raise ValueError(f"{path}: line {line}: hash_ids has {len(given)} ids for "
                             f"input_length {prompt_tokens}; format mooncake names each "
                             f"{BLOCK_TOKENS}-token prompt block, so it needs {blocks}")
        ids.extend(dense.setdefault(x, len(dense)) for x in given)
        offsets.append(len(ids))

    trace = read_json_lines(path, f, max_rows, COLUMNS, hash_ids)
    return replace(trace, prefix_blocks=PrefixBlocks(
        np.array(offsets, dtype=np.int64), np.array(ids, dtype=np.int64), BLOCK_TOKENS))
