"""When training fails part-way: save what can be saved, and say where it failed.

An exception from an environment, the agent, a subscriber or the disk ends the run. Before it
propagates, an *emergency checkpoint* is written when the run's state is consistent (Lightning
saves on exception too), so the work since the last checkpoint is not lost; the error is then
re-raised as a :class:`~rltrain.errors.TrainingError` naming the phase, the env step, the
sub-env and what was saved.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import torch

from rltrain.checkpoint import Checkpointer, SavedCheckpoint
from rltrain.envs.errors import SubEnvError
from rltrain.envs.runner import Runner
from rltrain.errors import TrainingError
from rltrain.optim import Optimization
from rltrain.strategies.run.storage import Sampled
from rltrain.types import Progress

#: What each phase is doing, for the message.
PHASES = {"collect": "collecting experience", "train": "training", "evaluate": "evaluating",
          "save": "saving a checkpoint"}


class StepStart:
    """What a gradient step may change before it fails part-way, as it was when the step began:
    the count of backward passes (none more means no weights changed), and the generators the
    step draws from first (the replay sampler's, torch's CPU generator). Taken before every
    gradient step (a few microseconds) and put back by :func:`failed`, so that the emergency
    checkpoint of a step that failed before its first backward pass is the state before it."""

    def __init__(self) -> None:
        self.backward_calls = 0
        self._sampler: Any = None
        self._torch: torch.Tensor | None = None
        self._optim: Optimization | None = None

    def watch(self, run: FailingRun, optim: Optimization, buffer: Sampled | None
              ) -> StepStart:
        """Around one gradient step (``with``): the run's phase set to ``train`` and what the
        step may change taken; once it is done, nothing to put back."""
        run.phase = "train"
        self.backward_calls = optim.backward_calls
        self._sampler = None if buffer is None else buffer.sampler_state
        self._torch = torch.get_rng_state()
        self._optim = optim
        return self

    def __enter__(self) -> StepStart:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if kind is None and self._optim is not None:  # done: nothing to put back
            self.backward_calls = self._optim.backward_calls
            self._sampler = self._torch = None

    def applied(self, optim: Optimization) -> bool:
        """True when the current step already ran a backward pass (it changed gradients)."""
        return optim.backward_calls != self.backward_calls

    def rewind(self, buffer: Sampled | None) -> None:
        """Put back what the failed step drew from the generators."""
        if self._sampler is not None and buffer is not None:
            buffer.sampler_state = self._sampler
        if self._torch is not None:
            torch.set_rng_state(self._torch)


class FailingRun(Protocol):
    """What :func:`failed` reads from a strategy's run."""

    phase: str
    saved_at: int
    step_start: StepStart
    sampled: Sampled | None
    progress: Progress
    runner: Runner
    optim: Optimization
    checkpointer: Checkpointer | None

    def refused(self) -> bool: ...

    def state(self) -> dict[str, Any]: ...

    def announce(self, saved: SavedCheckpoint, *, best: bool = False) -> None: ...


def failed(run: FailingRun, error: Exception) -> TrainingError:
    """Write an emergency checkpoint of ``run`` when its state allows, and return the
    :class:`~rltrain.errors.TrainingError` to raise from ``error``."""
    progress = run.progress
    sub_env = _sub_env(error, run.runner)
    steps = progress.gradient_steps
    where = (f"after {progress.env_steps:,} env steps ({progress.vector_steps:,} vector steps, "
             f"{steps:,} gradient step{'' if steps == 1 else 's'}), while {PHASES[run.phase]}"
             + (f", in {'evaluation ' if run.phase == 'evaluate' else ''}sub-env {sub_env}"
                if sub_env is not None else ""))
    cause = str(error) if isinstance(error, SubEnvError) else f"{type(error).__name__}: {error}"
    cause = cause.rstrip(". ")
    saved, outcome = _emergency_save(run)
    message = f"Training failed {where}: {cause}. {outcome} {next_step(run.checkpointer)}"
    return TrainingError(message, phase=run.phase, env_steps=progress.env_steps,
                         sub_env=sub_env, checkpoint=saved)


def _sub_env(error: Exception, runner: Runner) -> int | None:
    index = getattr(error, "index", None) if isinstance(error, SubEnvError) else None
    if index is None and runner.num_envs == 1 and runner.envs_out_of_step:
        return 0
    return index


def _emergency_save(run: FailingRun) -> tuple[Path | None, str]:
    """Save the run's state when it is consistent; returns the file and a sentence for the
    message saying what was saved, or why nothing was and what is left."""
    checkpointer = run.checkpointer
    if checkpointer is None:
        return None, "Nothing was saved (this run writes no checkpoints)."
    why_not = _why_not_consistent(run)
    if why_not is None and run.saved_at == run.progress.env_steps:
        why_not = "the checkpoint of this env step was already written"
    if why_not is None:
        if run.phase == "train":
            run.step_start.rewind(run.sampled)
        try:
            saved = checkpointer.save(run.state(), env_steps=run.progress.env_steps)
        except Exception as error:  # a full disk fails the emergency save too
            why_not = f"writing it failed too ({type(error).__name__}: {error})"
        else:
            _announce(run, saved)
            envs = (" The environments were not saved with it (they failed part-way through "
                    "a step): a resumed run restarts their episodes."
                    if run.runner.envs_out_of_step else "")
            return saved.path, (f"An emergency checkpoint of the state before the failure was "
                                f"saved: {saved.path} (it is now 'last').{envs}")
    return None, f"No emergency checkpoint was saved: {why_not}. {_last(checkpointer)}"


def _why_not_consistent(run: FailingRun) -> str | None:
    if run.checkpointer is not None and run.checkpointer.distributed.distributed:
        return ("in a run of several processes a save takes every rank, and the others "
                "cannot join one rank's failure")
    if run.phase == "save":
        return "the failure was in a save"
    if run.refused():
        return "a non-finite loss was refused before it, so nothing after it is saved"
    if run.phase == "train" and run.step_start.applied(run.optim):
        return ("the failure came in the middle of a gradient step, after part of it was "
                "applied")
    return None


def last_checkpoint(checkpointer: Checkpointer | None) -> Path | None:
    """The checkpoint ``last`` resolves to now; None when the run has none (or saves none)."""
    if checkpointer is None:
        return None
    try:
        return checkpointer.resolve("last")
    except (FileNotFoundError, ValueError):
        return None


def _last(checkpointer: Checkpointer) -> str:
    path = last_checkpoint(checkpointer)
    if path is None:
        return "There is no earlier checkpoint."
    return f"The last checkpoint, {path}, is intact."


def next_step(checkpointer: Checkpointer | None) -> str:
    """What to do once a run failed or stopped on a refused loss: resume from its last
    checkpoint, or start it again when it has none (nothing to resume)."""
    if last_checkpoint(checkpointer) is None:
        return ("Nothing can be resumed: fix the cause and start the run again (rltrain fit "
                "without --resume).")
    return "Fix the cause, then resume with ckpt_path='last' (rltrain fit --resume RUN_DIR)."


def what_is_left(checkpointer: Checkpointer | None) -> str:
    """The last checkpoint a run that stops without saving leaves (or that it has none), and
    :func:`next_step`."""
    left = "This run writes no checkpoints." if checkpointer is None else _last(checkpointer)
    return f"{left} {next_step(checkpointer)}"


def _announce(run: FailingRun, saved: SavedCheckpoint) -> None:
    """Tell the subscribers, unless one of them is what failed."""
    try:
        run.announce(saved)
    except Exception as error:
        warnings.warn(f"A subscriber failed on the emergency checkpoint's event: {error}",
                      stacklevel=3)
