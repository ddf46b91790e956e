"""Exact resume of MuJoCo environments: their physics, generator and wrapper state saved as
checked arrays (rltrain.envs.physics), a TD3 HalfCheetah run stopped and resumed equal to the
straight run bit for bit, and a `--resume` from the command line continuing its episode."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import QUIET, assert_same_tensors, rltrain, stepped_through, straight_and_resumed

from rltrain import TD3, OffPolicyConfig, OffPolicyStrategy, TD3Config, Trainer
from rltrain.checkpoint import read_checkpoint
from rltrain.envs import physics
from rltrain.envs.make import EnvSpec


def stepped(env_id: str, steps: int, actions: list[np.ndarray],
            seed: int = 3) -> gym.Env[Any, Any]:
    return stepped_through(gym.make(env_id), actions[:steps], seed)


def actions_for(env_id: str, count: int) -> list[np.ndarray]:
    space = gym.make(env_id).action_space
    space.seed(0)
    return [space.sample() for _ in range(count)]


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5"])
def test_a_restored_env_steps_and_resets_exactly_as_the_one_it_was_saved_from(
        env_id: str) -> None:
    actions = actions_for(env_id, 1_500)
    original = stepped(env_id, 300, actions)
    assert physics.saveable(original)
    saved = physics.state(original)
    copy = stepped(env_id, 7, actions, seed=99)  # elsewhere in another episode
    physics.restore(copy, saved, 0)
    episodes = 0
    for action in actions[300:]:
        a, b = original.step(action), copy.step(action)
        assert np.array_equal(a[0], b[0]) and a[1:4] == b[1:4]
        if a[2] or a[3]:  # the generators' next draws are the same too
            episodes += 1
            assert np.array_equal(original.reset()[0], copy.reset()[0])
    if env_id in ("Hopper-v5", "Walker2d-v5"):
        assert episodes > 3  # they fall: resets were compared
    elapsed = original.get_wrapper_attr("_elapsed_steps")
    assert elapsed == copy.get_wrapper_attr("_elapsed_steps")


def test_the_saved_state_is_plain_tensors_and_numbers() -> None:
    saved = physics.state(stepped("HalfCheetah-v5", 50, actions_for("HalfCheetah-v5", 50)))
    assert saved["physics"].dtype == torch.float64
    assert all(isinstance(t, torch.Tensor) for t in saved["fields"].values())
    assert [w["class"] for w in saved["wrappers"]] == [
        "TimeLimit", "OrderEnforcing", "PassiveEnvChecker"]
    assert saved["wrappers"][0]["_elapsed_steps"] == 50
    # the env's generator; its spaces' were never made (never seeded nor sampled here)
    assert saved["rng"][0]["bit_generator"] == "PCG64" and saved["rng"][1:] == [None, None]


def altered(saved: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**saved, **changes}


@pytest.mark.parametrize("change, message", [
    (lambda s: altered(s, physics=s["physics"][:-1]), r"physics has shape \(90,\)"),
    (lambda s: altered(s, physics=s["physics"].float()), "dtype float32"),
    (lambda s: altered(s, physics=s["physics"].tolist()), "not an array"),
    (lambda s: altered(s, fields={**s["fields"], "qpos": torch.zeros(3, dtype=torch.float64)}),
     r"mjData.qpos has shape \(3,\)"),
    (lambda s: altered(s, fields={k: v for k, v in s["fields"].items() if k != "xpos"}),
     "other mjData arrays"),
    (lambda s: altered(s, wrappers=s["wrappers"][1:]), "saved inside other wrappers"),
    (lambda s: altered(s, wrappers=[{**s["wrappers"][0], "_elapsed_steps": "os.system"},
                                    *s["wrappers"][1:]]), "not an int, a bool or None"),
    (lambda s: altered(s, rng=[{"bit_generator": "PCG64", "state": "x"}] * 3), "not valid"),
    (lambda s: altered(s, rng=s["rng"][:1]), "random generators"),
    (lambda s: {"physics": s["physics"]}, "not a MuJoCo env state"),
])
def test_an_altered_state_is_refused_by_name_and_nothing_is_changed(change: Any,
                                                                    message: str) -> None:
    actions = actions_for("HalfCheetah-v5", 40)
    saved = physics.state(stepped("HalfCheetah-v5", 40, actions))
    target = stepped("HalfCheetah-v5", 5, actions, seed=1)
    qpos, elapsed = target.unwrapped.data.qpos.copy(), target.get_wrapper_attr("_elapsed_steps")
    with pytest.raises(ValueError, match=message):
        physics.restore(target, change(saved), 2)
    assert np.array_equal(target.unwrapped.data.qpos, qpos)
    assert target.get_wrapper_attr("_elapsed_steps") == elapsed


def test_a_state_of_another_model_is_refused() -> None:
    saved = physics.state(stepped("HalfCheetah-v5", 10, actions_for("HalfCheetah-v5", 10)))
    hopper = stepped("Hopper-v5", 1, actions_for("Hopper-v5", 1))
    with pytest.raises(ValueError, match=r"sub-env 0 .HopperEnv.*another model"):
        physics.restore(hopper, saved, 0)


class Scaled(gym.RewardWrapper[Any, Any]):
    """A wrapper rltrain does not know the state of."""

    def reward(self, reward: Any) -> Any:
        return 2.0 * reward


def test_only_gymnasiums_mujoco_envs_in_known_wrappers_are_saved_this_way() -> None:
    cheetah = stepped("HalfCheetah-v5", 2, actions_for("HalfCheetah-v5", 2))
    assert physics.saveable(cheetah)
    # after one step Gymnasium's checker holds that step's observation: the general rule
    assert not physics.saveable(stepped("HalfCheetah-v5", 1, actions_for("HalfCheetah-v5", 1)))
    assert not physics.saveable(Scaled(cheetah))
    assert not physics.saveable(gym.make("HalfCheetah-v5"))  # never reset: no generator yet
    assert not physics.saveable(stepped("Pendulum-v1", 1, actions_for("Pendulum-v1", 1)))


# ------------------------------------------------------------------ runs

CHEETAH = "HalfCheetah-v5"


def fit(run_dir: Path, num_steps: int, ckpt_path: str | None = None) -> TD3:
    strategy = OffPolicyStrategy(OffPolicyConfig(batch_size=32, warmup_steps=100,
                                                 train_interval=1, train_steps=1,
                                                 buffer_size=5_000, seed=4))
    trainer = Trainer(num_steps=num_steps, strategy=strategy, run_dir=run_dir,
                      eval_interval=None, **QUIET)
    agent = TD3(TD3Config(hidden_sizes=[16]))
    trainer.fit(CHEETAH, agent, ckpt_path=ckpt_path)
    return agent


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    with warnings.catch_warnings():
        # no "The environments' state is not in this checkpoint"
        warnings.filterwarnings("error", message="The environments")
        straight, split = straight_and_resumed(fit, tmp_path_factory, 500)
    return {"straight": straight, "split": split}


@pytest.mark.parametrize("part", ["agent", "optimization", "buffer", "runner", "random",
                                  "metrics", "progress"])
def test_a_halfcheetah_run_stopped_and_resumed_equals_the_straight_run_bit_for_bit(
        runs: dict[str, Path], part: str) -> None:
    straight = read_checkpoint(runs["straight"] / "checkpoints" / "last.pt")
    split = read_checkpoint(runs["split"] / "checkpoints" / "last.pt")
    assert straight["progress"]["env_steps"] == split["progress"]["env_steps"] == 500
    assert straight["progress"]["episodes"] == 0  # one episode of 1,000 steps, still running
    if part == "runner":
        assert len(split["runner"]["physics"]) == 1 and split["runner"]["envs"] is None
    assert_same_tensors(straight[part], split[part], part)


def test_the_next_actions_after_the_resume_are_the_straight_runs(
        runs: dict[str, Path]) -> None:
    straight = read_checkpoint(runs["straight"] / "checkpoints" / "checkpoint-500.pt")
    half = read_checkpoint(runs["split"] / "checkpoints" / "checkpoint-250.pt")
    # the buffer holds every action; the 250 taken after the resume are the straight run's
    stored = straight["buffer"]
    resumed = read_checkpoint(runs["split"] / "checkpoints" / "last.pt")["buffer"]
    assert_same_tensors(stored, resumed, "buffer")
    assert half["progress"]["env_steps"] == 250


@pytest.mark.slow
def test_resuming_a_mujoco_run_from_the_cli_continues_its_episode(tmp_path: Path) -> None:
    common = ["agent.name=td3", f"env.id={CHEETAH}", "strategy.warmup_steps=100",
              "agent.hidden_sizes=[16]", "trainer.eval_interval=null",
              "trainer.enable_progress_bar=false", "trainer.log_interval=200"]
    rltrain("fit", *common, "trainer.num_steps=1200", f"trainer.run_dir={tmp_path / 'a'}",
            cwd=tmp_path)
    first = rltrain("fit", *common, "trainer.num_steps=600", f"trainer.run_dir={tmp_path / 'b'}",
                    cwd=tmp_path)
    resumed = rltrain("fit", "--resume", str(tmp_path / "b"), "trainer.num_steps=1200",
                      cwd=tmp_path)
    assert "not an exact continuation" not in first.stderr + resumed.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()  # MuJoCo's warnings are Python's

    def episode_rows(run: str) -> list[tuple[int, float, float]]:
        rows = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text()
                .splitlines()]
        return [(r["env_steps"], r["rollout/episode_length_last"],
                 r["rollout/episode_return_last"]) for r in rows
                if "rollout/episode_length_last" in r]

    straight, split = episode_rows("a"), episode_rows("b")
    # the first episode ends at env step 1,000 (its time limit) in both; a reset at the resume
    # (env step 600) would have ended none before 1,600
    assert straight and straight[0][1] == 1000.0
    assert split == straight


def test_an_env_saved_another_way_keeps_the_general_warning(tmp_path: Path) -> None:
    def run(num_steps: int, ckpt_path: str | None = None) -> None:
        strategy = OffPolicyStrategy(OffPolicyConfig(batch_size=32, warmup_steps=50,
                                                     train_interval=1, train_steps=1, seed=1))
        Trainer(num_steps=num_steps, strategy=strategy, run_dir=tmp_path, eval_interval=None,
                **QUIET).fit(EnvSpec(CHEETAH, wrappers=(Scaled,)),
                             TD3(TD3Config(hidden_sizes=[8])), ckpt_path=ckpt_path)

    run(100)
    with pytest.warns(UserWarning, match="not an exact continuation"):
        run(200, "last")
