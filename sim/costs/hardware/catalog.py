"""The model and GPU catalogs (`data/models.toml`, `data/gpus.toml`, every number with its
source) and the fitted calibration (`data/calibration.json`), read once.

`model_architecture(table)` turns a scenario's `[model]` table into an `Architecture`: a
catalog `name` (a Hugging Face id) or a Hugging Face `config.json` (`config`, `hf_config.py`),
whose keys may be overridden (e.g. a shorter `max_seq_len`, as vLLM's `--max-model-len`), or
every key given explicitly. `gpu_spec(value)` turns `hardware.gpu`
into a `Gpu`: a catalog id, or a table defining one. Unknown names are refused naming the
nearest catalog ids.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from .architecture import ARCHITECTURE_KEYS, Architecture
from .hf_config import config_architecture
from .timing import AllReduce, Efficiency

DATA = Path(__file__).resolve().parent / "data"
MODEL_KEYS = tuple(k for k in ARCHITECTURE_KEYS
                   if k not in ("fused_qkv", "rope", "flash_attention", "name"))
CATALOG_ONLY = ("params", "active_params", "source", "params_source",
                "note")  # catalog keys not in a scenario


@lru_cache(maxsize=None)
def models() -> dict:
    """{Hugging Face id: its catalog table}."""
    with open(DATA / "models.toml", "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=None)
def gpus() -> dict:
    """{GPU id: its catalog table}."""
    with open(DATA / "gpus.toml", "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=None)
def calibration() -> dict:
    """The fitted efficiencies and all-reduce constants (`calibration.calibrate()`)."""
    return json.loads((DATA / "calibration.json").read_text(encoding="utf-8"))


def nearest(name: str, options, n: int = 3) -> str:
    """'did you mean' text: the closest ids, else every id. The ids holding the name, or held
    in it, come first, the most alike first ("a100" -> the A100s, "b200-sxm" -> b200, "l40" ->
    l40s, "llama-3.1-8b" -> meta-llama/Llama-3.1-8B), then the others most alike."""
    options = list(options)
    lowered = {o.lower(): o for o in options}
    key = name.lower()
    close = [o for o in lowered if key in o or o.split("/")[-1] in key] if len(key) > 1 else []
    close.sort(key=lambda o: -difflib.SequenceMatcher(None, key, o).ratio())
    close += [o for o in difflib.get_close_matches(key, list(lowered), n=n, cutoff=0.4)
              if o not in close]
    shown = [lowered[c] for c in close[:n]] if close else options
    return ("nearest: " if close else "known: ") + ", ".join(shown)


def model_architecture(table: dict) -> Architecture:
    """The architecture a `[model]` table names, reads from a config.json or defines
    (ValueError naming the key)."""
    name, config = table.get("name"), table.get("config")
    given = {k: v for k, v in table.items() if k in MODEL_KEYS}
    if name is not None and config is not None:
        raise ValueError("model.config: give model.name (a catalog id) or model.config (a "
                         "config.json), not both")
    if config is not None:
        base = config_architecture(str(config), given)
        _check_length(given, base, str(config))
        try:
            return Architecture(**(base | given))
        except ValueError as exc:  # the file's shape, changed by the keys given beside it
            raise ValueError(f"model.config: {config}: {exc}") from None
    if name is not None:
        catalog = models()
        match = next((k for k in catalog if k.lower() == str(name).lower()), None)
        if match is None:
            raise ValueError(f"model.name: unknown model {name!r} ({nearest(str(name), catalog)}"
                             f"; or give model.config, a config.json, or define it with "
                             f"n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, "
                             f"max_seq_len)")
        base = {k: v for k, v in catalog[match].items() if k in MODEL_KEYS}
        _check_length(given, base, match)
        return Architecture(**(base | given), name=match)
    missing = [k for k in ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size", "max_seq_len")
               if k not in given]
    if missing:
        raise ValueError(f"model: with cost.model = 'hardware', give model.name (a catalog id), "
                         f"model.config (a config.json) or the architecture; missing "
                         f"{', '.join(missing)}")
    given.setdefault("n_kv_heads", given["n_heads"])
    return Architecture(**given, name="custom")


def _check_length(given: dict, base: dict, model: str) -> None:
    """A `model.max_seq_len` past the model's own (its max_position_embeddings, as its
    rope_scaling stretches it) is refused, as vLLM refuses such a --max-model-len."""
    length, limit = given.get("max_seq_len"), base.get("max_seq_len")
    if isinstance(length, int) and isinstance(limit, int) and length > limit:
        raise ValueError(f"model.max_seq_len: {model} takes at most {limit:,} tokens (its "
                         f"context: max_position_embeddings, or as a rope_scaling stretches "
                         f"it), got {length:,}")


@dataclass(frozen=True)
class Gpu:
    """One GPU's datasheet: dense peaks (FLOP/s by dtype), memory, bandwidths, and the
    measured GPU whose efficiencies it uses."""

    id: str
    name: str
    memory_gib: float
    memory_bandwidth_gbs: float
    peak_tflops: dict
    interconnect_bandwidth_gbs: float
    interconnect_latency_us: float
    measured: str
    interconnect: str = ""
    host_bandwidth_gbs: float = 32.0  # to host memory (PCIe Gen4 x16 unless the table says)
    in_catalog: bool = True  # False: defined in the scenario (no measured tables, no price)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def bandwidth(self) -> float:
        return self.memory_bandwidth_gbs * 1e9

    def peak_flops(self, dtype: str) -> float:
        if dtype not in self.peak_tflops:
            raise ValueError(f"hardware.dtype: {self.id} has no {dtype} tensor cores "
                             f"(it has {', '.join(self.peak_tflops)}; {dtype} runs on "
                             f"{', '.join(gpus_with(dtype)) or 'no catalog GPU'})")
        return self.peak_tflops[dtype] * 1e12

    def efficiency(self) -> Efficiency:
        return Efficiency.from_dict(calibration()["gpus"][self.measured]["efficiency"])

    def all_reduce(self, workers: int) -> AllReduce | None:
        """The all-reduce over `workers` GPUs of one node: fitted where this GPU was measured,
        else the measured GPU's scaled by the ratio of interconnect bandwidths, with this
        GPU's latency."""
        if workers <= 1:
            return None
        measured = calibration()["gpus"][self.measured]
        fits = {int(n): v for n, v in measured["all_reduce"].items()}
        n = min(fits, key=lambda k: (abs(k - workers), k))
        latency, bus = fits[n]
        if self.in_catalog and measured["catalog_id"] == self.id:  # a table's: its own figures
            return AllReduce(latency, bus)
        ratio = self.interconnect_bandwidth_gbs / gpus()[measured["catalog_id"]][
            "interconnect_bandwidth_gbs"]
        return AllReduce(self.interconnect_latency_us * 1e-6, bus * ratio)


def gpus_with(dtype: str) -> list[str]:
    """The catalog GPUs with tensor cores for `dtype` (a peak for it)."""
    return [gpu_id for gpu_id, table in gpus().items() if dtype in table["peak_tflops"]]


GPU_KEYS = tuple(f.name for f in fields(Gpu) if f.name not in ("id", "in_catalog"))


def gpu_spec(value) -> Gpu:
    """The GPU `hardware.gpu` names (a catalog id) or defines (a table of GPU_KEYS)."""
    if isinstance(value, str):
        catalog = gpus()
        if value.lower() not in catalog:
            raise ValueError(f"hardware.gpu: unknown GPU {value!r} ({nearest(value, catalog)}; "
                             f"or define one as a table)")
        table, gpu_id = catalog[value.lower()], value.lower()
    else:
        table, gpu_id = value, str(value.get("name", "custom"))
        for key in table:
            if key not in GPU_KEYS:
                raise ValueError(f"hardware.gpu.{key}: unknown key ({nearest(str(key), GPU_KEYS)})")
    known = {k: v for k, v in table.items() if k in GPU_KEYS}
    known.setdefault("name", gpu_id)
    missing = [k for k in GPU_KEYS if k not in known and
               k not in ("interconnect", "host_bandwidth_gbs")]
    if missing:
        what = {"measured": f"measured (whose fitted kernel efficiencies it takes: one of "
                            f"{', '.join(calibration()['gpus'])})"}
        raise ValueError(f"hardware.gpu: a GPU defined here needs "
                         f"{', '.join(what.get(key, key) for key in missing)}")
    if not isinstance(value, str):
        _check_gpu_table(known)
    if known["measured"] not in calibration()["gpus"]:
        raise ValueError(f"hardware.gpu.measured must be one of "
                         f"{', '.join(calibration()['gpus'])}, got {known['measured']!r}")
    return Gpu(id=gpu_id, **known, in_catalog=isinstance(value, str))


# The dtypes a GPU's dense peaks are given for (`compute_dtype` of every weight dtype).
PEAK_DTYPES = ("fp32", "fp16", "bf16", "fp8", "nvfp4")
# A defined GPU's figures: each must be a number above the bound (a step's time divides by
# every one of them but the latency) and below GPU_CEILING (far past any GPU's, and where the
# bytes and FLOP/s they make stay finite numbers)
GPU_NUMBERS = {"memory_gib": 0, "memory_bandwidth_gbs": 0, "interconnect_bandwidth_gbs": 0,
               "host_bandwidth_gbs": 0}
GPU_CEILING = 1e9


def _check_gpu_table(table: dict) -> None:
    """ValueError naming the key of a GPU table whose figures cannot cost a step."""
    for key, bound in GPU_NUMBERS.items():
        if key in table and not _is_number_above(table[key], bound):
            raise ValueError(f"hardware.gpu.{key}: must be a positive number below "
                             f"{GPU_CEILING:g}, got {table[key]!r}")
    latency = table["interconnect_latency_us"]
    if not (_is_number_above(latency, 0) or latency == 0):
        raise ValueError(f"hardware.gpu.interconnect_latency_us: must be a number >= 0 and "
                         f"below {GPU_CEILING:g}, got {latency!r}")
    peaks = table["peak_tflops"]
    if not isinstance(peaks, dict) or not peaks:
        raise ValueError(f"hardware.gpu.peak_tflops: must be a table of dtype = TFLOP/s, e.g. "
                         f"{{ fp16 = 989.0 }}, got {peaks!r}")
    for dtype, peak in peaks.items():
        if dtype not in PEAK_DTYPES:
            raise ValueError(f"hardware.gpu.peak_tflops.{dtype}: not a dtype servesim costs "
                             f"on tensor cores (one of {', '.join(PEAK_DTYPES)})")
        if not _is_number_above(peak, 0):
            raise ValueError(f"hardware.gpu.peak_tflops.{dtype}: must be a positive number "
                             f"below {GPU_CEILING:g}, got {peak!r}")
    for key in ("name", "measured", "interconnect"):
        if key in table and not isinstance(table[key], str):
            raise ValueError(f"hardware.gpu.{key}: must be a string, got {table[key]!r}")


def _is_number_above(value, bound: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        bound < value < GPU_CEILING


def cost_per_hour(hardware) -> float | None:
    """Dollars a GPU-hour of a resolved config's hardware settings: its `cost_per_hour`, else
    the catalog's assumed price for its GPU (data/gpus.toml says where each comes from); None
    for a GPU the scenario defines, or a catalog GPU without a price."""
    if hardware.cost_per_hour is not None:
        return float(hardware.cost_per_hour)
    gpu = hardware.gpu
    if not isinstance(gpu, str):
        return None
    return gpus().get(gpu.lower(), {}).get("cost_per_hour")
