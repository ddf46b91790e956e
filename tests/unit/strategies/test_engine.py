"""The Run engine (rltrain/strategies/run/engine.py) driven by the smallest loop: it counts env
steps over the sub-envs, keeps the Trainer's evaluation and checkpoint cadence at every interval
a step crosses, trains exactly the gradient steps owed, and ends with a final evaluation and
save, in the template's event order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from conftest import QUIET

from rltrain import DQN, DQNConfig, LearningAgent, RLComponents, RLStrategy, Run, Trainer
from rltrain.agents import Policy
from rltrain.buffers import ReplayBatch
from rltrain.envs import EnvInit
from rltrain.observe import (
    Checkpoint,
    End,
    EnvStep,
    EvaluationEnd,
    EventRecorder,
    Start,
    TrainStep,
)
from rltrain.strategies import replay


class EveryTen(RLStrategy):
    """Three sub-envs; three gradient steps owed for each 10 env steps crossed, after 30."""

    def train_loop(self, agent: LearningAgent, components: RLComponents,
                   env_init: EnvInit) -> Policy:
        with Run(self, agent, components, env_init, seed=0, storage=replay(500),
                 num_envs=3) as run:
            def owed(before: int, episodes: list[Any]) -> int:
                now = run.progress.env_steps
                return 3 * (now // 10 - before // 10) if now >= 30 else 0

            while not run.done():
                before = run.progress.env_steps
                run.step(random=True, owe=owed)
                run.train_owed(lambda: run.storage.sample(8))
                run.after_step(before)
            return run.finish()


def fit(run_dir: Path, recorder: EventRecorder) -> Any:
    trainer = Trainer(num_steps=100, strategy=EveryTen(), run_dir=run_dir, eval_interval=40,
                      eval_episodes=1, checkpoint_interval=25, callbacks=[recorder], **QUIET)
    return trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[8])))


def test_the_engine_keeps_the_cadence_a_loop_asks_for(tmp_path: Path) -> None:
    recorder = EventRecorder()
    result = fit(tmp_path, recorder)
    steps = [e.env_steps for e in recorder.of(EnvStep)]
    assert steps == list(range(3, 103, 3))  # 3 sub-envs: 34 vector steps pass num_steps=100
    # an evaluation at each multiple of 40 a step crossed (at 42 and 81), and the final one
    assert [e.env_steps for e in recorder.of(EvaluationEnd)] == [42, 81, 102]
    saved = [e.env_steps for e in recorder.of(Checkpoint) if not e.best]
    assert saved[:4] == [27, 51, 75, 102]  # each multiple of 25 crossed, then the final save
    # 3 gradient steps per multiple of 10 crossed from 30 on: 30, 40, ..., 100
    assert len(recorder.of(TrainStep)) == 3 * 8 == result.summary.gradient_steps
    assert isinstance(recorder.events[0], Start) and isinstance(recorder.events[-1], End)
    assert result.summary.env_steps == 102


class LastSteps:
    """A storage of the three methods a run needs (no ``sampler_state``): the last vector
    step's transitions, which the loop trains on."""

    def __init__(self, *_: Any) -> None:
        self.latest: Any = None
        self.added = 0

    def add(self, transitions: Any) -> None:
        self.latest, self.added = transitions, self.added + 1

    def state_dict(self) -> dict[str, Any]:
        return {"added": self.added}

    def load_state_dict(self, state: dict[str, Any], /) -> None:
        self.added = state["added"]


class OnLatest(RLStrategy):
    def train_loop(self, agent: LearningAgent, components: RLComponents,
                   env_init: EnvInit) -> Policy:
        with Run(self, agent, components, env_init, seed=0, storage=LastSteps) as run:
            while not run.done():
                before = run.progress.env_steps
                run.step(random=True, owe=lambda *_: 1)
                run.train_owed(lambda: replay_batch(run.storage.latest))
                run.after_step(before)
            assert run.storage.added == run.progress.vector_steps  # typed: a LastSteps
            return run.finish()


def replay_batch(transitions: Any) -> ReplayBatch:
    """The last vector step as a DQN batch."""
    def float_tensor(array: Any) -> torch.Tensor:
        return torch.as_tensor(array, dtype=torch.float32)
    return ReplayBatch(float_tensor(transitions.observations), torch.as_tensor(
        transitions.actions), float_tensor(transitions.rewards),
        float_tensor(transitions.next_observations), float_tensor(transitions.terminated),
        float_tensor(transitions.truncated))


def test_a_storage_of_its_own_needs_only_add_and_its_state(tmp_path: Path) -> None:
    trainer = Trainer(num_steps=40, strategy=OnLatest(), run_dir=tmp_path, eval_interval=None,
                      checkpoint_interval=20, **QUIET)
    result = trainer.fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[8])))
    assert result.summary.gradient_steps == 40  # one per vector step, none refused
    resumed = Trainer(num_steps=60, strategy=OnLatest(), run_dir=tmp_path, eval_interval=None,
                      **QUIET).fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[8])),
                                   ckpt_path="last")
    assert resumed.summary.gradient_steps == 60  # the storage's state came back with the rest
