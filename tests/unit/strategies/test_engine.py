"""The Run engine (rltrain/strategies/run/engine.py) driven by the smallest loop: it counts env
steps over the sub-envs, keeps the Trainer's evaluation and checkpoint cadence at every interval
a step crosses, trains exactly the gradient steps owed, and ends with a final evaluation and
save, in the template's event order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import QUIET

from rltrain import DQN, DQNConfig, LearningAgent, RLComponents, RLStrategy, Run, Trainer
from rltrain.agents import Policy
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
