"""Invalid-action masking: on an env where an invalid action ends the episode with a penalty,
masked DQN, QR-DQN, PQN and PPO never take one (counted by the env over thousands of real
steps) and learn; unmasked ones do take them. The mask from a ``Dict`` observation and from
``info`` (InfoActionMask, also from a config), in the targets (max over valid actions), in
PPO's log-probabilities and entropy, ``predict(action_mask=...)``, and the refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET

from rltrain import (
    DQN,
    PPO,
    DQNConfig,
    OffPolicyConfig,
    OffPolicyStrategy,
    OnPolicyConfig,
    OnPolicyStrategy,
    PPOConfig,
    Trainer,
    build,
    compose,
    load_policy,
)
from rltrain.agents import PQN, QRDQN, PQNConfig, QRDQNConfig, SpaceError
from rltrain.agents.nn.masking import masked_logits, masked_values
from rltrain.envs.masking import InfoActionMask

N = 4
LENGTH = 20


class MaskedChoice(gym.Env[Any, int]):
    """``N`` actions; each step a random subset is valid (the target always, each other one
    with probability 1/2). The observation is the target's one-hot (and, with ``in_info``
    false, the mask); +1 for the target, 0 for another valid action, -1 and the episode ends
    for an invalid one; episodes of ``LENGTH`` steps. ``invalid`` counts the invalid actions
    taken by every instance."""

    invalid: ClassVar[list[int]] = [0]
    steps: ClassVar[list[int]] = [0]

    spec = gym.envs.registration.EnvSpec("MaskedChoice-v0", max_episode_steps=LENGTH)

    def __init__(self, in_info: bool = False, show_mask: bool = True) -> None:
        self.in_info = in_info
        target_space = gym.spaces.Box(0.0, 1.0, (N,), np.float32)
        self.observation_space = (target_space if in_info or not show_mask else gym.spaces.Dict(
            {"observation": target_space, "action_mask": gym.spaces.MultiBinary(N)}))
        self.action_space = gym.spaces.Discrete(N)
        self.show_mask = show_mask

    def _draw(self) -> tuple[Any, dict[str, Any]]:
        self.target = int(self.np_random.integers(N))
        self.mask = (self.np_random.random(N) < 0.5).astype(np.int8)
        self.mask[self.target] = 1
        one_hot = np.eye(N, dtype=np.float32)[self.target]
        if self.in_info:
            return one_hot, {"action_mask": self.mask.copy()}
        if not self.show_mask:
            return one_hot, {}
        return {"observation": one_hot, "action_mask": self.mask.copy()}, {}

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._draw()

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        MaskedChoice.steps[0] += 1
        if not self.mask[int(action)]:
            MaskedChoice.invalid[0] += 1
            obs, info = self._draw()
            return obs, -1.0, True, False, info
        reward = 1.0 if int(action) == self.target else 0.0
        obs, info = self._draw()
        return obs, reward, False, self.t >= LENGTH, info


def count(make: Any, agent: Any, strategy: Any, num_steps: int,
          tmp_path: Path) -> tuple[int, int, float]:
    """Train on ``make``; the invalid actions and env steps counted, and the best evaluation."""
    MaskedChoice.invalid[0] = MaskedChoice.steps[0] = 0
    trainer = Trainer(num_steps=num_steps, strategy=strategy, run_dir=tmp_path,
                      eval_interval=num_steps // 2, eval_episodes=10, **QUIET)
    result = trainer.fit(make, agent)
    assert result.summary.best_eval_return is not None
    return MaskedChoice.invalid[0], MaskedChoice.steps[0], result.summary.best_eval_return


def off_policy() -> OffPolicyStrategy:
    return OffPolicyStrategy(OffPolicyConfig(warmup_steps=500, train_interval=64,
                                             train_steps=32, batch_size=64, seed=1))


AGENTS = {
    "dqn": lambda: (DQN(DQNConfig(hidden_sizes=[32], exploration_steps=2000, lr=1e-3)),
                    off_policy()),
    "qrdqn": lambda: (QRDQN(QRDQNConfig(hidden_sizes=[32], exploration_steps=2000, lr=1e-3)),
                      off_policy()),
    "pqn": lambda: (PQN(PQNConfig(hidden_sizes=[32], lr=3e-3, gamma=0.9)),
                    OnPolicyStrategy(OnPolicyConfig(num_envs=4, n_steps=32, batch_size=64,
                                                    update_epochs=4, seed=1))),
    "ppo": lambda: (PPO(PPOConfig(hidden_sizes=[32], lr=3e-3)),
                    OnPolicyStrategy(OnPolicyConfig(num_envs=4, n_steps=64, batch_size=64,
                                                    update_epochs=4, seed=1))),
}


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_masked_agents_never_take_an_invalid_action_and_learn(name: str,
                                                              tmp_path: Path) -> None:
    agent, strategy = AGENTS[name]()
    invalid, steps, best = count(MaskedChoice, agent, strategy, 10_000, tmp_path)
    assert steps >= 10_000 and invalid == 0
    assert best > 15  # of 20; a random valid action scores about 9.4


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_unmasked_agents_take_invalid_actions(name: str, tmp_path: Path) -> None:
    agent, strategy = AGENTS[name]()
    invalid, _, _ = count(lambda: MaskedChoice(show_mask=False), agent, strategy, 4_000,
                              tmp_path)
    assert invalid > 100  # episodes end on one: with 4,000 steps, hundreds of them


def test_a_mask_given_in_info_is_moved_into_the_observation(tmp_path: Path) -> None:
    agent, strategy = AGENTS["dqn"]()
    invalid, _, best = count(lambda: InfoActionMask(MaskedChoice(in_info=True)), agent,
                             strategy, 6_000, tmp_path / "run")
    assert invalid == 0 and best > 10
    policy = load_policy(tmp_path / "run")
    one_hot = np.eye(N, dtype=np.float32)[2]
    # the learnt target is 2; with 2 masked out the action is another valid one
    assert policy.predict(one_hot, action_mask=np.array([1, 1, 1, 1]))[0] == 2
    assert policy.predict(one_hot, action_mask=np.array([1, 0, 0, 1]))[0] in (0, 3)
    batch = policy.predict(np.stack([one_hot] * 3),
                           action_mask=np.array([[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]))[0]
    assert list(batch) == [2, 1, 3]


def test_info_masks_from_a_config_and_the_wrappers_refusals(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"info\['action_mask'\] must hold 4 .* got none"):
        InfoActionMask(MaskedChoice(show_mask=False)).reset(seed=0)
    with pytest.raises(ValueError, match="masks Discrete actions"):
        InfoActionMask(gym.make("Pendulum-v1"))
    config = compose([], [
        "agent.name=dqn", "env.id=null", f"env._target_={__name__}.MaskedChoice",
        "env.kwargs={in_info: true}",
        "env.wrappers=[{_target_: rltrain.envs.masking.InfoActionMask}]",
        "trainer.num_steps=600", "strategy.warmup_steps=100", f"trainer.run_dir={tmp_path}",
        "trainer.enable_progress_bar=false", "trainer.enable_console=false"])
    MaskedChoice.invalid[0] = 0
    build(config).fit()
    assert MaskedChoice.invalid[0] == 0


def test_the_targets_take_the_max_over_valid_actions_only() -> None:
    q = torch.tensor([[5.0, 1.0, 2.0], [0.0, 9.0, 3.0]])
    mask = torch.tensor([[False, True, True], [False, False, False]])
    # row 2 has no valid action (a broken env): left unmasked rather than all -inf
    assert masked_values(q, mask).max(dim=1).values.tolist() == [2.0, 9.0]
    logits = masked_logits(torch.zeros(1, 3), torch.tensor([[True, False, True]]))
    dist = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(dist.probs, torch.tensor([[0.5, 0.0, 0.5]]))
    assert torch.isfinite(dist.entropy()).all()
    assert dist.entropy().item() == pytest.approx(np.log(2))


def test_ppos_log_probabilities_and_entropy_are_the_masked_distributions() -> None:
    agent = PPO(PPOConfig(hidden_sizes=[8]))
    env = MaskedChoice()
    from rltrain.types import Progress
    agent.setup(observation_space=env.observation_space, action_space=env.action_space,
                device=torch.device("cpu"), progress=Progress())
    obs = {"observation": torch.eye(N)[:2], "action_mask": torch.tensor([[1, 0, 1, 0],
                                                                          [0, 0, 0, 1]])}
    dist, _ = agent.net(obs)
    samples = torch.stack([dist.sample() for _ in range(200)])
    assert set(samples[:, 0].tolist()) <= {0, 2} and set(samples[:, 1].tolist()) == {3}
    assert dist.log_prob(torch.tensor([0, 3]))[1].item() == pytest.approx(0.0, abs=1e-6)
    assert dist.entropy()[1].item() == pytest.approx(0.0, abs=1e-6)
    assert dist.entropy()[0].item() <= np.log(2) + 1e-6


def test_a_mask_that_does_not_fit_the_actions_is_refused_naming_it(tmp_path: Path) -> None:
    class Wrong(MaskedChoice):
        def __init__(self) -> None:
            super().__init__()
            self.observation_space = gym.spaces.Dict({
                "observation": gym.spaces.Box(0.0, 1.0, (N,), np.float32),
                "action_mask": gym.spaces.MultiBinary(N + 1)})

        def _draw(self) -> tuple[Any, dict[str, Any]]:
            obs, info = super()._draw()
            obs["action_mask"] = np.append(obs["action_mask"], 1).astype(np.int8)
            return obs, info

    for agent in (DQN(), PPO(), PQN()):
        with pytest.raises(SpaceError, match=r"'action_mask' must be a MultiBinary\(4\)"):
            Trainer(num_steps=100, run_dir=tmp_path / type(agent).__name__, **QUIET).fit(
                Wrong, agent)
