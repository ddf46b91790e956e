"""The same ALE game through rltrain's Atari training pipeline (Gymnasium's ``AtariPreprocessing``
and ``rltrain.envs.atari``'s wrappers) and Stable-Baselines3's ``AtariWrapper``, side by side.

Both start from the same seed and take the same uniformly random actions (``--steps`` of them);
after each step the two emulators' RAM, the rewards (clipped, as both learners see them), the
lost-life terminations and game overs are compared, and the newest 84x84 frame of each (the
last of rltrain's stack, SB3's ``WarpFrame`` output) pixel by pixel. The two pipelines differ
by construction in how a frame is made: rltrain max-pools the ALE's own grayscale screens of
the last two frames of each skip and resizes the result; SB3 max-pools the two RGB screens and
converts that to gray with OpenCV's weights before resizing. The RAM tells whether the games
themselves stay the same (no-op starts, FIRE after each reset, life loss, frame skip).

    python -m benchmarks.atari_pipelines [--game ALE/Breakout-v5] [--steps 5000] [--seeds 0 1 2] \
        [--envpool]

``--envpool`` compares envpool's pipeline (``env.backend=envpool``, rltrain's settings for it)
with rltrain's Gymnasium pipeline instead. envpool draws its no-ops from its own generator and
hides the emulator's RAM, so the games are lined up by what both can be told: one no-op frame
after each reset (``noop_max=1`` on both sides), no FIRE reset and no episodic life (the game
goes on through lost lives); then the rewards (unclipped), the lives, the game overs and each
newest 84x84 frame (frame skip, max-pooling, grayscale, resizing) are compared. What cannot be
lined up is the random part: the no-ops after a reset (both draw up to ``noop_max``) and after
a lost life (envpool only, unless ``env.atari.life_noops``).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from benchmarks._util import table, write_results
from benchmarks.atari_common import make_ale
from rltrain.config.schema import compose
from rltrain.envs.atari import AtariConfig
from rltrain.envs.make import EnvSpec


def pipelines(game: str) -> tuple[Any, Any]:
    """rltrain's training pipeline and SB3's ``AtariWrapper``, each on its own ALE env."""
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    atari = AtariConfig(**compose(["ppo_atari"]).env.atari)
    ours = EnvSpec(game, atari=atari, training=True)()
    theirs = AtariWrapper(make_ale(game, frameskip=1, repeat_action_probability=0.0,
                                   max_num_frames_per_episode=atari.max_episode_frames))
    return ours, theirs


def compare(game: str, seed: int, steps: int) -> dict[str, Any]:
    """Step both pipelines with the same actions; what matched, and the frames' differences."""
    ours, theirs = pipelines(game)
    rng = np.random.default_rng(seed)
    a, _ = ours.reset(seed=seed)
    b, _ = theirs.reset(seed=seed)
    same_ram = same_reward = same_end = 0
    first_divergence: int | None = None
    gaps: list[float] = []
    largest = 0
    differing = 0.0
    for step in range(steps):
        ram_equal = bool(np.array_equal(ours.unwrapped.ale.getRAM(),
                                        theirs.unwrapped.ale.getRAM()))
        same_ram += ram_equal
        if not ram_equal and first_divergence is None:
            first_divergence = step
        frame_a, frame_b = np.asarray(a)[-1].astype(np.int16), np.asarray(b)[..., 0]
        gap = np.abs(frame_a - frame_b.astype(np.int16))
        gaps.append(float(gap.mean()))
        largest = max(largest, int(gap.max()))
        differing += float((gap > 0).mean())
        action = int(rng.integers(ours.action_space.n))
        a, reward_a, term_a, trunc_a, _ = ours.step(action)
        b, reward_b, term_b, trunc_b, _ = theirs.step(action)
        same_reward += float(reward_a) == float(reward_b)
        same_end += (term_a, trunc_a) == (term_b, trunc_b)
        if term_a or trunc_a:
            a, _ = ours.reset()
        if term_b or trunc_b:
            b, _ = theirs.reset()
    ours.close()
    theirs.close()
    return {"seed": seed, "steps": steps, "same_ram": same_ram, "same_reward": same_reward,
            "same_end": same_end, "first_ram_divergence": first_divergence,
            "mean_abs_pixel_gap": float(np.mean(gaps)), "largest_pixel_gap": largest,
            "pixels_differing": differing / steps}


def compare_envpool(game: str, seed: int, steps: int) -> dict[str, Any]:
    """envpool's pipeline and rltrain's Gymnasium one lined up (module docstring) for ``steps``
    uniformly random actions: what matched, and the frames' differences."""
    import envpool

    from rltrain.envs.envpool import envpool_kwargs, envpool_task

    lined_up = AtariConfig(noop_max=1, fire_reset=False, episodic_life=False,
                           clip_rewards=False, frame_stack=1)
    ours: Any = EnvSpec(game, atari=lined_up)()  # the ALE's env under the pipeline
    theirs = envpool.make(envpool_task(game), env_type="gymnasium", num_envs=1, seed=seed,
                          **envpool_kwargs(lined_up))
    rng = np.random.default_rng(seed)
    a, _ = ours.reset(seed=seed)
    b, _ = theirs.reset()
    same_reward = same_lives = same_end = 0
    gaps: list[float] = []
    largest = 0
    for _ in range(steps):
        gap = np.abs(np.asarray(a)[-1].astype(np.int16) - b[0, -1].astype(np.int16))
        gaps.append(float((gap > 0).mean()))
        largest = max(largest, int(gap.max()))
        action = int(rng.integers(ours.action_space.n))
        a, reward_a, term_a, trunc_a, _ = ours.step(action)
        b, reward_b, term_b, trunc_b, info = theirs.step(np.array([action]))
        same_reward += float(reward_a) == float(reward_b[0])
        same_lives += int(ours.unwrapped.ale.lives()) == int(info["lives"][0])
        same_end += bool(term_a or trunc_a) == bool(term_b[0] or trunc_b[0])
        if term_a or trunc_a:
            a, _ = ours.reset()
        if term_b[0] or trunc_b[0]:
            b, _ = theirs.reset()
    ours.close()
    theirs.close()
    return {"seed": seed, "steps": steps, "same_reward": same_reward, "same_lives": same_lives,
            "same_end": same_end, "largest_pixel_gap": largest,
            "pixels_differing": float(np.mean(gaps))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="ALE/Breakout-v5")
    parser.add_argument("--steps", type=int, default=5_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--results", default=None,
                        help="results file (default atari_pipelines[_envpool])")
    parser.add_argument("--envpool", action="store_true",
                        help="envpool's pipeline against rltrain's Gymnasium one")
    args = parser.parse_args()
    results = args.results or ("atari_pipelines_envpool" if args.envpool else "atari_pipelines")
    if args.envpool:
        found = [compare_envpool(args.game, seed, args.steps) for seed in args.seeds]
        print(table(["seed", "steps", "same reward", "same lives", "same end", "largest gap",
                     "pixels differing"],
                    [[str(r["seed"]), str(r["steps"]), str(r["same_reward"]),
                      str(r["same_lives"]), str(r["same_end"]), str(r["largest_pixel_gap"]),
                      f"{100 * r['pixels_differing']:.2f}%"] for r in found]))
        print(f"results: {write_results(results, {'args': vars(args), 'runs': found})}")
        return
    rows = [compare(args.game, seed, args.steps) for seed in args.seeds]
    print(table(["seed", "steps", "same RAM", "same reward", "same end", "RAM first differs",
                 "mean |pixel gap|", "largest gap", "pixels differing"],
                [[str(r["seed"]), str(r["steps"]), str(r["same_ram"]), str(r["same_reward"]),
                  str(r["same_end"]), str(r["first_ram_divergence"]),
                  f"{r['mean_abs_pixel_gap']:.2f}", str(r["largest_pixel_gap"]),
                  f"{100 * r['pixels_differing']:.1f}%"] for r in rows]))
    print(f"results: {write_results(results, {'args': vars(args), 'runs': rows})}")


if __name__ == "__main__":
    main()
