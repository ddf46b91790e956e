"""What every strategy needs, bundled: :class:`RLComponents` and the run's :class:`Progress`."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

import torch

from rltrain.checkpoint.store import Checkpointer, read_checkpoint
from rltrain.envs.evaluator import EvaluationSettings
from rltrain.observe.processor import EventProcessor
from rltrain.optim.settings import OptimizationSettings
from rltrain.runtime.distributed import SINGLE, DistributedContext
from rltrain.runtime.interrupt import Interrupter
from rltrain.settings.base import Bounds, Settings, setting
from rltrain.types import Progress

#: The mean evaluation return a run's summary times (``TrainerConfig.return_threshold``).
RETURN_THRESHOLD = Bounds(finite=True, none="to run all num_steps",
                          says="a finite return (or None, to run all num_steps)")


@dataclass
class SummarySettings(Settings):
    """What the end-of-run summary measures.

    Attributes:
        return_threshold: When set, the summary reports the env steps and seconds taken until the
            mean evaluation return first reached it (e.g. 475 for CartPole-v1). Default None.
        window: Episodes in the rolling mean of training returns. Default 100.
    """

    return_threshold: float | None = setting(None, bounds=RETURN_THRESHOLD)
    window: int = setting(100, ge=1, unit="episodes")


#: Env steps a run trains for (``TrainerConfig.num_steps``).
NUM_STEPS = Bounds(ge=1, unit="env steps")
#: Vector steps between the ranks' agreements (``TrainerConfig.sync_interval``).
SYNC_INTERVAL = Bounds(ge=1, unit="vector steps")
#: Seconds an env step or reset may take (``TrainerConfig.env_step_timeout``).
ENV_STEP_TIMEOUT = Bounds(gt=0, finite=True, none="for no limit",
                          says="a finite number of seconds > 0 (or None for no limit)")


@dataclass(frozen=True)
class RLComponents(Settings):
    """Everything a strategy's ``train_loop`` uses besides the agent and the environment: built
    once, before the run starts, and never reassigned (its parts, such as the progress counters
    and the event processor's subscribers, change as the run goes).

    Attributes:
        num_steps: Total env steps to train for (transitions summed over sub-envs).
        checkpoint: A checkpoint file to resume from; None starts fresh. Default None.
        checkpointer: Saves the agent while training; None saves nothing. Default None.
        optimization: Accumulation, clipping, the NaN policy and the training precision
            (:class:`~rltrain.optim.settings.OptimizationSettings`). Default: its defaults.
        interrupter: The run's stop request, shared with callbacks and other threads.
        event_processor: Receives every event; holds the metrics and renderers.
        summary: What the end-of-run summary measures.
        evaluation: When and how long to evaluate (interval and episodes).
        device: Where the agent learns. Default CPU.
        inference_device: Where the policy acts while collecting. Default CPU.
        progress: The run's counters (fresh for a new run).
        config: The run's whole configuration as plain nested dicts (shown in the Start
            event's ``config``); empty when the run has none. Default empty.
        resume_state: What ``checkpoint`` holds when it was read already (a
            :class:`~rltrain.checkpoint.state.LoadedCheckpoint`'s state); None reads it on the
            first :meth:`saved_state`. Kept for every check and part of a resume, and dropped
            once the parts are loaded (:meth:`release_saved_state`). Default None.
        distributed: The run's processes (:mod:`rltrain.runtime.distributed`): this rank and the
            collectives. Default: one process.
        sync_interval: Vector steps between the ranks' agreements in a run of several
            processes (stop requests, and the episodes each rank ended, for the logs). Default
            16; ignored with one process.
        env_step_timeout: Seconds each env step or reset (training and evaluation) may take;
            one that takes longer fails the run as an environment error
            (:class:`~rltrain.envs.errors.EnvStepTimeout`). Default None: no limit.
        frame_stack: Frames per observation when the env stacks them (its
            ``metadata["frame_stack"]``, as the Atari pipeline declares it), which a replay
            can store once each; set from the probe env. Default 1: no stack.
    """

    num_steps: int = setting(bounds=NUM_STEPS)
    checkpoint: Path | None = None
    checkpointer: Checkpointer | None = None
    optimization: OptimizationSettings = field(default_factory=OptimizationSettings)
    interrupter: Interrupter = field(default_factory=Interrupter)
    event_processor: EventProcessor = field(default_factory=EventProcessor)
    summary: SummarySettings = field(default_factory=SummarySettings)
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    inference_device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    progress: Progress = field(default_factory=Progress)
    config: dict[str, Any] = field(default_factory=dict)
    resume_state: InitVar[dict[str, Any] | None] = None
    distributed: DistributedContext = SINGLE
    sync_interval: int = setting(16, bounds=SYNC_INTERVAL)
    env_step_timeout: float | None = setting(None, bounds=ENV_STEP_TIMEOUT)
    frame_stack: int = 1
    #: What ``checkpoint`` holds, once read: the ``"given"`` state (``resume_state``) and the
    #: ``"read"`` one, this rank's shard merged in.
    _saved: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False,
                                              compare=False)

    def saved_state(self) -> dict[str, Any]:
        """What ``checkpoint`` holds: read on the first call (checksums verified, no code run:
        :func:`~rltrain.checkpoint.store.read_checkpoint`) and kept for the next, until
        :meth:`release_saved_state`; this rank's shard merged in."""
        if self.checkpoint is None:
            raise ValueError("This run resumes from no checkpoint (components.checkpoint).")
        if "read" not in self._saved:
            # This rank's own parts, from its shard (refused when another world size wrote it).
            self._saved["read"] = read_checkpoint(self.checkpoint, self.checkpointer,
                                                  self.distributed,
                                                  state=self._saved.pop("given", None))
        return self._saved["read"]

    def release_saved_state(self) -> None:
        """Drop what :meth:`saved_state` read (the replay buffer in it can be large); a later
        call reads the file again."""
        self._saved.clear()

    @property
    def dtype(self) -> torch.dtype:
        """The precision of training forward passes (``optimization.dtype``)."""
        return self.optimization.dtype

    def __post_init__(self, resume_state: dict[str, Any] | None) -> None:
        super().__post_init__()
        object.__setattr__(self, "device", torch.device(self.device))
        object.__setattr__(self, "inference_device", torch.device(self.inference_device))
        if resume_state is not None:
            self._saved["given"] = resume_state
