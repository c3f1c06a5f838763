"""Profile files: the JSON a `servesim profile` run writes and `cost.model = "profile"` reads.

`load_profile(name_or_path)` reads a shipped profile by name (`sim/costs/profiles/<name>.json`)
or any file by path into a `FittedCost`; `check_profile_model` refuses a profile measured on
another model shape. The file's layout is documented in docs/sim/profiling.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from .fitted import FEATURES, LATER_FEATURES, ROW_TAILS, FittedCost
from .jitter import Jitter

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
FORMAT = "servesim-profile/3"
READS = ("servesim-profile/2", FORMAT)  # /2: before fingerprints and served fits


def profile_path(name_or_path) -> Path:
    """A shipped profile name ("default" -> sim/costs/profiles/default.json) or a file path."""
    text = str(name_or_path)
    if "/" not in text and not text.endswith(".json"):
        path = PROFILE_DIR / f"{text}.json"
        if not path.is_file():
            shipped = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.json"))) or "none"
            raise FileNotFoundError(f"cost.profile: no shipped profile {text!r} "
                                    f"(shipped: {shipped}; or give a path to a .json profile)")
        return path
    path = Path(text)
    if not path.is_file():
        raise FileNotFoundError(f"cost.profile: file not found: {text}")
    return path


def load_profile(name_or_path) -> FittedCost:
    path = profile_path(name_or_path)
    try:
        data = json.loads(path.read_text())
        if data.get("format") not in READS:
            raise ValueError(f"{path}: profile format {data.get('format')!r}, this servesim "
                             f"reads {' and '.join(map(repr, READS))}; profile again with "
                             f"`servesim profile`")
        fit = data["cost_model"]
        given = LATER_FEATURES | fit["coefficients"]
        coefficients = tuple(float(given[name]) for name in FEATURES)
        rows, wake = fit["rows"], fit["wake"]
        after = fit.get("after_prefill", {"prefill_tokens": [], "extra_s": []})
        try:
            jitter = Jitter.from_dict(fit["jitter"]) if "jitter" in fit else None
        except ValueError as exc:
            raise ValueError(f"{path}: cost_model.{exc}") from None
        return FittedCost(coefficients, dict(data["model"]), str(path),
                          tuple(int(k) for k in rows["knots"]),
                          tuple(float(c) for c in rows["costs_s"]),
                          tuple(float(rows["tails_s"][name]) for name in ROW_TAILS),
                          tuple(float(x) for x in wake["idle_s"]),
                          tuple(float(x) for x in wake["extra_s"]), jitter,
                          float(fit["reference_s"]) if "reference_s" in fit else None,
                          tuple(int(n) for n in after["prefill_tokens"]),
                          tuple(tuple(float(x) for x in row) for row in after["extra_s"]))
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a servesim profile ({type(exc).__name__}: {exc}); "
                         f"write one with `servesim profile`") from None


def cost_model_dict(cost: FittedCost) -> dict:
    """The "cost_model" table of a profile file for `cost` (what `load_profile` reads back)."""
    table = {
        "features": list(FEATURES),
        "coefficients": dict(zip(FEATURES, cost.coefficients)),
        "rows": {"knots": list(cost.row_knots), "costs_s": list(cost.row_costs),
                 "tails_s": dict(zip(ROW_TAILS, cost.row_tails))},
        "wake": {"idle_s": list(cost.wake_idle_s), "extra_s": list(cost.wake_extra_s)},
        "after_prefill": {"prefill_tokens": list(cost.after_tokens),
                          "extra_s": [list(row) for row in cost.after_extra_s]},
    }
    if cost.jitter is not None:
        table["jitter"] = cost.jitter.to_dict()
    if cost.reference_s is not None:
        table["reference_s"] = cost.reference_s
    return table


def check_profile_model(cost: FittedCost, model: dict) -> None:
    """A profile predicts the costs of the model it was measured on; refuse any other shape
    (max_seq_len and seed do not change a step's cost)."""
    keys = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff")
    diff = [f"{k} {cost.model.get(k)} vs {model.get(k)}" for k in keys
            if cost.model.get(k) != model.get(k)]
    if diff:
        raise ValueError(f"cost.profile: {cost.source} was measured on another model "
                         f"({'; '.join(diff)}, profile vs scenario); profile this model with "
                         f"`servesim profile` or use cost.model = 'linear'")
