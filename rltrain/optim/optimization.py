"""Framework-owned optimization: backward, gradient accumulation, clipping and optimizer steps."""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch

from rltrain.components import RLComponents
from rltrain.optim.fused import clip_grad_norm, fused_adam_step
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

    Args:
        optimizers: The agent's optimizers by name (from ``configure_optimizers``).
        progress: The run's counters; :meth:`training_step` advances ``gradient_steps``.
        accumulate_grad_batches: Batches per optimizer step. Default 1.
        gradient_clip_val: Maximum gradient norm (or absolute value); None does not clip.
        gradient_clip_algorithm: ``"norm"`` (total 2-norm over the optimizer's parameters) or
            ``"value"`` (each element clamped). Default ``"norm"``.
        on_nan_loss: What a NaN or infinite loss does. ``"stop"`` (what strategies pass by
            default, from ``RLComponents``): the update is skipped, the run is asked to stop
            (through ``interrupter``) and no checkpoint is written after it, so ``last`` stays
            the last good one. ``"skip"``: the update is skipped with a warning and training
            goes on. ``"raise"`` (the default here, with no run to stop):
            ``FloatingPointError``.
        interrupter: The run's stop request (needed for ``on_nan_loss="stop"``).
        dtype: ``torch.float32`` (default), or ``torch.bfloat16`` / ``torch.float16`` autocast.
        check_on_device: Check losses for NaN on the device instead of reading each one to
            the host: the fused Adam kernel skips the update of a non-finite loss itself, and
            the run reads the flags once per vector step (:meth:`poll`), so a GPU step needs no
            host sync. Default None: on for fused optimizers off the CPU (where a read costs a
            sync; on the CPU it costs nothing). Optimizers that are not fused are always
            checked on the host.
        distributed: The run's processes (:mod:`rltrain.runtime.distributed`). With several, each
            optimizer step first averages the gradients over the ranks (one all-reduce of
            one flat buffer, after the last accumulated backward pass and before clipping),
            so every rank applies the same update; a non-finite loss on any rank travels in
            the same buffer and is refused on every rank at that step. Default: one process.
    """

    def __init__(
        self,
        optimizers: Mapping[str, torch.optim.Optimizer],
        *,
        progress: Progress,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: Literal["norm", "value"] = "norm",
        on_nan_loss: Literal["stop", "skip", "raise"] = "raise",
        interrupter: Interrupter | None = None,
        dtype: torch.dtype = torch.float32,
        check_on_device: bool | None = None,
        distributed: DistributedContext = SINGLE,
    ) -> None:
        if not optimizers:
            raise ValueError("configure_optimizers() returned no optimizer; return at least one.")
        if accumulate_grad_batches < 1:
            raise ValueError(
                f"accumulate_grad_batches must be >= 1; got {accumulate_grad_batches}."
            )
        if on_nan_loss not in ("stop", "skip", "raise"):
            raise ValueError(
                f"on_nan_loss must be 'stop', 'skip' or 'raise'; got {on_nan_loss!r}.")
        if on_nan_loss == "stop" and interrupter is None:
            raise ValueError("on_nan_loss='stop' needs the run's interrupter.")
        self.on_nan_loss = on_nan_loss
        self.interrupter = interrupter
        #: Why the last non-finite loss was refused (None while every loss was finite).
        self.non_finite_loss: str | None = None
        #: Backward passes so far (not saved): a failed gradient step that made none left the
        #: networks and optimizers as they were.
        self.backward_calls = 0
        self.optimizers = dict(optimizers)
        self.progress = progress
        self.accumulate_grad_batches = accumulate_grad_batches
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self._pending = dict.fromkeys(self.optimizers, 0)
        self._params = {
            name: [p for group in opt.param_groups for p in group["params"]]
            for name, opt in self.optimizers.items()
        }
        self.dtype = dtype
        first = next((p for params in self._params.values() for p in params), None)
        self.device_type = first.device.type if first is not None else "cpu"
        check_autocast(self.device_type, dtype)
        self._scalers = ({name: torch.amp.GradScaler(self.device_type)
                          for name in self.optimizers} if dtype == torch.float16 else {})
        on_device = self.device_type != "cpu" if check_on_device is None else check_on_device
        #: Optimizers whose losses are checked on the device, and each one's flag of a
        #: non-finite loss since the last :meth:`poll` (with the gradient step it follows).
        self._device_checked = {name for name, opt in self.optimizers.items()
                                if on_device and opt.defaults.get("fused") and not self._scalers}
        self._flags: dict[str, tuple[torch.Tensor, int]] = {}
        #: The same flag since each one's last optimizer step: what its next step skips on.
        self._window: dict[str, torch.Tensor] = {}
        self.distributed = distributed
        #: With several processes: why this rank's loss of each optimizer was not finite since
        #: its last step (the ranks refuse that step together).
        self._refused_here: dict[str, str] = {}

    @classmethod
    def for_run(cls, optimizers: Mapping[str, torch.optim.Optimizer],
                components: RLComponents) -> Optimization:
        """An ``Optimization`` with the run's settings (accumulation, clipping, NaN policy)."""
        return cls(optimizers, progress=components.progress,
                   accumulate_grad_batches=components.accumulate_grad_batches,
                   gradient_clip_val=components.gradient_clip_val,
                   gradient_clip_algorithm=components.gradient_clip_algorithm,
                   on_nan_loss=components.on_nan_loss, interrupter=components.interrupter,
                   dtype=components.dtype, distributed=components.distributed)

    def training_step(self, agent: TrainableAgent, batch: Any) -> dict[str, MetricValue]:
        """Run ``agent.training_step(batch, self)`` (under autocast when the dtype asks for it)
        and count it as one gradient step. Values the agent passed to ``log()`` join the
        returned metrics."""
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
        optimizer stepped, False while it is still accumulating.
        """
        optimizer = self.optimizers.get(name)
        if optimizer is None:
            raise KeyError(
                f"No optimizer named {name!r}; configure_optimizers() returned "
                f"{sorted(self.optimizers)}."
            )
        if name in self._device_checked:
            self._flag(name, (~torch.isfinite(loss.detach())).any().float())
        elif not _finite(loss):
            reason = (f"the {name!r} loss is {loss.detach().float().cpu().flatten()[0].item()} "
                      f"at gradient step {self.progress.gradient_steps + 1:,}")
            if not self.distributed.distributed:
                self._refuse(name, reason)
                return False
            # The other ranks wait for this one's gradients: join their step, refusing it.
            self._refused_here.setdefault(name, f"{reason} on rank {self.distributed.rank}")
            return self._count_and_step(name, optimizer, max_norm)
        with self.autocast(enabled=False):
            return self._backward_and_step(name, optimizer, loss, max_norm)

    def _flag(self, name: str, bad: torch.Tensor) -> None:
        """Note on the device a flag (1.0) of a non-finite ``name`` loss; the fused step skips
        on it, and :meth:`poll` reports it."""
        window = self._window.get(name)
        self._window[name] = bad if window is None else torch.maximum(window, bad)
        previous = self._flags.get(name)
        self._flags[name] = ((bad, self.progress.gradient_steps + 1) if previous is None
                             else (torch.maximum(previous[0], bad), previous[1]))

    def poll(self) -> None:
        """Read the device-side flags of non-finite losses (one host sync for all of them)
        and act on a flagged one as :meth:`step` does on the host; the updates themselves
        were already skipped on the device."""
        if not self._flags:
            return
        flags, self._flags = self._flags, {}
        names = list(flags)
        found = torch.stack([flags[n][0] for n in names]).cpu().tolist()
        for name, bad in zip(names, found, strict=True):
            if bad:
                self._refuse(name, f"a {name!r} loss was not finite (NaN or infinite) in a "
                             f"gradient step from {flags[name][1]:,} on")
                return

    def _backward_and_step(self, name: str, optimizer: torch.optim.Optimizer,
                           loss: torch.Tensor, max_norm: float | None) -> bool:
        k = self.accumulate_grad_batches
        scaler = self._scalers.get(name)
        loss = loss / k if k > 1 else loss
        # Gradients go to this optimizer's parameters only: an actor loss that flows through
        # the critic or the world model leaves their (possibly accumulating) gradients alone.
        inputs = [p for p in self._params[name] if p.requires_grad]
        self.backward_calls += 1
        (scaler.scale(loss) if scaler is not None else loss).backward(  # type: ignore[no-untyped-call]
            inputs=inputs)
        return self._count_and_step(name, optimizer, max_norm)

    def _count_and_step(self, name: str, optimizer: torch.optim.Optimizer,
                        max_norm: float | None) -> bool:
        """Count one batch toward ``name``'s step; step when its batches are complete."""
        scaler = self._scalers.get(name)
        self._pending[name] += 1
        if self._pending[name] < self.accumulate_grad_batches:
            return False
        self._pending[name] = 0
        if self.distributed.distributed and not self._average_gradients(name):
            _zero_grad(optimizer)
            return False
        if scaler is not None:
            scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        if self.gradient_clip_val is not None:
            grads = [p.grad for p in self._params[name] if p.grad is not None]
            if self.gradient_clip_algorithm == "norm":
                clip_grad_norm(grads, self.gradient_clip_val)
            else:
                torch._foreach_clamp_min_(grads, -self.gradient_clip_val)
                torch._foreach_clamp_max_(grads, self.gradient_clip_val)
        if max_norm is not None:
            clip_grad_norm([p.grad for p in self._params[name] if p.grad is not None], max_norm)
        if scaler is not None:
            scaler.step(optimizer)  # skipped when a gradient overflowed; the scale then drops
            scaler.update()
        elif name in self._window:  # the fused kernel skips the update of a flagged loss
            optimizer.found_inf = self._window.pop(name)  # type: ignore[attr-defined]
            optimizer.step()
            optimizer.found_inf = None  # type: ignore[attr-defined]
        elif not fused_adam_step(optimizer):
            optimizer.step()
        _zero_grad(optimizer)
        return True

    def _average_gradients(self, name: str) -> bool:
        """Average ``name``'s gradients over the ranks, with the non-finite-loss flags of its
        step in the same all-reduce. Returns False when the step is refused (a loss checked
        on the host was not finite on some rank); a flag checked on the device makes the
        fused step skip on every rank instead."""
        params = [p for p in self._params[name] if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        window = self._window.get(name)
        here = self._refused_here.pop(name, None)
        device = params[0].device if params else torch.device("cpu")
        flag = (window.reshape(1).float() if window is not None
                else torch.tensor([float(here is not None)], device=device))
        flat = torch.cat([*(g.reshape(-1).float() for g in grads), flag])
        self.distributed.all_reduce_(flat)
        flat[:-1].div_(self.distributed.world_size)
        offset = 0
        for param, grad in zip(params, grads, strict=True):
            grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
            param.grad = grad
            offset += grad.numel()
        bad = flat[-1].clamp(max=1.0)  # any rank's flag (its own included)
        if name in self._device_checked:
            self._flag(name, bad)
            return True
        if bad.item() > 0:
            self._refuse(name, here or f"a {name!r} loss was not finite on another rank at "
                         f"gradient step {self.progress.gradient_steps + 1:,}")
            return False
        return True

    def _refuse(self, name: str, reason: str) -> None:
        self.non_finite_loss = reason
        advice = ("Lower the learning rate, clip gradients (gradient_clip_val), check the "
                  "rewards' scale, or set on_nan_loss='skip' to drop such updates.")
        if self.on_nan_loss == "raise":
            raise FloatingPointError(f"Non-finite loss: {reason}. {advice}")
        if self.on_nan_loss == "stop":
            assert self.interrupter is not None
            self.interrupter.stop(f"{REFUSED_LOSS}{reason}; the update was skipped and the run "
                                  "stopped, writing no checkpoint after it. " + advice)
        else:
            warnings.warn(f"Skipped an update: {reason}.", stacklevel=3)

    def state_dict(self) -> dict[str, Any]:
        """Every optimizer's state, and the batches (with their summed gradients) accumulated
        toward each one's next step, so a restored run steps exactly when and as this one would."""
        return {
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
            "pending": dict(self._pending),
            "scalers": {name: scaler.state_dict() for name, scaler in self._scalers.items()},
            "pending_grads": {
                name: [None if p.grad is None else p.grad.detach().clone() for p in params]
                for name, params in self._params.items() if self._pending[name]
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        saved = state["optimizers"]
        if set(saved) != set(self.optimizers):
            raise ValueError(
                f"The saved optimizers {sorted(saved)} do not match the agent's "
                f"{sorted(self.optimizers)}."
            )
        for name, opt in self.optimizers.items():
            opt.load_state_dict(saved[name])
        self._pending = {name: int(state["pending"][name]) for name in self.optimizers}
        for name, scaler in self._scalers.items():
            saved_scaler = state.get("scalers", {}).get(name)
            if saved_scaler:
                scaler.load_state_dict(saved_scaler)
        for name, params in self._params.items():
            grads = state.get("pending_grads", {}).get(name)
            for param, grad in zip(params, grads or [None] * len(params), strict=True):
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
    # One element (the usual loss): read it (0.6 µs) instead of isfinite().all() (15 µs).
    if loss.numel() == 1:
        return math.isfinite(loss.item())
    return bool(torch.isfinite(loss).all())
