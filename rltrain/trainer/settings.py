"""A Trainer's settings: every argument of :class:`~rltrain.Trainer`, checked once, before any
run directory exists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

import torch
from omegaconf import DictConfig

from rltrain.checkpoint import Checkpointer
from rltrain.components import (
    EvaluationSettings,
    RLComponents,
    SummarySettings,
    check_folder,
    resolve_dtype,
)
from rltrain.events.processor import Subscriber
from rltrain.events.renderers import MetricsLogger
from rltrain.events.renderers.schedule import LogSchedule
from rltrain.events.renderers.tensorboard import is_summary_writer
from rltrain.interrupt import Interrupter
from rltrain.optim import check_autocast
from rltrain.strategies.base import RLStrategy
from rltrain.strategies.off_policy import OffPolicyConfig, OffPolicyStrategy

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

#: What ``Trainer(logger=...)`` accepts: True (TensorBoard in the run directory), False, a
#: TensorBoard log directory, your ``SummaryWriter``, or a Lightning-style logger object.
Logger = Union[bool, str, Path, "SummaryWriter", MetricsLogger]


class TrainerSettings:
    """The settings of a :class:`~rltrain.Trainer` (its base class): the constructor checks
    each one (an error names it and the fix) and keeps it as the attribute of the same name;
    ``eval_interval`` and ``eval_episodes`` are kept together as ``evaluation``.

    Args:
        num_steps: Env steps to train for (transitions summed over sub-envs). Default 50,000.
        strategy: The loop. Default: the agent's default strategy, built at each ``fit``
            (``LearningAgent.strategy_kinds[0]`` with its ``default_strategy_settings()``;
            until then ``trainer.strategy`` is an :class:`OffPolicyStrategy` of the defaults).
        seed: Seed of the default strategy (to seed your own strategy, set it in its config).
        eval_interval: Env steps between greedy evaluations (and one at the end); None never
            evaluates. Default 10,000.
        eval_episodes: Episodes per evaluation (and the default of :meth:`evaluate`). Default 10.
        return_threshold: Stop when the mean evaluation return reaches it, and report the env
            steps and seconds it took. Default None: run all ``num_steps``.
        device: Where the agent learns (``"cpu"``, ``"cuda"``). Default ``"cpu"``.
        inference_device: Where the policy acts while collecting. Default: ``device``.
        dtype: ``"float32"`` (default), or ``"bfloat16"`` / ``"float16"``: training forward
            passes run under ``torch.autocast`` (mixed precision; weights stay float32; float16
            adds loss scaling). Refused where the device has no such autocast.
        num_threads: ``torch.set_num_threads`` while ``fit`` and ``evaluate`` run (restored
            after). Default None: leave it. Small MLPs are fastest with 1.
        gradient_clip_val: Clip each optimizer's gradients to this norm (or value); None does
            not clip. Default None.
        gradient_clip_algorithm: ``"norm"`` or ``"value"``. Default ``"norm"``.
        accumulate_grad_batches: Batches per optimizer step. Default 1.
        on_nan_loss: What a NaN or infinite loss does: ``"stop"`` (skip the update, stop the
            run, keep the last good checkpoint), ``"skip"`` or ``"raise"``. Default ``"stop"``.
        run_dir: The run's folder. Default: ``runs/<date>-<time>-<agent>-<env>``.
        logger: True (default): TensorBoard files in ``run_dir``; False: none; a directory:
            TensorBoard files there; a ``SummaryWriter``: yours (flushed, not closed); or any
            object with ``log_metrics(metrics, step)`` (Lightning's loggers).
        enable_progress_bar: A tqdm bar on stderr. Default True.
        enable_console: Console lines on stdout (and the model summary). Default True.
        enable_metrics_file: ``metrics.jsonl`` in ``run_dir``. Default True.
        log_interval: Env steps between logger and ``metrics.jsonl`` rows. Default 1,000.
        console_interval: Seconds between console lines. Default 10.
        callbacks: Subscribers that receive every event (after the built-in renderers); each
            can end the run with ``request_stop(reason)``.
        checkpoint_dir: Where checkpoints go. Default: ``run_dir/checkpoints``.
        checkpoint_interval: Env steps between checkpoints; None saves only at the end.
        keep_last_checkpoints: ``checkpoint-*.pt`` files kept. Default 3.
        keep_best: Keep the best evaluation's agent as ``best.pt``. Default True.
        config: The run's configuration (an omegaconf ``DictConfig`` or a mapping): saved as
            ``run_dir/config.yaml``, in every checkpoint and as TensorBoard hyperparameters,
            with the ``trainer``, ``env``, ``strategy`` and ``agent`` sections refreshed from
            what the run really uses. Default None: those four sections only.
        overwrite: Replace a run already in ``run_dir`` (its checkpoints, logs and summary).
            Default False: a ``run_dir`` holding a run is refused unless resuming.
        interrupter: The stop request shared with your callbacks and threads. Default: a new
            one, at ``trainer.interrupter``.
    """

    def __init__(
        self,
        *,
        num_steps: int = 50_000,
        strategy: RLStrategy | None = None,
        seed: int | None = None,
        eval_interval: int | None = 10_000,
        eval_episodes: int = 10,
        return_threshold: float | None = None,
        device: str | torch.device = "cpu",
        inference_device: str | torch.device | None = None,
        dtype: str | torch.dtype = "float32",
        num_threads: int | None = None,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: Literal["norm", "value"] = "norm",
        accumulate_grad_batches: int = 1,
        on_nan_loss: Literal["stop", "skip", "raise"] = "stop",
        run_dir: str | Path | None = None,
        logger: Logger = True,
        enable_progress_bar: bool = True,
        enable_console: bool = True,
        enable_metrics_file: bool = True,
        log_interval: int = 1_000,
        console_interval: float = 10.0,
        callbacks: Sequence[Subscriber] = (),
        checkpoint_dir: str | Path | None = None,
        checkpoint_interval: int | None = None,
        keep_last_checkpoints: int = 3,
        keep_best: bool = True,
        config: DictConfig | Mapping[str, Any] | None = None,
        overwrite: bool = False,
        interrupter: Interrupter | None = None,
    ) -> None:
        if strategy is not None and seed is not None:
            raise ValueError(
                "Pass the seed in your strategy's config (e.g. OffPolicyConfig(seed=...)), not "
                "to the Trainer: Trainer(seed=...) only seeds the default strategy."
            )
        #: True when no strategy was given: each ``fit`` builds the agent's default.
        self.default_strategy = strategy is None
        self.seed = 0 if seed is None else seed
        if strategy is None:
            strategy = OffPolicyStrategy(OffPolicyConfig(seed=self.seed))
        if not (isinstance(logger, (bool, str, Path, MetricsLogger))
                or is_summary_writer(logger)):
            raise TypeError(
                "logger must be True, False, a log directory, a SummaryWriter or an object with "
                f"log_metrics(metrics, step); got {type(logger).__name__}.")
        for callback in callbacks:
            if not isinstance(callback, Subscriber):
                raise TypeError(f"A callback must be a Subscriber; got {type(callback).__name__}.")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 (or None); got {num_threads}.")
        if console_interval < 0:
            raise ValueError(f"console_interval must be >= 0 seconds; got {console_interval}.")
        for name, folder in (("run_dir", run_dir), ("checkpoint_dir", checkpoint_dir),
                             ("logger", logger)):
            check_folder(name, folder)
        self.num_steps = num_steps
        self.strategy = strategy
        self.evaluation = EvaluationSettings(interval=eval_interval, episodes=eval_episodes)
        self.return_threshold = return_threshold
        self.device = parse_device(device, "device")
        self.inference_device = parse_device(
            inference_device if inference_device is not None else device, "inference_device")
        self.dtype = resolve_dtype(dtype)
        check_autocast(self.device.type, self.dtype)
        self.num_threads = num_threads
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.accumulate_grad_batches = accumulate_grad_batches
        self.on_nan_loss = on_nan_loss
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.logger = logger
        self.enable_progress_bar = enable_progress_bar
        self.enable_console = enable_console
        self.enable_metrics_file = enable_metrics_file
        self.log_interval = log_interval
        self.console_interval = console_interval
        self.callbacks = list(callbacks)
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.checkpoint_interval = checkpoint_interval
        self.keep_last_checkpoints = keep_last_checkpoints
        self.keep_best = keep_best
        self.config = config
        self.overwrite = overwrite
        self.interrupter = interrupter if interrupter is not None else Interrupter()
        # Validate every setting now, before any run directory exists.
        RLComponents(num_steps=num_steps, accumulate_grad_batches=accumulate_grad_batches,
                     gradient_clip_val=gradient_clip_val,
                     gradient_clip_algorithm=gradient_clip_algorithm, on_nan_loss=on_nan_loss,
                     summary=SummarySettings(return_threshold=return_threshold))
        LogSchedule(log_interval)
        Checkpointer(".", interval=checkpoint_interval, keep_last=keep_last_checkpoints)


def parse_device(device: str | torch.device, name: str) -> torch.device:
    """``torch.device(device)``, refused with the accepted forms named; CUDA needs a GPU."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{name} {str(device)!r} is not a device torch knows; use 'cpu', "
                         "'cuda', 'cuda:<index>' or 'mps'.") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name} {str(parsed)!r}: this torch build sees no CUDA GPU. Train on "
                         "device='cpu', or install a CUDA build of torch.")
    return parsed
