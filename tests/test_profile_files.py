"""Profile files (`sim.costs.load_profile`): the shipped default is a served profile of the
default model whose recorded errors follow from its cost model; a profile of another model, an
unknown name, a file that is not a profile, a damaged field or a folder is refused in one line
naming the file and the field; the earlier format still loads; and a step past twice the
largest measured, or KV blocks other than the profile's, are said once."""

import json

import numpy as np
import pytest

from engine.model import ModelConfig
from helpers.configs import DEFAULT_MODEL as MODEL
from helpers.configs import ONE_REQUEST, resolved
from sim import notes
from sim.costs import FEATURES, FittedCost, StepShape, check_profile_model, cost_model, \
    load_profile


def test_shipped_default_profile_is_self_consistent():
    """The shipped profile is a served one of the default model, with this format's every
    field, and the errors it records follow from its cost model."""
    path = load_profile("default").source
    profile = json.loads(open(path).read())
    shape = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff")
    assert [profile["model"][k] for k in shape] == [MODEL[k] for k in shape]  # the default model
    assert set(profile["cost_model"]["coefficients"]) == set(FEATURES)
    assert profile["fingerprint"]["model"] == {k: MODEL[k] for k in shape}
    assert profile["fingerprint"]["blas_threads"] == "1"
    held = profile["fit"]["held_out"]
    assert held["steps"] > 300 and 0 < held["median_abs_rel_error"] < held["p90_abs_rel_error"]
    cost = load_profile("default")
    assert cost.reference_s > 0 and cost.jitter is not None and cost.wake_cost(1.0) > 0
    assert cost.step_time(StepShape(decode_seqs=1, decode_context=100, sampled_seqs=1,
                                        decode_span=100, decoding=1)) > 0


def test_profile_for_another_model_is_refused():
    cost = FittedCost((1e-3,) * len(FEATURES), dict(MODEL), source="p.json")
    check_profile_model(cost, ModelConfig(**dict(MODEL, max_seq_len=16384)))  # it does not matter
    with pytest.raises(ValueError,
                       match=r"p.json was measured on another model \(d_model 512 vs 256"):
        check_profile_model(cost, ModelConfig(**dict(MODEL, d_model=256)))


def test_unknown_profile_name_lists_the_shipped_ones():
    with pytest.raises(FileNotFoundError, match=r"no shipped profile 'nope' \(shipped: .*default"):
        load_profile("nope")


def test_a_file_that_is_not_a_profile_is_refused_naming_the_file_and_field(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": "servesim-profile/2", "model": MODEL}))
    with pytest.raises(ValueError, match=rf"{path}: cost_model: missing or not a table"):
        load_profile(str(path))
    path.write_text(json.dumps({"format": "servesim-profile/1", "model": MODEL}))
    with pytest.raises(ValueError, match="format is 'servesim-profile/1'; this servesim "
                                         "reads 'servesim-profile/2' and 'servesim-profile/3'; "
                                         "profile again"):
        load_profile(str(path))
    path.write_text(json.dumps({"model": MODEL}))
    with pytest.raises(ValueError, match=rf"{path}: format is missing; this servesim reads"):
        load_profile(str(path))
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=rf"{path}: not a servesim profile \(a JSON list"):
        load_profile(str(path))
    path.write_text("{not json")
    with pytest.raises(ValueError, match=rf"{path}: not a servesim profile \(not JSON"):
        load_profile(str(path))
    good = json.loads(open(load_profile("default").source).read())
    for field, value, message in (
            ("coefficients.step", "abc", "cost_model.coefficients.step: must be a finite number, "
                                         "got 'abc'"),
            ("coefficients.step", float("inf"), "cost_model.coefficients.step: must be a finite"),
            ("coefficients.decode_seqs", 1e308, "must be from 0 to 3600 s"),
            ("rows.costs_s", "x", "cost_model.rows.costs_s: missing or not a list")):
        broken = json.loads(json.dumps(good))
        table, name = field.split(".")
        broken["cost_model"][table][name] = value
        path.write_text(json.dumps(broken))
        with pytest.raises(ValueError, match=str(path)) as info:
            load_profile(str(path))
        assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("field, value, message", [
    ("cost_model.after_prefill", None, "cost_model.after_prefill: missing or not a table"),
    ("cost_model.coefficients.step", 10 ** 400, "cost_model.coefficients.step: must be a "
                                                "finite number"),
    ("cost_model.rows.knots", [1.5, 2, 4], "cost_model.rows.knots: must be whole numbers"),
    ("cost_model.after_prefill.prefill_tokens", [2.7], "cost_model.after_prefill."
                                                       "prefill_tokens: must be whole numbers"),
    ("cost_model.reference_s", 0, "cost_model.reference_s must be above 0"),
    ("cost_model.reference_s", -1e-3, "cost_model.reference_s must be above 0"),
    ("cost_model.jitter", [1, 2], "cost_model.jitter: missing or not a table"),
    ("cost_model.jitter.timescales_s", "1", "cost_model.jitter.timescales_s: missing or not "
                                            "a list"),
    ("cost_model.jitter.sigmas", "abc", "cost_model.jitter.sigmas: missing or not a list"),
    ("cost_model.rows_cost", 1.0, "cost_model.rows_cost: not a key of a profile"),
    ("cost_model.coefficients.steps", 1e-3, "cost_model.coefficients.steps: not a key of a "
                                            "profile"),
    ("cost_model.features", ["step"], "cost_model.features: must list the coefficients' names"),
    ("block_size", "16", "block_size: must be a whole number >= 1, got '16'"),
])
def test_every_damaged_profile_field_is_one_line_naming_it(tmp_path, field, value, message):
    """Fields read through their types: none gives a traceback, is truncated (1.5 rows), read
    as something else ("1" as [1.0]) or dropped unread (a misspelt key)."""
    data = json.loads(open(load_profile("default").source).read())
    *parents, name = field.split(".")
    table = data
    for parent in parents:
        table = table[parent]
    table[name] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as info:
        load_profile(str(path))
    assert str(info.value).startswith(str(path)) and message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_profile_of_the_earlier_format_still_loads():
    """tests/data/profile-format-2.json: the cost model of a shipped profile as an earlier
    servesim wrote it (servesim-profile/2: its formula in words and the coefficients' two parts
    beside their sum)."""
    from pathlib import Path

    path = Path(__file__).parent / "data" / "profile-format-2.json"
    data = json.loads(path.read_text())
    assert data["format"] == "servesim-profile/2" and "loop_coefficients" in data["cost_model"]
    cost = load_profile(str(path))
    assert cost.coefficients[0] == data["cost_model"]["coefficients"]["step"]
    assert cost.block_size == 16 and cost.reference_s is None


def test_a_folder_given_as_a_profile_is_named_a_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"cost.profile: {tmp_path}/d.json is a folder"):
        (tmp_path / "d.json").mkdir()
        load_profile(str(tmp_path / "d.json"))


def test_a_step_past_twice_the_largest_measured_is_costed_by_the_last_segment_and_said_once():
    cost = FittedCost((0.0,) * len(FEATURES), dict(MODEL), source="p.json",
                      row_knots=(1, 10), row_costs=(1.0, 10.0))
    with notes.collected() as said:
        assert cost.rows_cost(20) == pytest.approx(20.0)  # within twice: nothing said
        assert said == []
        assert cost.rows_cost(21) == pytest.approx(21.0)
        assert cost.rows_cost(np.array([30, 40])) == pytest.approx([30.0, 40.0])
    assert len(said) == 1 and "p.json measured steps of up to 10 rows" in said[0]


def test_a_profile_measured_with_other_kv_blocks_is_said_once(tmp_path):
    settings = resolved({"workload": ONE_REQUEST}).cost
    with notes.collected() as said:
        cost_model(settings, ModelConfig(**MODEL), block_size=16)
        assert said == []
        cost_model(settings, ModelConfig(**MODEL), block_size=32)
    assert len(said) == 1 and "measured with KV blocks of 16 tokens and the run's are 32" \
        in said[0]
