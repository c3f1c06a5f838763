"""Block tables of a paged KV cache: regenerates docs/paged_kv_cache/block_table.png.

Three sequences append tokens in turns to a 12-block cache of 4 token slots each, so their blocks
interleave; sequence B then finishes and frees its blocks, which sequence D picks up. The picture
shows each sequence's block table (logical block -> physical block) and the physical blocks with
the token each slot holds. Everything comes from the engine's part 4 functions.
Run from the repository root: `python examples/plot_block_table.py`.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # write a file, never open a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from engine.paged_kv_cache import (append_to_paged_cache, free_sequence_blocks,  # noqa: E402
                                   init_block_allocator, kv_blocks_in_use)

NUM_BLOCKS, BLOCK_SIZE, D_MODEL = 12, 4, 8
OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "paged_kv_cache" / "block_table.png"
COLORS = {"A": "tab:blue", "B": "tab:orange", "C": "tab:green", "D": "tab:purple"}


def fill_cache():
    """Run the scenario; returns the allocator and each slot's (sequence, token index)."""
    alloc = init_block_allocator(NUM_BLOCKS, BLOCK_SIZE, D_MODEL)
    owner = {}

    def append(seq, n):
        start = alloc.seq_lengths.get(seq, 0)
        rows = np.zeros((n, D_MODEL), np.float32)
        append_to_paged_cache(alloc, seq, rows, rows)
        table = alloc.block_manager.block_tables[seq]
        for i in range(start, start + n):
            owner[table[i // BLOCK_SIZE], i % BLOCK_SIZE] = (seq, i)

    for seq, n in [("A", 6), ("B", 5), ("C", 3), ("A", 4), ("B", 6), ("C", 3)]:
        append(seq, n)
    for block in alloc.block_manager.block_tables["B"]:
        for slot in range(BLOCK_SIZE):
            owner.pop((block, slot), None)
    free_sequence_blocks(alloc, "B")
    append("D", 9)  # reuses B's freed blocks, last freed first
    return alloc, owner


def draw_tables(ax, alloc):
    tables = alloc.block_manager.block_tables
    for row, seq in enumerate(sorted(tables)):
        ax.text(-0.6, -row, f"seq {seq} ({alloc.seq_lengths[seq]} tokens)", ha="right",
                va="center", fontsize=9)
        for col, block in enumerate(tables[seq]):
            ax.add_patch(plt.Rectangle((col - 0.45, -row - 0.4), 0.9, 0.8, color=COLORS[seq],
                                       alpha=0.8))
            ax.text(col, -row, str(block), ha="center", va="center", color="white", fontsize=10)
    ax.set(xlim=(-4.5, 4), ylim=(-len(tables) + 0.4, 0.6), title="block tables (logical -> "
           "physical block)")
    ax.axis("off")


def draw_blocks(ax, owner):
    for block in range(NUM_BLOCKS):
        for slot in range(BLOCK_SIZE):
            seq_token = owner.get((block, slot))
            color = COLORS[seq_token[0]] if seq_token else "whitesmoke"
            ax.add_patch(plt.Rectangle((block - 0.45, -slot - 0.45), 0.9, 0.9, color=color,
                                       alpha=0.8 if seq_token else 1.0))
            if seq_token:
                ax.text(block, -slot, f"{seq_token[0]}{seq_token[1]}", ha="center", va="center",
                        color="white", fontsize=8)
    ax.set(xlim=(-0.6, NUM_BLOCKS - 0.4), ylim=(-BLOCK_SIZE + 0.4, 0.6),
           xticks=range(NUM_BLOCKS), yticks=[-s for s in range(BLOCK_SIZE)],
           yticklabels=range(BLOCK_SIZE), xlabel="physical block", ylabel="slot in block",
           title="KV storage: the token each slot holds (grey: free)")
    ax.set_aspect("equal")


def main() -> Path:
    alloc, owner = fill_cache()
    usage = kv_blocks_in_use(alloc)
    fig, (ax_tables, ax_blocks) = plt.subplots(2, 1, figsize=(9, 6.5), height_ratios=[1, 1.3])
    draw_tables(ax_tables, alloc)
    draw_blocks(ax_blocks, owner)
    fig.suptitle(f"paged KV cache, block_size {BLOCK_SIZE}: {usage['used']} of {usage['total']} "
                 f"blocks used after B finished and D reused its blocks")
    fig.tight_layout()
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUTPUT, dpi=110)
    plt.close(fig)
    return OUTPUT


if __name__ == "__main__":
    print(f"wrote {main()}")
