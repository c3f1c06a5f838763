"""Host swap space for preemption by swapping (vLLM's `preemption_mode="swap"`).

A victim's computed KV blocks are copied to host memory instead of being thrown away, and copied
back when it is readmitted, so it resumes where it stopped instead of computing its prompt and
output again. `SwapSpace` keeps the host blocks' bookkeeping (which are free, which sequence
holds which); the copies themselves are the executor's (`StepPlan.swap_out` / `swap_in` list the
block pairs, done before the step's forward pass: every copy out, then every copy in).
"""

from __future__ import annotations

from .block_manager import BlockError


class SwapSpace:
    """`num_blocks` host KV blocks, numbered 0 .. num_blocks - 1."""

    def __init__(self, num_blocks: int):
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 0:
            raise ValueError(f"engine.swap_blocks must be an integer >= 0, got {num_blocks!r}")
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))  # a stack: block 0 is taken first
        self.tables: dict[int, list[int]] = {}  # seq_id -> its host blocks, in token order

    @property
    def num_free(self) -> int:
        return len(self._free)

    def holds(self, seq_id: int) -> bool:
        return seq_id in self.tables

    def swap_out(self, seq_id: int, gpu_blocks: list[int]) -> list[tuple[int, int]]:
        """Give the sequence a host block for each of `gpu_blocks`; returns the (gpu, host)
        pairs to copy. The caller checked that they fit (`num_free`)."""
        if seq_id in self.tables:
            raise BlockError(f"sequence {seq_id} is already swapped out")
        if len(gpu_blocks) > len(self._free):
            raise BlockError(f"sequence {seq_id}: {len(gpu_blocks)} blocks to swap out, "
                             f"{len(self._free)} free in the swap space")
        host = [self._free.pop() for _ in gpu_blocks]
        self.tables[seq_id] = host
        return list(zip(gpu_blocks, host))

    def swap_in(self, seq_id: int) -> list[int]:
        """Release the sequence's host blocks; returns them, in token order, to copy back."""
        host = self.tables.pop(seq_id)
        self._free.extend(reversed(host))
        return host

    def check_invariants(self) -> None:
        held = [b for blocks in self.tables.values() for b in blocks]
        assert len(held) == len(set(held)), "a host block is held twice"
        assert not set(held) & set(self._free), "a held host block is also free"
        assert len(held) + len(self._free) == self.num_blocks, "host blocks lost"
