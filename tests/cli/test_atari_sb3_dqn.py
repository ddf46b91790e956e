"""``benchmarks.atari_ppo --library sb3 --preset dqn_atari``: Stable-Baselines3's DQN built on the
``dqn_atari`` preset's settings is RL-Zoo's Atari DQN (the peer the Pong curves are set beside):
its hyperparameters, epsilon schedule over the budget, network and replay."""

from __future__ import annotations

import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("ale_py")

from benchmarks.atari_common import atari_config, sb3_atari_envs, sb3_dqn

BUDGET = 1_000_000


def test_sb3s_dqn_on_the_dqn_atari_preset_is_rl_zoos_atari_dqn() -> None:
    from torch import nn

    config = atari_config("ALE/Pong-v5", BUDGET, "unused", [], "dqn_atari")
    envs = sb3_atari_envs("ALE/Pong-v5", 1, 0, 0.0, subprocess=False)
    try:
        model = sb3_dqn(config, envs, seed=0)
        # rl-baselines3-zoo hyperparams/dqn.yml, atari
        assert (model.buffer_size, model.learning_starts, model.batch_size) == (
            100_000, 100_000, 32)
        assert (model.train_freq.frequency, model.gradient_steps) == (4, 1)
        assert model.target_update_interval == 1_000  # env steps: 250 of rltrain's gradient
        assert (model.learning_rate, model.gamma, model.max_grad_norm) == (1e-4, 0.99, 10.0)
        assert (model.exploration_initial_eps, model.exploration_final_eps) == (1.0, 0.01)
        model._setup_learn(BUDGET)  # epsilon at half the budget: rltrain's at 500,000 steps
        agent = config.agent
        halfway = agent.epsilon_start + (agent.epsilon_end - agent.epsilon_start) * min(
            1.0, BUDGET / 2 / agent.exploration_steps)
        assert model.exploration_schedule(0.5) == pytest.approx(halfway)
        head = [m for m in model.q_net.q_net if isinstance(m, nn.Linear)]
        assert [(m.in_features, m.out_features) for m in head] == [(512, 6)]  # Nature DQN
        assert model.replay_buffer.observations.shape[1:] == (1, 4, 84, 84)
        assert not model.replay_buffer.optimize_memory_usage
    finally:
        envs.close()
