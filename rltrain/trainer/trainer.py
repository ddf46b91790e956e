"""The facade: :class:`Trainer` takes the run's settings, builds components, calls the strategy."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

import torch
from omegaconf import DictConfig, OmegaConf

from rltrain.agents.base import LearningAgent
from rltrain.callbacks import EarlyStopping
from rltrain.checkpoint import (
    Checkpointer,
    LoadedCheckpoint,
    atomic_save,
    atomic_write_text,
    load_agent,
    training_state,
)
from rltrain.components import (
    EvaluationSettings,
    RLComponents,
    SummarySettings,
    check_folder,
    resolve_dtype,
)
from rltrain.config import (
    AGENTS,
    STRATEGIES,
    make_strategy,
    save_config,
    section_of,
    to_container,
    validate,
)
from rltrain.envs import EnvInit, EnvSpec, env_name
from rltrain.evaluation import Evaluator
from rltrain.events.processor import EventProcessor, Subscriber
from rltrain.events.renderers import (
    ConsoleRenderer,
    JsonlRenderer,
    LoggerRenderer,
    MetricsLogger,
    TensorBoardRenderer,
    TqdmRenderer,
)
from rltrain.events.renderers.jsonl import json_safe
from rltrain.events.renderers.schedule import LogSchedule
from rltrain.events.renderers.tensorboard import is_summary_writer
from rltrain.interrupt import Interrupter, stop_on_signals
from rltrain.model_summary import format_summary, summarize
from rltrain.optim import check_autocast
from rltrain.strategies.base import RLResult, RLStrategy
from rltrain.strategies.off_policy import OffPolicyConfig, OffPolicyStrategy
from rltrain.trainer.preflight import (
    check_resume_settings,
    check_spaces,
    default_run_dir,
    evaluation_metrics,
    evaluation_seed,
    setup_agent,
    strategy_seed,
)
from rltrain.trainer.run_dir import open_run

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

#: What ``Trainer(logger=...)`` accepts: True (TensorBoard in the run directory), False, a
#: TensorBoard log directory, your ``SummaryWriter``, or a Lightning-style logger object.
Logger = Union[bool, str, Path, "SummaryWriter", MetricsLogger]


class Trainer:
    """Trains an agent with a strategy, shows progress and stores the run.

    Example::

        trainer = Trainer(num_steps=50_000, return_threshold=475, eval_episodes=20)
        agent = DQN()
        trainer.fit("CartPole-v1", agent)
        trainer.evaluate("CartPole-v1", agent, ckpt_path="best", episodes=20)

    Or from one config (see :mod:`rltrain.config`): ``build(compose(["dqn_cartpole"])).fit()``.

    The run directory receives ``config.yaml`` (the whole run's config), ``model_summary.txt``,
    TensorBoard event files, ``metrics.jsonl``, ``summary.json`` and ``checkpoints/``
    (``last.pt`` and ``best.pt``). Before training, the agent receives its ``device``,
    ``dtype``, ``logger``, ``trainer`` (this object) and the live ``progress`` counters.

    Args:
        num_steps: Env steps to train for (transitions summed over sub-envs). Default 50,000.
        strategy: The loop. Default: :class:`OffPolicyStrategy` with its default config.
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
        if strategy is None:
            strategy = OffPolicyStrategy(OffPolicyConfig(seed=0 if seed is None else seed))
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
        RLComponents(num_steps=num_steps, grad_accumulation=accumulate_grad_batches,
                     gradient_clip_val=gradient_clip_val,
                     gradient_clip_algorithm=gradient_clip_algorithm, on_nan_loss=on_nan_loss,
                     summary=SummarySettings(return_threshold=return_threshold))
        LogSchedule(log_interval)
        Checkpointer(".", interval=checkpoint_interval, keep_last=keep_last_checkpoints)
        self._fitted: tuple[LearningAgent, EnvInit, RLComponents] | None = None
        #: The run directory of the last ``fit`` (None before).
        self.last_run_dir: Path | None = None

    @classmethod
    def from_config(cls, config: DictConfig | Mapping[str, Any], **overrides: Any) -> Trainer:
        """The Trainer and strategy a run config describes (its ``trainer`` and ``strategy``
        sections; validated first). ``overrides`` are further Trainer arguments, e.g.
        ``callbacks=[...]`` or ``interrupter=...``. See :func:`build` for agent and env too."""
        cfg = validate(config)
        settings = OmegaConf.to_object(cfg.trainer)
        assert dataclasses.is_dataclass(settings) and not isinstance(settings, type)
        kwargs = {**dataclasses.asdict(settings), **overrides}
        return cls(strategy=make_strategy(cfg.strategy), config=cfg, **kwargs)

    def fit(self, env: EnvInit, agent: LearningAgent,
            ckpt_path: str | Path | LoadedCheckpoint | None = None) -> RLResult:
        """Train ``agent`` on ``env``; returns the trained policy and the run's summary.

        ``ckpt_path`` resumes a run: ``"last"`` or ``"best"`` (in this trainer's run directory)
        or a checkpoint file. With sync vector envs whose state can be pickled (CartPole,
        Pendulum) on CPU, the resumed run continues exactly as if it had not stopped: same
        networks, optimizer states, replay buffer, random streams and metrics. ``num_steps``
        is the total, counted from the start of the original run. The strategy's, agent's and
        optimisation settings must match the checkpoint's; a difference is an error naming the
        setting (evaluation, logging and checkpoint settings may change).

        The spaces are checked and the agent built before anything starts. A stop request
        (``trainer.interrupter``, a callback's ``request_stop``, or Ctrl-C / SIGTERM while
        ``fit`` runs in the main thread) ends the run after the current step, with the agent
        saved; a second Ctrl-C aborts at once.
        """
        self.interrupter.reset()  # a stop requested from here on ends this run
        run_dir = self.resolve_run_dir(env, agent)
        components = self._components(run_dir)
        spaces = setup_agent(env, agent, components, seed=strategy_seed(self.strategy))
        if isinstance(ckpt_path, LoadedCheckpoint):
            components.checkpoint, components.resume_state = ckpt_path.path, ckpt_path.state
        elif ckpt_path is not None:
            components.checkpoint = self.checkpoint_path(ckpt_path, run_dir)
        if components.checkpoint is not None:
            check_resume_settings(components.checkpoint, components.saved_state(),
                                  self.strategy.run_hparams(agent, components))
        self.strategy.check(agent, components, *spaces)
        components.config = self.run_config(env, agent, run_dir)
        assert components.checkpointer is not None
        components.checkpointer.config = components.config
        with open_run(run_dir, checkpoint_dir=components.checkpointer.directory,
                      resuming=components.checkpoint is not None, overwrite=self.overwrite):
            return self._fit(env, agent, components, run_dir)

    def _fit(self, env: EnvInit, agent: LearningAgent, components: RLComponents,
             run_dir: Path) -> RLResult:
        save_config(components.config, run_dir / "config.yaml")
        agent.trainer = self
        self._fitted, self.last_run_dir = (agent, env, components), run_dir
        components.event_processor = events = EventProcessor(self._subscribers(run_dir, agent))
        try:
            self._write_model_summary(agent, run_dir)
            with stop_on_signals(self.interrupter), self._threads():
                result = self.strategy.train(agent, components, env)
        finally:
            events.close()
            agent.logger = None
        atomic_write_text(run_dir / "summary.json", json.dumps(
            json_safe(dataclasses.asdict(result.summary)), indent=2) + "\n")
        return result

    def evaluate(self, env: EnvInit, agent: LearningAgent, *,
                 ckpt_path: str | Path | None = None, episodes: int | None = None,
                 seed: int | None = None) -> dict[str, float]:
        """Run greedy episodes of ``agent``'s policy; returns the ``eval/`` metrics.

        ``ckpt_path`` loads trained weights first: ``"best"`` or ``"last"`` (of this trainer's
        run directory, or of its last ``fit``) or a checkpoint file; None evaluates the agent as
        it is. ``episodes`` defaults to ``eval_episodes``. With the default ``seed`` the episodes
        start where the training run's evaluations started, so the last checkpoint reproduces
        the run's final evaluation return.
        """
        if ckpt_path is not None:
            run_dir = self.run_dir or self.last_run_dir
            load_agent(agent, self.checkpoint_path(ckpt_path, run_dir), env)
        check_spaces(env, agent)
        if not agent.built:
            raise ValueError(
                f"This {type(agent).__name__} has no trained networks yet: call fit() first, or "
                "pass ckpt_path='best', 'last' or a checkpoint file."
            )
        eval_seed = evaluation_seed(self.strategy) if seed is None else seed
        evaluator = Evaluator(env, episodes=self.evaluation.episodes if episodes is None
                              else episodes, seed=eval_seed, device=self.inference_device)
        try:
            with self._threads():
                result = evaluator.run(agent.policy(self.inference_device), env_steps=0,
                                       events=EventProcessor())
        finally:
            evaluator.close()
        return evaluation_metrics(result)

    def save_checkpoint(self, path: str | Path) -> Path:
        """Write the agent of the last :meth:`fit` to ``path`` (atomically): its networks,
        counters, settings and the run's config. Load it with :meth:`load_checkpoint` or
        ``evaluate(ckpt_path=path)``. It holds no optimizer, replay or environment state: to
        continue training exactly, resume from the run's own checkpoints (``"last"``)."""
        if self._fitted is None:
            raise RuntimeError("save_checkpoint() saves the agent of the last fit(); call fit() "
                               "first.")
        agent, _, components = self._fitted
        state = training_state(agent, {"agent": agent}, components.progress,
                               self.strategy.run_hparams(agent, components))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save({**state, "config": components.config, "weights_only": True}, path)
        return path

    def load_checkpoint(self, path: str | Path, agent: LearningAgent | None = None,
                        env: EnvInit | None = None) -> dict[str, Any]:
        """Load a checkpoint's networks into ``agent`` (default: the last ``fit``'s agent),
        built for ``env`` (default: the last ``fit``'s env); returns the whole checkpoint.
        ``path`` may be ``"best"`` or ``"last"``, as for :meth:`evaluate`."""
        if agent is None or env is None:
            if self._fitted is None:
                raise ValueError("load_checkpoint() needs agent= and env= before any fit().")
            agent = agent if agent is not None else self._fitted[0]
            env = env if env is not None else self._fitted[1]
        return load_agent(agent, self.checkpoint_path(path, self.run_dir or self.last_run_dir),
                          env)

    def settings(self) -> dict[str, Any]:
        """This trainer's settings as the ``trainer`` section of a run config
        (:class:`~rltrain.config.TrainerConfig`'s fields). ``overwrite`` is always saved as
        False: a saved config never replaces a run."""
        logger = self.logger if isinstance(self.logger, bool) else (
            str(self.logger) if isinstance(self.logger, (str, Path)) else True)
        return {
            "num_steps": self.num_steps,
            "eval_interval": self.evaluation.interval,
            "eval_episodes": self.evaluation.episodes,
            "return_threshold": self.return_threshold,
            "device": str(self.device),
            "inference_device": str(self.inference_device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "num_threads": self.num_threads,
            "gradient_clip_val": self.gradient_clip_val,
            "gradient_clip_algorithm": self.gradient_clip_algorithm,
            "accumulate_grad_batches": self.accumulate_grad_batches,
            "on_nan_loss": self.on_nan_loss,
            "run_dir": None if self.run_dir is None else str(self.run_dir),
            "logger": logger,
            "enable_progress_bar": self.enable_progress_bar,
            "enable_console": self.enable_console,
            "enable_metrics_file": self.enable_metrics_file,
            "log_interval": self.log_interval,
            "console_interval": self.console_interval,
            "checkpoint_dir": None if self.checkpoint_dir is None else str(self.checkpoint_dir),
            "checkpoint_interval": self.checkpoint_interval,
            "keep_last_checkpoints": self.keep_last_checkpoints,
            "keep_best": self.keep_best,
            "overwrite": False,
        }

    def run_config(self, env: EnvInit, agent: LearningAgent,
                   run_dir: Path | None = None) -> dict[str, Any]:
        """The run's config as plain dicts: the ``config`` given, with the ``trainer`` section
        from :meth:`settings` (``run_dir`` filled in), and ``env``, ``strategy`` and ``agent``
        described from the objects when they are registered (their sections as given
        otherwise)."""
        described: dict[str, Any] = {"trainer": self.settings()}
        if run_dir is not None:
            described["trainer"]["run_dir"] = str(run_dir)
        if isinstance(env, str):
            described["env"] = {"id": env, "kwargs": {}}
        elif isinstance(env, EnvSpec) and not env.wrappers:
            described["env"] = {"id": env.id, "kwargs": dict(env.kwargs)}
        for name, section in (("strategy", section_of(self.strategy, STRATEGIES)),
                              ("agent", section_of(agent, AGENTS))):
            if section is not None:
                described[name] = section
        given = to_container(self.config) if self.config is not None else {}
        return {**given, **described}

    def _components(self, run_dir: Path) -> RLComponents:
        return RLComponents(
            num_steps=self.num_steps,
            checkpointer=Checkpointer(
                self.checkpoint_dir or run_dir / "checkpoints", interval=self.checkpoint_interval,
                keep_last=self.keep_last_checkpoints, keep_best=self.keep_best),
            grad_accumulation=self.accumulate_grad_batches,
            gradient_clip_val=self.gradient_clip_val,
            gradient_clip_algorithm=self.gradient_clip_algorithm,
            on_nan_loss=self.on_nan_loss,
            interrupter=self.interrupter,
            summary=SummarySettings(return_threshold=self.return_threshold),
            evaluation=self.evaluation,
            dtype=self.dtype,
            device=self.device,
            inference_device=self.inference_device,
        )

    def checkpoint_path(self, ckpt_path: str | Path, run_dir: Path | None) -> Path:
        """``"last"`` / ``"best"`` among the run's checkpoints, or the file given; must exist."""
        if ckpt_path in ("last", "best"):
            if run_dir is None:
                raise ValueError(f"ckpt_path={ckpt_path!r} needs a run: give the Trainer its "
                                 "run_dir, or pass the path of a checkpoint file.")
            directory = self.checkpoint_dir or run_dir / "checkpoints"
            try:
                return Checkpointer(directory).resolve(str(ckpt_path))
            except FileNotFoundError as error:
                raise FileNotFoundError(
                    f"No checkpoint: {error} Pass the run_dir of the run, or the path of a "
                    "checkpoint file.") from error
        path = Path(ckpt_path)
        if not path.is_file():
            raise FileNotFoundError(
                f"No checkpoint at {path}. Pass ckpt_path='last' or 'best' with the run_dir of "
                "the run, or the path of a checkpoint file.")
        return path

    def resolve_run_dir(self, env: EnvInit, agent: LearningAgent) -> Path:
        """The run directory: the one given, or ``runs/<date>-<time>-<agent>-<env>``."""
        if self.run_dir is not None:
            return self.run_dir
        return default_run_dir(type(agent).__name__, env_name(env))

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        if self.num_threads is None:
            yield
            return
        previous = torch.get_num_threads()
        torch.set_num_threads(self.num_threads)
        try:
            yield
        finally:
            torch.set_num_threads(previous)

    def _write_model_summary(self, agent: LearningAgent, run_dir: Path) -> None:
        table = format_summary(summarize(agent))
        atomic_write_text(run_dir / "model_summary.txt", table + "\n")
        if self.enable_console:
            print(f"{type(agent).__name__}\n{table}", flush=True)

    def _logger_renderer(self, run_dir: Path) -> Subscriber | None:
        logger, interval = self.logger, self.log_interval
        if logger is False:
            return None
        if logger is True:
            return TensorBoardRenderer(run_dir, log_interval=interval)
        if isinstance(logger, (str, Path)):
            return TensorBoardRenderer(logger, log_interval=interval)
        if is_summary_writer(logger):
            return TensorBoardRenderer(writer=logger, log_interval=interval)
        return LoggerRenderer(logger, log_interval=interval)

    def _subscribers(self, run_dir: Path, agent: LearningAgent) -> list[Subscriber]:
        subscribers: list[Subscriber] = []
        if self.enable_progress_bar:
            subscribers.append(TqdmRenderer())
        if self.enable_console:
            subscribers.append(ConsoleRenderer(interval_seconds=self.console_interval))
        logger = self._logger_renderer(run_dir)
        if logger is not None:
            subscribers.append(logger)
            agent.logger = (logger.writer if isinstance(logger, TensorBoardRenderer)
                            else self.logger)
        if self.enable_metrics_file:
            subscribers.append(JsonlRenderer(run_dir / "metrics.jsonl",
                                             log_interval=self.log_interval))
        subscribers += self.callbacks
        if self.return_threshold is not None:
            subscribers.append(EarlyStopping(self.return_threshold))
        for subscriber in subscribers:
            subscriber.interrupter = self.interrupter
        return subscribers


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
