"""What the way a lost life restarts does to an Atari checkpoint's greedy score: the same policy
plays whole games on rltrain's Gymnasium pipeline with each restart, from the same seeds.

A restart is ``FILL`` or ``FILL+noops``: the frame stack refilled with the new frame
(``repeat``, rltrain's Gymnasium pipeline), zero-filled but for it (``zeros``, SB3's
``VecFrameStack``) or kept going with the old frames (``keep``, envpool's stacking); with
``+noops`` the pipeline's own restart takes envpool's random no-op frames first
(``env.atari.life_noops=true``), else its one no-op step (SB3's). Rewards are unclipped and a
game goes on through its lives to its end or the ALE's cap.

    python -m benchmarks.atari_life_restart RUN_DIR|CHECKPOINT [--game ALE/Breakout-v5] \
        [--games 10] [--restarts repeat keep repeat+noops zeros] [--results NAME]

A group's final checkpoints played so are kept as ``atari_life_restart_<game>_<label>_seed<S>``
(game in lower case, e.g. ``breakout``), which :func:`restart_scores` reads back.
"""

from __future__ import annotations

import argparse
import json
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._util import table, write_results
from rltrain import load_policy
from rltrain.config.schema import compose
from rltrain.envs.atari import AtariConfig
from rltrain.envs.make import EnvSpec

#: Env steps after which a game is cut: the ALE's cap of 108,000 frames.
CAP = 27_000


def restart_stack(stack: deque[np.ndarray], frame: np.ndarray, fill: str) -> None:
    """The stack after a lost life's restart, as ``fill`` says (module docstring)."""
    if fill == "repeat":
        stack.extend([frame] * len(stack))
    elif fill == "zeros":
        stack.extend([np.zeros_like(frame)] * (len(stack) - 1) + [frame])
    else:
        stack.append(frame)


def play(policy: Any, game: str, fill: str, noops: bool, seed: int, games: int) -> list[float]:
    """Scores of ``games`` greedy whole games, game ``g`` reset with ``seed + g``."""
    base = AtariConfig(**compose(["ppo_atari"]).env.atari)
    # the pipeline without its stack (kept here) or clipping, lives ending its episodes
    env = EnvSpec(game, atari=replace(base, frame_stack=1, clip_rewards=False,
                                      life_noops=noops))()
    ale = env.unwrapped.ale  # type: ignore[attr-defined]
    scores = []
    for g in range(games):
        obs, _ = env.reset(seed=seed + g)
        stack = deque([obs[0]] * base.frame_stack, maxlen=base.frame_stack)
        score = 0.0
        for _ in range(CAP):
            action, _ = policy.predict(np.stack(stack), deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            score += float(reward)
            if truncated or (terminated and ale.lives() == 0):
                break
            if terminated:  # a lost life: the game goes on
                obs, _ = env.reset()
                restart_stack(stack, obs[0], fill)
            else:
                stack.append(obs[0])
        scores.append(score)
    env.close()
    return scores


def restart_scores(results: Path, game: str, label: str, restart: str) -> dict[int, float]:
    """``{seed: mean score}`` of ``restart`` from the files ``results`` holds for ``label``'s
    final checkpoints on ``game`` (module docstring); a file without that restart is left out.
    """
    out = {}
    for path in sorted(results.glob(f"atari_life_restart_{game}_{label}_seed*.json")):
        rows = [row for row in json.loads(path.read_text())["runs"]
                if row["restart"] == restart]
        if rows:
            out[int(path.stem.rsplit("_seed", 1)[1])] = float(rows[0]["mean"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="a run directory or a checkpoint file")
    parser.add_argument("--game", default="ALE/Breakout-v5")
    parser.add_argument("--games", type=int, default=10)
    parser.add_argument("--seed", type=int, default=10_000)
    parser.add_argument("--restarts", nargs="+",
                        default=["repeat", "keep", "repeat+noops", "zeros"])
    parser.add_argument("--results", default=None, help="a results file to write (none)")
    args = parser.parse_args()
    for restart in args.restarts:
        fill, _, noops = restart.partition("+")
        if fill not in ("repeat", "zeros", "keep") or noops not in ("", "noops"):
            parser.error(f"a restart is repeat|zeros|keep[+noops], e.g. keep+noops; got "
                         f"{restart!r}")
    policy = load_policy(args.checkpoint)
    rows = []
    for restart in args.restarts:
        fill, _, noops = restart.partition("+")
        scores = play(policy, args.game, fill, bool(noops), args.seed, args.games)
        rows.append({"restart": restart, "mean": float(np.mean(scores)), "scores": scores})
    print(table(["restart", "mean", "games"],
                [[r["restart"], f"{r['mean']:.1f}", " ".join(f"{s:g}" for s in r["scores"])]
                 for r in rows]))
    if args.results:
        payload = {"args": {**vars(args), "checkpoint": str(args.checkpoint)}, "runs": rows}
        print(f"results: {write_results(args.results, payload)}")


if __name__ == "__main__":
    main()
