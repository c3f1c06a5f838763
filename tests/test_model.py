"""The model's configuration, parameters and checkpoints (engine/model.py)."""

import numpy as np
import pytest

from engine.model import (ModelConfig, init_params, load_params, normalize_params, save_params,
                          sinusoidal_positions)
from engine.transformer import forward_full

TINY = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=32)


def count_parameters(params):
    """Trainable values: everything but the fixed position table."""
    top = sum(v.size for k, v in params.items() if isinstance(v, np.ndarray) and k != "P")
    return top + sum(v.size for layer in params["layers"] for v in layer.values())


def test_the_default_model_has_between_10_and_20_million_parameters():
    config = ModelConfig()
    assert 10_000_000 <= config.num_parameters <= 20_000_000
    assert count_parameters(init_params(config)) == config.num_parameters


@pytest.mark.parametrize("d_ff", [0, 64])
def test_num_parameters_counts_the_initialised_arrays(d_ff):
    config = ModelConfig(vocab_size=40, d_model=32, n_layers=3, n_heads=2, d_ff=d_ff, max_seq_len=16)
    params = init_params(config)
    assert count_parameters(params) == config.num_parameters
    assert all(a.dtype == np.float32 for a in params["layers"][0].values())
    assert ("W1" in params["layers"][0]) == bool(d_ff)


def test_init_params_is_reproducible_per_seed():
    a, b = init_params(TINY), init_params(TINY)
    c = init_params(ModelConfig(**{**TINY.__dict__, "seed": 1}))
    np.testing.assert_array_equal(a["layers"][1]["Wq"], b["layers"][1]["Wq"])
    assert not np.array_equal(a["layers"][1]["Wq"], c["layers"][1]["Wq"])


@pytest.mark.parametrize("field, value, message", [
    ("vocab_size", 0, "model.vocab_size must be a positive integer"),
    ("d_model", -8, "model.d_model must be a positive integer"),
    ("n_layers", 1.5, "model.n_layers must be a positive integer"),
    ("n_heads", True, "model.n_heads must be a positive integer"),
    ("max_seq_len", 0, "model.max_seq_len must be a positive integer"),
    ("d_ff", -1, r"model.d_ff must be a non-negative integer \(0: no MLP\)"),
    ("n_heads", 3, r"model.d_model \(32\) must be divisible by model.n_heads \(3\)"),
])
def test_invalid_configs_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{**TINY.__dict__, field: value})


def test_head_dim():
    assert TINY.head_dim == 8


def test_positions_are_the_sinusoid_table():
    table = sinusoidal_positions(10, 6)
    assert table.shape == (10, 6) and table.dtype == np.float32
    np.testing.assert_allclose(table[3, 2], np.sin(3 / 10000 ** (2 / 6)), rtol=1e-6)
    np.testing.assert_allclose(table[3, 3], np.cos(3 / 10000 ** (2 / 6)), rtol=1e-6)


def test_save_and_load_round_trip(tmp_path):
    params = init_params(TINY)
    path = tmp_path / "tiny.npz"
    save_params(path, params)
    loaded = load_params(path)
    assert loaded["n_heads"] == 4 and loaded["max_seq_len"] == 32
    assert set(loaded) == set(params)
    for name in ("E", "P", "W_out", "lnf_g"):
        np.testing.assert_array_equal(loaded[name], params[name])
    for got, want in zip(loaded["layers"], params["layers"], strict=True):
        assert set(got) == set(want)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    ids = [1, 5, 9, 2]
    np.testing.assert_array_equal(forward_full(ids, loaded), forward_full(ids, params))


def test_a_flat_dict_round_trips_as_a_one_layer_model(tmp_path):
    rng = np.random.default_rng(0)
    flat = {name: rng.normal(size=(8, 8)).astype(np.float32) for name in ("Wq", "Wk", "Wv", "Wo")}
    flat.update(embedding=rng.normal(size=(12, 8)).astype(np.float32),
                W_out=rng.normal(size=(8, 12)).astype(np.float32), max_seq_len=16)
    save_params(tmp_path / "flat.npz", flat)
    loaded = load_params(tmp_path / "flat.npz")
    np.testing.assert_allclose(forward_full([1, 2, 3], loaded), forward_full([1, 2, 3], flat))


def test_a_checkpoint_missing_keys_is_refused(tmp_path):
    np.savez(tmp_path / "bad.npz", E=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="lacks W_out, n_heads, max_seq_len"):
        load_params(tmp_path / "bad.npz")


def test_normalize_params_turns_the_flat_dict_into_one_layer_one_head():
    rng = np.random.default_rng(0)
    flat = {name: rng.normal(size=(4, 4)).astype(np.float32) for name in ("Wq", "Wk", "Wv", "Wo")}
    flat.update(E=rng.normal(size=(6, 4)).astype(np.float32),
                W_out=rng.normal(size=(4, 6)).astype(np.float32), max_seq_len=9)
    p = normalize_params(flat)
    assert p["n_heads"] == 1 and p["max_seq_len"] == 9 and len(p["layers"]) == 1
    assert set(p["layers"][0]) == {"Wq", "Wk", "Wv", "Wo", "residual"}  # no norms, no MLP
    assert p["layers"][0]["residual"] is False  # the single-layer toy block has no skip connection
    assert "P" not in p and "lnf_g" not in p  # no positions, no final norm
    assert p["E"] is flat["E"] and p["layers"][0]["Wq"] is flat["Wq"]  # shared, not copied


def test_normalize_params_accepts_the_embedding_alias_and_leaves_layered_params_alone():
    flat = {"embedding": np.zeros((3, 2)), "Wq": 0, "Wk": 0, "Wv": 0, "Wo": 0, "W_out": 0,
            "max_seq_len": 4}
    assert normalize_params(flat)["E"] is flat["embedding"]
    layered = init_params(TINY)
    assert normalize_params(layered) is layered
