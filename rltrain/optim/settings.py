"""A run's optimization settings, declared and checked once (:class:`OptimizationSettings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rltrain.optim.compiled import COMPILE_MODES

#: Training precisions: float32, or autocast to bfloat16 / float16 (weights stay float32).
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                                  "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"``, ``"bfloat16"``, ``"float16"`` (or the torch dtype) as a torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype in DTYPES.values():
            return dtype
    elif dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"dtype must be one of {list(DTYPES)}; got {dtype!r}. bfloat16 and float16 "
                     "train with autocast (mixed precision); the weights stay float32.")


@dataclass(frozen=True)
class OptimizationSettings:
    """How :class:`~rltrain.optim.Optimization` turns losses into updates (Lightning's
    ``Trainer`` arguments of the same names).

    Attributes:
        accumulate_grad_batches: Batches whose gradients are summed before each optimizer
            step. Default 1.
        gradient_clip_val: Clip each optimizer's gradients to this norm (or value); None does
            not clip. Default None.
        gradient_clip_algorithm: ``"norm"`` (total 2-norm over the optimizer's parameters, as
            ``clip_grad_norm_``) or ``"value"`` (each element clamped). Default ``"norm"``.
        on_nan_loss: What a NaN or infinite loss does. ``"stop"`` (a run's default): the
            update is skipped, the run is asked to stop and no checkpoint is written after it,
            so ``last`` stays the last good one. ``"skip"``: the update is skipped with a
            warning and training goes on. ``"raise"``: ``FloatingPointError``. Default
            ``"stop"``.
        dtype: The precision of training forward passes: ``torch.float32``, or
            ``torch.bfloat16`` / ``torch.float16`` under autocast (float16 with loss scaling).
            A name (``"bfloat16"``) is taken too. Default float32.
        check_on_device: Check losses for NaN on the device instead of reading each one to
            the host (fused optimizers only: the fused Adam kernel skips the update of a
            non-finite loss itself, and the run reads the flags once per vector step). Default
            None: on off the CPU, where a read costs a sync.
        compile: The ``torch.compile`` mode the agent's networks are compiled with
            (:mod:`rltrain.optim.compiled`): ``"default"``, ``"reduce-overhead"`` or
            ``"max-autotune"``. Default None: not compiled.
    """

    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: Literal["norm", "value"] = "norm"
    on_nan_loss: Literal["stop", "skip", "raise"] = "stop"
    dtype: torch.dtype = torch.float32
    check_on_device: bool | None = None
    compile: str | None = None

    def __post_init__(self) -> None:
        if (not isinstance(self.accumulate_grad_batches, int)
                or self.accumulate_grad_batches < 1):
            raise ValueError(f"accumulate_grad_batches must be >= 1 batch; got "
                             f"{self.accumulate_grad_batches}.")
        clip = self.gradient_clip_val
        if clip is not None and clip <= 0:
            raise ValueError(f"gradient_clip_val must be > 0 (or None for no clipping); got "
                             f"{clip}.")
        if self.gradient_clip_algorithm not in ("norm", "value"):
            raise ValueError(f"gradient_clip_algorithm must be 'norm' or 'value'; got "
                             f"{self.gradient_clip_algorithm!r}.")
        if self.on_nan_loss not in ("stop", "skip", "raise"):
            raise ValueError(f"on_nan_loss must be 'stop', 'skip' or 'raise'; got "
                             f"{self.on_nan_loss!r}.")
        if self.compile is not None and self.compile not in COMPILE_MODES.values():
            raise ValueError(f"compile must be None or a torch.compile mode "
                             f"({', '.join(sorted(set(filter(None, COMPILE_MODES.values()))))}); "
                             f"got {self.compile!r}.")
        object.__setattr__(self, "dtype", resolve_dtype(self.dtype))

    def hparams(self) -> dict[str, float | int | str | bool]:
        """The settings that change what a gradient step computes, for the run's hparams
        (compared on resume)."""
        return {"optim/accumulate_grad_batches": self.accumulate_grad_batches,
                "optim/gradient_clip_val": ("none" if self.gradient_clip_val is None
                                            else float(self.gradient_clip_val)),
                "optim/gradient_clip_algorithm": self.gradient_clip_algorithm,
                "optim/dtype": str(self.dtype).removeprefix("torch.")}
