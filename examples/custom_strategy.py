"""A custom training loop: learn at the end of each episode instead of every N env steps.

Some practitioners train episodically (collect a whole episode, then a burst of gradient steps
proportional to its length), as in many continuous-control codebases. ``OffPolicyStrategy`` does
not do that, so this file writes the loop as an ``RLStrategy`` subclass over a ``Run``, the
framework's assembly: the run owns the environments, the replay, ``Optimization``, the policy and
their state, and honours every Trainer setting (evaluation and checkpoint intervals, the best
checkpoint, the final evaluation and save, exact resume, policy sync). The loop is the only
thing written here.

Run it:  python examples/custom_strategy.py --steps 20000
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import torch

from rltrain import DQN, LearningAgent, RLComponents, RLStrategy, Run, Trainer
from rltrain.agents import Policy
from rltrain.envs import EnvInit
from rltrain.observe import EpisodeEnd
from rltrain.settings import Settings, setting
from rltrain.strategies import replay


@dataclass
class EpisodicConfig(Settings):
    """Settings of :class:`EpisodicStrategy`.

    Attributes:
        updates_per_step: Gradient steps per env step of each finished episode. Default 0.5.
        warmup_steps: Env steps of random actions before learning. Default 1,000.
        buffer_size: Replay capacity in transitions. Default 50,000.
        batch_size: Transitions per gradient step. Default 64.
        seed: Seeds every random stream. Default 0.

    When and how long to evaluate, and when to save, are the Trainer's settings
    (``Trainer(eval_interval=..., checkpoint_interval=...)``): the run applies them.
    """

    updates_per_step: float = setting(0.5, ge=0)  # bounds checked when made, named in errors
    warmup_steps: int = setting(1_000, ge=0, unit="env steps")
    buffer_size: int = setting(50_000, ge=1)
    batch_size: int = setting(64, ge=1)
    seed: int = 0


class EpisodicStrategy(RLStrategy):
    """One env, and a burst of gradient steps each time an episode ends."""

    def __init__(self, config: EpisodicConfig | None = None) -> None:
        self.config = config if config is not None else EpisodicConfig()

    @property
    def seed(self) -> int:  # the run's seed: the probe env and evaluate use it too
        return self.config.seed

    def train_loop(self, agent: LearningAgent, components: RLComponents,
                   env_init: EnvInit) -> Policy:
        cfg = self.config
        with Run(self, agent, components, env_init, seed=cfg.seed,
                 storage=replay(cfg.buffer_size)) as run:

            def batch() -> Any:
                return run.storage.sample(cfg.batch_size)

            def owed(before: int, episodes: list[EpisodeEnd]) -> int:  # by episode lengths
                return sum(int(e.episode_length * cfg.updates_per_step) for e in episodes)

            run.train_owed(batch)  # what a stop left owed, when resuming
            while not run.done():
                before = run.progress.env_steps
                warm = before >= cfg.warmup_steps
                run.step(random=not warm, owe=owed if warm else None)  # owed before its events
                run.train_owed(batch)
                run.after_step(before)
            return run.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--run-dir", default="runs/custom-strategy")
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer = Trainer(num_steps=args.steps, strategy=EpisodicStrategy(), run_dir=args.run_dir,
                      eval_interval=5_000, gradient_clip_val=10.0)
    result = trainer.fit("CartPole-v1", DQN())
    print(f"best evaluation return: {result.summary.best_eval_return}")


if __name__ == "__main__":
    main()
