"""Atari environments saved as checked data (rltrain.envs.emulator): a restored env steps and
resets exactly as the one it was saved from, sticky actions included; an altered state is
refused, naming the part, with nothing changed; only the ALE in known wrappers is saved so."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import stepped_through

from rltrain.envs import emulator
from rltrain.envs.atari import AtariConfig, AtariPipeline, LastAction

pytest.importorskip("ale_py")


def atari(game: str, sticky: float = 0.0) -> gym.Env[Any, Any]:
    import ale_py

    gym.register_envs(ale_py)
    pipeline = AtariPipeline(AtariConfig(repeat_action_probability=sticky))
    return pipeline(gym.make(f"ALE/{game}-v5", **pipeline.make_kwargs()))


def stepped(game: str, steps: int, actions: np.ndarray, *, seed: int = 1,
            sticky: float = 0.0) -> gym.Env[Any, Any]:
    return stepped_through(atari(game, sticky), actions[:steps], seed)


def same_future(a: gym.Env[Any, Any], b: gym.Env[Any, Any], actions: np.ndarray) -> int:
    """Step both with ``actions`` (resetting on episode ends), asserting equal frames,
    rewards and flags; returns the episodes that ended."""
    episodes = 0
    for action in actions:
        x, y = a.step(action), b.step(action)
        assert np.array_equal(x[0], y[0]) and x[1:4] == y[1:4]
        if x[2] or x[3]:
            episodes += 1
            assert np.array_equal(a.reset()[0], b.reset()[0])
    return episodes


@pytest.mark.slow
@pytest.mark.parametrize(("game", "sticky", "cut"), [
    ("Breakout", 0.0, 300), ("Pong", 0.0, 450), ("Breakout", 0.25, 350), ("Pong", 0.25, 200)])
def test_a_restored_env_steps_and_resets_exactly_as_the_one_it_was_saved_from(
        game: str, sticky: float, cut: int) -> None:
    actions = np.random.default_rng(cut).integers(0, 4, cut + 1_500)
    original = stepped(game, cut, actions, sticky=sticky)
    assert emulator.saveable(original)
    saved = emulator.state(original)
    copy = stepped(game, 11, actions[::-1], seed=99, sticky=sticky)  # another game, elsewhere
    emulator.restore(copy, saved, 0)
    episodes = same_future(original, copy, actions[cut:])
    if game == "Breakout":
        assert episodes > 3  # lives were lost: resets (no-op starts, FIRE) were compared


def test_a_state_saved_just_after_a_reset_gives_the_emulator_its_no_op() -> None:
    """After the ALE's reset its last action (what a sticky first step repeats) is the no-op,
    which LastAction records."""
    import ale_py

    gym.register_envs(ale_py)

    def raw(seed: int, steps: int) -> gym.Env[Any, Any]:
        env = LastAction(gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.5))
        env.reset(seed=seed)
        for action in actions[:steps]:
            env.step(action)
        return env

    actions = np.random.default_rng(5).integers(1, 4, 2_000)  # never the no-op
    original = raw(1, 40)
    original.reset()
    saved = emulator.state(original)
    assert next(w for w in saved["wrappers"] if w["class"] == "LastAction")["last_action"] == 0
    copy = raw(3, 13)
    emulator.restore(copy, saved, 0)
    same_future(original, copy, actions[40:400])


def test_the_saved_state_is_tensors_numbers_and_strings() -> None:
    saved = emulator.state(stepped("Pong", 30, np.zeros(30, dtype=np.int64)))
    assert set(saved) == {"emulator", "sha256", "rng", "wrappers"}
    assert saved["emulator"].dtype == torch.uint8 and saved["emulator"].dim() == 1
    assert saved["sha256"] == hashlib.sha256(saved["emulator"].numpy().tobytes()).hexdigest()
    classes = [w["class"] for w in saved["wrappers"]]
    assert classes == ["FrameStack", "SignReward", "FireReset", "EpisodicLife",
                       "AtariPreprocessing", "TimeLimit", "LastAction", "OrderEnforcing",
                       "PassiveEnvChecker"]
    frames = saved["wrappers"][0]["obs_queue"]
    assert len(frames) == 4 and all(f.shape == (84, 84) and f.dtype == torch.uint8
                                    for f in frames)


def with_wrapper(saved: dict[str, Any], cls: str, **changes: Any) -> dict[str, Any]:
    return {**saved, "wrappers": [{**w, **changes} if w["class"] == cls else w
                                  for w in saved["wrappers"]]}


def flipped(saved: dict[str, Any], at: int, *, digest: bool) -> dict[str, Any]:
    data = bytearray(saved["emulator"].numpy().tobytes())
    data[at] ^= 0xFF
    out = {**saved, "emulator": torch.frombuffer(data, dtype=torch.uint8)}
    return {**out, "sha256": hashlib.sha256(data).hexdigest()} if digest else out


ALTERATIONS: list[tuple[Callable[[dict[str, Any]], dict[str, Any]], str]] = [
    (lambda s: flipped(s, 200, digest=False), "does not match its digest"),
    (lambda s: flipped(s, 40, digest=True), "not of this game's cartridge"),  # its ROM's MD5
    (lambda s: flipped(s, 12, digest=True), "time limit counted"),  # its episode's frames
    (lambda s: flipped(s, 20, digest=True), "another game mode or difficulty"),
    (lambda s: flipped(s, 24, digest=True), "cannot be read by the ALE"),
    (lambda s: flipped(s, 70, digest=True), "ALE cannot restore"),
    (lambda s: {**s, "emulator": s["emulator"].float()}, "no vector of bytes"),
    (lambda s: {**s, "emulator": s["emulator"].tolist()}, "no vector of bytes"),
    (lambda s: {k: v for k, v in s.items() if k != "sha256"}, "not an Atari env state"),
    (lambda s: with_wrapper(s, "LastAction", last_action=99), "not one of the env's"),
    (lambda s: with_wrapper(s, "TimeLimit", _elapsed_steps="os.system"), "not an int"),
    (lambda s: with_wrapper(s, "FrameStack", obs_queue=[torch.zeros(84, 84)] * 4), "dtype"),
    (lambda s: with_wrapper(s, "FrameStack", obs_queue=[]), "list of 4 arrays"),
    (lambda s: with_wrapper(s, "AtariPreprocessing",
                            obs_buffer=[torch.zeros(10, dtype=torch.uint8)] * 2), "shape"),
    (lambda s: {**s, "wrappers": s["wrappers"][1:]}, "saved inside other wrappers"),
    (lambda s: {**s, "rng": [{"bit_generator": "PCG64", "state": "x"}] * 3}, "not valid"),
]


#: Actions of the altered-state cases: the saved env's, then the target's and its twin's.
ACTIONS = np.random.default_rng(2).integers(0, 4, 200)


@pytest.fixture(scope="module")
def saved_breakout() -> dict[str, Any]:
    """A Breakout state with sticky actions, saved once for every altered-state case (each
    alteration makes a new dict: the saved one is never changed)."""
    return emulator.state(stepped("Breakout", 120, ACTIONS, sticky=0.25))


@pytest.mark.parametrize(("change", "message"), ALTERATIONS)
def test_an_altered_state_is_refused_by_name_and_nothing_is_changed(
        change: Callable[[dict[str, Any]], dict[str, Any]], message: str,
        saved_breakout: dict[str, Any]) -> None:
    target, twin = (stepped("Breakout", 70, ACTIONS, seed=4, sticky=0.25) for _ in range(2))
    with pytest.raises(ValueError, match=message) as refused:
        emulator.restore(target, change(saved_breakout), 2)
    assert "sub-env 2" in str(refused.value)
    same_future(target, twin, ACTIONS[70:110])  # the target is where it was, untouched


def test_a_state_of_another_game_is_refused() -> None:
    saved = emulator.state(stepped("Pong", 20, np.zeros(20, dtype=np.int64)))
    breakout = stepped("Breakout", 20, np.zeros(20, dtype=np.int64))
    with pytest.raises(ValueError, match=r"cartridge|other wrappers"):
        emulator.restore(breakout, saved, 0)


def test_only_the_ale_in_known_wrappers_with_its_last_action_is_saved_this_way() -> None:
    import ale_py

    gym.register_envs(ale_py)
    assert emulator.saveable(stepped("Pong", 3, np.zeros(3, dtype=np.int64)))
    raw = gym.make("ALE/Pong-v5", repeat_action_probability=0.0)  # no pipeline: still exact
    raw.reset(seed=0)
    raw.step(0)
    raw.step(0)
    assert emulator.saveable(raw)
    sticky = gym.make("ALE/Pong-v5")  # sticky actions (0.25) and no record of the last action
    sticky.reset(seed=0)
    sticky.step(0)
    sticky.step(0)
    assert not emulator.saveable(sticky)
    pong = stepped("Pong", 3, np.zeros(3, dtype=np.int64))
    assert not emulator.saveable(gym.wrappers.ClipReward(pong, -1, 1))  # an unknown wrapper
    assert not emulator.restorable(gym.make("CartPole-v1"))
