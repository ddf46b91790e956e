"""The facade: :class:`Trainer` takes the run's settings, builds components, calls the strategy."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from rltrain.agents.base import LearningAgent
from rltrain.callbacks import EarlyStopping
from rltrain.checkpoint import Checkpointer
from rltrain.components import RLComponents, SummarySettings
from rltrain.envs import EnvInit, env_factory, env_name
from rltrain.evaluation import Evaluator
from rltrain.events.events import EvaluationEnd
from rltrain.events.processor import EventProcessor, Subscriber
from rltrain.events.renderers import (
    ConsoleRenderer,
    JsonlRenderer,
    TensorBoardRenderer,
    TqdmRenderer,
)
from rltrain.events.renderers.jsonl import json_safe
from rltrain.events.renderers.schedule import LogSchedule
from rltrain.interrupt import Interrupter, stop_on_signals
from rltrain.strategies.base import RLResult, RLStrategy
from rltrain.strategies.off_policy import EVAL_SEED_OFFSET, OffPolicyConfig, OffPolicyStrategy

#: Renderer names accepted by ``Trainer(renderers=...)``.
RENDERERS = ("tqdm", "console", "tensorboard", "jsonl")


class Trainer:
    """Trains an agent with a strategy, shows progress and stores the run.

    Example::

        trainer = Trainer(num_steps=50_000, return_threshold=475)
        agent = DQN()
        result = trainer.fit("CartPole-v1", agent)
        trainer.evaluate("CartPole-v1", agent, episodes=20)

    The run directory receives TensorBoard event files, ``metrics.jsonl``, ``summary.json`` and
    ``checkpoints/`` (``last.pt`` holds the trained agent).

    Args:
        num_steps: Env steps to train for (transitions summed over sub-envs). Default 50,000.
        strategy: The loop. Default: :class:`OffPolicyStrategy` with its default config.
        device: Where the agent learns (``"cpu"``, ``"cuda"``). Default ``"cpu"``.
        inference_device: Where the policy acts while collecting. Default: ``device``.
        run_dir: The run's folder. Default: ``runs/<date>-<time>-<agent>-<env>``.
        seed: Seed of the default strategy (to seed your own strategy, set it in its config).
        renderers: Names from :data:`RENDERERS` or :class:`Subscriber` objects. Default: all four.
        callbacks: More subscribers (they receive every event after the renderers).
        return_threshold: Stop when the mean evaluation return reaches it, and report the env
            steps and seconds it took. Default None: run all ``num_steps``.
        log_interval: Env steps between TensorBoard and JSONL rows. Default 1,000.
        console_interval: Seconds between console lines. Default 10.
        checkpoint_interval: Env steps between checkpoints; None saves only at the end.
        keep_last_checkpoints: ``checkpoint-*.pt`` files kept (``best.pt`` is kept apart).
            Default 3.
        gradient_clip_val: Clip gradients to this norm (or value); None does not clip.
        gradient_clip_algorithm: ``"norm"`` or ``"value"``. Default ``"norm"``.
        accumulate_grad_batches: Batches per optimizer step. Default 1.
        on_nan_loss: What a NaN or infinite loss does: ``"stop"`` (skip the update, stop the
            run, keep the last good checkpoint), ``"skip"`` or ``"raise"``. Default ``"stop"``.
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
        device: str | torch.device = "cpu",
        inference_device: str | torch.device | None = None,
        run_dir: str | Path | None = None,
        seed: int | None = None,
        renderers: Sequence[str | Subscriber] = RENDERERS,
        callbacks: Sequence[Subscriber] = (),
        return_threshold: float | None = None,
        log_interval: int = 1_000,
        console_interval: float = 10.0,
        checkpoint_interval: int | None = None,
        keep_last_checkpoints: int = 3,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: Literal["norm", "value"] = "norm",
        accumulate_grad_batches: int = 1,
        on_nan_loss: Literal["stop", "skip", "raise"] = "stop",
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
        for renderer in renderers:
            if isinstance(renderer, str) and renderer not in RENDERERS:
                raise ValueError(f"Unknown renderer {renderer!r}; choose from {list(RENDERERS)}.")
            if not isinstance(renderer, (str, Subscriber)):
                raise TypeError(
                    f"A renderer must be one of {list(RENDERERS)} or a Subscriber; got "
                    f"{type(renderer).__name__}."
                )
        self.num_steps = num_steps
        self.strategy = strategy
        self.device = torch.device(device)
        self.inference_device = torch.device(
            inference_device if inference_device is not None else device)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.renderers = list(renderers)
        self.callbacks = list(callbacks)
        self.return_threshold = return_threshold
        self.log_interval = log_interval
        self.console_interval = console_interval
        self.checkpoint_interval = checkpoint_interval
        self.keep_last_checkpoints = keep_last_checkpoints
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.accumulate_grad_batches = accumulate_grad_batches
        self.on_nan_loss = on_nan_loss
        self.overwrite = overwrite
        self.interrupter = interrupter if interrupter is not None else Interrupter()
        # Validate every setting now, before any run directory exists.
        RLComponents(num_steps=num_steps, grad_accumulation=accumulate_grad_batches,
                     gradient_clip_val=gradient_clip_val,
                     gradient_clip_algorithm=gradient_clip_algorithm, on_nan_loss=on_nan_loss)
        LogSchedule(log_interval)
        Checkpointer(".", interval=checkpoint_interval, keep_last=keep_last_checkpoints)
        if console_interval < 0:
            raise ValueError(f"console_interval must be >= 0 seconds; got {console_interval}.")

    def fit(self, env: EnvInit, agent: LearningAgent,
            ckpt_path: str | Path | None = None) -> RLResult:
        """Train ``agent`` on ``env``; returns the trained policy and the run's summary.

        ``ckpt_path`` resumes a run: ``"last"`` or ``"best"`` (in this trainer's run directory)
        or a checkpoint file. With sync vector envs whose state can be pickled (CartPole,
        Pendulum) on CPU, the resumed run continues exactly as if it had not stopped: same
        networks, optimizer states, replay buffer, random streams and metrics. ``num_steps``
        is the total, counted from the start of the original run. The strategy's and agent's
        settings must match the checkpoint's, except the evaluation settings (a difference is
        printed); any other difference is an error naming the setting.

        The spaces are checked before anything starts. A stop request (``trainer.interrupter``,
        or Ctrl-C / SIGTERM while ``fit`` runs in the main thread) ends the run after the
        current step, with the agent saved; a second Ctrl-C aborts at once.
        """
        check_spaces(env, agent)
        run_dir = self.resolve_run_dir(env, agent)
        components = self._components(run_dir)
        if ckpt_path is not None:
            components.checkpoint = self.checkpoint_path(ckpt_path, run_dir)
            check_resume_settings(components.checkpoint,
                                  self.strategy.run_hparams(agent, components))
        prepare_run_dir(run_dir, resuming=components.checkpoint is not None,
                        overwrite=self.overwrite)
        self.interrupter.reset()
        components.event_processor = events = EventProcessor(self._subscribers(run_dir))
        try:
            with stop_on_signals(self.interrupter):
                result = self.strategy.train(agent, components, env)
        finally:
            events.close()
        summary_path = run_dir / "summary.json"
        summary_path.write_text(
            json.dumps(json_safe(dataclasses.asdict(result.summary)), indent=2) + "\n")
        return result

    def evaluate(self, env: EnvInit, agent: LearningAgent, *, episodes: int = 10,
                 seed: int | None = None) -> dict[str, float]:
        """Run ``episodes`` greedy episodes of ``agent``'s policy; returns the ``eval/`` metrics.

        With the default ``seed``, the episodes start where the training run's evaluations
        started, so a trained agent reproduces its last evaluation return.
        """
        check_spaces(env, agent)
        if not agent.built:
            raise ValueError(
                f"This {type(agent).__name__} has no trained networks yet: call fit() first, or "
                "load a checkpoint with load_agent()."
            )
        eval_seed = evaluation_seed(self.strategy) if seed is None else seed
        evaluator = Evaluator(env, episodes=episodes, seed=eval_seed,
                              device=self.inference_device)
        events = EventProcessor()
        try:
            result = evaluator.run(agent.policy(self.inference_device), env_steps=0,
                                   events=events)
        finally:
            evaluator.close()
        return evaluation_metrics(result)

    def _components(self, run_dir: Path) -> RLComponents:
        return RLComponents(
            num_steps=self.num_steps,
            checkpointer=Checkpointer(run_dir / "checkpoints", interval=self.checkpoint_interval,
                                      keep_last=self.keep_last_checkpoints),
            grad_accumulation=self.accumulate_grad_batches,
            gradient_clip_val=self.gradient_clip_val,
            gradient_clip_algorithm=self.gradient_clip_algorithm,
            on_nan_loss=self.on_nan_loss,
            interrupter=self.interrupter,
            summary=SummarySettings(return_threshold=self.return_threshold),
            device=self.device,
            inference_device=self.inference_device,
        )

    def checkpoint_path(self, ckpt_path: str | Path, run_dir: Path) -> Path:
        """``"last"`` / ``"best"`` in ``run_dir/checkpoints``, or the file given; must exist."""
        if ckpt_path in ("last", "best"):
            try:
                return Checkpointer(run_dir / "checkpoints").resolve(str(ckpt_path))
            except FileNotFoundError as error:
                raise FileNotFoundError(
                    f"Nothing to resume: {error} Pass the run_dir of the run to resume, or the "
                    "path of a checkpoint file.") from error
        path = Path(ckpt_path)
        if not path.is_file():
            raise FileNotFoundError(
                f"No checkpoint to resume from at {path}. Pass ckpt_path='last' or 'best' with "
                "the run_dir of the run to resume, or the path of a checkpoint file.")
        return path

    def resolve_run_dir(self, env: EnvInit, agent: LearningAgent) -> Path:
        """The run directory: the one given, or ``runs/<date>-<time>-<agent>-<env>``."""
        if self.run_dir is not None:
            return self.run_dir
        return default_run_dir(type(agent).__name__, env_name(env))

    def _subscribers(self, run_dir: Path) -> list[Subscriber]:
        subscribers: list[Subscriber] = []
        for renderer in self.renderers:
            if renderer == "tqdm":
                subscribers.append(TqdmRenderer())
            elif renderer == "console":
                subscribers.append(ConsoleRenderer(interval_seconds=self.console_interval))
            elif renderer == "tensorboard":
                subscribers.append(TensorBoardRenderer(run_dir, log_interval=self.log_interval))
            elif renderer == "jsonl":
                subscribers.append(JsonlRenderer(run_dir / "metrics.jsonl",
                                                 log_interval=self.log_interval))
            elif isinstance(renderer, Subscriber):
                subscribers.append(renderer)
        subscribers += self.callbacks
        if self.return_threshold is not None:
            subscribers.append(EarlyStopping(self.return_threshold, interrupter=self.interrupter))
        return subscribers


def default_run_dir(agent_name: str, env_name: str) -> Path:
    """``runs/<date>-<time>-<agent>-<env>`` under the current directory."""
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{agent_name.lower()}-{env_name}"


#: Settings that may differ between a checkpoint and the run resuming it.
SAFE_RESUME_OVERRIDES = frozenset({"strategy/eval_interval", "strategy/eval_episodes"})


def check_resume_settings(checkpoint: Path, hparams: dict[str, Any]) -> None:
    """Refuse to resume when settings other than :data:`SAFE_RESUME_OVERRIDES` changed."""
    saved = Checkpointer.load(checkpoint).get("hparams", {})
    changed = sorted(k for k in set(saved) | set(hparams) if saved.get(k) != hparams.get(k))
    unsafe = [k for k in changed if k not in SAFE_RESUME_OVERRIDES]
    if unsafe:
        details = "; ".join(f"{k}: {saved.get(k)!r} in the checkpoint, {hparams.get(k)!r} now"
                            for k in unsafe)
        raise ValueError(
            f"Cannot resume from {checkpoint}: settings differ from the checkpoint's ({details}). "
            f"Use the checkpoint's settings. On resume these may change: "
            f"{sorted(SAFE_RESUME_OVERRIDES)}, num_steps, the run directory, the renderers, the "
            "devices and on_nan_loss.")
    for key in changed:
        warnings.warn(f"Resuming with {key} = {hparams.get(key)!r} "
                      f"(the checkpoint had {saved.get(key)!r}).", stacklevel=3)


#: What a run leaves in its directory (config.yaml is the command line's, written before fit).
RUN_ARTEFACTS = ("checkpoints", "metrics.jsonl", "summary.json")


def prepare_run_dir(run_dir: Path, *, resuming: bool, overwrite: bool) -> None:
    """Create ``run_dir`` and check it is writable; refuse one holding another run unless
    resuming it or told to overwrite it (then its checkpoints, logs and summary are removed)."""
    existing = [name for name in RUN_ARTEFACTS if (run_dir / name).exists()]
    if existing and not resuming:
        if not overwrite:
            raise FileExistsError(
                f"{run_dir} already holds a run ({', '.join(existing)}). Resume it with "
                "ckpt_path='last' (rltrain fit --resume last), replace it with overwrite=True "
                "(--overwrite), or choose another run directory.")
        for name in existing:
            target = run_dir / name
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink()
        for events_file in run_dir.glob("events.out.tfevents.*"):
            events_file.unlink()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=run_dir, prefix=".write-test-")
        probe.close()
    except OSError as error:
        raise PermissionError(
            f"Cannot write to the run directory {run_dir}: {error}. Choose a run_dir you can "
            "write to (run_dir=... or --run-dir).") from error


def check_spaces(env: EnvInit, agent: LearningAgent) -> None:
    """Make one environment and let ``agent`` check its spaces, before any training starts."""
    probe = env_factory(env)()
    try:
        agent.check_spaces(probe.observation_space, probe.action_space)
    finally:
        probe.close()


def evaluation_seed(strategy: RLStrategy) -> int:
    """The reset seed of a strategy's evaluations (its config's seed + ``EVAL_SEED_OFFSET``)."""
    config: Any = getattr(strategy, "config", None)
    return int(getattr(config, "seed", 0)) + EVAL_SEED_OFFSET


def evaluation_metrics(result: EvaluationEnd) -> dict[str, float]:
    """``eval/return_mean``, ``eval/return_std``, ``eval/length_mean`` and ``eval/episodes``."""
    lengths = result.lengths
    return {
        "eval/return_mean": result.return_mean,
        "eval/return_std": result.return_std,
        "eval/length_mean": sum(lengths) / len(lengths) if lengths else float("nan"),
        "eval/episodes": float(len(result.returns)),
    }
