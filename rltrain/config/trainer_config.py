"""The Trainer's settings, declared once: :class:`TrainerConfig` is both the ``trainer:``
section of a run config and the base of :class:`~rltrain.Trainer`, whose constructor takes the
same fields (plus the objects a YAML file cannot hold)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from typing_extensions import override

from rltrain.checkpoint.store import CHECKPOINT_INTERVAL, KEEP_LAST
from rltrain.envs.evaluator import VIDEO_INTERVAL, EvaluationSettings
from rltrain.observe.loggers import LOGGER_PACKAGES, is_unrecorded, logger_items
from rltrain.observe.renderers.schedule import LOG_INTERVAL
from rltrain.optim.compiled import compile_mode
from rltrain.optim.settings import OptimizationSettings, resolve_dtype
from rltrain.settings.base import Settings, setting
from rltrain.strategies.components import (
    ENV_STEP_TIMEOUT,
    NUM_STEPS,
    RETURN_THRESHOLD,
    SYNC_INTERVAL,
    SummarySettings,
)

#: ``num_threads="auto"`` uses one torch thread for an agent with fewer trainable parameters
#: than this, torch's own count otherwise (measured: ``docs/benchmarks.md``, "Torch threads").
AUTO_ONE_THREAD_BELOW = 2_000_000


@dataclass(kw_only=True)
class TrainerConfig(Settings):
    """Every plain setting of a run, checked once when made (an error names the setting and
    the fix). The ``trainer:`` section of a run config, and :class:`~rltrain.Trainer`'s
    keyword arguments of the same names.

    Attributes:
        num_steps: Env steps to train for (transitions summed over sub-envs). Default 50,000.
        eval_interval: Env steps between greedy evaluations (and one at the end); None never
            evaluates. Default 10,000.
        eval_episodes: Episodes per evaluation (and the default of ``Trainer.evaluate``).
            Default 10.
        eval_max_episode_steps: Env steps after which an evaluation episode is cut short
            (truncated, as by ``gymnasium.wrappers.TimeLimit``), so an environment that never
            terminates cannot hang an evaluation; None: no cap. Default 27,000: the longest
            episode of the usual benchmarks (Atari's 108,000 frames at frame skip 4, the
            ALE protocol of Machado et al. 2018 that SB3 and RL-Zoo use), far above
            Gymnasium's classic-control, Box2D and MuJoCo limits (at most 2,000), so it cuts
            no episode those environments' own limits allow.
        video_interval: Record videos of every ``video_interval``-th evaluation of a ``fit``
            (the N-th, 2N-th, ..., counted from the start of that ``fit``; 1: every one) into
            ``run_dir/videos`` as ``eval-<env_steps>-episode-<k>.mp4``: the episodes of
            evaluation sub-env 0 (``eval_episodes // min(eval_episodes, 10)`` of them), made
            with ``render_mode="rgb_array"`` (set for a Gymnasium id or ``EnvSpec``; a callable
            must make its env so). Needs ``pip install 'rltrain[video]'``. Default None: none.
        return_threshold: Stop when the mean evaluation return reaches it, and report the env
            steps and seconds it took. Default None: run all ``num_steps``.
        env_step_timeout: Seconds each environment step or reset may take (training,
            evaluation and the check before the run); one that takes longer fails the run
            like an environment that raised (a ``TrainingError`` naming the sub-env, the
            timeout and this setting, after an emergency checkpoint). A sync step is
            interrupted in the main thread (SIGALRM; from another thread it fails when it
            returns); an async step's worker is not waited for, and is ended. Default None:
            no limit. See ``docs/trainer.md``, "Hung environments".
        device: Where the agent learns (``"cpu"``, ``"cuda"``, ``"cuda:1"``; a
            ``torch.device`` is taken too). Default ``"cpu"``.
        inference_device: Where the policy acts while collecting. Default: ``device``.
        devices: Processes per node in a run of several processes (Lightning's ``devices``;
            distribution here, unlike Lightning, is not the ``strategy``, which names the
            training loop). Processes are started by ``torchrun --nproc-per-node=N``, never by
            rltrain: ``"auto"`` (default) takes what torchrun started (one process without
            it); a number checks it, and without torchrun a number above 1 is an error that
            gives the torchrun command. With several processes, ``device="cuda"`` becomes
            ``cuda:<LOCAL_RANK>``. See ``docs/distributed.md``.
        num_nodes: Machines in the run (``torchrun --nnodes``): ``"auto"`` (default) or a
            number, checked as ``devices`` is.
        sync_interval: Vector steps between the ranks' agreements in a run of several
            processes: stop requests (Ctrl-C, SIGTERM, callbacks) take effect on every rank
            at the next one, and the episodes every rank ended reach rank 0's logs there.
            Each is one all-gather, whose cost is mostly latency (``docs/benchmarks.md``,
            "Figures behind implementation choices" and "What one collective costs here").
            Default 16.
        dtype: ``"float32"`` (default), or ``"bfloat16"`` / ``"float16"``: training forward
            passes run under ``torch.autocast`` (mixed precision; weights stay float32; float16
            adds loss scaling). A torch dtype is taken too.
        num_threads: ``torch.set_num_threads`` while ``fit`` and ``evaluate`` run (restored
            after): a count, None (leave torch's, one per core), or ``"auto"`` (default): one
            thread for an agent with fewer than :data:`AUTO_ONE_THREAD_BELOW` trainable
            parameters (every shipped preset's MLP or small CNN), torch's own for larger ones
            and for the Nature CNN over images (the Atari presets). Measured in
            ``docs/benchmarks.md`` (``python -m benchmarks.threads``; "Atari"): small
            networks run several times slower on 2 threads than on 1; PPO on Atari runs 1.2 to
            1.5 times faster on 2. A run's console says
            what was chosen (``torch threads: 1 (num_threads=auto: ...)``).
        keep_freed_memory: With glibc (Linux), ``fit`` first raises the C allocator's trim
            threshold, top pad and mmap threshold for the rest of the process
            (:mod:`rltrain.runtime.heap`), so that tensor memory freed at each step is reused rather
            than returned to the kernel and faulted in again: faster Dreamer steps
            (``docs/benchmarks.md``, "Figures behind implementation choices" and "Heap
            settings"), for up to 256 MiB of freed memory kept. Left alone where
            ``MALLOC_*_``, ``GLIBC_TUNABLES`` or ``LD_PRELOAD`` is set. Default True.
        gradient_clip_val: Clip each optimizer's gradients to this norm (or value); None does
            not clip. Default None.
        gradient_clip_algorithm: ``"norm"`` or ``"value"``. Default ``"norm"``.
        accumulate_grad_batches: Batches per optimizer step. Default 1.
        on_nan_loss: What a NaN or infinite loss does: ``"stop"`` (skip the update, stop the
            run, save nothing after it; exit status 3 from the CLI), ``"skip"`` or
            ``"raise"``. Default ``"stop"``.
        compile: Compile the agent's networks with ``torch.compile``
            (:mod:`rltrain.optim.compiled`): ``false`` (default: on a CPU, small networks gain
            little for the compile's tens of seconds, ``docs/benchmarks.md``), ``true`` (the
            default mode), ``"reduce-overhead"`` (CUDA graphs on CUDA) or ``"max-autotune"``.
            Its seconds are the metric ``time/compile``.
        run_dir: The run's folder. Default: ``runs/<date>-<time>-<agent>-<env>``.
        logger: The experiment loggers (:mod:`rltrain.observe.loggers`), every one written at once,
            as Lightning's ``logger`` reads them: a list, ``[tensorboard, csv]``, of names
            (``tensorboard``: event files in ``run_dir``; ``csv``, ``wandb``, ``mlflow``), or
            one name; True (default) is ``[tensorboard]`` and False (or ``[]``) none. The
            Trainer also takes objects, in the list or alone: a ``SummaryWriter`` (yours:
            flushed, not closed; the way to write TensorBoard files elsewhere) or any object
            with ``log_metrics(metrics, step)`` (Lightning's loggers). A saved config names each
            logger, an object as ``{unrecorded: why}`` (not made again when the run is resumed
            from the config).
        enable_progress_bar: A tqdm bar on stderr. Default True.
        enable_console: Console lines on stdout (and the model summary). Default True.
        enable_metrics_file: ``metrics.jsonl`` in ``run_dir``. Default True.
        log_interval: Env steps between logger and ``metrics.jsonl`` rows. Default 1,000.
        console_interval: Seconds between console lines. Default 10.
        checkpoint_dir: Where checkpoints go. Default: ``run_dir/checkpoints``.
        checkpoint_interval: Env steps between checkpoints; None saves only at the end.
        keep_last_checkpoints: ``checkpoint-*.pt`` files kept. Default 3.
        keep_best: Keep the best evaluation's agent as ``best.pt``. Default True.
        overwrite: Replace a run already in ``run_dir`` (its checkpoints, logs and summary).
            Default False: a ``run_dir`` holding a run is refused unless resuming. A saved
            config always says False.

    Once made, ``device`` and ``inference_device`` are torch's spelling of the device
    (``inference_device`` filled in), ``dtype`` is a name of :data:`~rltrain.optim.settings.DTYPES`
    and the folders are ``Path`` objects.
    """

    num_steps: int = setting(50_000, bounds=NUM_STEPS)
    eval_interval: int | None = 10_000
    eval_episodes: int = 10
    eval_max_episode_steps: int | None = 27_000
    video_interval: int | None = setting(None, bounds=VIDEO_INTERVAL)
    return_threshold: float | None = setting(None, bounds=RETURN_THRESHOLD)
    env_step_timeout: float | None = setting(None, bounds=ENV_STEP_TIMEOUT)
    device: str = "cpu"
    inference_device: str | None = None
    devices: int | str = "auto"
    num_nodes: int | str = "auto"
    sync_interval: int = setting(16, bounds=SYNC_INTERVAL)
    dtype: str = "float32"
    num_threads: int | str | None = "auto"
    keep_freed_memory: bool = True
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str = "norm"
    accumulate_grad_batches: int = 1
    on_nan_loss: str = "stop"
    compile: bool | str = False
    run_dir: str | Path | None = None
    logger: Any = True
    enable_progress_bar: bool = True
    enable_console: bool = True
    enable_metrics_file: bool = True
    log_interval: int = setting(1_000, bounds=LOG_INTERVAL)
    console_interval: float = setting(10.0, ge=0, unit="seconds")
    checkpoint_dir: str | Path | None = None
    checkpoint_interval: int | None = setting(None, bounds=CHECKPOINT_INTERVAL)
    keep_last_checkpoints: int = setting(3, bounds=KEEP_LAST)
    keep_best: bool = True
    overwrite: bool = False

    #: The section a run config holds these settings in, which their errors name.
    owner: ClassVar[str] = "trainer"

    def __post_init__(self) -> None:
        self.check_logger()
        for name in ("run_dir", "checkpoint_dir"):
            _check_folder(name, getattr(self, name))
        super().__post_init__()
        _ = self.optimization, self.evaluation, self.summary  # each checks its own fields
        self.device = str(parse_device(self.device, "device"))
        self.inference_device = str(parse_device(
            self.device if self.inference_device is None else self.inference_device,
            "inference_device"))
        self.dtype = str(resolve_dtype(self.dtype)).removeprefix("torch.")
        self.run_dir = None if self.run_dir is None else Path(self.run_dir)
        self.checkpoint_dir = None if self.checkpoint_dir is None else Path(self.checkpoint_dir)

    @override
    def rules(self) -> list[tuple[bool, str]]:
        return [
            (self.num_threads in (None, "auto") or _count(self.num_threads),
             f"num_threads must be a count >= 1, 'auto' (one thread for small networks) or "
             f"None (torch's own); got {self.num_threads!r}."),
            (self.video_interval is None or self.eval_interval is not None,
             "video_interval records evaluations, and eval_interval=None makes none: set "
             "eval_interval, or video_interval=None."),
            (self.devices == "auto" or _count(self.devices),
             f"devices must be a count of processes per node >= 1, or 'auto' (what torchrun "
             f"started); got {self.devices!r}."),
            (self.num_nodes == "auto" or _count(self.num_nodes),
             f"num_nodes must be a count of machines >= 1, or 'auto'; got {self.num_nodes!r}."),
        ]

    def check_logger(self) -> None:
        """Refuse a ``logger`` a config cannot name: a list of logger names, one name, true or
        false (:func:`~rltrain.observe.loggers.logger_items` checks each name, and that the
        package of ``wandb`` or ``mlflow`` is installed)."""
        if not isinstance(self.logger, (bool, str, list, tuple)):
            raise ValueError(f"logger must be a list of logger names ({', '.join(LOGGER_PACKAGES)}"
                             f"), one name, true or false; got {self.logger!r}.")
        for item in logger_items(self.logger):
            if not isinstance(item, str) and not is_unrecorded(item):
                raise ValueError(f"logger list item {item!r}: a config names loggers "
                                 f"({', '.join(LOGGER_PACKAGES)}); pass logger objects to "
                                 "Trainer(logger=[...]) in Python.")

    def torch_threads(self, trainable_parameters: int, image_cnn: bool = False
                      ) -> tuple[int | None, str]:
        """The torch threads a run of an agent with ``trainable_parameters`` (and with the
        Nature CNN over images, ``image_cnn``) uses (None: torch's own, left as it is) and why,
        in words (for the run's console)."""
        if self.num_threads != "auto":
            assert self.num_threads is None or isinstance(self.num_threads, int)
            return self.num_threads, ("trainer.num_threads=None: torch's own count"
                                      if self.num_threads is None else
                                      f"trainer.num_threads={self.num_threads}")
        if image_cnn:
            return None, "auto: torch's own count for a CNN over images"
        if trainable_parameters < AUTO_ONE_THREAD_BELOW:
            return 1, f"auto: {trainable_parameters:,} parameters run fastest on one thread"
        return None, f"auto: torch's own count for {trainable_parameters:,} parameters"

    @property
    def evaluation(self) -> EvaluationSettings:
        """``eval_interval``, ``eval_episodes``, ``eval_max_episode_steps`` and
        ``video_interval``, as the strategies take them (``video_dir`` is set by ``fit``)."""
        return EvaluationSettings(interval=self.eval_interval, episodes=self.eval_episodes,
                                  max_episode_steps=self.eval_max_episode_steps,
                                  video_interval=self.video_interval)

    @property
    def summary(self) -> SummarySettings:
        """What the run's summary measures (``return_threshold``)."""
        return SummarySettings(return_threshold=self.return_threshold)

    @property
    def optimization(self) -> OptimizationSettings:
        """``accumulate_grad_batches``, ``gradient_clip_val``, ``gradient_clip_algorithm``,
        ``on_nan_loss``, ``dtype`` and ``compile``, as :class:`~rltrain.optim.Optimization`
        takes them (checked there, once)."""
        return OptimizationSettings(
            accumulate_grad_batches=self.accumulate_grad_batches,
            gradient_clip_val=self.gradient_clip_val,
            gradient_clip_algorithm=self.gradient_clip_algorithm,  # type: ignore[arg-type]
            on_nan_loss=self.on_nan_loss, dtype=resolve_dtype(self.dtype),  # type: ignore[arg-type]
            compile=compile_mode(self.compile))

    @property
    def torch_dtype(self) -> torch.dtype:
        """``dtype`` as a torch dtype."""
        return resolve_dtype(self.dtype)


def _count(value: object) -> bool:
    """True for an int >= 1 (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_folder(name: str, folder: object) -> None:
    """Refuse an empty folder setting (``run_dir``, ``checkpoint_dir``): an
    empty path would silently mean the current directory."""
    if isinstance(folder, (str, Path)) and not str(folder).strip():
        raise ValueError(f"{name} is empty; give a directory, or None for the default (the "
                         "current directory is used only when named, as '.').")


def parse_device(device: str | torch.device, name: str) -> torch.device:
    """``torch.device(device)``, refused with the accepted forms named."""
    try:
        return torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{name} {str(device)!r} is not a device torch knows; use 'cpu', "
                         "'cuda', 'cuda:<index>' or 'mps'.") from None
