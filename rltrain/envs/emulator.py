"""The state of Atari environments (the ALE's) as checked data, so that a resumed Atari run
takes the same next actions and sees the same next frames as the straight run (no pickle: the
ALE env pickles only its constructor arguments).

One sub-env's state is a dict:

- ``emulator``: the ALE's own serialization of its state with its random generator
  (``cloneState(include_rng=True)``: the console's RAM, CPU and cartridge, the frame counters,
  the sticky-action generator), as a ``uint8`` tensor, with ``sha256``, its digest;
- ``rng``: the env's random generator (it draws the no-op count of each reset), and those of
  its action and observation spaces;
- ``wrappers``: per wrapper layer, outermost first, its class name and its state
  (:mod:`rltrain.envs.wrapper_state`): the last action given to the ALE (a sticky step
  repeats it, and the ALE's state leaves it out), the time limit's elapsed frames, the
  preprocessing's two max-pooled screens, lives and game-over flag, the episodic-life
  counter, the frames of the frame stack.

Only ``ale_py``'s ``AtariEnv`` inside the wrappers of :data:`ATARI` (the standard pipeline,
:mod:`rltrain.envs.atari`, and Gymnasium's standard wrappers) is saved this way. On load
everything is checked against the live env before anything changes: the emulator bytes must
have their digest, the live game's cartridge, mode and difficulty, and the frame count the time
limit recorded; every other part its kind, shapes and dtypes. An altered state is refused,
naming the part it fails on.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

import gymnasium as gym
import torch

import rltrain.envs.wrapper_state as wrapper_state
from rltrain.envs.atari import LastAction
from rltrain.envs.wrapper_state import ARRAYS, PLAIN, STANDARD, generator_states

#: Gymnasium's Atari wrappers with their state, and its standard ones (the pipeline's own
#: wrappers, :mod:`rltrain.envs.atari`, declare theirs).
ATARI: wrapper_state.Table = {
    **STANDARD,
    gym.wrappers.AtariPreprocessing: {"obs_buffer": ARRAYS, "lives": PLAIN,
                                      "game_over": PLAIN},
    gym.wrappers.FrameStackObservation: {"obs_queue": ARRAYS},
}

KEYS = {"emulator", "sha256", "rng", "wrappers"}

#: The cartridge's ROM digest (32 hexadecimal digits) inside the ALE's serialized state.
ROM_MD5 = re.compile(rb"[0-9a-f]{32}")


def restorable(env: gym.Env[Any, Any]) -> bool:
    """Whether a state saved by :func:`state` can be put back into ``env``: ``ale_py``'s
    ``AtariEnv`` in wrappers of :data:`ATARI` only."""
    inner = env.unwrapped
    return (type(inner).__module__.startswith("ale_py") and hasattr(inner, "ale")
            and wrapper_state.known(env, ATARI))


def saveable(env: gym.Env[Any, Any]) -> bool:
    """Whether ``env``'s state can be saved now: :func:`restorable`, reset at least once, its
    wrappers' state data (Gymnasium's checker holds the first step's observation until the
    second step), and without sticky actions or with its last action recorded
    (:class:`~rltrain.envs.atari.LastAction`: the ALE's state does not hold it)."""
    inner: Any = env.unwrapped
    return (restorable(env) and getattr(inner, "_np_random", None) is not None
            and wrapper_state.holds_data(env, ATARI)
            and (_sticky(inner) == 0.0 or _last_action_layer(env) is not None))


def state(env: gym.Env[Any, Any]) -> dict[str, Any]:
    """``env``'s state (module docstring); ``env`` must be :func:`saveable`."""
    inner: Any = env.unwrapped
    data = inner.ale.cloneState(include_rng=True).__getstate__()
    return {
        "emulator": torch.frombuffer(bytearray(data), dtype=torch.uint8),
        "sha256": hashlib.sha256(data).hexdigest(),
        "rng": generator_states(inner),
        "wrappers": wrapper_state.state(env, ATARI),
    }


def restore(env: gym.Env[Any, Any], saved: Any, index: int) -> None:
    """Put :func:`state`'s output ``saved`` back into ``env`` (sub-env ``index``, named in
    errors), after checking every part of it against ``env``; raises ``ValueError`` naming
    the part that does not fit, before anything is changed."""
    inner: Any = env.unwrapped
    where = f"The checkpoint's state of sub-env {index} ({inner.spec.id if inner.spec else 'ALE'})"
    check_saved(saved, where)
    wrapper_state.check(env, saved["wrappers"], ATARI, where)
    wrapper_state.check_generators(inner, saved["rng"], where)
    emulator = _emulator_state(inner, saved, where)
    last = _last_action(env, saved["wrappers"], where)
    _restore_emulator(inner, emulator, where)
    if last is not None:
        _give_last_action(inner, last)
        inner.ale.restoreState(emulator)
    wrapper_state.restore_generators(inner, saved["rng"])
    wrapper_state.restore(env, saved["wrappers"], ATARI)


def _restore_emulator(inner: Any, emulator: Any, where: str) -> None:
    """Restore ``emulator`` into the ALE; where the ALE fails part-way (bytes it parsed but
    cannot apply), put its own state back and refuse."""
    before = inner.ale.cloneState(include_rng=True)
    try:
        inner.ale.restoreState(emulator)
    except Exception as error:  # the ALE raises untranslated C++ errors
        inner.ale.restoreState(before)
        raise ValueError(f"{where}: the ALE cannot restore its emulator state ({error}): it "
                         "was altered. Resume from another checkpoint.") from None


def _sticky(inner: Any) -> float:
    """The probability that the ALE repeats its last action instead of the one given."""
    return float(inner.ale.getFloat("repeat_action_probability"))


def _last_action_layer(env: gym.Env[Any, Any]) -> LastAction | None:
    return next((layer for layer in wrapper_state.wrappers(env)
                 if isinstance(layer, LastAction)), None)


def _last_action(env: gym.Env[Any, Any], wrappers: list[dict[str, Any]],
                 where: str) -> int | None:
    """The saved last action, checked to be one of the env's, where sticky actions need it;
    else None."""
    inner: Any = env.unwrapped
    if not 0.0 < _sticky(inner) < 1.0 or _last_action_layer(env) is None:
        return None
    last = next(w["last_action"] for w in wrappers if w["class"] == LastAction.__name__)
    if not isinstance(last, int) or not 0 <= last < len(inner._action_set):
        raise ValueError(f"{where}: its last action {last!r} is not one of the env's "
                         f"{len(inner._action_set)} actions.")
    return last


def _give_last_action(inner: Any, last: int) -> None:
    """Make ``last`` the emulator's last action (what a sticky step repeats), which its saved
    state does not hold: the ALE takes a given action with probability ``1 - p``, so it is
    given until the chance that every draw repeated the previous one is below 1e-12. The
    caller restores the state (its generator included) afterwards."""
    p = _sticky(inner)
    for _ in range(min(10_000, math.ceil(math.log(1e-12) / math.log(p)))):
        inner.ale.act(inner._action_set[last])


def check_saved(saved: Any, where: str) -> None:
    """Refuse a saved state (untrusted) whose own parts disagree, before any env is made:
    its keys, the emulator bytes as a ``uint8`` vector, and their digest. The rest needs the
    live env (:func:`restore`)."""
    if not isinstance(saved, dict) or set(saved) != KEYS:
        raise ValueError(f"{where} is not an Atari env state; it was altered or written by "
                         "something else. Resume from another checkpoint.")
    value = saved["emulator"]
    if not isinstance(value, torch.Tensor) or value.dtype != torch.uint8 or value.dim() != 1:
        raise ValueError(f"{where}: its emulator state is no vector of bytes of the size this "
                         "game's has. Resume from another checkpoint.")
    if saved["sha256"] != hashlib.sha256(value.numpy().tobytes()).hexdigest():
        raise ValueError(f"{where}: its emulator state does not match its digest (sha256): "
                         "it was altered or damaged. Resume from another checkpoint.")


def _emulator_state(inner: Any, saved: dict[str, Any], where: str) -> Any:
    """The saved emulator state as the ALE's object, once its bytes are checked: a ``uint8``
    vector whose digest is the recorded one, of the live game's cartridge (its ROM's MD5 at
    the place the live emulator's state has it), in the live game's mode and difficulty, and
    whose frame within the episode is the time limit's count."""
    from ale_py import ALEState

    live = inner.ale.cloneState(include_rng=True)
    live_data = live.__getstate__()
    data = saved["emulator"].numpy().tobytes()  # a vector of bytes of its digest (check_saved)
    if not 0 < len(data) <= 2 * len(live_data):
        raise ValueError(f"{where}: its emulator state is no vector of bytes of the size this "
                         "game's has. Resume from another checkpoint.")
    rom = ROM_MD5.search(live_data)
    if rom is None or data[rom.start():rom.end()] != rom.group():
        raise ValueError(f"{where}: its emulator state is not of this game's cartridge (ROM "
                         f"{rom.group().decode() if rom else '?'}). Resume on the game it was "
                         "trained on.")
    try:
        emulator = ALEState(data)
    except Exception as error:  # the ALE's parser raises untranslated C++ errors
        raise ValueError(f"{where}: its emulator state cannot be read by the ALE ({error}): "
                         "it was altered. Resume from another checkpoint.") from None
    if (emulator.getCurrentMode(), emulator.getDifficulty()) != (live.getCurrentMode(),
                                                                 live.getDifficulty()):
        raise ValueError(f"{where}: its emulator state is of another game mode or difficulty "
                         "than this env's. Resume with the env settings it was trained with.")
    elapsed = _elapsed_frames(saved["wrappers"]) if inner._frameskip == 1 else None
    if elapsed is not None and emulator.getEpisodeFrameNumber() != elapsed:
        raise ValueError(f"{where}: its emulator is at frame {emulator.getEpisodeFrameNumber():,}"
                         f" of its episode, but its time limit counted {elapsed:,}: the state "
                         "was altered. Resume from another checkpoint.")
    return emulator


def _elapsed_frames(wrappers: list[dict[str, Any]]) -> int | None:
    """The innermost time limit's elapsed steps (emulator frames where the ALE env steps one
    frame at a time, as the pipeline makes it), or None without one."""
    limits = [w["_elapsed_steps"] for w in wrappers if w["class"] == "TimeLimit"]
    return limits[-1] if limits and isinstance(limits[-1], int) else None
