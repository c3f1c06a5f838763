"""Profile files: the JSON a `servesim profile` run writes and `cost.model = "profile"` reads.

`load_profile(name_or_path)` reads a shipped profile by name (`sim/costs/profiles/<name>.json`)
or any file by path into a `FittedCost`; `check_profile_model` refuses a profile measured on
another model shape. The file's layout is documented in docs/sim/profiling.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .fitted import FEATURES, LATER_FEATURES, PROFILED_BLOCK_SIZE, ROW_TAILS, FittedCost
from .jitter import Jitter

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
COST_MODEL_KEYS = ("features", "coefficients", "rows", "wake", "after_prefill", "jitter",
                   "reference_s")
# what a servesim-profile/2 file's cost_model also holds, read past: its formula in words and
# its coefficients' two parts (they sum to `coefficients`)
FORMAT_2_KEYS = ("form", "executor_coefficients", "loop_coefficients")
FORMAT = "servesim-profile/3"
READS = ("servesim-profile/2", FORMAT)  # /2: before fingerprints and served fits


def is_profile_text(text: str) -> bool:
    """Whether `text` is a profile file servesim wrote (any format it has written), so that
    `servesim profile --out` may replace it."""
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and str(data.get("format", "")).startswith("servesim-profile/")


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
    if path.is_dir():
        raise FileNotFoundError(f"cost.profile: {text} is a folder; give a profile file's path")
    if not path.is_file():
        raise FileNotFoundError(f"cost.profile: file not found: {text}")
    return path


def load_profile(name_or_path) -> FittedCost:
    """The `FittedCost` of a profile file; every way a file can be wrong is one ValueError
    naming the file and the field."""
    path = profile_path(name_or_path)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not a servesim profile (not JSON: {exc}); write one with "
                         f"`servesim profile`") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a servesim profile (a JSON {type(data).__name__}, not "
                         f"an object); write one with `servesim profile`")
    if data.get("format") not in READS:
        given = f"is {data['format']!r}" if "format" in data else "is missing"
        raise ValueError(f"{path}: format {given}; this servesim reads "
                         f"{' and '.join(map(repr, READS))}; profile again with "
                         f"`servesim profile`")
    read = _Reader(path)
    fit = read.table(data, "cost_model")
    read.known(fit, COST_MODEL_KEYS + (FORMAT_2_KEYS if data["format"] == READS[0] else ()),
               "cost_model")
    given = read.table(fit, "coefficients", "cost_model")
    read.known(given, FEATURES, "cost_model.coefficients")
    if "features" in fit and (not isinstance(fit["features"], list) or
                              sorted(map(str, fit["features"])) != sorted(given)):
        read.fail("cost_model.features", f"must list the coefficients' names "
                                         f"({', '.join(given)}), got {fit['features']!r:.80}")
    given = LATER_FEATURES | given
    coefficients = tuple(read.number(given, name, "cost_model.coefficients") for name in FEATURES)
    rows = read.table(fit, "rows", "cost_model")
    wake = read.table(fit, "wake", "cost_model")
    after = read.table(fit, "after_prefill", "cost_model") if "after_prefill" in fit else \
        {"prefill_tokens": [], "extra_s": []}
    block_size = data.get("block_size", PROFILED_BLOCK_SIZE)  # not recorded: measured at it
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        read.fail("block_size", f"must be a whole number >= 1, got {block_size!r:.40}")
    jitter = None
    if "jitter" in fit:
        table = read.table(fit, "jitter", "cost_model")
        jitter = Jitter(read.numbers(table, "timescales_s", "cost_model.jitter"),
                        read.numbers(table, "sigmas", "cost_model.jitter"),
                        read.number(table, "step_sigma", "cost_model.jitter"))
    try:
        return FittedCost(
            coefficients, dict(read.table(data, "model")), str(path),
            read.whole_numbers(rows, "knots", "cost_model.rows"),
            read.numbers(rows, "costs_s", "cost_model.rows"),
            tuple(read.number(read.table(rows, "tails_s", "cost_model.rows"), name,
                              "cost_model.rows.tails_s") for name in ROW_TAILS),
            read.numbers(wake, "idle_s", "cost_model.wake"),
            read.numbers(wake, "extra_s", "cost_model.wake"), jitter,
            read.number(fit, "reference_s", "cost_model") if "reference_s" in fit else None,
            read.whole_numbers(after, "prefill_tokens", "cost_model.after_prefill"),
            tuple(read.numbers({"row": row}, "row", "cost_model.after_prefill.extra_s")
                  for row in read.list(after, "extra_s", "cost_model.after_prefill")),
            block_size)
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if message.startswith(str(path)) else f"{path}: {message}") \
            from None


class _Reader:
    """Fields of a profile's JSON, each checked for its type, named in any error."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, problem: str):
        raise ValueError(f"{self.path}: {where}: {problem}; write a profile with "
                         f"`servesim profile`")

    def known(self, data: dict, keys, where: str) -> None:
        """Refuse a key `keys` does not hold (a misspelt one would be dropped unread)."""
        unknown = sorted(set(data) - set(keys))
        if unknown:
            self.fail(f"{where}.{unknown[0]}", f"not a key of a profile (allowed: "
                                               f"{', '.join(keys)})")

    def table(self, data: dict, name: str, where: str = "") -> dict:
        key = f"{where}.{name}" if where else name
        if not isinstance(data.get(name), dict):
            self.fail(key, f"missing or not a table (got {data.get(name)!r:.40})")
        return data[name]

    def list(self, data: dict, name: str, where: str) -> list:
        if not isinstance(data.get(name), list):
            self.fail(f"{where}.{name}", f"missing or not a list (got {data.get(name)!r:.40})")
        return data[name]

    def number(self, data: dict, name: str, where: str) -> float:
        value = data.get(name)
        try:
            finite = not isinstance(value, bool) and isinstance(value, (int, float)) and \
                math.isfinite(value)
        except OverflowError:  # an integer past any float
            finite = False
        if not finite:
            self.fail(f"{where}.{name}", f"must be a finite number, got {value!r:.40}")
        return float(value)

    def numbers(self, data: dict, name: str, where: str) -> tuple:
        return tuple(self.number({name: v}, name, where) for v in self.list(data, name, where))

    def whole_numbers(self, data: dict, name: str, where: str) -> tuple:
        numbers = self.numbers(data, name, where)
        if any(not n.is_integer() for n in numbers):
            self.fail(f"{where}.{name}", f"must be whole numbers, got {data[name]!r:.60}")
        return tuple(int(n) for n in numbers)


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


def check_profile_model(cost: FittedCost, model) -> None:
    """A profile predicts the costs of the model it was measured on (an
    `engine.model.ModelConfig`); refuse any other shape (max_seq_len and seed do not change a
    step's cost)."""
    keys = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff")
    diff = [f"{k} {cost.model.get(k)!r} vs {getattr(model, k)!r}" for k in keys
            if cost.model.get(k) != getattr(model, k)]
    if diff:
        raise ValueError(f"cost.profile: {cost.source} was measured on another model "
                         f"({'; '.join(diff)}, profile vs scenario); profile this model with "
                         f"`servesim profile` or use cost.model = 'linear'")
