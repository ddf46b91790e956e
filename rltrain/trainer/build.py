"""A run from one config: :func:`build` makes the Trainer, agent and environment it describes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rltrain.agents.base import LearningAgent
from rltrain.checkpoint import LoadedCheckpoint
from rltrain.config.instantiate import make_agent, make_env
from rltrain.config.schema import validate
from rltrain.envs.atari import is_atari_id, warn_raw_pixels
from rltrain.envs.make import EnvInit
from rltrain.settings.targets import TRUSTED, Trust
from rltrain.strategies.base import RLResult
from rltrain.trainer.trainer import Trainer


@dataclasses.dataclass
class BuiltRun:
    """What :func:`build` makes from a config: the trainer, the agent and the environment."""

    trainer: Trainer
    agent: LearningAgent
    env: EnvInit

    def fit(self, ckpt_path: str | Path | LoadedCheckpoint | None = None) -> RLResult:
        """``trainer.fit(env, agent, ckpt_path)``."""
        return self.trainer.fit(self.env, self.agent, ckpt_path=ckpt_path)

    def evaluate(self, ckpt_path: str | Path | None = None, episodes: int | None = None,
                 seed: int | None = None, video_dir: str | Path | None = None
                 ) -> dict[str, float]:
        """``trainer.evaluate(env, agent, ckpt_path=..., episodes=..., seed=...,
        video_dir=...)``."""
        return self.trainer.evaluate(self.env, self.agent, ckpt_path=ckpt_path,
                                     episodes=episodes, seed=seed, video_dir=video_dir)


def build(config: DictConfig | Mapping[str, Any], trust: Trust = TRUSTED,
          **trainer_overrides: Any) -> BuiltRun:
    """Trainer, strategy, agent and environment from one run config (validated first);
    ``trainer_overrides`` are further Trainer arguments (``callbacks``, ``interrupter``).
    ``trust``: what the config's import paths may name; a config read from a run directory or
    a checkpoint is untrusted (``Trust(stored_in=run_dir)``), the default trusts the config
    as the user's own."""
    cfg = validate(config)
    if is_atari_id(cfg.env.id) and cfg.env.atari is None and not cfg.env.wrappers:
        warn_raw_pixels(str(cfg.env.id), cfg.agent.get("name"))
    return BuiltRun(trainer=Trainer.from_config(cfg, trust, **trainer_overrides),
                    agent=make_agent(cfg.agent, trust), env=make_env(cfg.env, trust))


