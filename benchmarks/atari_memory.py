"""Replay memory for Atari transitions (``[4, 84, 84]`` ``uint8`` stacks): rltrain's
FrameStackReplay beside whole stacks stored twice (obs and next obs, as a plain replay) and
Stable-Baselines3's ``ReplayBuffer`` with and without ``optimize_memory_usage``.

rltrain's FrameStackReplay is allocated at ``--capacity`` transitions (1,000,000) and its
arrays' bytes summed (NumPy reserves them without touching the pages); the others are counted
from their arrays' shapes (rltrain's plain replay refuses to reserve more than the memory
available, and this machine cannot reserve SB3's 28 or 56 GB). A FrameStackReplay of
``--fill`` transitions (100,000) is then filled from 8 sub-envs of random 84x84 frames in
episodes of 100 to 1,000 steps, and the process's resident memory measured before and after: the
bytes it holds once every page is written, checked against its formula at that size.

    python -m benchmarks.atari_memory [--capacity 1000000] [--fill 100000]

Writes ``benchmarks/results/atari_memory.json``.
"""

from __future__ import annotations

import argparse
import resource
from typing import Any

import gymnasium as gym
import numpy as np

from benchmarks._util import table, write_results
from rltrain.buffers import FrameStackReplay
from rltrain.buffers.frames import EXTRA_FRAMES
from rltrain.types import Transitions

SPACE = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
ACTIONS = gym.spaces.Discrete(6)
FRAME = 84 * 84


def formula(capacity: int, num_envs: int) -> int:
    """FrameStackReplay's bytes: its frame ring (one frame a transition, 1/16 more and a stack
    per sub-env) and per transition an int64 action, three float32s and two int64 indices."""
    slots = capacity // num_envs
    return (slots + int(slots * EXTRA_FRAMES) + 4) * num_envs * FRAME + capacity * (8 + 12 + 16)


def sb3_bytes(capacity: int, optimize: bool) -> int:
    """SB3's ``ReplayBuffer`` arrays at ``capacity`` (one env), from their shapes in its
    ``__init__`` (this machine's 24 GB cannot reserve them): observations (and
    next_observations unless ``optimize_memory_usage``) in the space's ``uint8``, int64
    actions, float32 rewards, dones and timeouts."""
    stacks = (1 if optimize else 2) * capacity * 4 * FRAME
    return stacks + capacity * (8 + 3 * 4)


def resident_bytes() -> int:
    """Peak resident memory of this process so far (Linux: kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fill(capacity: int, num_envs: int, seed: int = 0) -> tuple[int, int]:
    """Fill a FrameStackReplay of ``capacity`` from ``num_envs`` streams of random frames:
    (its nbytes, resident bytes added)."""
    rng = np.random.default_rng(seed)
    before = resident_bytes()
    replay = FrameStackReplay(capacity, num_envs=num_envs, observation_space=SPACE,
                              action_space=ACTIONS, frame_stack=4)
    stacks = np.repeat(rng.integers(0, 256, (num_envs, 1, 84, 84), np.uint8), 4, axis=1)
    left = rng.integers(100, 1_000, num_envs)
    for _ in range(capacity // num_envs + capacity // num_envs // 10):
        frames = rng.integers(0, 256, (num_envs, 1, 84, 84), np.uint8)
        following = np.concatenate([stacks[:, 1:], frames], axis=1)
        left -= 1
        ended = left <= 0
        replay.add(Transitions(stacks, np.zeros(num_envs, np.int64), np.zeros(num_envs),
                               following, ended, np.zeros(num_envs, bool), {}))
        stacks = following.copy()
        if ended.any():  # new episodes: a repeated reset frame
            stacks[ended] = rng.integers(0, 256, (int(ended.sum()), 1, 84, 84), np.uint8)
            left[ended] = rng.integers(100, 1_000, int(ended.sum()))
    return replay.nbytes, resident_bytes() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--fill", type=int, default=100_000)
    args = parser.parse_args()
    n = args.capacity
    frames = FrameStackReplay(n, num_envs=8, observation_space=SPACE, action_space=ACTIONS,
                              frame_stack=4).nbytes
    assert frames == formula(n, 8)
    stacks = 2 * n * 4 * FRAME + n * (8 + 3 * 4)  # ReplayBuffer's arrays (it refuses to
    # reserve more than the memory available, so they are counted, not allocated)
    sizes: dict[str, Any] = {
        "rltrain FrameStackReplay": frames, "rltrain ReplayBuffer (whole stacks)": stacks,
        "SB3 ReplayBuffer": sb3_bytes(n, False),
        "SB3 ReplayBuffer, optimize_memory_usage": sb3_bytes(n, True)}
    filled, resident = fill(args.fill, 8)
    rows = [[name, "-" if b is None else f"{b / 1e9:.2f} GB",
             "-" if b is None else f"{b / frames:.1f}x"] for name, b in sizes.items()]
    print(f"Replay of {n:,} Atari transitions ([4, 84, 84] uint8), allocated")
    print(table(["buffer", "bytes", "/ FrameStackReplay"], rows))
    print(f"FrameStackReplay of {args.fill:,} filled from 8 sub-envs: {filled / 1e9:.3f} GB by "
          f"formula, resident memory grew {resident / 1e9:.3f} GB")
    write_results("atari_memory", {"args": vars(args), "bytes": sizes,
                                   "filled": {"formula": filled, "resident": resident}})


if __name__ == "__main__":
    main()
