"""What the Atari benchmarks share: the ``ppo_atari`` preset as a config, and Stable-Baselines3's
PPO on the same settings with its own Atari pipeline (``make_atari_env``: ``AtariWrapper`` in
``SubprocVecEnv`` workers, ``VecFrameStack`` of 4); SB3's DQN on the ``dqn_atari`` preset's
settings (:func:`benchmarks.dqn_presets.sb3_settings`: RL-Zoo's, one env, the same pipeline).

SB3's settings, from the preset one for one: n_envs, n_steps, batch_size, n_epochs, the learning
rate annealed linearly to 0 (``lambda remaining: remaining * lr``), clip_range,
clip_range_vf, ent_coef, vf_coef, max_grad_norm, gamma, gae_lambda; its ``CnnPolicy`` is the
same Nature CNN shared by the policy and value heads with orthogonal init (SB3's defaults for
images). Its env: ``ALE/<Game>-v5`` made with ``frameskip=1`` and the preset's sticky-action
probability, ``AtariWrapper`` (no-op reset 30, frame skip 4 with max-pooling, episodic life,
fire reset, 84x84 grayscale, sign-clipped rewards), 4 frames stacked.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from omegaconf import DictConfig

from benchmarks._util import QUIET
from rltrain.config.schema import compose


def atari_config(game: str, steps: int, run_dir: str, extra: list[str] | None = None,
                 preset: str = "ppo_atari") -> DictConfig:
    """``preset`` (``ppo_atari``, or ``dqn_atari``) on ``game`` (``ALE/Breakout-v5``) for
    ``steps`` env steps."""
    return compose([preset], [f"env.id={game}", f"trainer.num_steps={steps}",
                              f"trainer.run_dir={run_dir}", *QUIET, *(extra or [])])


def sb3_atari_envs(game: str, num_envs: int, seed: int, sticky: float, *,
                   subprocess: bool = True) -> Any:
    """SB3's Atari vector env: ``AtariWrapper`` (episodic life, clipped rewards; its
    ``Monitor``, inside them, records whole games in the game's score) in ``SubprocVecEnv``
    workers, 4 frames stacked."""
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecFrameStack

    envs = make_atari_env(partial(make_ale, game), n_envs=num_envs, seed=seed,
                          env_kwargs={"frameskip": 1, "repeat_action_probability": sticky},
                          vec_env_cls=SubprocVecEnv if subprocess else None)
    return VecFrameStack(envs, n_stack=4)


def make_ale(game: str, **kwargs: Any) -> Any:
    """``gym.make(game)`` after registering the ALE's ids (in SB3's worker processes too)."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    return gym.make(game, **kwargs)


def sb3_dqn(config: DictConfig, envs: Any, seed: int) -> Any:
    """SB3's DQN ``CnnPolicy`` (the Nature CNN, no hidden layer after it) with ``config``'s
    (the ``dqn_atari`` preset's) settings on ``envs``; the replay holds both observations of
    each transition, as RL-Zoo's (``optimize_memory_usage=False``): 5.6 GB for 100,000."""
    import stable_baselines3

    from benchmarks.dqn_presets import sb3_settings

    return stable_baselines3.DQN("CnnPolicy", envs, seed=seed, device="cpu", verbose=0,
                                 **sb3_settings(config))


def sb3_ppo(config: DictConfig, envs: Any, seed: int) -> Any:
    """SB3's PPO with ``config``'s (the ``ppo_atari`` preset's) settings on ``envs``."""
    import stable_baselines3

    strategy, agent = config.strategy, config.agent
    lr = float(agent.lr)
    return stable_baselines3.PPO(
        "CnnPolicy", envs, seed=seed, device="cpu", verbose=0,
        n_steps=int(strategy.n_steps), batch_size=int(strategy.batch_size),
        n_epochs=int(strategy.update_epochs),
        learning_rate=(lambda remaining: remaining * lr) if agent.anneal_lr else lr,
        clip_range=float(agent.clip_range), clip_range_vf=agent.clip_range_vf,
        ent_coef=float(agent.ent_coef), vf_coef=float(agent.vf_coef),
        max_grad_norm=float(agent.max_grad_norm), gamma=float(agent.gamma),
        gae_lambda=float(agent.gae_lambda))
