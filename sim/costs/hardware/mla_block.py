"""Which measured latent-attention block a model's layers are: the package measured DeepSeek-V3's
multi-head latent attention as one block (projections, norms, attention and output projection),
which serves any model of its shape (`mla_model`), and DeepSeek-V3.2's and GLM-5's
sparse-attention layers whole (`sparse_model`).
"""

from __future__ import annotations

from functools import lru_cache

from .architecture import Architecture
from .catalog import model_architecture
from .kernels import data_root

# What DeepSeek's measured latent-attention block runs besides attention: its projections, the
# latents' norms and the output projection (in `mla_block` steps, costed with the attention)
MLA_BLOCK_OPS = ("mla_down_proj", "mla_q_up_proj", "mla_kv_up_proj", "mla_norm",
                 "attn_post_proj")
# The models whose latent-attention block the package measured, and what its shape is
MLA_MODELS = ("deepseek-ai/DeepSeek-V3",)
MLA_SHAPE = ("d_model", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
             "v_head_dim")
# and what the attention kernel measured alone depends on (its heads are looked up)
MLA_HEAD_DIMS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


# The models whose sparse-attention layer the package measured whole (the indexer and its
# projections, the latent projections and norms, the sparse attention, the output projection:
# `dsa_*_module_perf`), their shapes read from the package's own copies of their config.json
SPARSE_BLOCK_OPS = (*MLA_BLOCK_OPS, "indexer_q_proj", "indexer_k_proj")
SPARSE_MODELS = ("deepseek-ai/DeepSeek-V3.2", "zai-org/GLM-5")
SPARSE_SHAPE = (*MLA_SHAPE, "index_topk", "index_n_heads", "index_head_dim")


def sparse_model(arch: Architecture) -> str | None:
    """The model whose sparse-attention layer the tables measured in `arch`'s shape (its heads
    per GPU looked up in the table), whatever `arch` is called; None: none."""
    for name in SPARSE_MODELS:
        measured = _package_model(name)
        if measured is not None and all(getattr(measured, key) == getattr(arch, key)
                                        for key in SPARSE_SHAPE):
            return name
    return None


@lru_cache(maxsize=None)
def _package_model(name: str) -> Architecture | None:
    """`name` as the package's copy of its config.json reads (None: no such copy)."""
    root = data_root()  # .../aiconfigurator_core/systems/data
    if root is None:
        return None
    path = root.parent.parent / "model_configs" / f"{name.replace('/', '--')}_config.json"
    return model_architecture({"config": str(path)}) if path.is_file() else None


def mla_model(arch: Architecture, shape: tuple = MLA_SHAPE) -> str | None:
    """The model whose latent-attention block the tables measured in `arch`'s shape (width and
    ranks; its heads per GPU are looked up in the table), whatever `arch` is called: DeepSeek-
    V3's block is also DeepSeek-R1's, and any config.json's of its shape. None: no such model
    (a V3 with another latent rank is not V3's block). `shape`: the keys that must match
    (`MLA_HEAD_DIMS`: those of the attention kernel measured alone)."""
    for name in MLA_MODELS:
        measured = model_architecture({"name": name})
        if all(getattr(measured, key) == getattr(arch, key) for key in shape):
            return name
    return None
