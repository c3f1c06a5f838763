"""The routed experts of `MeasuredOps` (which mixes `MeasuredMoe` in: it sets `arch`, `tables`,
`ep`, `experts_gpus`, `distribution`, `chain`, `activations`, `moe_backend`, `_moe_dtype`,
`_first`, and where the kernel was found, `marlin_shape`, `triton_version`, `mxfp8_shape` and
`mxfp8_source`): the fused MoE kernel a run's experts take (`_moe`): the framework's default,
Marlin's or Triton's (`hardware.moe_backend`), or, for mxfp4 experts with MXFP8 activations
(`hardware.activation_scheme = "mxfp8"`), the kernel measured so, at the model's shape (another
framework's rows of the same kernel where the run's lack it) or transferred from the nearest
(`MoeTables.moe_mxfp8`); which one and from where, for the notes and the report
(`moe_kernel_text`); and why a choice cannot cost the experts here (`refusal`).
"""

from __future__ import annotations

from .kernels import MOE_CHAIN
from .marlin import expert_shape, marlin_missing, marlin_text, on_marlin


def mxfp8_text(framework: str, shape: tuple, measured_at: tuple, other: str | None) -> str:
    """Where the time of mxfp4 experts with MXFP8 activations comes from
    (`KernelTables.moe_mxfp8`; `other`: another framework's collection that timed the kernel at
    the model's shape), for the notes and the report."""
    kernel = f"{framework}'s MoE kernel with MXFP8 activations"
    if other is not None:
        return (f"{kernel} (FlashInfer's TensorRT-LLM kernel), as {other}'s tables timed it at "
                f"this model's shape ({framework}'s time it at other shapes only)")
    if measured_at == shape:
        return f"{kernel}, as measured at this model's shape"
    hidden, inter, topk, experts = measured_at
    return (f"{kernel}, as measured at hidden {hidden}, intermediate {inter}, {experts} "
            f"experts, top {topk}: scaled to this model's experts at as many rows an expert")


class MeasuredMoe:
    """The routed experts' kernel and its time (module docstring)."""

    def moe_kernel_text(self) -> str | None:
        """The experts' kernel where `moe_backend` or MXFP8 activations chose one, and where it
        was measured (None: the framework's default, or not measured)."""
        if self._moe_dtype is None:
            return None
        if self.triton_version is not None:
            tables = self.tables
            older = "" if self.triton_version == tables.version else (
                f" (the newest on the {tables.gpu} that timed it at these experts' shape and "
                f"layout)")
            return (f"the Triton fused MoE kernel, as {tables.framework} "
                    f"{self.triton_version}'s tables timed it{older}")
        if self.mxfp8_shape is not None:
            return mxfp8_text(self.tables.framework, expert_shape(self.arch), self.mxfp8_shape,
                              self.mxfp8_source)
        if self.marlin_shape is None:
            return None
        return marlin_text(expert_shape(self.arch), self.marlin_shape)

    def refusal(self) -> tuple[str, str] | None:
        """(the key, what is wrong and what to use instead) where the run's `moe_backend` or
        MXFP8 activations cannot cost its experts here, or None; the caller names the key as
        its user gave it."""
        if self.backend_missing:
            return "moe_backend", f'"{self.moe_backend}": {self.backend_missing}; use "auto"'
        if self.scheme_missing:
            return "activation_scheme", (f'"mxfp8": {self.scheme_missing}; use "static" (bf16 '
                                         f'activations)')
        return None

    def _backend_missing(self, probe, dtype: str) -> str | None:
        """Why `moe_backend` cannot cost the experts where the default kernel can (the tables
        have no such kernel at this shape and layout), or None."""
        chain = self.chain | MOE_CHAIN
        if self.moe_backend == "auto" or not self.arch.is_moe or self._moe_dtype is not None:
            return None
        default = self._first(lambda d: self._moe(probe, d, "auto"), dtype, chain)
        if default is None:
            return None  # no experts of this shape measured at all: the roofline's, said so
        layout = self._moe_layout()
        if self.moe_backend == "marlin":
            return marlin_missing(self.tables, default, layout, self.distribution)
        tables, tried = self.tables, chain.get(dtype, (dtype,))
        return (f"no {tables.framework} collection up to {tables.version} on the {tables.gpu} "
                f"timed a Triton MoE kernel at this model's experts' shape in "
                f"{' or '.join(tried)} with the experts at moe TP {layout[0]} x EP {layout[1]}")

    def _scheme_missing(self) -> str | None:
        """Why mxfp4 experts cannot run with MXFP8 activations here (the tables time no such
        kernel at this layout), or None."""
        if self.activations != "mxfp8" or self._moe_dtype is not None:
            return None
        layout = self._moe_layout()
        return (f"{self.tables.describe()} time no MoE kernel of mxfp4 experts with MXFP8 "
                f"activations with the experts at moe TP {layout[0]} x EP {layout[1]}")

    def _moe_layout(self) -> tuple[int, int]:
        """(moe TP, moe EP): the experts split by TP over their GPUs, or whole across them."""
        return (self.experts_gpus, 1) if self.ep == 1 else (1, self.ep)

    def _moe(self, tokens, dtype: str, backend: str | None = None):
        """The routed experts' measured seconds: with MXFP8 activations, the kernel timed so
        (`KernelTables.moe_mxfp8`); else the framework's default kernel, or on `backend`'s
        (None: `moe_backend`'s) "marlin", Marlin's (`marlin.on_marlin`), or "triton", the
        Triton kernel's (`KernelTables.moe_triton`)."""
        shape, layout = expert_shape(self.arch), self._moe_layout()
        backend = backend or self.moe_backend
        if self.activations == "mxfp8":  # mxfp4 experts (check_dtypes), on the default kernel
            found = self.tables.moe_mxfp8(tokens, *shape, *layout, self.distribution)
            if found is None:
                return None
            seconds, self.mxfp8_shape, self.mxfp8_source = found
            return seconds
        if backend == "triton":
            found = self.tables.moe_triton(tokens, *shape, *layout, dtype, self.distribution)
            if found is None:
                return None
            seconds, self.triton_version = found
            return seconds
        default = self.tables.moe(tokens, *shape, *layout, dtype, self.distribution)
        if backend != "marlin" or default is None:
            return default
        marlin = on_marlin(self.tables, tokens, shape, layout, dtype, self.distribution, default)
        if marlin is None:
            return None
        seconds, self.marlin_shape = marlin
        return seconds
