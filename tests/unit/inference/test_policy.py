"""Inference in three lines (issue 16, item 3): ``rltrain.load_policy`` rebuilds a trained agent
from a checkpoint alone (its config and its stored spaces; the env is made only for older
files), ``predict`` takes unbatched or batched NumPy observations (Box, Dict with uint8 images
and Discrete keys) with recurrent state and PPO's normalisation statistics, and ``export``
writes a ``torch.export`` program that a fresh process runs with torch alone, giving the same
actions. Every run here is a short real fit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, small

import rltrain
from rltrain import (
    DQN,
    PPO,
    SAC,
    DQNConfig,
    OffPolicyConfig,
    OffPolicyStrategy,
    OnPolicyConfig,
    OnPolicyStrategy,
    PPOConfig,
    SACConfig,
    Trainer,
)
from rltrain.agents.dreamer import Dreamer, DreamerConfig
from rltrain.checkpoint import Checkpointer, atomic_save, read_checkpoint
from rltrain.checkpoint.spaces import space_from_state, space_state
from rltrain.envs.make import EnvSpec
from rltrain.inference import policy as inference_policy

SIDE = 6

#: This module: the wrapper of the "dict" runs lives here, and a stored config imports it only
#: when trusted.
OWN = [__name__]


class CartPoleDict(gym.ObservationWrapper[Any, Any, Any]):
    """CartPole as a Dict: a ``SIDE x SIDE x 3`` uint8 image of the cart's position, the state
    vector and the sign of the pole's velocity as a Discrete."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Dict({
            "pixels": gym.spaces.Box(0, 255, (SIDE, SIDE, 3), np.uint8),
            "state": env.observation_space, "spin": gym.spaces.Discrete(2)})

    def observation(self, observation: Any) -> Any:
        image = np.zeros((SIDE, SIDE, 3), np.uint8)
        image[:, int(np.clip((observation[0] + 2.4) / 4.8 * SIDE, 0, SIDE - 1)), 0] = 255
        return {"pixels": image, "state": np.asarray(observation, np.float32),
                "spin": int(observation[3] > 0)}


DICT = EnvSpec("CartPole-v1", wrappers=(CartPoleDict,))
ENVS: dict[str, Any] = {"dqn": "CartPole-v1", "dict": DICT, "ppo": "Pendulum-v1",
                        "sac": "Pendulum-v1", "dreamer": "Pendulum-v1"}


def fit(root: Path, name: str) -> tuple[Path, Any]:
    """A short real fit of each kind; returns its run directory and its trained agent."""
    run_dir = root / name
    agent: Any
    if name in ("dqn", "dict"):
        agent, strategy, steps = DQN(DQNConfig(hidden_sizes=[16])), small(), 200
    elif name == "ppo":
        agent = PPO(PPOConfig(normalize_observations=True, hidden_sizes=[16]))
        strategy = OnPolicyStrategy(OnPolicyConfig(num_envs=2, n_steps=32, batch_size=32,
                                                   update_epochs=2))
        steps = 192
    elif name == "sac":
        agent, strategy, steps = SAC(SACConfig(hidden_sizes=[16])), small(), 200
    else:
        agent = Dreamer(DreamerConfig(deter_size=32, stoch_size=8, hidden_size=32,
                                      sequence_length=10, horizon=5))
        strategy = OffPolicyStrategy(OffPolicyConfig(num_envs=2, buffer_size=4_000,
                                                     batch_size=4, warmup_steps=200,
                                                     train_interval=100, train_steps=3))
        steps = 300
    evaluation = dict(eval_interval=100, eval_episodes=1) if name == "dqn" else {
        "eval_interval": None}
    Trainer(num_steps=steps, strategy=strategy, run_dir=run_dir, **QUIET,
            **evaluation).fit(ENVS[name], agent)
    return run_dir, agent


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("runs")
    return {name: fit(root, name) for name in ENVS}


def observations(env: Any, n: int, seed: int = 0) -> list[Any]:
    """``n`` observations of a real episode (random actions), reset as they end."""
    made: Any = gym.make(env) if isinstance(env, str) else CartPoleDict(gym.make(env.id))
    obs, _ = made.reset(seed=seed)
    made.action_space.seed(seed)
    seen = []
    for _ in range(n):
        seen.append(obs)
        obs, _, terminated, truncated, _ = made.step(made.action_space.sample())
        if terminated or truncated:
            obs, _ = made.reset()
    made.close()
    return seen


def stack(obs: list[Any]) -> Any:
    if isinstance(obs[0], dict):
        return {key: np.stack([np.asarray(o[key]) for o in obs]) for key in obs[0]}
    return np.stack(obs)


def never_make_env(env: Any) -> Any:
    raise AssertionError(f"load_policy made the environment {env!r}: the checkpoint's spaces "
                         "should have been used")


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ENVS))
def test_load_policy_rebuilds_the_agent_from_the_checkpoint_alone(
        runs: dict[str, tuple[Path, Any]], name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, trained = runs[name]
    monkeypatch.setattr(inference_policy, "make_probe_env", never_make_env)
    policy = rltrain.load_policy(run_dir, trust=OWN)
    assert type(policy.agent) is type(trained)
    assert policy.checkpoint == Checkpointer(run_dir / "checkpoints").resolve("last")
    assert policy.observation_space == trained.spaces[0]
    assert policy.action_space == trained.spaces[1]
    loaded, saved = policy.agent.state_dict(), trained.state_dict()
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[k].cpu(), saved[k].cpu()) for k in saved)
    # The same from the checkpoint file itself.
    again = rltrain.load_policy(policy.checkpoint, trust=OWN)
    assert again.observation_space == policy.observation_space


def test_a_file_of_trainer_save_checkpoint_loads_too(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = Trainer(num_steps=100, strategy=small(), run_dir=tmp_path / "run",
                      eval_interval=None, **QUIET)
    agent = DQN(DQNConfig(hidden_sizes=[8]))
    trainer.fit("CartPole-v1", agent)
    path = trainer.save_checkpoint(tmp_path / "elsewhere" / "agent.pt")
    monkeypatch.setattr(inference_policy, "make_probe_env", never_make_env)
    policy = rltrain.load_policy(path)
    obs = stack(observations("CartPole-v1", 4))
    np.testing.assert_array_equal(policy.predict(obs)[0],
                                  agent.q_network(torch.as_tensor(obs)).argmax(1).numpy())


def test_which_best_and_device(runs: dict[str, tuple[Path, Any]]) -> None:
    run_dir, _ = runs["dqn"]
    best = rltrain.load_policy(run_dir, which="best", device="cpu")
    assert best.checkpoint is not None and best.checkpoint.name.startswith("best-")
    assert best.device == torch.device("cpu")
    assert next(best.agent.parameters()).device == torch.device("cpu")
    with pytest.raises(ValueError, match="which must be 'last' or 'best'"):
        rltrain.load_policy(run_dir, which="first")
    with pytest.raises(FileNotFoundError, match="No checkpoint or run directory"):
        rltrain.load_policy(run_dir / "nothing")


def test_an_older_checkpoint_without_spaces_makes_the_env_from_its_config(
        runs: dict[str, tuple[Path, Any]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, _ = runs["ppo"]
    state = read_checkpoint(run_dir / "checkpoints" / "last.pt")
    old = {k: v for k, v in state.items() if k != "spaces"}
    atomic_save(old, tmp_path / "old.pt")
    made: list[Any] = []
    real = inference_policy.make_probe_env

    def spy(env: Any) -> Any:
        made.append(env)
        return real(env)

    monkeypatch.setattr(inference_policy, "make_probe_env", spy)
    policy = rltrain.load_policy(tmp_path / "old.pt")
    assert made == ["Pendulum-v1"]
    obs = observations("Pendulum-v1", 3)
    expected = rltrain.load_policy(run_dir).predict(stack(obs))[0]
    np.testing.assert_array_equal(policy.predict(stack(obs))[0], expected)


@pytest.mark.parametrize("spaces, message", [
    ({"observation": {"type": "posix.system", "n": 2}, "action": {"type": "Discrete", "n": 2,
                                                                 "start": 0}},
     "names the space type 'posix.system'"),
    ({"observation": {"type": "Box", "shape": [4], "dtype": "object",
                      "low": torch.zeros(4), "high": torch.ones(4)},
      "action": {"type": "Discrete", "n": 2, "start": 0}}, "names the dtype 'object'"),
    ({"observation": {"type": "Box", "shape": [1 << 20, 1 << 20], "dtype": "float32",
                      "low": torch.zeros(1), "high": torch.ones(1)},
      "action": {"type": "Discrete", "n": 2, "start": 0}}, "1,099,511,627,776 elements, more"),
    ({"observation": {"type": "Box", "shape": [4], "dtype": "float32",
                      "low": torch.zeros(3), "high": torch.ones(4)},
      "action": {"type": "Discrete", "n": 2, "start": 0}}, "low that is not a tensor of shape"),
    ({"observation": {"type": "Box", "shape": [4], "dtype": "float32",
                      "low": torch.zeros(4), "high": torch.ones(4)},
      "action": {"type": "Discrete", "n": -3, "start": 0}}, "action space.n is '-3', not a size"),
])
def test_altered_stored_spaces_are_refused(runs: dict[str, tuple[Path, Any]], tmp_path: Path,
                                           spaces: dict[str, Any], message: str) -> None:
    state = read_checkpoint(runs["dqn"][0] / "checkpoints" / "last.pt")
    atomic_save({**state, "spaces": spaces}, tmp_path / "altered.pt")
    with pytest.raises(ValueError, match=message):
        rltrain.load_policy(tmp_path / "altered.pt")


@pytest.mark.parametrize("space", [
    gym.spaces.Box(-1.0, 2.0, (3,), np.float32),
    gym.spaces.Box(-np.inf, np.inf, (2, 2), np.float64),
    gym.spaces.Box(0, 255, (4, 4, 3), np.uint8),
    gym.spaces.Discrete(5, start=-2),
    gym.spaces.MultiDiscrete([3, 4], start=[1, 0]),
    gym.spaces.MultiBinary(6),
    gym.spaces.Dict({"b": gym.spaces.Discrete(2), "a": gym.spaces.Box(0, 1, (2,))}),
])
def test_spaces_are_stored_as_plain_data_and_read_back_equal(space: gym.Space[Any],
                                                              tmp_path: Path) -> None:
    torch.save({"space": space_state(space)}, tmp_path / "s.pt")
    stored = torch.load(tmp_path / "s.pt", weights_only=True)["space"]
    restored = space_from_state(stored)
    assert restored == space
    if isinstance(space, gym.spaces.Dict):
        assert list(restored.spaces) == list(space.spaces)  # the order is kept


# ---------------------------------------------------------------------------------------------
# predict
# ---------------------------------------------------------------------------------------------


def test_dqn_predict_takes_unbatched_and_batched_observations(
        runs: dict[str, tuple[Path, Any]]) -> None:
    run_dir, trained = runs["dqn"]
    policy = rltrain.load_policy(run_dir)
    obs = observations("CartPole-v1", 8)
    action, state = policy.predict(obs[0])
    assert type(action) is int and state is None
    batch, _ = policy.predict(stack(obs))
    assert batch.dtype == np.int64 and batch.shape == (8,)
    greedy = trained.q_network(torch.as_tensor(stack(obs))).argmax(1).numpy()
    np.testing.assert_array_equal(batch, greedy)
    assert [policy.predict(o)[0] for o in obs] == greedy.tolist()
    assert policy(obs[0]) == greedy[0]
    assert gym.make("CartPole-v1").action_space.contains(action)
    # float64 observations are cast to the float32 the networks take; a list is an array.
    assert policy.predict(obs[0].astype(np.float64))[0] == action
    assert policy.predict(obs[0].tolist())[0] == action


def test_predict_refuses_observations_of_another_shape_or_kind(
        runs: dict[str, tuple[Path, Any]]) -> None:
    policy = rltrain.load_policy(runs["dqn"][0])
    with pytest.raises(ValueError, match=r"observations of shape \(4,\), or batches"):
        policy.predict(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"got shape \(2, 2, 4\)"):
        policy.predict(np.zeros((2, 2, 4), np.float32))
    dict_policy = rltrain.load_policy(runs["dict"][0], trust=OWN)
    with pytest.raises(ValueError, match=r"dict observations with the keys \['pixels', "):
        dict_policy.predict(np.zeros(4, np.float32))
    obs = observations(DICT, 1)[0]
    with pytest.raises(ValueError, match=r"obs\['pixels'\]: this policy takes uint8"):
        dict_policy.predict({**obs, "pixels": obs["pixels"].astype(np.float32)})


def test_dict_observations_with_a_uint8_image_and_a_discrete_key(
        runs: dict[str, tuple[Path, Any]]) -> None:
    run_dir, trained = runs["dict"]
    policy = rltrain.load_policy(run_dir, trust=OWN)
    obs = observations(DICT, 6)
    batch, _ = policy.predict(stack(obs))
    tensors = {k: torch.as_tensor(v) for k, v in stack(obs).items()}
    np.testing.assert_array_equal(batch, trained.q_network(tensors).argmax(1).numpy())
    assert [policy.predict(o)[0] for o in obs] == batch.tolist()


def test_ppo_applies_its_saved_observation_normalisation(
        runs: dict[str, tuple[Path, Any]]) -> None:
    run_dir, trained = runs["ppo"]
    policy = rltrain.load_policy(run_dir)
    rms = policy.agent.obs_rms
    assert rms is not None and float(rms.count) > 1  # the statistics of the run, not fresh
    torch.testing.assert_close(rms.mean, trained.obs_rms.mean, rtol=0, atol=0)
    obs = stack(observations("Pendulum-v1", 16))
    action, _ = policy.predict(obs)
    x = torch.as_tensor(obs)
    net = trained.net
    normalised = net.distribution(rms.normalize(x, 10.0)).mode().clamp(-2.0, 2.0)
    raw = net.distribution(x).mode().clamp(-2.0, 2.0)
    np.testing.assert_allclose(action, normalised.detach().numpy(), rtol=1e-6)
    assert not np.allclose(action, raw.detach().numpy())  # normalisation changes the actions
    assert action.dtype == np.float32 and action.shape == (16, 1)
    assert policy.predict(obs[0])[0].shape == (1,)


def test_sac_predict_gives_the_squashed_mean_in_the_bounds(
        runs: dict[str, tuple[Path, Any]]) -> None:
    run_dir, trained = runs["sac"]
    policy = rltrain.load_policy(run_dir)
    obs = stack(observations("Pendulum-v1", 10))
    action, _ = policy.predict(obs)
    np.testing.assert_allclose(action, trained.actor.mode(torch.as_tensor(obs)).detach().numpy(),
                               rtol=1e-6)
    assert ((action >= -2) & (action <= 2)).all()
    sampled, _ = policy.predict(obs, deterministic=False)
    assert not np.allclose(sampled, action)


def test_dreamer_predict_carries_its_recurrent_state(runs: dict[str, tuple[Path, Any]]) -> None:
    run_dir, trained = runs["dreamer"]
    policy = rltrain.load_policy(run_dir)
    obs = observations("Pendulum-v1", 6)
    reference = trained.policy(torch.device("cpu"))
    ref_state = reference.initial_state(1)
    state = None
    actions = []
    for o in obs:
        action, state = policy.predict(o, state)
        with torch.inference_mode():
            step = reference.act(torch.as_tensor(o)[None], ref_state, True)
        ref_state = step.state
        np.testing.assert_allclose(action, step.action[0].numpy(), rtol=1e-5, atol=1e-6)
        actions.append(action)
    assert isinstance(state, tuple) and state[0].shape == (1, 32)
    # The state matters: the same observation from the start gives another action ...
    assert not np.allclose(policy.predict(obs[-1])[0], actions[-1])
    # ... and episode_start resets it.
    np.testing.assert_allclose(policy.predict(obs[0], state, episode_start=True)[0], actions[0],
                               rtol=1e-5)
    with pytest.raises(ValueError, match="state holds 1 rows and obs 2"):
        policy.predict(stack(obs[:2]), state)


def test_a_stored_config_naming_what_is_not_an_agent_is_refused(
        runs: dict[str, tuple[Path, Any]], tmp_path: Path) -> None:
    state = read_checkpoint(runs["dqn"][0] / "checkpoints" / "last.pt")
    config = {**state["config"], "agent": {"_target_": "os.system", "command": "touch pwned"}}
    atomic_save({**state, "config": config}, tmp_path / "altered.pt")
    with pytest.raises(ValueError, match=r"os\.system"):
        rltrain.load_policy(tmp_path / "altered.pt")
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


# ---------------------------------------------------------------------------------------------
# Export: a file torch alone runs
# ---------------------------------------------------------------------------------------------

FRESH = r"""
import json, sys
import torch
jobs = json.loads(sys.argv[1])
for job in jobs:
    extra = {"rltrain.json": ""}
    program = torch.export.load(job["program"], extra_files=extra).module()
    meta = json.loads(extra["rltrain.json"])
    inputs = torch.load(job["obs"], weights_only=True)
    outputs = []
    if meta["recurrent"]:
        state = tuple(torch.tensor([row]) for row in meta["initial_state"])
        for obs in inputs:  # one env, step by step
            action, state = program(obs, state)
            outputs.append(action)
    else:
        first = ({k: v[:1] for k, v in inputs.items()} if isinstance(inputs, dict)
                 else inputs[:1])
        outputs = [program(first), program(inputs)]
    torch.save(outputs, job["out"])
assert "rltrain" not in sys.modules, sorted(m for m in sys.modules if "rltrain" in m)
print("fresh process: rltrain not imported")
"""


@pytest.mark.slow
def test_exported_programs_run_in_a_fresh_process_with_the_same_actions(
        runs: dict[str, tuple[Path, Any]], tmp_path: Path) -> None:
    jobs, expected = [], {}
    for name, (run_dir, _) in runs.items():
        policy = rltrain.load_policy(run_dir, trust=OWN)
        program = policy.export(tmp_path / f"{name}.pt2")
        obs = observations(ENVS[name], 5, seed=3)
        batch = stack(obs)
        if name == "dreamer":
            tensors: Any = [torch.as_tensor(o)[None] for o in obs]
            state, actions = None, []
            for o in obs:
                action, state = policy.predict(o, state)
                actions.append(action)
            expected[name] = [np.stack(actions)]
        else:
            tensors = ({k: torch.as_tensor(v) for k, v in batch.items()}
                       if isinstance(batch, dict) else torch.as_tensor(batch))
            full, _ = policy.predict(batch)
            expected[name] = [full[:1], full]
        torch.save(tensors, tmp_path / f"{name}-obs.pt")
        jobs.append({"program": str(program), "obs": str(tmp_path / f"{name}-obs.pt"),
                     "out": str(tmp_path / f"{name}-out.pt")})
    done = subprocess.run([sys.executable, "-c", FRESH, json.dumps(jobs)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rltrain not imported" in done.stdout
    for name, job in zip(runs, jobs, strict=True):
        outputs = torch.load(job["out"], weights_only=True)
        if name == "dreamer":
            outputs = [torch.cat(outputs).numpy()]
        for got, want in zip(outputs, expected[name], strict=True):
            got = np.asarray(got)
            assert got.shape == want.shape, name
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_export_policy_and_its_metadata(runs: dict[str, tuple[Path, Any]],
                                        tmp_path: Path) -> None:
    out = rltrain.inference.export_policy(runs["dict"][0], tmp_path / "sub" / "dict.pt2",
                                          trust=OWN)
    extra = {"rltrain.json": ""}
    torch.export.load(str(out), extra_files=extra)
    meta = json.loads(extra["rltrain.json"])
    assert meta["recurrent"] is False and meta["initial_state"] is None
    assert meta["observation"]["keys"]["pixels"] == {"shape": [SIDE, SIDE, 3], "dtype": "uint8"}
    assert meta["observation"]["keys"]["spin"] == {"shape": [], "dtype": "int64"}
    assert meta["action"] == {"type": "Discrete", "shape": [], "dtype": "int64", "n": 2,
                              "start": 0}


def test_rltrain_export_writes_the_program_of_a_run_directory(
        runs: dict[str, tuple[Path, Any]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from rltrain.cli import main

    run_dir = runs["dqn"][0]
    out = tmp_path / "cartpole.pt2"
    assert main(["export", str(run_dir), str(out), "--checkpoint", "best"]) == 0
    assert capsys.readouterr().out.strip() == f"exported: {out}"
    program = torch.export.load(str(out)).module()
    policy = rltrain.load_policy(run_dir, which="best")
    obs = stack(observations("CartPole-v1", 5))
    expected, _ = policy.predict(obs)
    assert program(torch.as_tensor(obs)).numpy().tolist() == list(expected)
    assert main(["export", str(tmp_path / "no-run"), str(tmp_path / "x.pt2")]) == 2
