"""The configuration of a command-line run, saved as ``config.yaml`` in its run directory."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from rltrain.agents.dqn import DQNConfig
from rltrain.strategies.off_policy import OffPolicyConfig


def _cartpole_strategy() -> OffPolicyConfig:
    # Evaluate often and over 20 episodes: "solved" is a mean greedy return >= 475 over 20.
    return OffPolicyConfig(eval_interval=2_500, eval_episodes=20)


@dataclass
class RunConfig:
    """Everything ``rltrain fit`` needs; defaults train DQN on CartPole-v1 until solved.

    Attributes:
        env: Gymnasium environment id. Default ``"CartPole-v1"``.
        num_steps: Env steps to train for. Default 50,000.
        device: Where the agent learns. Default ``"cpu"``.
        threads: ``torch.set_num_threads`` for the run; small MLPs are fastest with 1. Default 1.
        return_threshold: Stop once the mean evaluation return reaches it; None runs every
            step. Default: the environment's registered ``reward_threshold`` (475 for CartPole-v1),
            filled in by the command line.
        gradient_clip_val: Gradient norm clip. Default 10 (SB3 DQN's ``max_grad_norm``).
        dqn: The agent's hyperparameters.
        off_policy: The loop's settings (evaluation every 2,500 env steps over 20 episodes).
    """

    env: str = "CartPole-v1"
    num_steps: int = 50_000
    device: str = "cpu"
    threads: int = 1
    return_threshold: float | None = None
    gradient_clip_val: float | None = 10.0
    dqn: DQNConfig = field(default_factory=DQNConfig)
    off_policy: OffPolicyConfig = field(default_factory=_cartpole_strategy)


def save_run_config(config: RunConfig, path: str | Path) -> None:
    """Write ``config`` as YAML."""
    Path(path).write_text(OmegaConf.to_yaml(OmegaConf.structured(config)), encoding="utf-8")


def load_run_config(path: str | Path) -> RunConfig:
    """Read a ``config.yaml`` written by :func:`save_run_config`, type-checked and validated."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No run configuration at {path}; is this an rltrain run directory?")
    merged = OmegaConf.merge(OmegaConf.structured(RunConfig), OmegaConf.load(path))
    config = OmegaConf.to_object(merged)
    assert isinstance(config, RunConfig)
    return config
