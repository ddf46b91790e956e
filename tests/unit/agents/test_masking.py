"""Invalid-action masking (the env and agents of ``benchmarks/masking.py``): on an env where an
invalid action ends the episode with a penalty, masked DQN, QR-DQN, PQN and PPO never take one
(counted by the env over thousands of real steps) and learn; unmasked ones do take them. The
mask from a ``Dict`` observation and from ``info`` (InfoActionMask, also from a config), in the
targets (max over valid actions), in PPO's log-probabilities and entropy,
``predict(action_mask=...)``, and the refusals."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET

from benchmarks.masking import AGENTS, MaskedChoice, N, count
from rltrain import (
    DQN,
    PPO,
    PPOConfig,
    Trainer,
    build,
    compose,
    load_policy,
)
from rltrain.agents import PQN, QRDQN, SpaceError
from rltrain.agents.nn.masking import masked_logits, masked_values
from rltrain.envs.masking import InfoActionMask


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_masked_agents_never_take_an_invalid_action_and_learn(name: str,
                                                              tmp_path: Path) -> None:
    agent, strategy = AGENTS[name](1)
    if name == "qrdqn":  # its loss pairs every quantile with every other: the paper's 200 took
        # 3 minutes here, 25 take 8 s; masking does not depend on how many there are
        agent = QRDQN(dataclasses.replace(agent.config, n_quantiles=25))
    invalid, steps, best = count(MaskedChoice, agent, strategy, 10_000, tmp_path)
    assert steps >= 10_000 and invalid == 0
    assert best > 15  # of 20; a random valid action scores about 9.4


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_unmasked_agents_take_invalid_actions(name: str, tmp_path: Path) -> None:
    agent, strategy = AGENTS[name](1)
    invalid, _, _ = count(lambda: MaskedChoice(show_mask=False), agent, strategy, 4_000,
                              tmp_path)
    assert invalid > 100  # episodes end on one: with 4,000 steps, hundreds of them


@pytest.mark.slow
def test_a_mask_given_in_info_is_moved_into_the_observation(tmp_path: Path) -> None:
    agent, strategy = AGENTS["dqn"](1)
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
        "agent.name=dqn", "env.id=null", "env._target_=benchmarks.masking.MaskedChoice",
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
