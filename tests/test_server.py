"""The serving API on a tiny real model: submit, stream, drive, collect, respond; and serve()."""

import time

import numpy as np
import pytest

from engine.benchmark import run_benchmark
from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.model import ModelConfig, init_params
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import GREEDY, Sequence
from engine.server import (Server, build_completion_response, collect_request_output,
                           drive_until_complete, format_stream_chunk, serve, submit_request)
from engine.tokenizer import build_vocab, decode_tokens

VOCAB = build_vocab(["hello world, the quick brown fox jumps over the lazy dog"],
                    ["<bos>", "<eos>", "<unk>"])
MODEL = ModelConfig(vocab_size=len(VOCAB["id_to_token"]), d_model=32, n_layers=2, n_heads=2,
                    d_ff=64, max_seq_len=128)


@pytest.fixture(scope="module")
def params():
    return init_params(MODEL)


def make_server(params, **kwargs):
    kwargs.setdefault("scheduler_config", SchedulerConfig(max_num_seqs=4, max_seq_len=128))
    return Server(params, VOCAB, block_size=4, num_kv_blocks=64, **kwargs)


def test_format_stream_chunk_has_the_four_fields():
    assert format_stream_chunk("req-0", 7, "a", False) == {
        "request_id": "req-0", "token_id": 7, "text": "a", "finished": False}


def test_submit_request_numbers_requests_in_order(params):
    server = make_server(params)
    ids = [submit_request(server, "hello", 3, 0, VOCAB) for _ in range(3)]
    assert ids == ["req-0", "req-1", "req-2"]


def test_a_bad_sampling_value_is_refused_at_submit_and_the_others_are_served(params):
    # a NaN temperature would fail its first step, every step, holding the batch for good
    server = make_server(params)
    good = server.submit("hello", 4, sampling=GREEDY)
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        server.submit("world", 4, sampling={"temperature": float("nan")})
    drive_until_complete(server)
    assert len(collect_request_output(server, good)["output_ids"]) == 4


def test_tokens_stream_while_the_batch_is_still_running(params):
    server = make_server(params)
    seen = []
    a = server.submit("hello", 5, sampling=GREEDY, on_chunk=seen.append)
    b = server.submit("the lazy dog", 3, sampling=GREEDY)
    first = server.step()  # both prefill together: one chunk each, neither finished
    assert [(c["request_id"], c["finished"]) for c in first] == [(a, False), (b, False)]
    assert seen == [first[0]]
    assert collect_request_output(server, a) is None
    chunks = list(server.stream(a))
    assert len(chunks) == 5 and chunks[-1]["finished"] and not any(c["finished"] for c in chunks[:-1])
    assert seen == chunks
    out = collect_request_output(server, a)
    assert [c["token_id"] for c in chunks] == out["output_ids"]
    assert "".join(c["text"] for c in chunks) == decode_tokens(out["output_ids"], VOCAB)


def test_completion_response_is_openai_shaped(params):
    server = make_server(params)
    rid = server.submit("hello world", 4, sampling=GREEDY)
    assert build_completion_response(server, rid, VOCAB) is None
    drive_until_complete(server)
    r = build_completion_response(server, rid, VOCAB)
    assert r["id"] == rid and r["object"] == "text_completion" and r["model"] == "servesim-numpy"
    assert isinstance(r["created"], int)
    out = collect_request_output(server, rid)
    assert r["choices"][0]["text"] == decode_tokens(out["output_ids"], VOCAB)
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"] == {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}


def test_eos_stops_a_request_with_finish_reason_stop(params):
    probe = make_server(params)
    rid = probe.submit("hello", 6, sampling=GREEDY, ignore_eos=True)
    drive_until_complete(probe)
    third = collect_request_output(probe, rid)["output_ids"][2]
    stop_at = collect_request_output(probe, rid)["output_ids"].index(third) + 1
    server = make_server(params, eos_token=VOCAB["id_to_token"][third])
    rid = server.submit("hello", 6, sampling=GREEDY)
    drive_until_complete(server)
    r = build_completion_response(server, rid)
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["usage"]["completion_tokens"] == stop_at  # the stop token itself is included


def test_drive_until_complete_honours_a_step_limit(params):
    server = make_server(params)
    server.submit("hello", 10, ignore_eos=True)
    chunks = drive_until_complete(server, max_steps=3)
    assert len(chunks) == 3 and server.has_unfinished()
    drive_until_complete(server)
    assert not server.has_unfinished()


def test_a_request_that_can_never_fit_is_refused_with_the_reason(params):
    server = make_server(params)
    with pytest.raises(ValueError, match="req-0 rejected: .*max_seq_len"):
        server.submit("hello", 200)
    with pytest.raises(ValueError, match="unknown request id"):
        collect_request_output(server, "req-9")


def test_static_batching_server_streams_too(params):
    server = make_server(params, scheduler_config=SchedulerConfig(policy="static", max_batch_size=2,
                                                                 max_num_seqs=4, max_seq_len=128))
    ids = [server.submit(p, n, sampling=GREEDY) for p, n in [("hello", 2), ("dog", 4), ("fox", 1)]]
    drive_until_complete(server)
    assert [len(collect_request_output(server, i)["output_ids"]) for i in ids] == [2, 4, 1]


def workload(n, gap_s, prompt=6, out=4):
    rng = np.random.default_rng(0)
    return [Sequence(f"w{i}", prompt, out, prompt_token_ids=rng.integers(0, MODEL.vocab_size,
                     size=prompt).tolist(), arrival_s=10.0 + gap_s * i, sampling=GREEDY)
            for i in range(n)]


def engine_parts(params, **config):
    bm = BlockManager(64, 4)
    config.setdefault("max_num_seqs", 4)
    return Scheduler(SchedulerConfig(max_seq_len=128, **config), bm), \
        NumpyExecutor(params, bm, rng=np.random.default_rng(0))


def test_serve_replays_arrivals_in_real_time_and_records_every_request(params):
    scheduler, executor = engine_parts(params)
    requests = workload(8, 0.1)
    recorder = serve(scheduler, executor, requests, RunRecorder(64))
    cols = recorder.request_columns()
    assert sorted(cols["request_id"]) == [s.request_id for s in requests]
    assert set(cols["status"]) == {"finished"}
    arrival = dict(zip(cols["request_id"], cols["arrival_s"]))
    assert arrival["w0"] == 0.0 and arrival["w7"] == pytest.approx(0.7)  # from the first arrival
    first_token = np.asarray(cols["first_token_s"])
    assert (first_token >= np.asarray(cols["arrival_s"])).all()
    assert (np.asarray(cols["first_scheduled_s"]) >= np.asarray(cols["arrival_s"])).all()
    assert len(recorder.submit_lag_s) == 8 and min(recorder.submit_lag_s) >= 0
    steps = recorder.step_columns()
    assert steps["start_s"][0] >= 0 and (np.diff(steps["start_s"]) > 0).all()
    assert scheduler.block_manager.num_used == 0


def test_serve_ends_when_its_last_requests_are_rejected(params):
    # nothing waits once the last arrival is refused: the loop ends, it does not assert
    scheduler, executor = engine_parts(params)
    too_long = Sequence("long", 200, 2, prompt_token_ids=[1] * 200, arrival_s=10.2,
                        sampling=GREEDY)  # past max_seq_len 128
    recorder = serve(scheduler, executor, workload(2, 0.05) + [too_long], RunRecorder(64))
    status = dict(zip(recorder.request_ids, recorder.statuses))
    assert status == {"w0": "finished", "w1": "finished", "long": "rejected"}
    assert scheduler.block_manager.num_used == 0


def test_under_a_cap_no_request_is_sent_after_send_until(params):
    # one slot: w0 is sent at once; the deadline passes while w1 and w2 wait for the slot,
    # and w3 arrives after it: none of them is sent or recorded (the simulator's client slots)
    scheduler, executor = engine_parts(params)
    execute = executor.execute

    def first_step_slow(plan):  # w0's prefill outlasts the deadline, whatever the machine
        if plan.step == 0:
            time.sleep(0.3)
        return execute(plan)

    executor.execute = first_step_slow
    requests = workload(3, 0.0) + [Sequence("w3", 6, 4, prompt_token_ids=[1] * 6,
                                            arrival_s=11.0, sampling=GREEDY)]
    recorder = serve(scheduler, executor, requests, RunRecorder(64), max_in_flight=1,
                     send_until_s=10.2)
    assert recorder.request_ids == ["w0"] and recorder.statuses == ["finished"]


def test_under_a_cap_a_request_due_before_send_until_is_sent_after_a_long_step(params):
    # two slots: w1 arrives at 10.1 into the free one while w0's first step runs to 10.3; it
    # was due then and is sent, as the simulator sends it; w2 (10.15) finds both slots taken
    # until after 10.2 and is never sent
    scheduler, executor = engine_parts(params)
    execute = executor.execute

    def first_step_slow(plan):
        if plan.step == 0:
            time.sleep(0.3)
        return execute(plan)

    executor.execute = first_step_slow
    requests = [Sequence(f"w{i}", 6, 4, prompt_token_ids=[1 + i] * 6, arrival_s=t,
                         sampling=GREEDY) for i, t in enumerate((10.0, 10.1, 10.15))]
    recorder = serve(scheduler, executor, requests, RunRecorder(64), max_in_flight=2,
                     send_until_s=10.2)
    assert sorted(recorder.request_ids) == ["w0", "w1"]
    assert set(recorder.statuses) == {"finished"}


def test_serve_marks_requests_past_the_time_limit_unfinished(params):
    scheduler, executor = engine_parts(params)
    requests = workload(3, 0.5, out=2)  # arrivals at 0, 0.5, 1.0 on the run's clock
    recorder = serve(scheduler, executor, requests, RunRecorder(64), time_limit_s=0.45)
    status = dict(zip(recorder.request_ids, recorder.statuses))
    assert status == {"w0": "finished", "w1": "unfinished", "w2": "unfinished"}


def test_run_benchmark_returns_the_run_summary(params):
    scheduler, executor = engine_parts(params)
    requests = [Sequence(f"b{i}", 5, 3, prompt_token_ids=[3, 4, 5, 6, 7], arrival_s=0.0)
                for i in range(4)]
    summary = run_benchmark(scheduler, executor, requests, slo={"ttft_s": 60.0})
    assert summary["completed"] == 4 and summary["total_output_tokens"] == 12
    assert summary["goodput"] == summary["request_throughput"] > 0
    assert summary["ttft_p50_s"] > 0 and summary["itl_mean_s"] > 0
