"""On-policy storage and its arithmetic: GAE(λ) against hand-computed answers, the rollout buffer
(what it stores, its minibatches, its checkpoint state and what it refuses to load), and the
runner handing the policy's outputs to the transitions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrain import PPO, PPOConfig
from rltrain.agents.returns import gae
from rltrain.buffers import RolloutBuffer
from rltrain.envs.make import make_vector_env
from rltrain.envs.runner import Runner
from rltrain.types import Progress, Transitions

# ---------------------------------------------------------------------------------------------
# GAE(λ): a 3-step rollout of 2 sub-envs, worked out by hand.
#
# Env 0 never ends: rewards 1, 2, 3; v(s_0..s_2) = 0.5, 1.0, 1.5; next values v(s_1), v(s_2) and
# the bootstrap at the rollout's end v(s_3) = 2.0.
# Env 1 ends at step 1 (terminated or truncated, per test): rewards 1, 1, 1; v = 2, 3, 4; the
# next value of step 1 is the value of the true final observation (7.0), of step 2 v(s_3) = 5.
# ---------------------------------------------------------------------------------------------

GAMMA, LAM = 0.9, 0.5
REWARDS = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
VALUES = torch.tensor([[0.5, 2.0], [1.0, 3.0], [1.5, 4.0]])
NEXT_VALUES = torch.tensor([[1.0, 3.0], [1.5, 7.0], [2.0, 5.0]])
NONE = torch.zeros(3, 2, dtype=torch.bool)
AT_STEP_1_OF_ENV_1 = torch.tensor([[False, False], [False, True], [False, False]])

# Env 0's TD errors δ_t = r_t + γ v'_t - v_t, and A_t = δ_t + γλ A_{t+1} (γλ = 0.45):
D0 = [1 + 0.9 * 1.0 - 0.5, 2 + 0.9 * 1.5 - 1.0, 3 + 0.9 * 2.0 - 1.5]  # 1.4, 2.35, 3.3
A0_2 = D0[2]                       # 3.3
A0_1 = D0[1] + 0.45 * A0_2         # 2.35 + 1.485 = 3.835
A0_0 = D0[0] + 0.45 * A0_1         # 1.4 + 1.72575 = 3.12575
ENV0 = [A0_0, A0_1, A0_2]


def advantages(terminated: torch.Tensor, truncated: torch.Tensor, gamma: float = GAMMA,
               lambda_: float = LAM) -> torch.Tensor:
    return gae(REWARDS, VALUES, NEXT_VALUES, terminated, truncated, gamma, lambda_)


def test_gae_without_episode_ends_matches_the_hand_computation() -> None:
    result = advantages(NONE, NONE)
    assert result[:, 0].tolist() == pytest.approx(ENV0)
    assert ENV0 == pytest.approx([3.12575, 3.835, 3.3])
    # env 1 without an end: δ = 1+0.9*3-2, 1+0.9*7-3, 1+0.9*5-4 = 1.7, 4.3, 1.5
    a2 = 1.5
    a1 = 4.3 + 0.45 * a2
    a0 = 1.7 + 0.45 * a1
    assert result[:, 1].tolist() == pytest.approx([a0, a1, a2])


def test_gae_with_lambda_0_is_the_one_step_td_error() -> None:
    result = advantages(NONE, NONE, lambda_=0.0)
    assert result[:, 0].tolist() == pytest.approx(D0)
    assert result[:, 1].tolist() == pytest.approx([1.7, 4.3, 1.5])


def test_gae_with_lambda_1_is_the_monte_carlo_return_minus_the_value() -> None:
    result = advantages(NONE, NONE, lambda_=1.0)
    # discounted rewards to the rollout's end, then γ^k v(s_3) = 2.0 (the bootstrap)
    mc2 = 3 + 0.9 * 2.0 - 1.5
    mc1 = 2 + 0.9 * 3 + 0.81 * 2.0 - 1.0
    mc0 = 1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 2.0 - 0.5
    assert result[:, 0].tolist() == pytest.approx([mc0, mc1, mc2])
    assert [mc0, mc1, mc2] == pytest.approx([6.188, 5.32, 3.3])


def test_a_termination_cuts_the_recursion_and_does_not_bootstrap() -> None:
    result = advantages(AT_STEP_1_OF_ENV_1, NONE)
    a2 = 1 + 0.9 * 5.0 - 4.0       # 1.5: the new episode, bootstrapped at the rollout's end
    a1 = 1 + 0.0 - 3.0             # -2: r - v, the final observation's 7.0 is not used
    a0 = (1 + 0.9 * 3 - 2) + 0.45 * a1   # 1.7 - 0.9 = 0.8
    assert result[:, 1].tolist() == pytest.approx([a0, a1, a2])
    assert result[:, 0].tolist() == pytest.approx(ENV0)  # the other env is untouched


def test_a_truncation_bootstraps_from_the_final_observation_and_cuts_the_recursion() -> None:
    result = advantages(NONE, AT_STEP_1_OF_ENV_1)
    a2 = 1.5
    a1 = 1 + 0.9 * 7.0 - 3.0       # 4.3: bootstrapped from v(final observation) = 7.0 ...
    a0 = 1.7 + 0.45 * a1           # 3.635
    assert result[:, 1].tolist() == pytest.approx([a0, a1, a2])  # ... and A_2 not carried in
    assert a0 == pytest.approx(3.635)
    # Terminated and truncated together (gymnasium allows it): a termination, no bootstrap.
    both = advantages(AT_STEP_1_OF_ENV_1, AT_STEP_1_OF_ENV_1)
    assert both[1, 1].item() == pytest.approx(-2.0)


def test_gae_with_gamma_0_is_reward_minus_value() -> None:
    for lam in (0.0, 0.5, 1.0):
        result = advantages(AT_STEP_1_OF_ENV_1, NONE, gamma=0.0, lambda_=lam)
        assert torch.allclose(result, REWARDS - VALUES)


# ---------------------------------------------------------------------------------------------
# RolloutBuffer
# ---------------------------------------------------------------------------------------------

OBS = gym.spaces.Box(-10.0, 10.0, (3,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


def buffer(n_steps: int = 3, num_envs: int = 2, seed: int = 0,
           observation_space: gym.Space[Any] = OBS) -> RolloutBuffer:
    return RolloutBuffer(n_steps, num_envs=num_envs, observation_space=observation_space,
                         action_space=ACT, seed=seed)


def step(t: int, num_envs: int = 2, *, terminated: tuple[bool, ...] | None = None,
         truncated: tuple[bool, ...] | None = None, raw: bool = True,
         info: dict[str, torch.Tensor] | None = None) -> Transitions:
    """Vector step ``t``: observation ``[t, i, 0]`` of sub-env ``i``, next observation
    ``[t, i, 1]``, clipped action ±1 sent and the raw sample ``3 * (t + 1) * (-1)^i`` stored,
    log-prob ``-t - i``, value ``10t + i``, reward ``t + i / 10``."""
    obs = np.array([[t, i, 0] for i in range(num_envs)], dtype=np.float32)
    next_obs = np.array([[t, i, 1] for i in range(num_envs)], dtype=np.float32)
    sample = torch.tensor([[3.0 * (t + 1) * (-1) ** i] for i in range(num_envs)])
    policy_info = {"log_prob": torch.tensor([-t - i for i in range(num_envs)], dtype=torch.float32),
                   "value": torch.tensor([10.0 * t + i for i in range(num_envs)])}
    if raw:
        policy_info["raw_action"] = sample
    if info is not None:
        policy_info = info
    return Transitions(obs, sample.clamp(-1, 1).numpy(),
                       np.array([t + i / 10 for i in range(num_envs)], dtype=np.float32),
                       next_obs, np.array(terminated or (False,) * num_envs),
                       np.array(truncated or (False,) * num_envs), policy_info)


def filled(rollout: RolloutBuffer) -> RolloutBuffer:
    for t in range(rollout.pos, rollout.n_steps):
        rollout.add(step(t, rollout.num_envs))
    return rollout


def test_add_stores_the_policy_outputs_and_the_unclipped_action() -> None:
    rollout = buffer()
    rollout.add(step(0))
    rollout.add(step(1, truncated=(False, True), terminated=(True, False)))
    assert rollout.pos == 2 and len(rollout) == 4 and not rollout.full
    assert rollout.observations[1].tolist() == [[1, 0, 0], [1, 1, 0]]
    assert rollout.actions[:2, :, 0].tolist() == [[3.0, -3.0], [6.0, -6.0]]  # raw, not ±1
    assert rollout.log_probs[:2].tolist() == [[0.0, -1.0], [-1.0, -2.0]]
    assert rollout.values[:2].tolist() == [[0.0, 1.0], [10.0, 11.0]]
    assert rollout.rewards[:2].flatten().tolist() == pytest.approx([0.0, 0.1, 1.0, 1.1])
    assert rollout.terminated[:2].tolist() == [[False, False], [True, False]]
    assert rollout.truncated[:2].tolist() == [[False, False], [False, True]]
    # The true final observation is kept only where a time limit cut the episode.
    assert rollout.final_observations[1].tolist() == [[0, 0, 0], [1, 1, 1]]
    assert rollout.final_observations[0].abs().sum() == 0
    assert rollout.last_observations.tolist() == [[1, 0, 1], [1, 1, 1]]


def test_without_a_raw_action_the_sent_action_is_stored() -> None:
    rollout = buffer()
    rollout.add(step(0, raw=False))
    assert rollout.actions[0, :, 0].tolist() == [1.0, -1.0]


@pytest.mark.parametrize("info, missing", [
    ({}, r"log_prob and value for each action .*this policy returned nothing"),
    ({"value": torch.zeros(2)}, r"needs the policy's log_prob for each action .*returned "
                                r"\['value'\]"),
], ids=["random actions", "no log_prob"])
def test_a_transition_without_log_prob_or_value_is_refused(info: dict[str, torch.Tensor],
                                                           missing: str) -> None:
    rollout = buffer()
    with pytest.raises(ValueError, match=missing + r"\. On-policy agents \(PPO\) return them"):
        rollout.add(step(0, info=info))
    assert rollout.pos == 0


def test_a_full_rollout_refuses_more() -> None:
    rollout = filled(buffer())
    assert rollout.full
    with pytest.raises(ValueError, match=r"already holds its 3 steps; train on it and reset\(\)"):
        rollout.add(step(3))
    rollout.reset()
    assert rollout.pos == 0 and not rollout.prepared
    rollout.add(step(0))  # reset: room again


def rows_of(rollout: RolloutBuffer, index: int, batch_size: int) -> list[int]:
    """The flat transition indices (t * num_envs + i) of minibatch ``index``, read back from its
    observations ``[t, i, 0]``."""
    obs = rollout.minibatch(index, batch_size).observations
    return [int(t) * rollout.num_envs + int(i) for t, i, _ in obs.tolist()]


def test_each_epoch_covers_every_transition_once_in_a_new_order() -> None:
    rollout = filled(buffer(n_steps=6, num_envs=2))
    rollout.shuffle(3)
    per_epoch, batch_size = 4, 3
    epochs = [[row for slot in range(per_epoch)
               for row in rows_of(rollout, epoch * per_epoch + slot, batch_size)]
              for epoch in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(12))
    assert len({tuple(order) for order in epochs}) == 3
    assert all(order != list(range(12)) for order in epochs)  # shuffled, not in time order
    # Every field of a minibatch row belongs to the same transition.
    batch = rollout.minibatch(5, batch_size)
    for (t, i, _), action, log_prob, value in zip(batch.observations.tolist(),
                                                  batch.actions[:, 0].tolist(),
                                                  batch.log_probs.tolist(),
                                                  batch.values.tolist(), strict=True):
        assert action == 3.0 * (t + 1) * (-1) ** i
        assert log_prob == -t - i and value == 10 * t + i
    assert batch.advantages.shape == batch.returns.shape == (3,)


def test_two_buffers_with_the_same_seed_shuffle_alike_and_another_seed_does_not() -> None:
    a, b, c = (filled(buffer(seed=s)) for s in (5, 5, 6))
    for rollout in (a, b, c):
        rollout.shuffle(2)
    assert torch.equal(a.permutations, b.permutations)
    assert not torch.equal(a.permutations, c.permutations)


def same_state(a: RolloutBuffer, b: RolloutBuffer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    for key, value in sa.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, sb[key]), key
        else:
            assert value == sb[key], key


def test_state_round_trip_in_the_middle_of_a_rollout() -> None:
    original = buffer(seed=3)
    original.add(step(0, truncated=(True, False)))
    copy = buffer(seed=99)
    copy.load_state_dict(original.state_dict())
    same_state(original, copy)
    for rollout in (original, copy):  # both go on alike: the rest of the rollout, the shuffle
        filled(rollout)
        rollout.shuffle(2)
    same_state(original, copy)
    assert copy.final_observations[0, 0].tolist() == [0, 0, 1]


def test_state_round_trip_of_a_prepared_rollout_keeps_its_shuffler(tmp_path: Any) -> None:
    original = filled(buffer(seed=3))
    original.advantages.copy_(torch.arange(6.0).reshape(3, 2))
    original.returns.copy_(-torch.arange(6.0).reshape(3, 2))
    original.running_returns.copy_(torch.tensor([1.5, -2.5], dtype=torch.float64))
    original.shuffle(2)
    path = tmp_path / "rollout.pt"
    torch.save(original.state_dict(), path)  # through a file, as in a checkpoint
    copy = buffer(seed=99)
    copy.load_state_dict(torch.load(path, weights_only=True))
    assert copy.prepared and copy.can_sample() and copy.full
    for index in range(4):
        for x, y in zip(original.minibatch(index, 3), copy.minibatch(index, 3), strict=True):
            assert (x is None and y is None) or torch.equal(x, y)  # no moments: one process
    # The next rollout's shuffle equals the original's next shuffle (the generator's state).
    for rollout in (original, copy):
        rollout.reset()
        filled(rollout).shuffle(2)
    assert torch.equal(original.permutations, copy.permutations)
    assert copy.running_returns.tolist() == [1.5, -2.5]  # carried over by reset()


def hostile(edit: str) -> dict[str, Any]:
    state = filled(buffer()).state_dict()
    if edit == "other n_steps":
        state["n_steps"] = 4
    elif edit == "other num_envs":
        state["num_envs"] = 3
    elif edit == "other observation shape":
        state["observations"] = torch.zeros(3, 2, 4)
    elif edit == "observations not a tensor":
        state["observations"] = [[0.0]]
    elif edit == "position out of range":
        state["pos"] = 7
    elif edit == "permutation index out of range":
        state["permutations"] = torch.arange(6).reshape(1, 6) + 1  # 6 is not a transition
        state["prepared"] = True
    elif edit == "negative permutation index":
        state["permutations"] = torch.tensor([[0, 1, 2, 3, 4, -1]])
        state["prepared"] = True
    elif edit == "permutations of another rollout size":
        state["permutations"] = torch.stack([torch.randperm(8)])
        state["prepared"] = True
    return state


@pytest.mark.parametrize("edit, message", [
    ("other n_steps", r"holds 4 steps of 2 envs; this one 3 of 2\. Resume with the saved "
                      r"n_steps and num_envs"),
    ("other num_envs", r"holds 3 steps of 3 envs; this one 3 of 2"),
    ("other observation shape", r"The saved rollout's observations do not fit this rollout "
                                r"\(\(3, 2, 3\) float32\)\. Was it made for another environment"),
    ("observations not a tensor", r"The saved rollout's observations do not fit"),
    ("position out of range", r"position 7 is outside 0\.\.3"),
    ("permutation index out of range", r"minibatch order is not one permutation of its 6 "
                                       r"transitions"),
    ("negative permutation index", r"minibatch order is not one permutation"),
    ("permutations of another rollout size", r"minibatch order is not one permutation"),
])
def test_a_saved_rollout_that_does_not_fit_is_refused_before_anything_changes(
        edit: str, message: str) -> None:
    target = buffer(seed=1)
    target.add(step(0))
    before = target.state_dict()
    with pytest.raises(ValueError, match=message):
        target.load_state_dict(hostile(edit))
    after = target.state_dict()
    for key, value in before.items():  # nothing was overwritten
        assert torch.equal(value, after[key]) if isinstance(value, torch.Tensor) else (
            value == after[key]), key


@pytest.mark.parametrize("permutations", ["none", "repeated rows"])
def test_a_prepared_rollout_without_valid_permutations_is_refused(permutations: str) -> None:
    state = filled(buffer()).state_dict()
    state["prepared"] = True
    state["permutations"] = (torch.zeros((0, 6), dtype=torch.int64) if permutations == "none"
                             else torch.zeros((2, 6), dtype=torch.int64))
    with pytest.raises(ValueError, match="permutation"):
        buffer().load_state_dict(state)


def test_a_rollout_too_large_for_the_memory_is_refused_up_front() -> None:
    with pytest.raises(MemoryError, match=r"A rollout of 100,000,000,000 x 8 transitions needs "
                                          r"[\d.]+ GB; .*Lower n_steps or num_envs"):
        RolloutBuffer(10**11, num_envs=8, observation_space=OBS, action_space=ACT)
    with pytest.raises(ValueError, match=r"n_steps >= 1 and num_envs >= 1; got 0 and 2"):
        RolloutBuffer(0, num_envs=2, observation_space=OBS, action_space=ACT)


# ---------------------------------------------------------------------------------------------
# The runner hands the policy's outputs to the transitions
# ---------------------------------------------------------------------------------------------


def built_ppo(env_id: str = "CartPole-v1", **overrides: Any) -> PPO:
    agent = PPO(PPOConfig(hidden_sizes=[16], **overrides))
    probe = gym.make(env_id)
    agent.setup(observation_space=probe.observation_space, action_space=probe.action_space,
                device=torch.device("cpu"), progress=Progress())
    probe.close()
    return agent


def test_the_runner_hands_ppo_outputs_to_the_transitions_as_ordinary_tensors() -> None:
    agent = built_ppo()
    policy = agent.policy(torch.device("cpu"))
    envs = make_vector_env("CartPole-v1", num_envs=3, seed=0)
    runner = Runner(envs, device=torch.device("cpu"), progress=Progress())
    try:
        runner.reset(seed=0, policy=policy)
        obs = torch.as_tensor(runner.observations)
        actions = runner.act(policy)
        transitions, _ = runner.step(actions, policy)
        info = transitions.policy_info
        assert set(info) == {"log_prob", "value", "raw_action"}
        for name, tensor in info.items():
            assert not tensor.is_inference(), name
            assert tensor.shape[0] == 3, name
        assert runner.policy_info == {}  # handed on once, not to the next step
        # The outputs are those of the networks for the observations the step started from.
        dist, value = agent.net(obs)
        assert torch.allclose(info["value"], value.detach())
        assert torch.allclose(info["log_prob"], dist.log_prob(info["raw_action"]).detach())
        assert info["raw_action"].tolist() == transitions.actions.tolist()
        # Ordinary tensors: a training step can use them in a graph (inference tensors cannot
        # be saved for backward).
        weight = torch.ones(3, requires_grad=True)
        (weight * info["value"] * info["log_prob"]).sum().backward()  # type: ignore[no-untyped-call]
        assert weight.grad is not None and weight.grad.shape == (3,)
        # Random actions and greedy actions carry nothing.
        random_step, _ = runner.step(runner.random_actions(), policy)
        assert dict(random_step.policy_info) == {}
        greedy_step, _ = runner.step(runner.act(policy, deterministic=True), policy)
        assert dict(greedy_step.policy_info) == {}
    finally:
        envs.close()


def test_a_rollout_collected_by_the_runner_holds_what_the_policy_returned() -> None:
    agent = built_ppo()
    policy = agent.policy(torch.device("cpu"))
    envs = make_vector_env("CartPole-v1", num_envs=2, seed=1)
    runner = Runner(envs, device=torch.device("cpu"), progress=Progress())
    rollout = RolloutBuffer(40, num_envs=2, observation_space=envs.single_observation_space,
                            action_space=envs.single_action_space)
    try:
        runner.reset(seed=1, policy=policy)
        first_obs = runner.observations.copy()
        infos = []
        while not rollout.full:
            transitions, _ = runner.step(runner.act(policy), policy)
            infos.append(transitions.policy_info)
            rollout.add(transitions)
        assert torch.equal(rollout.observations[0], torch.as_tensor(first_obs))
        assert torch.equal(rollout.log_probs, torch.stack([i["log_prob"] for i in infos]))
        assert torch.equal(rollout.values, torch.stack([i["value"] for i in infos]))
        assert rollout.actions.dtype == torch.int64
        assert set(rollout.actions.unique().tolist()) <= {0, 1}
        # 40 CartPole steps of a near-uniform policy: episodes ended, by termination only.
        assert rollout.terminated.any() and not rollout.truncated.any()
        assert rollout.final_observations.abs().sum() == 0
        assert torch.equal(rollout.last_observations, torch.as_tensor(runner.observations))
    finally:
        envs.close()


def test_prepare_rollout_bootstraps_a_truncation_from_its_final_observation() -> None:
    agent = built_ppo(gamma=0.9, gae_lambda=0.7)
    rollout = RolloutBuffer(3, num_envs=2, observation_space=gym.spaces.Box(-5, 5, (4,)),
                            action_space=gym.spaces.Discrete(2))
    generator = torch.Generator().manual_seed(0)
    obs = torch.randn(3, 2, 4, generator=generator)
    final = torch.randn(2, 4, generator=generator)   # sub-env 1's true final observation
    last = torch.randn(2, 4, generator=generator)
    values = torch.randn(3, 2, generator=generator)
    truncated = np.array([False, True])
    for t in range(3):
        next_obs = obs[t + 1] if t < 2 else last
        if t == 1:
            next_obs = torch.stack([obs[2, 0], final[1]])  # the runner's next_observations
        rollout.add(Transitions(obs[t].numpy(), np.zeros(2, dtype=np.int64),
                                np.array([1.0, 0.5 * t], dtype=np.float32), next_obs.numpy(),
                                np.array([False, False]),
                                truncated if t == 1 else np.array([False, False]),
                                {"log_prob": torch.zeros(2), "value": values[t]}))
    agent.prepare_rollout(rollout)
    with torch.no_grad():
        v = agent.net.value
        next_values = torch.stack([values[1], torch.stack([values[2, 0], v(final[1:])[0]]),
                                   v(last)])
    expected = gae(rollout.rewards, values, next_values, torch.zeros(3, 2, dtype=torch.bool),
                   torch.tensor([[False, False], [False, True], [False, False]]), 0.9, 0.7)
    assert torch.allclose(rollout.advantages, expected, atol=1e-6)
    assert torch.allclose(rollout.returns, expected + values, atol=1e-6)
    # Step 1 of sub-env 1 by hand: r + γ v(final) - v, and nothing carried from step 2.
    assert rollout.advantages[1, 1].item() == pytest.approx(
        0.5 + 0.9 * v(final[1:]).item() - values[1, 1].item(), abs=1e-6)


def test_a_checkpoint_holds_the_rows_stored_and_the_truncated_episodes_final_observations(
) -> None:
    rollout = buffer(n_steps=4)
    rollout.add(step(0, truncated=(False, True)))
    rollout.add(step(1))
    state = rollout.state_dict()
    assert state["rows"] == 2 and state["observations"].shape == (2, 2, 3)
    assert state["final_index"].tolist() == [1]  # step 0, sub-env 1: flat 0 x 2 + 1
    assert state["final_observations"].tolist() == [[0.0, 1.0, 1.0]]
    emptied = filled(buffer(n_steps=4))
    emptied.reset()  # after its update: nothing a resume reads is left
    assert emptied.state_dict()["observations"].shape == (0, 2, 3)
    copy = buffer(n_steps=4, seed=99)
    copy.load_state_dict(state)
    assert torch.equal(copy.final_observations[0, 1], torch.tensor([0.0, 1.0, 1.0]))
    for r in (rollout, copy):
        filled(r).shuffle(2)
    same_state(rollout, copy)


def test_a_checkpoint_of_whole_tensors_from_an_earlier_version_still_loads() -> None:
    original = buffer()
    original.add(step(0, truncated=(True, False)))
    state = original.state_dict()
    for name in ("observations", "actions", "log_probs", "values", "rewards", "terminated",
                 "truncated", "advantages", "returns", "final_observations"):
        state[name] = getattr(original, name).clone()  # every row, as earlier versions saved
    del state["rows"], state["final_index"]
    copy = buffer(seed=99)
    copy.load_state_dict(state)
    same_state(original, copy)


@pytest.mark.parametrize("edit", ["rows", "final_index", "final_index dtype"])
def test_altered_rows_or_final_indices_are_refused_and_nothing_changes(edit: str) -> None:
    original = buffer()
    original.add(step(0, truncated=(True, False)))
    state = original.state_dict()
    if edit == "rows":
        state["rows"] = 9
    elif edit == "final_index":
        state["final_index"] = torch.tensor([5])  # beyond the 1 x 2 transitions stored
    else:
        state["final_index"] = torch.tensor([0.0])
    copy = buffer(seed=99)
    before = copy.state_dict()
    with pytest.raises(ValueError, match=r"rows .* or final-observation indices do not fit"):
        copy.load_state_dict(state)
    after = copy.state_dict()
    assert all(torch.equal(v, after[k]) if isinstance(v, torch.Tensor) else v == after[k]
               for k, v in before.items())
