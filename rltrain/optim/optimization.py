"""Framework-owned optimization: backward, gradient accumulation, clipping and optimizer steps."""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from rltrain.optim.fused import clip_grad_norm, fused_adam_step
from rltrain.optim.settings import OptimizationSettings
from rltrain.runtime.distributed import SINGLE, DistributedContext
from rltrain.runtime.interrupt import Interrupter
from rltrain.types import Progress

if TYPE_CHECKING:
    from rltrain.types import MetricValue

#: How the stop request of a refused non-finite loss begins (``on_nan_loss="stop"``): a run
#: whose stop reason begins so ended on a refused loss (:func:`ended_on_refused_loss`).
REFUSED_LOSS = "non-finite loss: "


def ended_on_refused_loss(stop_reason: str | None) -> bool:
    """True for the stop reason of a run that a refused non-finite loss stopped: a failed run
    (``rltrain fit`` exits with status 3), not a finished one."""
    return stop_reason is not None and stop_reason.startswith(REFUSED_LOSS)


class TrainableAgent(Protocol):
    """What :meth:`Optimization.training_step` calls on an agent (a
    :class:`~rltrain.LearningAgent`)."""

    def training_step(self, batch: Any, optim: Optimization) -> dict[str, MetricValue]: ...

    def pop_logged(self) -> dict[str, MetricValue]: ...


#: A standalone Optimization's settings: with no run to stop, a non-finite loss raises.
STANDALONE = OptimizationSettings(on_nan_loss="raise")


@dataclass(eq=False)
class OptimizerRecord:
    """One optimizer and what :class:`Optimization` keeps for it.

    Attributes:
        name: The name ``training_step`` passes to ``optim.step``.
        optimizer: The torch optimizer.
        params: Its parameters (every group's).
        scaler: float16's loss scaler; None otherwise.
        device_checked: Whether its losses are checked for NaN on the device (chosen once).
        pending: Batches accumulated toward its next step.
        window: The device flag (1.0) of a non-finite loss since its last step: what the next
            fused step skips on. None when no loss was flagged since.
        flag: The same flag since the last :meth:`Optimization.poll`, with the gradient step
            it was first raised at.
        refused_here: Why this rank's loss was not finite since its last step, in a run of
            several processes (the ranks refuse that step together).
    """

    name: str
    optimizer: torch.optim.Optimizer
    params: list[torch.Tensor]
    scaler: torch.amp.GradScaler | None = None
    device_checked: bool = False
    pending: int = 0
    window: torch.Tensor | None = None
    flag: tuple[torch.Tensor, int] | None = None
    refused_here: str | None = None

    @property
    def trainable(self) -> list[torch.Tensor]:
        """The parameters that take gradients now."""
        return [p for p in self.params if p.requires_grad]

    def note(self, bad: torch.Tensor, gradient_step: int) -> None:
        """Note on the device a flag (1.0) of a non-finite loss: the fused step skips on it,
        and :meth:`Optimization.poll` reports it."""
        self.window = bad if self.window is None else torch.maximum(self.window, bad)
        self.flag = ((bad, gradient_step) if self.flag is None
                     else (torch.maximum(self.flag[0], bad), self.flag[1]))


class Optimization:
    """Runs an agent's ``training_step`` and performs every backward pass and optimizer step.

    Agents never call ``loss.backward()``: they call :meth:`step` with the optimizer's name and the
    loss. With ``accumulate_grad_batches=k`` each optimizer steps once every ``k`` calls, on the
    sum of ``loss / k`` gradients (so an averaged loss over ``k`` batches of size ``B`` gives the
    same update as one batch of size ``k·B``). Clipping applies to that optimizer's parameters
    just before its step. Several optimizers can be stepped in sequence in one ``training_step``
    (world model, then actor, then critic); each accumulates on its own, and each loss's
    backward pass fills only its own optimizer's gradients (``backward(inputs=...)``), so an
    actor loss computed through the critic does not touch the critic's gradients.

    With ``dtype=torch.bfloat16`` or ``torch.float16`` the agent's ``training_step`` runs under
    ``torch.autocast`` (mixed precision: matrix products in the low precision, weights and
    optimizer states in float32); backward passes and optimizer steps run outside it. float16
    also scales each optimizer's loss with its own ``GradScaler`` (unscaled before clipping), as
    its narrow range would otherwise flush small gradients to zero.

    A loss is checked for NaN on the host (one read of a scalar) or, for a fused optimizer off
    the CPU, on the device (the fused kernel skips the update itself, and :meth:`poll` reads
    the flags once per vector step): chosen once per optimizer, here.

    Args:
        optimizers: The agent's optimizers by name (from ``configure_optimizers``).
        progress: The run's counters; :meth:`training_step` advances ``gradient_steps``.
        settings: Accumulation, clipping, the NaN policy and the precision. Default:
            :data:`STANDALONE` (``on_nan_loss="raise"``: no run to stop).
        interrupter: The run's stop request (needed for ``on_nan_loss="stop"``).
        sync: The gradient-sync service (:meth:`DistributedContext.average_gradients_
            <rltrain.runtime.distributed.DistributedContext.average_gradients_>`): with
            several processes each optimizer step first averages the gradients over the ranks,
            so every rank applies the same update, and a non-finite loss on any rank is
            refused on every rank at that step. Default: one process (nothing to sync).
    """

    def __init__(self, optimizers: Mapping[str, torch.optim.Optimizer], *, progress: Progress,
                 settings: OptimizationSettings = STANDALONE,
                 interrupter: Interrupter | None = None,
                 sync: DistributedContext = SINGLE) -> None:
        if not optimizers:
            raise ValueError("configure_optimizers() returned no optimizer; return at least one.")
        if settings.on_nan_loss == "stop" and interrupter is None:
            raise ValueError("on_nan_loss='stop' needs the run's interrupter.")
        self.settings, self.progress = settings, progress
        self.interrupter, self.sync = interrupter, sync
        #: Why the last non-finite loss was refused (None while every loss was finite).
        self.non_finite_loss: str | None = None
        #: Backward passes so far (not saved): a failed gradient step that made none left the
        #: networks and optimizers as they were.
        self.backward_calls = 0
        #: The index of the gradient step being computed (from 1; set by
        #: :meth:`training_step`): what an agent's schedules within a step read (DQN's target
        #: update every ``target_update_interval`` steps, SAC's delayed actor).
        self.gradient_step = progress.gradient_steps + 1
        params = {name: [p for group in opt.param_groups for p in group["params"]]
                  for name, opt in optimizers.items()}
        first = next((p for found in params.values() for p in found), None)
        self.device_type = first.device.type if first is not None else "cpu"
        check_autocast(self.device_type, settings.dtype)
        scaled = settings.dtype == torch.float16
        on_device = (self.device_type != "cpu" if settings.check_on_device is None
                     else settings.check_on_device)
        self.records = {name: OptimizerRecord(
            name, opt, params[name],
            scaler=torch.amp.GradScaler(self.device_type) if scaled else None,
            device_checked=on_device and bool(opt.defaults.get("fused")) and not scaled)
            for name, opt in optimizers.items()}

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers by name."""
        return {name: record.optimizer for name, record in self.records.items()}

    @property
    def dtype(self) -> torch.dtype:
        """The precision of training forward passes."""
        return self.settings.dtype

    def training_step(self, agent: TrainableAgent, batch: Any) -> dict[str, MetricValue]:
        """Run ``agent.training_step(batch, self)`` (under autocast when the dtype asks for it)
        and count it as one gradient step. Values the agent passed to ``log()`` join the
        returned metrics."""
        self.gradient_step = self.progress.gradient_steps + 1
        with self.autocast():
            metrics = agent.training_step(batch, self)
        self.progress.gradient_steps += 1
        logged = agent.pop_logged()
        return {**metrics, **logged} if logged else metrics

    def autocast(self, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` to this run's dtype (a no-op context for float32)."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=enabled)

    def step(self, name: str, loss: torch.Tensor, *, max_norm: float | None = None) -> bool:
        """Backpropagate ``loss`` for optimizer ``name``; step it when its batches are complete.

        ``max_norm`` is the agent's own clip of the gradients' total 2-norm (PPO's
        ``max_grad_norm``), applied after the run's ``gradient_clip_val``. Returns True when the
        optimizer stepped, False while it is still accumulating (or the step was refused).
        """
        record = self._record(name)
        refused = self._guard(record, loss)
        if refused is not None and not self.sync.distributed:
            self._refuse(name, refused)
            return False
        if refused is None:
            self._backward(record, loss)
        else:  # the other ranks wait for this one's gradients: join their step, refusing it
            record.refused_here = record.refused_here or f"{refused} on rank {self.sync.rank}"
        record.pending += 1
        if record.pending < self.settings.accumulate_grad_batches:
            return False
        record.pending = 0
        if not self._synced(record):
            _zero_grad(record.optimizer)
            return False
        if record.scaler is not None:
            record.scaler.unscale_(record.optimizer)  # clip the true gradients, not scaled ones
        self._clip(record, max_norm)
        self._optimizer_step(record)
        _zero_grad(record.optimizer)
        return True

    def _record(self, name: str) -> OptimizerRecord:
        record = self.records.get(name)
        if record is None:
            raise KeyError(f"No optimizer named {name!r}; configure_optimizers() returned "
                           f"{sorted(self.records)}.")
        return record

    def _guard(self, record: OptimizerRecord, loss: torch.Tensor) -> str | None:
        """Why ``loss`` is refused (None when it is finite, or checked on the device, where a
        flag is noted instead)."""
        if record.device_checked:
            record.note((~torch.isfinite(loss.detach())).any().float(),
                        self.progress.gradient_steps + 1)
            return None
        if _finite(loss):
            return None
        return (f"the {record.name!r} loss is "
                f"{loss.detach().float().cpu().flatten()[0].item()} at gradient step "
                f"{self.progress.gradient_steps + 1:,}")

    def _backward(self, record: OptimizerRecord, loss: torch.Tensor) -> None:
        k = self.settings.accumulate_grad_batches
        loss = loss / k if k > 1 else loss
        self.backward_calls += 1
        # Gradients go to this optimizer's parameters only: an actor loss that flows through
        # the critic or the world model leaves their (possibly accumulating) gradients alone.
        with self.autocast(enabled=False):
            (record.scaler.scale(loss) if record.scaler is not None else loss).backward(  # type: ignore[no-untyped-call]
                inputs=record.trainable)

    def _synced(self, record: OptimizerRecord) -> bool:
        """Average the gradients over the ranks (nothing with one process). False when the
        step is refused: a loss checked on the host was not finite on some rank; a flag
        checked on the device makes the fused step skip on every rank instead."""
        if not self.sync.distributed:
            return True
        here, record.refused_here = record.refused_here, None
        device = record.params[0].device if record.params else torch.device("cpu")
        flag = (record.window.reshape(1).float() if record.window is not None
                else torch.tensor([float(here is not None)], device=device))
        bad = self.sync.average_gradients_(record.trainable, flag)
        if record.device_checked:
            record.note(bad, self.progress.gradient_steps + 1)
            return True
        if bad.item() > 0:
            self._refuse(record.name, here or f"a {record.name!r} loss was not finite on another "
                         f"rank at gradient step {self.progress.gradient_steps + 1:,}")
            return False
        return True

    def _clip(self, record: OptimizerRecord, max_norm: float | None) -> None:
        clip = self.settings.gradient_clip_val
        if clip is None and max_norm is None:
            return
        grads = [p.grad for p in record.params if p.grad is not None]
        if clip is not None and self.settings.gradient_clip_algorithm == "norm":
            clip_grad_norm(grads, clip)
        elif clip is not None:
            torch._foreach_clamp_min_(grads, -clip)
            torch._foreach_clamp_max_(grads, clip)
        if max_norm is not None:
            clip_grad_norm(grads, max_norm)

    def _optimizer_step(self, record: OptimizerRecord) -> None:
        optimizer = record.optimizer
        if record.scaler is not None:
            record.scaler.step(optimizer)  # skipped when a gradient overflowed; the scale drops
            record.scaler.update()
        elif record.window is not None:  # the fused kernel skips the update of a flagged loss
            optimizer.found_inf = record.window  # type: ignore[attr-defined]
            record.window = None
            optimizer.step()
            optimizer.found_inf = None  # type: ignore[attr-defined]
        elif not fused_adam_step(optimizer):
            optimizer.step()

    def poll(self) -> None:
        """Read the device-side flags of non-finite losses (one host sync for all of them)
        and act on a flagged one as :meth:`step` does on the host; the updates themselves
        were already skipped on the device."""
        flagged = [record for record in self.records.values() if record.flag is not None]
        if not flagged:
            return
        flags = [record.flag for record in flagged]
        for record in flagged:
            record.flag = None
        found = torch.stack([flag[0] for flag in flags if flag is not None]).cpu().tolist()
        for record, flag, bad in zip(flagged, flags, found, strict=True):
            if bad and flag is not None:
                self._refuse(record.name, f"a {record.name!r} loss was not finite (NaN or "
                             f"infinite) in a gradient step from {flag[1]:,} on")
                return

    def halted(self) -> bool:
        """True once a refused non-finite loss stopped the run (``on_nan_loss="stop"``): the
        one answer the run (nothing saved after it) and failure handling read. Flags checked on
        the device count once read (:meth:`poll`)."""
        return self.settings.on_nan_loss == "stop" and self.non_finite_loss is not None

    def _refuse(self, name: str, reason: str) -> None:
        self.non_finite_loss = reason
        advice = ("Lower the learning rate, clip gradients (gradient_clip_val), check the "
                  "rewards' scale, or set on_nan_loss='skip' to drop such updates.")
        if self.settings.on_nan_loss == "raise":
            raise FloatingPointError(f"Non-finite loss: {reason}. {advice}")
        if self.settings.on_nan_loss == "stop":
            assert self.interrupter is not None
            self.interrupter.stop(f"{REFUSED_LOSS}{reason}; the update was skipped and the run "
                                  "stopped, writing no checkpoint after it. " + advice)
        else:
            warnings.warn(f"Skipped an update: {reason}.", stacklevel=3)

    def state_dict(self) -> dict[str, Any]:
        """Every optimizer's state, and the batches (with their summed gradients) accumulated
        toward each one's next step, so a restored run steps exactly when and as this one would."""
        records = self.records.values()
        return {
            "optimizers": {r.name: r.optimizer.state_dict() for r in records},
            "pending": {r.name: r.pending for r in records},
            "scalers": {r.name: r.scaler.state_dict() for r in records if r.scaler is not None},
            "pending_grads": {
                r.name: [None if p.grad is None else p.grad.detach().clone() for p in r.params]
                for r in records if r.pending
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        saved = state["optimizers"]
        if set(saved) != set(self.records):
            raise ValueError(
                f"The saved optimizers {sorted(saved)} do not match the agent's "
                f"{sorted(self.records)}."
            )
        for name, record in self.records.items():
            record.optimizer.load_state_dict(saved[name])
            record.pending = int(state["pending"][name])
            saved_scaler = state.get("scalers", {}).get(name)
            if record.scaler is not None and saved_scaler:
                record.scaler.load_state_dict(saved_scaler)
            grads = state.get("pending_grads", {}).get(name)
            for param, grad in zip(record.params, grads or [None] * len(record.params),
                                   strict=True):
                param.grad = None if grad is None else grad.to(param.device).clone()


def check_autocast(device_type: str, dtype: torch.dtype) -> None:
    """Raise ``ValueError`` when ``device_type`` cannot train in ``dtype``."""
    if dtype == torch.float32:
        return
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be float32, bfloat16 or float16; got {dtype}.")
    if not torch.amp.is_autocast_available(device_type):
        raise ValueError(f"{device_type} has no autocast; train with dtype='float32' there.")
    if device_type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ValueError("This GPU does not support bfloat16; use dtype='float16' (with loss "
                         "scaling) or 'float32'.")


def _zero_grad(optimizer: torch.optim.Optimizer) -> None:
    """What ``optimizer.zero_grad(set_to_none=True)`` does, without its wrapper (a profiler
    record and per-call grouping)."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None


def _finite(loss: torch.Tensor) -> bool:
    # One element (the usual loss): reading it is cheaper than isfinite().all()
    # (docs/benchmarks.md, "Figures behind implementation choices").
    if loss.numel() == 1:
        return math.isfinite(loss.item())
    return bool(torch.isfinite(loss).all())
