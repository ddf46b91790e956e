"""The facade: :class:`Trainer` takes the run's settings, builds components, calls the strategy."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from rltrain.agents.base import LearningAgent
from rltrain.agents.nn.encoders import ImageEncoder
from rltrain.checkpoint import (
    LoadedCheckpoint,
    LocalFiles,
    load_agent,
    training_state,
)
from rltrain.config.files import save_config
from rltrain.config.instantiate import make_strategy
from rltrain.config.schema import validate
from rltrain.config.trainer_config import TrainerConfig
from rltrain.envs.envpool import backend_lines
from rltrain.envs.evaluator import Evaluator
from rltrain.envs.make import EnvInit, env_name
from rltrain.envs.video import check_rendering
from rltrain.observe.processor import EventProcessor
from rltrain.runtime.distributed import SINGLE, DistributedContext, connect
from rltrain.runtime.heap import keep_freed_memory
from rltrain.runtime.interrupt import stop_on_signals
from rltrain.settings.targets import TRUSTED, Trust
from rltrain.strategies.base import RLResult, RLStrategy
from rltrain.strategies.components import RLComponents
from rltrain.trainer.description import run_config, trainer_settings
from rltrain.trainer.outputs import (
    kept_after_abort,
    subscribers,
    write_model_summary,
    write_summary,
)
from rltrain.trainer.preflight import (
    check_resume_settings,
    check_spaces,
    default_run_dir,
    evaluation_metrics,
    evaluation_seed,
    make_components,
    probe_env,
    resolve_checkpoint,
    setup_agent,
    strategy_for,
)
from rltrain.trainer.run_dir import open_run
from rltrain.trainer.settings import TrainerSettings


def trainable_parameters(agent: LearningAgent) -> int:
    """The agent's trainable parameters (a target network's copies not counted)."""
    return sum(p.numel() for p in agent.parameters() if p.requires_grad)


def network_size(agent: LearningAgent) -> tuple[int, bool]:
    """What ``num_threads="auto"`` decides by: the agent's trainable parameters, and whether
    it convolves images with the Nature CNN (whose convolutions share well between cores)."""
    nature = any(isinstance(m, ImageEncoder) and m.cnn_name == "NatureCNN"
                 for m in agent.modules())
    return trainable_parameters(agent), nature


class Trainer(TrainerSettings):
    """Trains an agent with a strategy, shows progress and stores the run.

    Example:

        trainer = Trainer(num_steps=50_000, return_threshold=475, eval_episodes=20)
        agent = DQN()
        trainer.fit("CartPole-v1", agent)
        trainer.evaluate("CartPole-v1", agent, ckpt_path="best", episodes=20)

    Or from one config (see :mod:`rltrain.config.schema`):
    ``build(compose(["dqn_cartpole"])).fit()``.

    The run directory receives ``config.yaml`` (the whole run's config), ``model_summary.txt``,
    TensorBoard event files, ``metrics.jsonl``, ``summary.json`` and ``checkpoints/``
    (``last.pt`` and ``best.pt``). Before training, the agent receives its ``device``,
    ``dtype``, ``logger``, ``trainer`` (this object) and the live ``progress`` counters.

    Args: every setting, as keyword arguments (Lightning's names where they apply): the plain
    ones of :class:`~rltrain.config.trainer_config.TrainerConfig` (also a config's ``trainer:``
    section) and the objects of :class:`~rltrain.trainer.settings.TrainerSettings`.
    """

    #: The agent, env and components of the last ``fit`` (None before).
    _fitted: tuple[LearningAgent, EnvInit, RLStrategy, RLComponents] | None = None
    #: The run directory of the last ``fit`` (None before).
    last_run_dir: Path | None = None
    #: This process among the last ``fit``'s processes (:mod:`rltrain.runtime.distributed`); a
    #: single process before any ``fit`` and outside ``torchrun``.
    distributed: DistributedContext = SINGLE

    @classmethod
    def from_config(cls, config: DictConfig | Mapping[str, Any], trust: Trust = TRUSTED,
                    **overrides: Any) -> Trainer:
        """The Trainer and strategy a run config describes (its ``trainer`` and ``strategy``
        sections; validated first). ``overrides`` are further Trainer arguments, e.g.
        ``callbacks=[...]`` or ``interrupter=...`` (a ``strategy=`` given replaces the
        config's). ``trust``: see :func:`build`, which makes the agent and env too."""
        cfg = validate(config)
        settings = OmegaConf.to_object(cfg.trainer)
        assert isinstance(settings, TrainerConfig)
        fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(TrainerConfig)}
        if "strategy" not in overrides:
            overrides["strategy"] = make_strategy(cfg.strategy, trust)
        return cls(config=cfg, **{**fields, **overrides})

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
        saved; a second Ctrl-C aborts at once. A request is never dropped: one made before
        ``fit`` got going (``Thread(target=trainer.fit, ...).start()`` then
        ``trainer.interrupter.stop()``) ends the run before its first step, with a checkpoint;
        only the request that ended the previous ``fit`` is cleared when the next one starts.

        Under ``torchrun`` every process calls ``fit`` with the same arguments and trains its
        rank (``docs/distributed.md``): rank 0 chooses and writes the run directory, and
        ``num_steps`` counts env steps over every rank.
        """
        # A stop requested before this line (say, by the thread that started fit in another
        # one) ends this run too; only the request that ended the previous run is cleared.
        self.interrupter.begin_run()
        try:
            return self._prepare_and_fit(env, agent, ckpt_path)
        finally:
            self.interrupter.end_run()

    def _prepare_and_fit(self, env: EnvInit, agent: LearningAgent,
                         ckpt_path: str | Path | LoadedCheckpoint | None) -> RLResult:
        self.strategy = strategy = strategy_for(self, agent)
        self.distributed = context = connect(self.device, devices=self.devices,
                                             num_nodes=self.num_nodes)
        # Rank 0's choice (a default name holds the time), and its resolution of a checkpoint.
        run_dir = context.on_main(lambda: self.resolve_run_dir(env, agent))
        probe = probe_env(env, self, seed=strategy.seed)
        checkpoint, saved = None, None
        if isinstance(ckpt_path, LoadedCheckpoint):
            checkpoint, saved = ckpt_path.path, ckpt_path.state
        elif ckpt_path is not None:
            path = ckpt_path
            checkpoint = context.on_main(lambda: self.checkpoint_path(path, run_dir))
        components = make_components(
            self, run_dir, context, checkpoint=checkpoint, resume_state=saved,
            config=self.run_config(env, agent, run_dir), frame_stack=probe.frame_stack)
        setup_agent(agent, probe, components, seed=strategy.seed)
        if components.checkpoint is not None:
            check_resume_settings(components.checkpoint, components.saved_state(),
                                  strategy.run_hparams(agent, components))
        strategy.check(agent, components, probe.observation_space, probe.action_space)
        assert components.checkpointer is not None
        components.checkpointer.config = components.config
        directory = components.checkpointer.directory or run_dir / "checkpoints"
        with contextlib.ExitStack() as stack:  # rank 0 takes the run directory for them all
            context.on_main(lambda: stack.enter_context(open_run(
                run_dir, checkpoint_dir=directory, resuming=components.checkpoint is not None,
                overwrite=self.overwrite)))
            return self._fit(env, agent, strategy, components, run_dir)

    def _fit(self, env: EnvInit, agent: LearningAgent, strategy: RLStrategy,
             components: RLComponents, run_dir: Path) -> RLResult:
        main = components.distributed.is_main  # only rank 0 writes and shows the run
        if main:
            save_config(components.config, run_dir / "config.yaml")
        agent.trainer = self
        self._fitted, self.last_run_dir = (agent, env, strategy, components), run_dir
        threads, why = self.torch_threads(*network_size(agent))
        if self.keep_freed_memory:
            keep_freed_memory()
        count = torch.get_num_threads() if threads is None else threads
        preamble = ([write_model_summary(agent, run_dir), f"torch threads: {count} ({why})",
                     *backend_lines(env)] if main else [])
        events = components.event_processor
        for subscriber in subscribers(self, run_dir, agent, preamble) if main else ():
            events.add(subscriber)
        try:
            with stop_on_signals(self.interrupter), self._threads(threads):
                result = strategy.train(agent, components, env)
        except KeyboardInterrupt as abort:  # a second Ctrl-C: its message says what is left
            abort.args = (kept_after_abort(components.checkpointer, run_dir),)
            raise
        finally:
            events.close()
            agent.logger = None
        if main:
            write_summary(run_dir, result.summary)
        return result

    def evaluate(self, env: EnvInit, agent: LearningAgent, *,
                 ckpt_path: str | Path | None = None, episodes: int | None = None,
                 seed: int | None = None, video_dir: str | Path | None = None
                 ) -> dict[str, float]:
        """Run greedy episodes of ``agent``'s policy; returns the ``eval/`` metrics.

        ``ckpt_path`` loads trained weights first: ``"best"`` or ``"last"`` (of this trainer's
        run directory, or of its last ``fit``) or a checkpoint file; None evaluates the agent as
        it is. ``episodes`` defaults to ``eval_episodes``. With the default ``seed`` the episodes
        start where the training run's evaluations started, so the last checkpoint reproduces
        the run's final evaluation return. ``video_dir``: record the episodes of evaluation
        sub-env 0 there (:mod:`rltrain.envs.video`; ``pip install 'rltrain[video]'``).
        """
        if ckpt_path is not None:
            run_dir = self.run_dir or self.last_run_dir
            load_agent(agent, self.checkpoint_path(ckpt_path, run_dir), env)
        check_spaces(env, agent)
        if video_dir is not None:
            check_rendering(env)
        if not agent.built:
            raise ValueError(
                f"This {type(agent).__name__} has no trained networks yet: call fit() first, or "
                "pass ckpt_path='best', 'last' or a checkpoint file."
            )
        eval_seed = evaluation_seed(self) if seed is None else seed
        device = torch.device(self.inference_device or self.device)
        evaluator = Evaluator(env, episodes=self.eval_episodes if episodes is None
                              else episodes, seed=eval_seed, device=device,
                              max_episode_steps=self.eval_max_episode_steps,
                              video_dir=video_dir, step_timeout=self.env_step_timeout)
        try:
            with self._threads(self.torch_threads(*network_size(agent))[0]):
                result = evaluator.run(agent.policy(device), env_steps=0,
                                       events=EventProcessor())
        finally:
            evaluator.close()
        return evaluation_metrics(result)

    def save_checkpoint(self, path: str | Path) -> Path:
        """Write the agent of the last :meth:`fit` to ``path`` (atomically, through the
        Trainer's ``checkpoint_io`` when it holds ``path``, else as a local file): its networks,
        counters, settings and the run's config. Load it with :meth:`load_checkpoint` or
        ``evaluate(ckpt_path=path)``. It holds no optimizer, replay or environment state: to
        continue training exactly, resume from the run's own checkpoints (``"last"``)."""
        if self._fitted is None:
            raise RuntimeError("save_checkpoint() saves the agent of the last fit(); call fit() "
                               "first.")
        agent, _, strategy, components = self._fitted
        state = training_state(agent, {"agent": agent}, components.progress,
                               strategy.run_hparams(agent, components))
        path = Path(path)
        store = (self.checkpoint_io if self.checkpoint_io is not None
                 and self.checkpoint_io.holds(path) else LocalFiles(path.parent))
        store.prepare()
        store.save({**state, "config": components.config, "weights_only": True}, path.name)
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
        (:class:`~rltrain.config.schema.TrainerConfig`'s fields). ``overwrite`` is always saved as
        False: a saved config never replaces a run."""
        return trainer_settings(self)

    def run_config(self, env: EnvInit, agent: LearningAgent,
                   run_dir: Path | None = None) -> dict[str, Any]:
        """The run's config as plain dicts (:func:`~rltrain.trainer.description.run_config`)."""
        return run_config(self, env, agent, run_dir)

    def checkpoint_path(self, ckpt_path: str | Path, run_dir: str | Path | None) -> Path:
        """``"last"`` / ``"best"`` among the run's checkpoints, or the file given; must exist."""
        return resolve_checkpoint(ckpt_path, run_dir, self)

    def resolve_run_dir(self, env: EnvInit, agent: LearningAgent) -> Path:
        """The run directory: the one given, or ``runs/<date>-<time>-<agent>-<env>``."""
        if self.run_dir is not None:
            return Path(self.run_dir)
        return default_run_dir(type(agent).__name__, env_name(env))

    @staticmethod
    @contextlib.contextmanager
    def _threads(threads: int | None) -> Iterator[None]:
        """``torch.set_num_threads(threads)`` inside (None: leave it), restored after."""
        if threads is None:
            yield
            return
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(previous)
