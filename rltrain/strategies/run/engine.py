"""The run object: everything a training loop needs, assembled once for every strategy.

A strategy's ``train_loop`` opens a :class:`Run` and writes only its loop over it:

    with Run(self, agent, components, env_init, seed=cfg.seed, storage=replay(50_000)) as run:
        while not run.done():
            before = run.progress.env_steps
            run.step(random=before < 1_000,          # act, step the envs, store, then events,
                     owe=lambda before, episodes: 2)  # the gradient steps it earned owed first
            run.train_owed(lambda: run.storage.sample(64))
            run.after_step(before)                   # evaluation, checkpoint, best: when due
        return run.finish()                          # final evaluation and save

The run honours every Trainer setting without the loop naming them: evaluation and checkpoint
cadence, the best checkpoint, the "nothing saved after a refused loss" rule, policy sync to the
inference device, exact resume (every stateful part is in each checkpoint and restored on
entry), and a failure part-way (an emergency checkpoint, then a
:class:`~rltrain.errors.TrainingError`; :mod:`rltrain.strategies.run.failure`).

In a run of several processes (``torchrun``; :mod:`rltrain.runtime.distributed`) every rank runs the
same loop over its own run object, with its own seeded envs and storage; the run keeps the
ranks in step without the loop naming them: it starts every rank from rank 0's weights, counts
``env_steps`` over every rank, agrees on stop requests and the episodes ended every
``sync_interval`` vector steps, evaluates on rank 0 only, and saves the shared parts once and
each rank's own parts (all but :data:`SHARED_PARTS`) as its shard.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Self

from rltrain.agents.base import LearningAgent, Policy
from rltrain.checkpoint import SavedCheckpoint, Stateful, training_state
from rltrain.envs.atari import frame_stack_of
from rltrain.envs.evaluator import Evaluator, video_options
from rltrain.envs.make import EnvInit, Vectorization, env_name, make_vector_env
from rltrain.envs.runner import Runner
from rltrain.observe.events import Checkpoint, EnvStep, EpisodeEnd, TrainStep
from rltrain.optim import Optimization
from rltrain.optim.compiled import compile_networks, compile_seconds
from rltrain.runtime.cadence import crossed
from rltrain.runtime.seeding import GlobalRandomState, derive_seeds, seed_everything
from rltrain.runtime.statistics import Statistics
from rltrain.runtime.watchdog import watch_env_calls
from rltrain.strategies.components import RLComponents
from rltrain.strategies.run.agreement import Agreement
from rltrain.strategies.run.failure import StepStart, failed
from rltrain.strategies.run.resume import resume
from rltrain.strategies.run.storage import Sampled, StorageFactory, StorageT
from rltrain.types import MetricValue

if TYPE_CHECKING:
    from rltrain.strategies.base import RLStrategy

#: The names a run's own parts and a checkpoint's own entries take.
RESERVED = frozenset({"runner", "agent", "optimization", "buffer", "random", "metrics",
                      "progress", "hparams", "config", "format", "agent_class", "versions",
                      "spaces"})

class Run(Generic[StorageT]):
    """One training run: envs, evaluator, runner, storage, optimization, policy and their state.

    Made inside a strategy's ``train_loop``; entering it (``with Run(...) as run``) restores a
    resumed run's state, and leaving it closes the environments, also on an error. An error
    raised inside the ``with`` block becomes a :class:`~rltrain.errors.TrainingError` after an
    emergency checkpoint where the state allows one.

    Args:
        strategy: The strategy running (its ``run_hparams`` go into every checkpoint).
        agent: The agent; set up here for the envs' spaces (built on first use) unless it
            already is for this run (``LearningAgent.is_set_up_for``).
        components: The run's components (settings, counters, events, checkpointer).
        env_init: The environment.
        seed: The run's seed: the global generators', the envs' (and their spaces'), the
            storage sampler's and the evaluation's derive from it
            (:func:`~rltrain.runtime.seeding.derive_seeds`).
        storage: Makes the experience storage (e.g. :func:`replay`), ``run.storage``, typed
            as the factory returns it; None keeps none.
        num_envs: Sub-environments stepped together. Default 1.
        vectorization: ``"sync"`` or ``"async"``. Default ``"sync"``.
        parts: More stateful parts of the strategy's own, saved and restored with the rest.
    """

    def __init__(self, strategy: RLStrategy, agent: LearningAgent, components: RLComponents,
                 env_init: EnvInit, *, seed: int,
                 storage: StorageFactory[StorageT] | None = None,
                 num_envs: int = 1, vectorization: Vectorization = "sync",
                 parts: Mapping[str, Stateful] | None = None) -> None:
        taken = RESERVED & set(parts or {})
        if taken:
            raise ValueError(f"Run parts {sorted(taken)} would replace the run's own; name "
                             "the strategy's parts otherwise.")
        self.agent, self.components = agent, components
        self.distributed = components.distributed
        self.statistics = Statistics(self.distributed)
        self.seeds = derive_seeds(seed, self.distributed.rank)
        self.progress, self.events = components.progress, components.event_processor
        self.interrupter, self.checkpointer = components.interrupter, components.checkpointer
        seed_everything(self.seeds.globals)
        self.envs = make_vector_env(env_init, num_envs=num_envs, vectorization=vectorization,
                                    seed=self.seeds.envs)
        self.evaluator: Evaluator | None = None
        # Env calls past env_step_timeout (or a stop signal's grace) are interrupted until close.
        self._watch = contextlib.ExitStack()
        try:
            self._watch.enter_context(watch_env_calls())
            self._assemble(strategy, env_init, storage, dict(parts or {}))
        except BaseException:
            self.close()
            raise

    def _assemble(self, strategy: RLStrategy, env_init: EnvInit,
                  storage: StorageFactory[StorageT] | None,
                  extra: dict[str, Stateful]) -> None:
        components, agent, envs = self.components, self.agent, self.envs
        if components.evaluation.interval is not None and self.distributed.is_main:
            self.evaluator = Evaluator(
                env_init, episodes=components.evaluation.episodes, seed=self.seeds.evaluation,
                device=components.inference_device,
                max_episode_steps=components.evaluation.max_episode_steps,
                step_timeout=components.env_step_timeout, **video_options(components.evaluation))
        spaces = envs.single_observation_space, envs.single_action_space
        agent.distributed = components.distributed
        if not agent.is_set_up_for(self.progress):  # a Trainer's fit has set it up already
            agent.setup(observation_space=spaces[0], action_space=spaces[1],
                        device=components.device, progress=self.progress, dtype=components.dtype,
                        num_steps=components.num_steps)
        if components.optimization.compile is not None:
            compiled_before = compile_seconds()
            compile_networks(agent, components.optimization.compile)
            self.events.metrics.compiling = lambda: compile_seconds() - compiled_before
        stack = frame_stack_of(envs)
        self.storage: StorageT = None if storage is None else storage(  # type: ignore[assignment]
            agent, *spaces, envs.num_envs, self.seeds.storage, components.device,
            **({"frame_stack": stack} if stack > 1 else {}))
        #: The storage when a failed gradient step puts its draws back (:class:`Sampled`).
        self.sampled: Sampled | None = self.storage if isinstance(self.storage, Sampled) else None
        self.optim = Optimization(agent.configure_optimizers(), progress=self.progress,
                                  settings=components.optimization,
                                  interrupter=self.interrupter, sync=self.distributed)
        self.policy = agent.policy(components.inference_device)
        self.runner = Runner(envs, device=components.inference_device, progress=self.progress,
                             world_size=self.distributed.world_size,
                             step_timeout=components.env_step_timeout,
                             env_name=env_name(env_init))
        self.agreement = Agreement(components.distributed, self.interrupter, self.events,
                                   self.progress, num_envs=envs.num_envs,
                                   interval=components.sync_interval)
        self.runner.reset(seed=self.seeds.envs, policy=self.policy)
        # Everything with state, saved and restored as one (the checkpoint is their union).
        self.parts: dict[str, Stateful] = {
            "runner": self.runner,  # first: it checks the environment matches the checkpoint's
            "agent": agent, "optimization": self.optim,
            **({"buffer": self.storage} if self.storage is not None else {}),
            "random": GlobalRandomState(), "metrics": self.events.metrics, **extra}
        self.hparams = strategy.run_hparams(agent, components)
        #: What the loop is doing (``collect``, ``train``, ``evaluate``, ``save``), the env
        #: steps of the last evaluation and save, and what the current gradient step may change
        #: before it fails: what the cadence, a failure report and its checkpoint need.
        self.phase, self.evaluated_at, self.saved_at = "collect", -1, -1
        self.step_start = StepStart()

    def __enter__(self) -> Self:
        try:
            if self.components.checkpoint is not None:
                resume(self.components, self.agent, self.parts)
            # Every rank starts from rank 0's weights (and normalisation statistics).
            self.distributed.broadcast_tensors_([*self.agent.parameters(),
                                                 *self.agent.buffers()])
        except BaseException:
            self.close()
            raise
        self.sync_policy()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            if isinstance(error, Exception):
                raise failed(self, error) from error
        finally:
            self.close()

    def close(self) -> None:
        """Close the training and evaluation environments (hung async workers are ended)."""
        with self._watch:
            self.envs.close()
            if self.evaluator is not None:
                self.evaluator.close()

    @property
    def num_envs(self) -> int:
        """Sub-environments stepped together."""
        return self.runner.num_envs

    def done(self) -> bool:
        """True once ``num_steps`` env steps are done or a stop was requested."""
        return (self.progress.env_steps >= self.components.num_steps
                or self.stop_requested())

    def stop_requested(self) -> bool:
        """True once a stop was requested (``interrupter.stop``: Ctrl-C, SIGTERM, a callback,
        another thread, a refused loss). With several processes, a request counts once the
        ranks agreed on it (at the same vector step on every rank; :meth:`agree`), so that
        every rank stops at the same point; a refused loss is agreed when it is refused."""
        return self.agreement.stop_requested() or self.optim.halted()

    def agree(self) -> None:
        """With several processes: exchange every rank's stop request and the episodes it
        ended since the last agreement (:class:`~rltrain.strategies.run.agreement.Agreement`);
        called every ``sync_interval`` vector steps, before each save and at the end. A
        no-op with one process."""
        self.agreement.agree()

    def step(self, *, random: bool = False,
             owe: Callable[[int, list[EpisodeEnd]], int] | None = None) -> list[EpisodeEnd]:
        """One vector step into the storage: the policy's actions (uniform random ones with
        ``random``), the envs stepped, the transitions stored; then the gradient steps it
        earned owed (``owe(env_steps_before, episodes)``, see :meth:`owe`), before its events
        (EnvStep, then its EpisodeEnds; with several processes, every rank's at the ranks' next
        agreement), so a stop or a save an event causes finds them owed. Returns the episodes
        it ended."""
        self.phase = "collect"
        runner, before = self.runner, self.progress.env_steps
        actions = runner.random_actions() if random else runner.act(self.policy)
        transitions, episodes = runner.step(actions, self.policy)
        if self.storage is not None:
            self.storage.add(transitions)
        if owe is not None:
            self.owe(owe(before, episodes))
        progress, events = self.progress, self.events
        if events.hears(EnvStep):
            events.emit(EnvStep(env_steps=progress.env_steps, vector_steps=progress.vector_steps))
        self.agreement.episodes_ended(episodes)
        return episodes

    def owe(self, gradient_steps: int) -> None:
        """Owe ``gradient_steps`` more gradient steps (``progress.pending_gradient_steps``):
        saved in checkpoints, so a stop or a failure between here and :meth:`train_owed` leaves
        a resumed run owing exactly them."""
        self.progress.pending_gradient_steps += gradient_steps

    def gradient_step(self, batch: Callable[[], Any], *, owed: bool = False
                      ) -> dict[str, MetricValue]:
        """One gradient step on the batch ``batch()`` returns (``agent.training_step`` through
        :class:`~rltrain.optim.Optimization`), then its TrainStep event; returns its metrics.
        ``owed``: it is one of the owed steps (:meth:`owe`), counted off before the event."""
        with self.step_start.watch(self, self.optim, self.sampled):
            metrics = self.optim.training_step(self.agent, batch())
            if owed:
                self.progress.pending_gradient_steps -= 1
        self.events.emit(TrainStep(env_steps=self.progress.env_steps,
                                   gradient_steps=self.progress.gradient_steps, metrics=metrics))
        return metrics

    def train_owed(self, batch: Callable[[], Any], *,
                   until: Callable[[dict[str, MetricValue]], bool] | None = None) -> None:
        """The owed gradient steps, each on a new ``batch()``, then the policy synced. A stop
        leaves the rest owed, so a resumed run does exactly the steps a straight run would;
        ``until(metrics)`` returning True after a step forgives the rest (an early end of an
        update, e.g. PPO's target KL)."""
        progress = self.progress
        if not progress.pending_gradient_steps:
            return
        while progress.pending_gradient_steps and not self.stop_requested():
            metrics = self.gradient_step(batch, owed=True)
            # With several processes, the update ends on every rank when it ends on one.
            if until is not None and self.distributed.any(until(metrics)):
                progress.pending_gradient_steps = 0
        self.sync_policy()

    def sync_policy(self) -> None:
        """Refresh the acting policy's copy of the weights when it lives on another device."""
        if self.components.inference_device != self.components.device:
            self.agent.sync_policy(self.policy)

    def after_step(self, before: int) -> None:
        """What is due once a vector step took the run from ``before`` env steps to now: an
        evaluation (and a best checkpoint) at each ``eval_interval``, a checkpoint at each
        ``checkpoint_interval``."""
        self.optim.poll()  # non-finite losses flagged on the device, read once per step
        after = self.progress.env_steps
        interval = self.components.evaluation.interval
        if (interval is not None and crossed(before, after, interval)
                and not self.stop_requested()):
            self.evaluate()
        if self.checkpointer is not None and self.checkpointer.due(before, after):
            self.save()

    def finish(self) -> Policy:
        """The final evaluation and save (each unless it just happened; no evaluation after a
        stop request); returns the trained policy."""
        end = self.progress.env_steps
        self.agree()
        if self.evaluated_at != end and not self.stop_requested():
            self.evaluate()
        if self.saved_at != end:
            self.save()
        return self.policy

    def evaluate(self) -> None:
        """Greedy evaluation (on rank 0); a new best evaluation return is saved as ``best``."""
        if self.components.evaluation.interval is None:
            return
        with self.in_phase("evaluate"):
            self._evaluate()

    def _evaluate(self) -> None:
        metrics = self.events.metrics
        best = metrics.best_eval_return
        if self.evaluator is not None:
            self.evaluator.run(self.policy, env_steps=self.progress.env_steps,
                               events=self.events, interrupter=self.interrupter)
        self.evaluated_at = self.progress.env_steps
        checkpointer = self.checkpointer
        improved = self.distributed.any(metrics.best_eval_return > best)  # rank 0's result
        if checkpointer is not None and checkpointer.keep_best and improved:
            with self.in_phase("save"):
                state, shard = self.checkpoint_state()
                self.announce(checkpointer.save_best(
                    state, env_steps=self.progress.env_steps,
                    eval_return=metrics.best_eval_return, shard=shard), best=True)

    def save(self) -> None:
        """Write a checkpoint of every part and make it ``last`` (nothing after a refused
        non-finite loss: :meth:`refused`)."""
        if self.checkpointer is None or self.refused():
            return
        with self.in_phase("save"):
            self.agree()  # every rank's episodes counted before the counters are saved
            state, shard = self.checkpoint_state()
            self.announce(self.checkpointer.save(state, env_steps=self.progress.env_steps,
                                                 shard=shard))
            self.saved_at = self.progress.env_steps

    @contextlib.contextmanager
    def in_phase(self, phase: str) -> Iterator[None]:
        """What the run is doing (``evaluate``, ``save``) for as long as the block runs; a
        failure inside it names that phase (:mod:`~rltrain.strategies.run.failure`)."""
        before, self.phase = self.phase, phase
        yield
        self.phase = before

    def state(self) -> dict[str, Any]:
        """A checkpoint of the run now: every part's state, the counters and the settings."""
        return training_state(self.agent, self.parts, self.progress, self.hparams)

    def checkpoint_state(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """What a save writes: :meth:`state` and no shard with one process; with several,
        the shared parts (:data:`SHARED_PARTS`, with the counters and settings; on rank 0,
        which writes them) and this rank's own parts, its shard."""
        return self.agreement.split(self.parts, lambda parts: training_state(
            self.agent, parts, self.progress, self.hparams))

    def announce(self, saved: SavedCheckpoint, *, best: bool = False) -> None:
        """The Checkpoint event of a save."""
        self.events.emit(Checkpoint(env_steps=saved.env_steps, path=str(saved.path),
                                    size_bytes=saved.size_bytes, seconds=saved.seconds,
                                    best=best))

    def refused(self) -> bool:
        """True after a refused non-finite loss with ``on_nan_loss="stop"``: nothing is saved
        after it, so ``last`` stays the last checkpoint written before it."""
        self.optim.poll()
        return self.optim.halted()
