"""A custom training loop: learn at the end of each episode instead of every N env steps.

Some practitioners train episodically (collect a whole episode, then a burst of gradient steps
proportional to its length), as in many continuous-control codebases. ``OffPolicyStrategy`` does
not do that, so this file writes the loop as an ``RLStrategy`` subclass. It reuses the framework's
pieces: the ``Runner`` (vector env stepping, autoreset, episode statistics), the ``ReplayBuffer``,
``Optimization`` (backward, clipping, accumulation) and the events (so the progress bar,
TensorBoard, console and JSONL renderers all work unchanged), and ``Evaluator``.

Run it:  python examples/custom_strategy.py --steps 20000
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from rltrain import (
    DQN,
    Evaluator,
    LearningAgent,
    Optimization,
    Policy,
    ReplayBuffer,
    RLComponents,
    RLStrategy,
    Runner,
    Trainer,
    make_vector_env,
)
from rltrain.checkpoint import Stateful, resume, training_state
from rltrain.envs import EnvInit
from rltrain.events import EnvStep, TrainStep
from rltrain.seeding import GlobalRandomState, seed_everything
from rltrain.strategies.off_policy import EVAL_SEED_OFFSET


@dataclass
class EpisodicConfig:
    """Settings of :class:`EpisodicStrategy`.

    Attributes:
        updates_per_step: Gradient steps per env step of each finished episode. Default 0.5.
        warmup_steps: Env steps of random actions before learning. Default 1,000.
        buffer_size: Replay capacity in transitions. Default 50,000.
        batch_size: Transitions per gradient step. Default 64.
        seed: Seeds every random stream. Default 0.

    When and how long to evaluate is the Trainer's setting (``Trainer(eval_interval=...,
    eval_episodes=...)``), which the strategy receives as ``components.evaluation``.
    """

    updates_per_step: float = 0.5
    warmup_steps: int = 1_000
    buffer_size: int = 50_000
    batch_size: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if self.updates_per_step < 0 or self.batch_size < 1:
            raise ValueError(
                "EpisodicConfig needs updates_per_step >= 0 and batch_size >= 1; got "
                f"{self.updates_per_step}, {self.batch_size}."
            )


class EpisodicStrategy(RLStrategy):
    """One env, and a burst of gradient steps each time an episode ends."""

    def __init__(self, config: EpisodicConfig | None = None) -> None:
        self.config = config if config is not None else EpisodicConfig()

    def train_loop(self, agent: LearningAgent, components: RLComponents,
                   env_init: EnvInit) -> Policy:
        cfg = self.config
        seed_everything(cfg.seed)
        envs = make_vector_env(env_init, num_envs=1, seed=cfg.seed)
        progress, events = components.progress, components.event_processor
        stop = components.interrupter.should_stop
        eval_interval = components.evaluation.interval  # None: never evaluate
        evaluator: Evaluator | None = None
        try:
            if eval_interval is not None:
                evaluator = Evaluator(env_init, episodes=components.evaluation.episodes,
                                      seed=cfg.seed + EVAL_SEED_OFFSET,
                                      device=components.inference_device)
            agent.setup(observation_space=envs.single_observation_space,
                        action_space=envs.single_action_space,
                        device=components.device, progress=progress, dtype=components.dtype)
            buffer = ReplayBuffer(cfg.buffer_size, observation_space=envs.single_observation_space,
                                  action_space=envs.single_action_space, seed=cfg.seed,
                                  device=components.device)
            optim = Optimization.for_run(agent.configure_optimizers(), components)
            policy = agent.policy(components.inference_device)
            runner = Runner(envs, device=components.inference_device, progress=progress)
            runner.reset(seed=cfg.seed, policy=policy)
            # Everything with state: a checkpoint is their union, and resuming restores it all.
            parts: dict[str, Stateful] = {
                "agent": agent, "optimization": optim, "buffer": buffer, "runner": runner,
                "random": GlobalRandomState(), "metrics": events.metrics}
            if components.checkpoint is not None:  # the template restored the counters
                resume(components, agent, parts)

            while progress.env_steps < components.num_steps and not stop():
                before = progress.env_steps
                warm = before >= cfg.warmup_steps
                actions = runner.act(policy) if warm else runner.random_actions()
                transitions, episodes = runner.step(actions, policy)
                buffer.add(transitions)
                events.emit(EnvStep(env_steps=progress.env_steps,
                                    vector_steps=progress.vector_steps))
                for episode in episodes:
                    events.emit(episode)
                    if not warm:
                        continue
                    # The episodic schedule: updates proportional to the episode's length.
                    for _ in range(int(episode.episode_length * cfg.updates_per_step)):
                        if stop():
                            break
                        metrics = optim.training_step(agent, buffer.sample(cfg.batch_size))
                        events.emit(TrainStep(env_steps=progress.env_steps,
                                              gradient_steps=progress.gradient_steps,
                                              metrics=metrics))
                    if components.inference_device != components.device:
                        agent.sync_policy(policy)
                if (evaluator is not None and eval_interval is not None
                        and progress.env_steps // eval_interval > before // eval_interval
                        and not stop()):
                    evaluator.run(policy, env_steps=progress.env_steps, events=events,
                                  interrupter=components.interrupter)
            if components.checkpointer is not None:
                state = training_state(agent, parts, progress,
                                       self.run_hparams(agent, components))
                components.checkpointer.save(state,
                                             env_steps=progress.env_steps)
            return policy
        finally:
            envs.close()
            if evaluator is not None:
                evaluator.close()


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
