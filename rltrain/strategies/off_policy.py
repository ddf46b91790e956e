"""The off-policy loop: collect into a replay buffer, train every few env steps, evaluate."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
from typing_extensions import override

from rltrain.agents.base import LearningAgent, Policy
from rltrain.checkpoint import Checkpointer, SavedCheckpoint, Stateful, resume, training_state
from rltrain.components import RLComponents
from rltrain.envs import EnvInit, Vectorization, make_vector_env
from rltrain.evaluation import Evaluator
from rltrain.events.events import Checkpoint, EnvStep, EpisodeEnd, TrainStep, flatten_hparams
from rltrain.optim import Optimization
from rltrain.runner import Runner, check_saved_runner
from rltrain.seeding import GlobalRandomState, seed_everything
from rltrain.strategies.base import RLStrategy
from rltrain.strategies.failure import StepStart, failed

#: Evaluation environments reset with ``seed + EVAL_SEED_OFFSET``, apart from the training envs.
EVAL_SEED_OFFSET = 1_000_003


@dataclass
class OffPolicyConfig:
    """Settings of :class:`OffPolicyStrategy`. Env steps are transitions summed over sub-envs.

    Attributes:
        num_envs: Sub-environments stepped together. Default 1.
        vectorization: ``"sync"`` (one process) or ``"async"`` (a process per sub-env).
            Default ``"sync"``.
        buffer_size: Replay capacity in transitions (all sub-envs together). Default 100,000.
        batch_size: Transitions per gradient step. Default 64.
        warmup_steps: Env steps of uniform random actions before learning starts (SB3's
            ``learning_starts``); learning also waits until the buffer holds this many
            transitions. Default 1,000.
        train_interval: Env steps between training rounds (SB3's ``train_freq``); a vector step
            that crosses several boundaries runs as many rounds. Default 256.
        train_steps: Gradient steps per training round (SB3's ``gradient_steps``). Default 128.
        seed: Seeds Python, NumPy, torch, the environments and the replay sampler. Default 0.
    """

    num_envs: int = 1
    vectorization: str = "sync"  # str, not a Literal: omegaconf cannot type-check Literals
    buffer_size: int = 100_000
    batch_size: int = 64
    warmup_steps: int = 1_000
    train_interval: int = 256
    train_steps: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.num_envs >= 1, f"num_envs must be >= 1; got {self.num_envs}."),
            (self.vectorization in ("sync", "async"),
             f"vectorization must be 'sync' or 'async'; got {self.vectorization!r}."),
            (self.buffer_size >= 1, f"buffer_size must be >= 1; got {self.buffer_size}."),
            (self.batch_size >= 1, f"batch_size must be >= 1; got {self.batch_size}."),
            (self.batch_size <= self.buffer_size,
             f"batch_size ({self.batch_size}) is larger than buffer_size ({self.buffer_size}); "
             "raise buffer_size or lower batch_size."),
            (self.warmup_steps >= 0, f"warmup_steps must be >= 0; got {self.warmup_steps}."),
            (self.train_interval >= 1,
             f"train_interval must be >= 1 env step; got {self.train_interval}."),
            (self.train_steps >= 0, f"train_steps must be >= 0; got {self.train_steps}."),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"OffPolicyConfig: {message}")


class OffPolicyStrategy(RLStrategy):
    """Collect with the current policy, learn from replayed transitions (DQN, SAC, Dreamer).

    Per vector step: act (uniform random during warm-up), step the envs, store the transitions,
    emit EnvStep and EpisodeEnd. Each time ``train_interval`` env steps have passed after warm-up:
    ``train_steps`` gradient steps on batches of ``batch_size``. Each ``components.evaluation``
    interval: greedy episodes on a separate environment, and once more at the end. The
    ``components.checkpointer`` saves the agent at its interval and at the end (also when
    stopped). The interrupter is checked before every vector step, gradient step and evaluation
    step. With ``components.checkpoint`` set, the networks, optimizers and counters are loaded
    from that checkpoint first.

    Args:
        config: The loop's settings. Default: :class:`OffPolicyConfig` ().
    """

    def __init__(self, config: OffPolicyConfig | None = None) -> None:
        self.config = config if config is not None else OffPolicyConfig()

    @override
    def hparams(self) -> dict[str, float | int | str | bool]:
        return flatten_hparams("strategy", self.config)

    @override
    def check(self, agent: LearningAgent, components: RLComponents,
              observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        cfg = self.config
        if cfg.warmup_steps >= components.num_steps and cfg.train_steps:
            warnings.warn(
                f"warmup_steps ({cfg.warmup_steps:,}) >= num_steps ({components.num_steps:,}): "
                "the run ends before its first gradient step, so the agent will not learn. "
                "Lower strategy.warmup_steps or raise trainer.num_steps.", stacklevel=3)
        # The agent's replay, made once and dropped (its pages are never touched): its own
        # checks (memory, sequence length) then fail before the run directory is written.
        agent.make_buffer(cfg.buffer_size, num_envs=cfg.num_envs,
                          observation_space=observation_space, action_space=action_space,
                          seed=cfg.seed, device=components.device)
        if components.checkpoint is not None:
            path = components.checkpoint
            try:
                check_saved_runner(Checkpointer.load(path).get("runner"), observation_space,
                                   action_space, cfg.num_envs)
            except ValueError as error:
                raise ValueError(f"{path}: {error}") from None

    @override
    def train_loop(self, agent: LearningAgent, components: RLComponents,
                   env_init: EnvInit) -> Policy:
        cfg = self.config
        seed_everything(cfg.seed)
        envs = make_vector_env(env_init, num_envs=cfg.num_envs,
                               vectorization=cast(Vectorization, cfg.vectorization),
                               seed=cfg.seed)
        evaluator: Evaluator | None = None
        try:
            if components.evaluation.interval is not None:
                evaluator = Evaluator(env_init, episodes=components.evaluation.episodes,
                                      seed=cfg.seed + EVAL_SEED_OFFSET,
                                      device=components.inference_device)
            return self._run(agent, components, envs, evaluator)
        finally:
            envs.close()
            if evaluator is not None:
                evaluator.close()

    def _run(self, agent: LearningAgent, components: RLComponents,
             envs: gym.vector.VectorEnv[Any, Any, Any], evaluator: Evaluator | None) -> Policy:
        return _OffPolicyRun(self, agent, components, envs, evaluator).run()


class _OffPolicyRun:
    """One run of :class:`OffPolicyStrategy`: its parts, and the loop over them."""

    def __init__(self, strategy: OffPolicyStrategy, agent: LearningAgent,
                 components: RLComponents, envs: gym.vector.VectorEnv[Any, Any, Any],
                 evaluator: Evaluator | None) -> None:
        cfg = self.cfg = strategy.config
        self.agent, self.components, self.evaluator = agent, components, evaluator
        self.progress = progress = components.progress
        self.events, self.interrupter = components.event_processor, components.interrupter
        self.checkpointer = components.checkpointer
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        agent.setup(observation_space=obs_space, action_space=act_space,
                    device=components.device, progress=progress, dtype=components.dtype)
        self.buffer = agent.make_buffer(cfg.buffer_size, num_envs=cfg.num_envs,
                                        observation_space=obs_space, action_space=act_space,
                                        seed=cfg.seed, device=components.device)
        self.optim = Optimization.for_run(agent.configure_optimizers(), components)
        self.policy = agent.policy(components.inference_device)
        self.syncs_policy = components.inference_device != components.device
        self.runner = Runner(envs, device=components.inference_device, progress=progress)
        self.runner.reset(seed=cfg.seed, policy=self.policy)
        # Everything with state, saved and restored as one (the checkpoint is their union).
        self.parts: dict[str, Stateful] = {
            "runner": self.runner,  # first: it checks the environment matches the checkpoint's
            "agent": agent, "optimization": self.optim, "buffer": self.buffer,
            "random": GlobalRandomState(), "metrics": self.events.metrics}
        self.hparams = strategy.run_hparams(agent, components)
        #: What the loop is doing (``collect``, ``train``, ``evaluate``, ``save``), the env
        #: steps of the last save, and what the current gradient step may change before it
        #: fails: what a failure report and its emergency checkpoint need.
        self.phase, self.saved_at, self.step_start = "collect", -1, StepStart()
        if components.checkpoint is not None:
            resume(components, agent, self.parts)
            self.sync_policy()

    def run(self) -> Policy:
        """Collect, train, evaluate and save until ``num_steps`` or a stop request. An error
        from the envs, the agent or a subscriber is re-raised as a
        :class:`~rltrain.errors.TrainingError` naming where it happened, after an emergency
        checkpoint when the state allows one (:func:`~rltrain.strategies.failure.failed`)."""
        try:
            return self.loop()
        except Exception as error:
            raise failed(self, error) from error

    def loop(self) -> Policy:
        cfg, progress, interrupter = self.cfg, self.progress, self.interrupter
        eval_interval = self.components.evaluation.interval
        evaluated_at = -1
        self.train_pending()  # a round a stop cut short, when resuming
        while progress.env_steps < self.components.num_steps and not interrupter.should_stop():
            before = progress.env_steps
            episodes = self.collect_step(warmup=before < cfg.warmup_steps)
            after = progress.env_steps

            # Learn once the buffer holds warmup_steps transitions (after a resume, too), one
            # round per train_interval boundary crossed (several when num_envs > train_interval).
            # The round is owed before the step's events go out, so a checkpoint taken when a
            # subscriber fails on them still owes it.
            rounds = after // cfg.train_interval - before // cfg.train_interval
            if (rounds and len(self.buffer) >= min(cfg.warmup_steps, cfg.buffer_size)
                    and self.buffer.can_sample()):
                progress.pending_gradient_steps += rounds * cfg.train_steps
            self.emit_step(episodes)
            self.train_pending()

            if (eval_interval is not None and _crossed(eval_interval, before, after)
                    and not interrupter.should_stop()):
                self.evaluate()
                evaluated_at = after

            if (self.checkpointer is not None and self.checkpointer.due(before, after)
                    and not self.refused()):
                self.save()

        end = progress.env_steps
        # The final policy is always evaluated and saved, unless that just happened.
        if evaluated_at != end and not interrupter.should_stop():
            self.evaluate()
        if self.checkpointer is not None and self.saved_at != end and not self.refused():
            self.save()
        return self.policy

    def collect_step(self, *, warmup: bool) -> list[EpisodeEnd]:
        """One vector step (uniform random actions during warm-up) into the buffer; returns the
        episodes it ended, for :meth:`emit_step` once the step's training round is owed."""
        self.phase = "collect"
        runner = self.runner
        actions = runner.random_actions() if warmup else runner.act(self.policy)
        transitions, episodes = runner.step(actions, self.policy)
        self.buffer.add(transitions)
        return episodes

    def emit_step(self, episodes: list[EpisodeEnd]) -> None:
        """The EnvStep and EpisodeEnd events of the vector step just taken."""
        progress, events = self.progress, self.events
        events.emit(EnvStep(env_steps=progress.env_steps, vector_steps=progress.vector_steps))
        for episode in episodes:
            events.emit(episode)

    def train_pending(self) -> None:
        """The gradient steps owed by the current round. A stop leaves the rest in progress,
        so a resumed run does exactly the steps an uninterrupted run would have."""
        progress = self.progress
        if not progress.pending_gradient_steps:
            return
        self.phase = "train"
        while progress.pending_gradient_steps and not self.interrupter.should_stop():
            self.step_start.take(self.optim, self.buffer)
            metrics = self.optim.training_step(self.agent, self.buffer.sample(self.cfg.batch_size))
            progress.pending_gradient_steps -= 1
            self.step_start.finish(self.optim)
            self.events.emit(TrainStep(env_steps=progress.env_steps,
                                       gradient_steps=progress.gradient_steps, metrics=metrics))
        self.sync_policy()

    def sync_policy(self) -> None:
        """Refresh the acting policy's copy of the weights when it lives on another device."""
        if self.syncs_policy:
            self.agent.sync_policy(self.policy)

    def evaluate(self) -> None:
        """Greedy evaluation; a new best evaluation return is saved as ``best``."""
        if self.evaluator is None:
            return
        self.phase = "evaluate"
        metrics = self.events.metrics
        best = metrics.best_eval_return
        self.evaluator.run(self.policy, env_steps=self.progress.env_steps, events=self.events,
                           interrupter=self.interrupter)
        checkpointer = self.checkpointer
        if checkpointer is not None and checkpointer.keep_best and metrics.best_eval_return > best:
            self.phase = "save"
            self.announce(checkpointer.save_best(
                self.state(), env_steps=self.progress.env_steps,
                eval_return=metrics.best_eval_return), best=True)

    def save(self) -> None:
        """Write a checkpoint of every part and make it ``last``."""
        assert self.checkpointer is not None
        self.phase = "save"
        self.announce(self.checkpointer.save(self.state(), env_steps=self.progress.env_steps))
        self.saved_at = self.progress.env_steps

    def state(self) -> dict[str, Any]:
        return training_state(self.agent, self.parts, self.progress, self.hparams)

    def announce(self, saved: SavedCheckpoint, *, best: bool = False) -> None:
        self.events.emit(Checkpoint(env_steps=saved.env_steps, path=str(saved.path),
                                    size_bytes=saved.size_bytes, seconds=saved.seconds,
                                    best=best))

    def refused(self) -> bool:
        """True after a refused non-finite loss with ``on_nan_loss="stop"``: nothing is saved
        after it, so ``last`` stays the last checkpoint written before it."""
        return (self.components.on_nan_loss == "stop"
                and self.optim.non_finite_loss is not None)


def _crossed(interval: int, before: int, after: int) -> bool:
    """True when a multiple of ``interval`` lies in ``(before, after]``."""
    return after // interval > before // interval
