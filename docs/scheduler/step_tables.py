"""Print the step tables of docs/scheduler/*.md from real scheduler runs (no model: the
simulator's way, tokens counted but not sampled).

    python docs/scheduler/step_tables.py
"""

from __future__ import annotations

from engine.block_manager import BlockManager
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from engine.swap import SwapSpace

HEADER = "| step | prefill (tokens) | decode | padding | preempted | waiting after | blocks used |"


def run(title: str, config: SchedulerConfig, requests, num_blocks: int, block_size: int,
        show_tables: bool = False, swap_blocks: int = 0) -> None:
    bm = BlockManager(num_blocks, block_size)
    scheduler = Scheduler(config, bm, SwapSpace(swap_blocks) if swap_blocks else None)
    for rid, prompt, out in requests:
        scheduler.add(Sequence(rid, prompt, out))
    print(f"### {title}\n")
    print(HEADER + (" block tables |" if show_tables else ""))
    print("|" + "---|" * (8 if show_tables else 7))
    while scheduler.has_unfinished():
        plan = scheduler.schedule()
        tables = "; ".join(f"{s.request_id}: {bm.block_tables[s.seq_id]}"
                           for s in scheduler.running)
        finished = scheduler.postprocess(plan, None)
        prefill = ", ".join(f"{s.request_id} ({n})" for s, n in plan.prefills) or "-"
        decode = ", ".join(s.request_id for s in plan.decodes) or "-"
        preempted = ", ".join(s.request_id for s in plan.preempted) or "-"
        if plan.swap_out:
            preempted += f" (out {[g for g, _ in plan.swap_out]} -> host {[h for _, h in plan.swap_out]})"
        if plan.swap_in:
            prefill += f"; in host {[h for h, _ in plan.swap_in]} -> {[g for _, g in plan.swap_in]}"
        waiting = ", ".join(s.request_id for s in scheduler.waiting) or "-"
        done = f" ({', '.join(s.request_id for s in finished)} done)" if finished else ""
        row = (f"| {plan.step} | {prefill} | {decode}{done} | {plan.padding_seqs} | {preempted} "
               f"| {waiting} | {plan.kv_blocks_used}/{num_blocks} |")
        print(row + (f" {tables} |" if show_tables else ""))
    print(f"\npreemptions: {scheduler.num_preemptions}, steps: {scheduler.num_steps}\n")


def main() -> None:
    requests = [("A", 3, 5), ("B", 3, 1), ("C", 2, 2), ("D", 2, 3)]
    run("static, max_batch_size = 2", SchedulerConfig(policy="static", max_batch_size=2),
        requests, num_blocks=16, block_size=4)
    run("continuous, max_num_seqs = 2", SchedulerConfig(max_num_seqs=2), requests,
        num_blocks=16, block_size=4)
    run("preemption by recompute: 4 blocks of 4 tokens, fcfs", SchedulerConfig(max_num_seqs=4),
        [("a", 4, 6), ("b", 4, 6), ("c", 4, 6)], num_blocks=4, block_size=4, show_tables=True)
    run("preemption by swap: the same, with 8 host blocks", SchedulerConfig(
        max_num_seqs=4, preemption="swap"), [("a", 4, 6), ("b", 4, 6), ("c", 4, 6)],
        num_blocks=4, block_size=4, show_tables=True, swap_blocks=8)
    run("chunked prefill, max_num_batched_tokens = 8", SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=8, chunked_prefill=True),
        [("A", 3, 4), ("L", 13, 2)], num_blocks=16, block_size=4)


if __name__ == "__main__":
    main()
