"""CleanRL's scripts made to run on Gymnasium 1.x (and envpool 1.x), changed in nothing else:
each patch a (pattern, replacement) that must match exactly once, so that a changed script is
refused rather than silently half-patched. ``dqn.py``'s patches live beside its learning
benchmark (``benchmarks.cleanrl_dqn.PATCHES``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from benchmarks.cleanrl_dqn import PATCHES as DQN_PATCHES
from benchmarks.cleanrl_dqn import patched_script as patched_dqn

#: Gymnasium 1.x's vector env: CleanRL's scripts expect the same-step autoreset (0.29's).
SAME_STEP = DQN_PATCHES[0]
#: ``ppo.py`` builds its vector env with a trailing comma.
SAME_STEP_PPO = (r"for i in range\(args\.num_envs\)\],\n    \)",
                 "for i in range(args.num_envs)],\n"
                 "        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,\n    )")
#: ``final_observation`` is ``final_obs`` in Gymnasium 1.x.
FINAL_OBS = DQN_PATCHES[2]
#: CleanRL's episode printing, any indentation: ``final_info`` is a dict of arrays with an
#: ``_episode`` mask in Gymnasium 1.x. A ``break`` after the block (the first ended episode
#: only, as ``sac``'s and ``td3``'s scripts log) is kept.
FINAL_INFO = r'(?P<i> +)if "final_info" in infos:\n.*?"charts/episodic_length"[^\n]*\n' \
             r'(?P<brk>(?P=i) {12}break\n)?'


#: CleanRL's episode line, as the patched scripts print it.
SHOW_EPISODE = """f"global_step={global_step}, episodic_return={ended['r'][j]}\""""


def _final_info(match: re.Match[str]) -> str:
    i = match.group("i")
    lines = [f'{i}if "final_info" in infos and "episode" in infos["final_info"]:',
             f'{i}    ended = infos["final_info"]["episode"]',
             f'{i}    for j in np.flatnonzero(infos["final_info"]["_episode"]):',
             f'{i}        print({SHOW_EPISODE})',
             f'{i}        writer.add_scalar("charts/episodic_return", ended["r"][j], global_step)',
             f'{i}        writer.add_scalar("charts/episodic_length", ended["l"][j], global_step)']
    if match.group("brk"):
        lines.append(f"{i}        break")
    return "\n".join(lines) + "\n"


Patch = tuple[str, "str | Callable[[re.Match[str]], str]"]

#: (pattern, replacement) per CleanRL script (``dqn.py``: ``benchmarks.cleanrl_dqn.PATCHES``),
#: each matching exactly once.
PATCHES: dict[str, list[Patch]] = {
    "pqn.py": [SAME_STEP, (FINAL_INFO, _final_info)],
    "ppo.py": [SAME_STEP_PPO, (FINAL_INFO, _final_info)],
    "sac_continuous_action.py": [SAME_STEP, (FINAL_INFO, _final_info), FINAL_OBS],
    "td3_continuous_action.py": [SAME_STEP, (FINAL_INFO, _final_info), FINAL_OBS],
    # envpool 1.x speaks Gymnasium's API (and ``gym`` may be absent): reset returns
    # (obs, info), step five values.
    "ppo_atari_envpool.py": [
        (r"^import gym\n", "import gymnasium as gym\n"),
        (r"observations = super\(\)\.reset\(\*\*kwargs\)",
         "observations, _ = super().reset(**kwargs)"),
        # ... and has num_envs and the single spaces already, as read-only properties, which
        # Gymnasium 1.x's wrappers do not forward: the wrapper copies them.
        (r"    envs\.num_envs = args\.num_envs\n"
         r"    envs\.single_action_space = envs\.action_space\n"
         r"    envs\.single_observation_space = envs\.observation_space\n", ""),
        (r'self\.num_envs = getattr\(env, "num_envs", 1\)\n',
         'self.num_envs = getattr(env, "num_envs", 1)\n'
         "        self.single_action_space = env.single_action_space\n"
         "        self.single_observation_space = env.single_observation_space\n"),
        (r"observations, rewards, dones, infos = super\(\)\.step\(action\)",
         "observations, rewards, terminated, truncated, infos = super().step(action)\n"
         "        dones = np.logical_or(terminated, truncated)"),
    ],
}


def patch_text(name: str, text: str) -> str:
    """CleanRL's script ``name`` (its text) with its :data:`PATCHES` applied."""
    patches = DQN_PATCHES if name == "dqn.py" else PATCHES[name]
    for pattern, replacement in patches:
        if isinstance(replacement, str):
            replacement = replacement.replace("\\", "\\\\")
        text, count = re.subn(pattern, replacement, text, flags=re.DOTALL | re.MULTILINE)
        if count != 1:
            raise SystemExit(f"CleanRL's {name} has changed: a Gymnasium 1.x patch no longer "
                             f"applies ({pattern[:60]!r} matched {count} times).")
    return text


def patched_script(cleanrl: Path, name: str, folder: Path) -> Path:
    """CleanRL's ``cleanrl/<name>`` with its patches, written into ``folder``."""
    if name == "dqn.py":
        return patched_dqn(cleanrl, folder)
    script = folder / name
    script.write_text(patch_text(name, (cleanrl / "cleanrl" / name).read_text()))
    return script
