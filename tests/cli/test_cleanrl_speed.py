"""benchmarks/cleanrl_speed.py: the rate from two step counts, the step counts, the rltrain side's
settings (they compose, and match CleanRL's ``Args`` defaults where a CleanRL checkout is at
hand), the commands; benchmarks/cleanrl_patches.py: the Gymnasium 1.x patches of CleanRL's
scripts (on a stand-in snippet always, on the scripts themselves where the checkout is at
hand)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks import cleanrl_patches as patches
from benchmarks import cleanrl_speed as bench
from rltrain.config.schema import compose

#: A CleanRL checkout (github.com/vwxyzjn/cleanrl); the tests that read its scripts skip
#: without it.
CLEANRL = Path(os.environ.get("CLEANRL_DIR", "/work/bench/cleanrl-src"))
needs_cleanrl = pytest.mark.skipif(not (CLEANRL / "cleanrl" / "dqn.py").is_file(),
                                   reason=f"no CleanRL checkout at {CLEANRL} (set CLEANRL_DIR)")


def test_rate_cancels_the_start_up() -> None:
    # t(n) = start-up + n / r: the difference of two runs gives r whatever the start-up
    for start_up in (0.0, 3.0, 40.0):
        t1, t2 = start_up + 12_000 / 800, start_up + 52_000 / 800
        assert bench.rate(12_000, t1, 52_000, t2) == pytest.approx(800)
    assert bench.rate(1_000, 2.0, 3_000, 4.5) == pytest.approx(800)


def test_rate_refuses_counts_or_times_in_the_wrong_order() -> None:
    with pytest.raises(ValueError, match="n1 < n2"):
        bench.rate(2_000, 1.0, 2_000, 2.0)
    with pytest.raises(ValueError, match="too short for the noise"):
        bench.rate(1_000, 5.0, 2_000, 4.0)


@pytest.mark.parametrize("name", list(bench.PAIRS))
def test_steps_keep_n1_past_the_warm_up_and_whole_rollouts(name: str) -> None:
    pair = bench.PAIRS[name]
    for scale in (1e-6, 0.05, 1.0, 3.0):
        n1, n2 = bench.steps(pair, scale)
        assert n1 == pair.start and n2 > n1
        assert (n2 - n1) % pair.unit == 0 and n1 % pair.unit == 0


def composed(name: str, n: int = 52_000, n1: int = 12_000) -> Any:
    pair = bench.PAIRS[name]
    return compose([pair.preset], [*pair.rltrain_overrides(n, n1), *bench.COMMON])


@pytest.mark.parametrize("name", list(bench.PAIRS))
def test_rltrain_side_composes_with_one_thread_and_no_outputs(name: str) -> None:
    pair = bench.PAIRS[name]
    config = composed(name, pair.start + pair.window, pair.start)
    trainer = config.trainer
    assert trainer.num_threads == 1 and trainer.eval_interval is None
    assert trainer.checkpoint_interval is None
    assert not (trainer.logger or trainer.enable_progress_bar or trainer.enable_console
                or trainer.enable_metrics_file)
    assert config.strategy.seed == bench.SEED
    # learning is on at N1: past the off-policy warm-up, or past the first rollout
    if config.strategy.name == "off_policy":
        assert pair.start > config.strategy.warmup_steps
    else:
        assert pair.start > config.strategy.num_envs * config.strategy.n_steps


def test_epsilon_ends_at_n1_on_both_sides() -> None:
    dqn = bench.PAIRS["dqn"]
    assert composed("dqn").agent.exploration_steps == 12_000
    assert "--exploration-fraction=0.23076923076923078" in dqn.cleanrl_args(52_000, 12_000)
    pqn = composed("pqn", 43_008, 2_048)
    assert int(pqn.agent.exploration_fraction * 43_008) in (2_047, 2_048)
    assert bench.PAIRS["ppo"].cleanrl_args(4_096, 2_048) == [
        "--seed=1", "--total-timesteps=4096", "--no-cuda"]


def test_recurrent_pair_is_the_asked_shape() -> None:
    config = composed("recurrent_ppo", 20_480, 4_096)
    assert config.env.id == "Acrobot-v1"
    assert [w["_target_"] for w in config.env.wrappers] == ["rltrain.envs.partial.MaskVelocity"]
    strategy, agent = config.strategy, config.agent
    assert (strategy.num_envs, strategy.n_steps, strategy.batch_size,
            strategy.update_epochs) == (8, 256, 512, 10)
    assert agent.recurrent == "lstm" and agent.recurrent_hidden_size == 64
    assert not (agent.normalize_observations or agent.normalize_rewards)


def test_commands(tmp_path: Path) -> None:
    made = bench.commands("dqn", 52_000, 12_000, Path("/cleanrl"), tmp_path)
    rltrain, cwd = made["rltrain"]
    assert rltrain[1:5] == ["-m", "rltrain.cli", "fit", "dqn_cartpole"]
    assert "trainer.num_steps=52000" in rltrain and "trainer.num_threads=1" in rltrain
    assert f"trainer.run_dir={tmp_path / 'run'}" in rltrain and cwd == bench.ROOT
    peer, peer_cwd = made["peer"]
    assert peer[1] == str(tmp_path / "dqn.py") and peer_cwd == tmp_path
    assert "--total-timesteps=52000" in peer and "--no-cuda" in peer
    child, child_cwd = bench.commands("recurrent_ppo", 8_192, 4_096, Path("/c"),
                                      tmp_path)["peer"]
    assert child[1:] == ["-m", "benchmarks.cleanrl_speed", "--peer", "recurrent_ppo",
                         "--peer-steps=8192"] and child_cwd == bench.ROOT
    assert bench.child_env(Path("/c"))["OMP_NUM_THREADS"] == "1"


#: CleanRL's episode logging, shaped as in sac_continuous_action.py (with its ``break``).
SNIPPET = '''\
for global_step in range(1):
    if True:
        if "final_info" in infos:
            for info in infos["final_info"]:
                if info is not None:
                    print(f"global_step={global_step}, episodic_return={info['episode']['r']}")
                    writer.add_scalar("charts/episodic_return", info["episode"]["r"], global_step)
                    writer.add_scalar("charts/episodic_length", info["episode"]["l"], global_step)
                    break
'''


class Writer:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float, int]] = []

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.rows.append((tag, float(value), step))


@pytest.mark.parametrize("keep_break", [True, False])
def test_final_info_patch_reads_gymnasium_1_dicts(keep_break: bool) -> None:
    text = SNIPPET if keep_break else SNIPPET.replace("                    break\n", "")
    patched, count = re.subn(patches.FINAL_INFO, patches._final_info, text, flags=re.DOTALL)
    assert count == 1
    # Gymnasium 1.x: final_info is a dict of arrays, "_episode" masks the sub-envs that ended
    infos = {"final_info": {"episode": {"r": np.array([0.0, 21.0, 35.0]),
                                        "l": np.array([0, 21, 35])},
                            "_episode": np.array([False, True, True])}}
    writer = Writer()
    exec(compile(patched, "snippet", "exec"), {"np": np, "infos": infos, "writer": writer})
    lengths = [row for row in writer.rows if row[0] == "charts/episodic_length"]
    assert lengths == ([("charts/episodic_length", 21.0, 0)] if keep_break else
                       [("charts/episodic_length", 21.0, 0), ("charts/episodic_length", 35.0, 0)])
    # no episode ended: nothing logged, no KeyError
    writer = Writer()
    exec(compile(patched, "snippet", "exec"), {"np": np, "infos": {}, "writer": writer})
    assert writer.rows == []


def test_a_patch_that_no_longer_applies_stops() -> None:
    with pytest.raises(SystemExit, match="has changed"):
        patches.patch_text("ppo.py", "print('not CleanRL')\n")


def cleanrl_defaults(script: str) -> dict[str, Any]:
    """The defaults of ``class Args`` in CleanRL's ``script``, read without running it."""
    tree = ast.parse((CLEANRL / "cleanrl" / script).read_text())
    args = next(node for node in tree.body
                if isinstance(node, ast.ClassDef) and node.name == "Args")
    values = {}
    for node in args.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            try:
                values[node.target.id] = ast.literal_eval(node.value)  # type: ignore[arg-type]
            except ValueError:
                pass  # computed defaults (exp_name, int(1e6))
    return values


@needs_cleanrl
@pytest.mark.parametrize("name", [n for n, p in bench.PAIRS.items() if p.script])
def test_patches_apply_to_cleanrl_scripts(name: str, tmp_path: Path) -> None:
    script = patches.patched_script(CLEANRL, bench.PAIRS[name].script or "", tmp_path)
    text = script.read_text()
    compile(text, str(script), "exec")
    if name != "ppo_atari":
        assert "AutoresetMode.SAME_STEP" in text and 'infos["final_info"]["_episode"]' in text
    assert 'infos["final_observation"]' not in text and "\nimport gym\n" not in text


#: (CleanRL Args field, the rltrain config key) that must agree, per pair.
MATCHES = {
    "dqn": {"learning_rate": "agent.lr", "buffer_size": "strategy.buffer_size",
            "gamma": "agent.gamma", "tau": "agent.tau", "batch_size": "strategy.batch_size",
            "start_e": "agent.epsilon_start", "end_e": "agent.epsilon_end",
            "learning_starts": "strategy.warmup_steps",
            "train_frequency": "strategy.train_interval", "num_envs": "strategy.num_envs"},
    "pqn": {"learning_rate": "agent.lr", "num_envs": "strategy.num_envs",
            "num_steps": "strategy.n_steps", "update_epochs": "strategy.update_epochs",
            "anneal_lr": "agent.anneal_lr", "gamma": "agent.gamma",
            "start_e": "agent.epsilon_start", "end_e": "agent.epsilon_end",
            "max_grad_norm": "agent.max_grad_norm", "q_lambda": "agent.q_lambda"},
    "ppo": {"learning_rate": "agent.lr", "num_envs": "strategy.num_envs",
            "num_steps": "strategy.n_steps", "anneal_lr": "agent.anneal_lr",
            "gamma": "agent.gamma", "gae_lambda": "agent.gae_lambda",
            "update_epochs": "strategy.update_epochs", "norm_adv": "agent.normalize_advantage",
            "clip_coef": "agent.clip_range", "ent_coef": "agent.ent_coef",
            "max_grad_norm": "agent.max_grad_norm", "target_kl": "agent.target_kl"},
    "sac": {"num_envs": "strategy.num_envs", "gamma": "agent.gamma", "tau": "agent.tau",
            "batch_size": "strategy.batch_size", "learning_starts": "strategy.warmup_steps",
            "policy_lr": "agent.lr"},
    "td3": {"learning_rate": "agent.lr", "num_envs": "strategy.num_envs", "gamma": "agent.gamma",
            "tau": "agent.tau", "batch_size": "strategy.batch_size",
            "policy_noise": "agent.target_policy_noise",
            "exploration_noise": "agent.exploration_noise",
            "learning_starts": "strategy.warmup_steps", "policy_frequency": "agent.policy_delay",
            "noise_clip": "agent.target_noise_clip"},
    "ppo_atari": {"learning_rate": "agent.lr", "num_envs": "strategy.num_envs",
                  "num_steps": "strategy.n_steps", "anneal_lr": "agent.anneal_lr",
                  "gamma": "agent.gamma", "gae_lambda": "agent.gae_lambda",
                  "update_epochs": "strategy.update_epochs", "clip_coef": "agent.clip_range",
                  "ent_coef": "agent.ent_coef", "max_grad_norm": "agent.max_grad_norm"},
}


@needs_cleanrl
@pytest.mark.parametrize("name", list(MATCHES))
def test_rltrain_side_has_cleanrl_defaults(name: str) -> None:
    pair = bench.PAIRS[name]
    defaults = cleanrl_defaults(pair.script or "")
    config = composed(name, pair.start + pair.window, pair.start)
    for field_name, key in MATCHES[name].items():
        section, _, setting = key.partition(".")
        assert config[section][setting] == pytest.approx(defaults[field_name]), (field_name, key)
    strategy = config.strategy
    if "num_minibatches" in defaults:  # on-policy: minibatches of the rollout
        rollout = strategy.num_envs * strategy.n_steps
        assert rollout // strategy.batch_size == defaults["num_minibatches"]
    if name in ("ppo", "ppo_atari"):
        assert config.agent.clip_range_vf == defaults["clip_coef"]  # clip_vloss
        # CleanRL weighs 0.5 x the squared error by vf_coef; rltrain (as SB3) the error itself
        assert config.agent.vf_coef == pytest.approx(defaults["vf_coef"] * 0.5)
    if name == "dqn":  # CleanRL counts its target copies in env steps
        assert (config.agent.target_update_interval * strategy.train_interval
                == defaults["target_network_frequency"])


@pytest.mark.slow
@needs_cleanrl
def test_one_repeat_of_ppo_runs_both_sides(tmp_path: Path) -> None:
    pytest.importorskip("tyro")  # CleanRL's command line (the test and bench extras)
    result = bench.run_pair("ppo", 1_024, 6_144, 0, CLEANRL, tmp_path)
    assert set(result["rates"]) == {"rltrain", "peer"} and result["ratio"] > 0
    assert len(list(tmp_path.glob("ppo-r0-*.log"))) == 4


def test_a_results_path_given_with_its_suffix_gets_it_once(tmp_path: Path) -> None:
    from benchmarks._util import write_results

    written = write_results(str(tmp_path / "quiet.json"), {"x": 1})
    assert written == tmp_path / "quiet.json" and json.loads(written.read_text())["x"] == 1
    assert write_results(str(tmp_path / "loud"), {}) == tmp_path / "loud.json"


def test_a_results_file_names_the_commit_it_was_measured_at(tmp_path: Path) -> None:
    from benchmarks._util import write_results

    root = Path(__file__).resolve().parents[2]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                          text=True)
    if head.returncode != 0:
        pytest.skip("not a git clone")
    machine = json.loads(write_results(str(tmp_path / "r"), {}).read_text())["machine"]
    assert machine["commit"] == head.stdout.strip()
    assert isinstance(machine["uncommitted_changes"], bool)


def test_only_code_changes_count_as_uncommitted_not_new_results(tmp_path: Path) -> None:
    from benchmarks._util import code_version

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "rltrain").mkdir()
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "rltrain" / "agent.py").write_text("x = 1\n")
    (tmp_path / "benchmarks" / "bench.py").write_text("y = 1\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "first")
    assert code_version(tmp_path)["uncommitted_changes"] is False
    (tmp_path / "benchmarks" / "results" / "new.json").write_text("{}")  # an output
    (tmp_path / "notes.txt").write_text("elsewhere")
    assert code_version(tmp_path)["uncommitted_changes"] is False
    (tmp_path / "benchmarks" / "bench.py").write_text("y = 2\n")
    assert code_version(tmp_path)["uncommitted_changes"] is True
    git("checkout", "--", "benchmarks/bench.py")
    (tmp_path / "rltrain" / "new_module.py").write_text("")
    assert code_version(tmp_path)["uncommitted_changes"] is True


def test_a_damaged_or_foreign_calls_file_is_started_again(tmp_path: Path) -> None:
    from benchmarks._util import record_call

    first = record_call(tmp_path / "run", 0)
    assert len(first) == 1 and first[0]["from_env_steps"] == 0
    assert [c["from_env_steps"] for c in record_call(tmp_path / "run", 500)] == [0, 500]
    for foreign in ("not json", '{"calls": 1}', "[1, 2]"):
        (tmp_path / "run" / "calls.json").write_text(foreign)
        assert [c["from_env_steps"] for c in record_call(tmp_path / "run", 700)] == [700]
