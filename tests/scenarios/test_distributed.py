"""Data-parallel training on torch.distributed, with real processes: ``torchrun`` launches of
two ranks on gloo (tests/distributed_worker.py says what each rank runs), the command line
under torchrun, SIGTERM to the launcher, and two "nodes" joined by the c10d rendezvous."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import TESTS, assert_same_tensors, env_snapshot

from rltrain import DQN, DQNConfig, Trainer, load_policy
from rltrain.checkpoint import Checkpointer, read_checkpoint
from rltrain.checkpoint.io import LocalFiles
from rltrain.checkpoint.manifest import read_manifest
from rltrain.runtime.distributed import TORCHRUN_VARIABLES, DistributedContext, connect

#: Scenario tests of whole runs (subprocesses, real files): out of the fast inner loop,
#: ``pytest -m "not slow"``; CI runs them.
pytestmark = pytest.mark.slow

WORKER = TESTS / "distributed_worker.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
#: A small DQN on CartPole: 16 gradient steps per 256 env steps after 1,000 of warm-up,
#: evaluated and saved every 1,000 env steps.
DQN_RUN = ("trainer.enable_progress_bar=false trainer.console_interval=1000 "
           "agent.hidden_sizes=[32,32] strategy.train_steps=16 trainer.eval_interval=1000 "
           "trainer.eval_episodes=3 trainer.checkpoint_interval=1000")


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def launch(case: str, out: Path, *args: str, timeout: float = 300) -> list[dict[str, Any]]:
    """``torchrun --standalone --nproc-per-node=2`` of a worker case; each rank's findings."""
    done = subprocess.run([*TORCHRUN, "--standalone", "--nproc-per-node=2", str(WORKER), case,
                           str(out), *args], capture_output=True, text=True, timeout=timeout,
                          env=environment(), cwd=out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return [json.loads((out / f"{case}-rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """One launch for the update, statistics, stop and early-end cases."""
    return launch("units", tmp_path_factory.mktemp("units"))


@pytest.fixture(scope="module")
def updates(units: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return units


@pytest.fixture(scope="module")
def stops(units: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return units


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Under torchrun: ``rltrain fit`` for 3,000 env steps straight, and for 1,500 then
    ``--resume`` to 3,000, each rank's file writes recorded."""
    out = tmp_path_factory.mktemp("cli")
    straight = f"fit dqn_cartpole trainer.run_dir={out}/straight trainer.num_steps=3000 {DQN_RUN}"
    first = f"fit dqn_cartpole trainer.run_dir={out}/split trainer.num_steps=1500 {DQN_RUN}"
    resumed = f"fit --resume {out}/split trainer.num_steps=3000"
    return out, launch("cli", out, *f"{straight} --then {first} --then {resumed}".split())


@pytest.mark.parametrize("agent", ["dqn", "ppo", "sac", "td3"])
def test_every_rank_steps_with_the_same_averaged_gradients(updates: list[dict[str, Any]],
                                                           agent: str) -> None:
    rank0, rank1 = updates[0][agent], updates[1][agent]
    assert rank0["optimizers"] == rank1["optimizers"] == {"sac": 3, "td3": 2}.get(agent, 1)
    assert rank0["grads"] == rank1["grads"]  # exactly: one all-reduce, the same on both
    assert rank0["weights"] == rank1["weights"]


@pytest.mark.parametrize("agent", ["dqn", "ppo", "sac", "td3"])
def test_two_ranks_on_half_batches_update_as_one_process_on_the_whole_batch(
        updates: list[dict[str, Any]], agent: str) -> None:
    for found in updates:
        result = found[agent]
        assert result["grad_scale"] > 1e-3  # a real gradient, not zeros on both sides
        assert result["grad_difference"] <= 1e-6 * result["grad_scale"]
        assert result["weight_difference"] <= 1e-6


def test_a_non_finite_loss_on_one_rank_is_refused_on_every_rank(
        updates: list[dict[str, Any]]) -> None:
    rank0, rank1 = updates[0]["nan"], updates[1]["nan"]
    assert rank0["unchanged"] and rank1["unchanged"]
    assert "another rank" in rank0["refused"] and "on rank 1" in rank1["refused"]
    assert rank0["after"] == rank1["after"]  # the next finite step is applied on both


def test_advantage_moments_shared_once_per_update_normalise_as_the_whole_minibatch(
        updates: list[dict[str, Any]]) -> None:
    for found in updates:
        assert len(found["moments"]) == 8  # 2 epochs x 4 minibatches of 4 per rank
        for mean_gap, std_gap, std in found["moments"]:
            assert abs(mean_gap) < 1e-6 and abs(std_gap) < 1e-6 and std > 0.1
    assert updates[0]["moments"] == updates[1]["moments"]


def test_running_statistics_merge_every_rank_s_batch(updates: list[dict[str, Any]],
                                                      stops: list[dict[str, Any]]) -> None:
    for found in updates:
        assert found["statistics"]["difference"] < 1e-9
    assert updates[0]["statistics"]["mean"] == updates[1]["statistics"]["mean"]
    # A run with observation and reward normalisation: every rank keeps the same statistics.
    assert stops[0]["run_statistics"] == stops[1]["run_statistics"]
    statistics = stops[0]["run_statistics"]
    assert len(statistics) >= 2 and any(v not in (0.0, 1.0) for v in statistics[0])


def test_a_stop_requested_on_one_rank_stops_every_rank_at_the_same_step(
        stops: list[dict[str, Any]]) -> None:
    rank0, rank1 = stops
    assert rank0["env_steps"] == rank1["env_steps"] < 20_000
    # Rank 1 asked at its 300th env step (600 global); the ranks agree every 16 vector steps.
    assert 600 <= rank0["env_steps"] <= 600 + 2 * 16
    assert "rank 1's own request" in rank0["reason"] and "on rank 1" in rank0["reason"]
    assert rank0["episodes"] == rank1["episodes"] > 0  # every rank's episodes, counted once


def test_an_early_end_of_an_update_on_one_rank_ends_it_on_every_rank(
        stops: list[dict[str, Any]]) -> None:
    # Two updates of 4 epochs x 4 minibatches; rank 0 alone ends each at a gradient step
    # count ending in 3: the first after 3 steps, the second at 13. Without agreement rank 1
    # would go on to 32 (or wait for rank 0 forever).
    assert stops[0]["kl_gradient_steps"] == stops[1]["kl_gradient_steps"] == 13


SHARD_OF_RANK_1 = re.compile(r"\.?(?:checkpoint|best)-\d+\.rank1\.pt(?:\..+\.tmp)?")


def test_only_rank_0_writes_the_run_and_rank_1_only_its_shards(
        cli_runs: tuple[Path, list[dict[str, Any]]]) -> None:
    out, (rank0, rank1) = cli_runs
    assert rank0["codes"] == rank1["codes"] == [0, 0, 0]
    # Every write is "<event> <path>"; a path of digits is a file descriptor os.fdopen opened.
    written = [Path(w.split(" ", 1)[1]) for w in rank1["writes"]
               if not w.split(" ", 1)[1].isdigit()]
    inside = [p for p in written if out in p.parents]
    assert inside and all(SHARD_OF_RANK_1.fullmatch(p.name) for p in inside), inside
    # Outside the runs: only torch's own cache folder probe in the temporary directory.
    temporary = Path(tempfile.gettempdir())
    assert all(p.parent == temporary for p in written if out not in p.parents), written
    created = {Path(w.split(" ", 1)[1]).name for w in rank0["writes"]
               if not w.startswith("os.remove")}
    assert {"config.yaml", "summary.json", "manifest.json", "checkpoint-3000.pt",
            "checkpoint-3000.rank0.pt"} <= created
    assert not any(".rank1." in name for name in created)  # rank 0 only deletes old ones
    assert sorted(p.name for p in (out / "straight" / "checkpoints").glob("checkpoint-3000*")) \
        == ["checkpoint-3000.pt", "checkpoint-3000.rank0.pt", "checkpoint-3000.rank1.pt"]


@pytest.mark.parametrize("part", ["agent", "optimization", "metrics", "progress", "shards"])
def test_a_two_rank_run_stopped_and_resumed_equals_the_straight_run_bit_for_bit(
        cli_runs: tuple[Path, list[dict[str, Any]]], part: str) -> None:
    out, _ = cli_runs
    straight, split = (read_checkpoint(out / name / "checkpoints" / "last.pt")
                       for name in ("straight", "split"))
    assert straight["progress"]["env_steps"] == split["progress"]["env_steps"] == 3000
    if part != "shards":
        assert_same_tensors(straight[part], split[part], part)
        return
    for rank in (0, 1):
        context = DistributedContext(rank=rank, world_size=2)
        a, b = (read_checkpoint(out / name / "checkpoints" / "last.pt", distributed=context)
                for name in ("straight", "split"))
        assert env_snapshot(a["runner"].pop("envs")) == env_snapshot(b["runner"].pop("envs"))
        for name in ("runner", "buffer", "random"):
            assert_same_tensors(a[name], b[name], f"rank {rank} {name}")
    shard0, shard1 = (torch.load(out / "straight" / "checkpoints" / f"checkpoint-3000.rank{r}.pt",
                                 weights_only=True) for r in (0, 1))
    assert not torch.equal(shard0["buffer"]["observations"], shard1["buffer"]["observations"])


@pytest.fixture(scope="module")
def prioritized_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Under torchrun: DQN with 3-step windows and prioritized replay (β held at 1, so that
    the first part's shorter num_steps does not change it), 2,000 env steps straight, and 1,200
    then ``--resume`` to 2,000."""
    out = tmp_path_factory.mktemp("prioritized")
    per = (f"{DQN_RUN} strategy.n_step=3 strategy.prioritized=true strategy.priority_beta=1.0 "
           "strategy.train_interval=128")
    straight = f"fit dqn_cartpole trainer.run_dir={out}/straight trainer.num_steps=2000 {per}"
    first = f"fit dqn_cartpole trainer.run_dir={out}/split trainer.num_steps=1200 {per}"
    resumed = f"fit --resume {out}/split trainer.num_steps=2000"
    launch("cli", out, *f"{straight} --then {first} --then {resumed}".split())
    return out


def test_n_step_and_priorities_on_two_ranks_resume_bit_for_bit(prioritized_runs: Path) -> None:
    out = prioritized_runs
    loaded = {name: read_checkpoint(out / name / "checkpoints" / "last.pt")
              for name in ("straight", "split")}
    for part in ("agent", "optimization", "progress"):
        assert_same_tensors(loaded["straight"][part], loaded["split"][part], part)
    priorities = []
    for rank in (0, 1):
        context = DistributedContext(rank=rank, world_size=2)
        a, b = (read_checkpoint(out / name / "checkpoints" / "last.pt", distributed=context,
                                state=loaded[name]) for name in ("straight", "split"))
        assert_same_tensors(a["buffer"], b["buffer"], f"rank {rank} buffer")
        priorities.append(a["buffer"]["priorities"]["values"][:1000])
    # each rank set its own transitions' priorities from its own TD errors
    assert len(torch.unique(priorities[0])) > 100 and not torch.equal(*priorities)


def test_a_multi_process_checkpoint_is_refused_by_another_world_size(
        cli_runs: tuple[Path, list[dict[str, Any]]]) -> None:
    out, _ = cli_runs
    path = out / "straight" / "checkpoints" / "last.pt"
    with pytest.raises(ValueError, match=r"run of 2 process\(es\) and this run has 1"):
        Trainer(run_dir=out / "straight", num_steps=4000, logger=False,
                enable_progress_bar=False, enable_console=False).fit(
            "CartPole-v1", DQN(DQNConfig(hidden_sizes=[32, 32])), ckpt_path=path)
    assert read_manifest(LocalFiles(out / "straight" / "checkpoints")).last == "checkpoint-3000.pt"
    # Its shared parts load at any world size: evaluation reads the agent alone.
    action, _ = load_policy(path).predict(np.zeros(4, dtype=np.float32))
    assert int(action) in (0, 1)


def test_devices_without_torchrun_is_an_error_that_gives_the_command() -> None:
    with pytest.raises(ValueError, match=r"torchrun --nproc-per-node=2"):
        connect("cpu", devices=2)
    with pytest.raises(ValueError, match=r"--nnodes=2"):
        connect("cpu", devices=1, num_nodes=2)
    assert connect("cpu").world_size == 1  # "auto": what was launched, one process here
    with pytest.raises(ValueError, match="devices must be"):
        Trainer(devices=0)


@pytest.mark.parametrize("world_size", ["1", "2"])
def test_exit_process_flushes_the_output_and_ends_with_the_status(world_size: str) -> None:
    """Under torchrun (WORLD_SIZE > 1) ``os._exit``, which skips atexit handlers, after the
    buffered output is flushed; otherwise ``sys.exit``, which runs them."""
    script = ("import atexit, sys\n"
              "from rltrain.runtime.distributed import exit_process\n"
              "atexit.register(lambda: print('atexit ran'))\n"
              "sys.stdout.write('out, unflushed'); sys.stderr.write('err, unflushed')\n"
              "exit_process(3)\n")
    env = {**environment(), "WORLD_SIZE": world_size}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 3
    assert done.stdout.startswith("out, unflushed") and done.stderr == "err, unflushed"
    assert ("atexit ran" in done.stdout) is (world_size == "1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_to_the_launcher_stops_both_ranks_with_a_loadable_checkpoint(
        tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    launcher = subprocess.Popen(
        [*TORCHRUN, "--standalone", "--nproc-per-node=2", "-m", "rltrain.cli", "fit",
         "ppo_cartpole", f"trainer.run_dir={run_dir}", "trainer.num_steps=10000000",
         "trainer.enable_progress_bar=false", "trainer.eval_interval=null"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(),
        cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        metrics = run_dir / "metrics.jsonl"
        while not (metrics.is_file() and metrics.read_text().count("\n") >= 2):
            assert launcher.poll() is None and time.monotonic() < deadline, launcher.stdout
            time.sleep(0.2)
        launcher.send_signal(signal.SIGTERM)
        output, _ = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "SIGTERM" in summary["stop_reason"], output[-3000:]
    steps = summary["env_steps"]
    assert 0 < steps < 10_000_000
    path = Checkpointer(run_dir / "checkpoints").resolve("last")
    assert path.name == f"checkpoint-{steps}.pt"
    for rank in (0, 1):  # each rank saved its own part of the stop's checkpoint
        state = read_checkpoint(path, distributed=DistributedContext(rank=rank, world_size=2))
        assert {"agent", "optimization", "runner", "buffer", "random"} <= set(state)


def test_two_nodes_joined_by_the_c10d_rendezvous_write_one_run(tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    run_dir = tmp_path / "run"
    nodes = [subprocess.Popen(
        [*TORCHRUN, "--nnodes=2", f"--node-rank={node}", "--nproc-per-node=1",
         "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", "--rdzv-id=two-nodes",
         "-m", "rltrain.cli", "fit", "ppo_cartpole", f"trainer.run_dir={run_dir}",
         "trainer.num_steps=2048", "trainer.eval_interval=1024", "trainer.eval_episodes=3",
         "trainer.enable_progress_bar=false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(),
        cwd=tmp_path) for node in (0, 1)]
    outputs = [node.communicate(timeout=180)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert sum("run directory:" in output for output in outputs) == 1  # rank 0 reports
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 2048
    names = sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert names == ["checkpoint-2048.pt", "checkpoint-2048.rank0.pt",
                     "checkpoint-2048.rank1.pt"]


def test_retention_deletes_a_checkpoint_with_its_shards(
        cli_runs: tuple[Path, list[dict[str, Any]]]) -> None:
    out, _ = cli_runs
    names = sorted(p.name for p in (out / "split" / "checkpoints").iterdir())
    # Saved at 1,000, 1,500 (the stop), 2,000 and 3,000, three kept; best moved to 3,000.
    assert [n for n in names if n.startswith("checkpoint-1000")] == []
    assert [n for n in names if n.startswith("best-")] == [
        "best-3000.pt", "best-3000.rank0.pt", "best-3000.rank1.pt"]
    manifest = read_manifest(LocalFiles(out / "split" / "checkpoints"))
    assert [(e.file, e.shards) for e in manifest.checkpoints] == [
        ("checkpoint-1500.pt", 2), ("checkpoint-2000.pt", 2), ("checkpoint-3000.pt", 2)]


def copied_run(out: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for path in (out / "straight" / "checkpoints").glob("checkpoint-3000*"):
        (folder / path.name).write_bytes(path.read_bytes())
    return folder / "checkpoint-3000.pt"


def test_a_shard_that_was_altered_or_is_named_elsewhere_is_refused(
        cli_runs: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    path = copied_run(cli_runs[0], tmp_path)
    rank1 = DistributedContext(rank=1, world_size=2)
    shard = path.with_name("checkpoint-3000.rank1.pt")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"rank 1's part of checkpoint-3000.pt\) is unusable: "
                                         r"its SHA-256"):
        read_checkpoint(path, distributed=rank1)
    state = read_checkpoint(path)
    for name in ("../checkpoint-3000.rank1.pt", "/etc/passwd", "checkpoint-3000.rank0.pt"):
        state["shards"][1]["file"] = name
        with pytest.raises(ValueError, match="is not a shard file of its folder"):
            read_checkpoint(path, distributed=rank1, state=state)
    state["world_size"] = 3
    with pytest.raises(ValueError, match="no valid world size and shards"):
        read_checkpoint(path, distributed=rank1, state=state)


def test_a_manifest_s_shard_count_is_checked_and_unlisted_shards_are_swept(
        tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name in ("checkpoint-10.pt", "checkpoint-10.rank0.pt", "checkpoint-10.rank1.pt",
                 "checkpoint-10.rank2.pt", "checkpoint-20.rank0.pt", "notes.rank1.pt"):
        (folder / name).write_bytes(b"x")
    entry = {"file": "checkpoint-10.pt", "env_steps": 10, "sequence": 1, "shards": 2}
    manifest = folder / "manifest.json"
    manifest.write_text(json.dumps({"checkpoints": [entry], "last": "checkpoint-10.pt"}))
    Checkpointer(folder).sweep()
    assert sorted(p.name for p in folder.iterdir()) == [
        "checkpoint-10.pt", "checkpoint-10.rank0.pt", "checkpoint-10.rank1.pt",
        "manifest.json", "notes.rank1.pt"]  # not rltrain's name: never touched
    for shards in (-1, 10**9, "2", True):
        manifest.write_text(json.dumps({"checkpoints": [{**entry, "shards": shards}],
                                        "last": "checkpoint-10.pt"}))
        with pytest.warns(UserWarning, match="unusable"):
            assert read_manifest(LocalFiles(folder)).fallback


def test_an_error_rank_0_meets_before_training_is_the_same_kind_on_every_rank(
        updates: list[dict[str, Any]]) -> None:
    assert updates[0]["forwarded"] == ["FileExistsError", "the folder is theirs"]
    assert updates[1]["forwarded"] == [
        "FileExistsError", "Rank 0 failed: FileExistsError: the folder is theirs"]


def test_a_run_directory_rank_0_refuses_is_a_clear_error_on_every_rank(tmp_path: Path) -> None:
    run_dir = tmp_path / "theirs"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("not rltrain's\n")
    done = subprocess.run(
        [*TORCHRUN, "--standalone", "--nproc-per-node=2", "-m", "rltrain.cli", "fit",
         "ppo_cartpole", f"trainer.run_dir={run_dir}", "trainer.num_steps=2048"],
        capture_output=True, text=True, timeout=120, env=environment(), cwd=tmp_path)
    assert done.returncode != 0
    said = done.stderr[-3000:]  # what the ranks said, if it fails
    errors = [line for line in done.stderr.splitlines() if "rltrain: " in line]
    # Whichever rank exits first has said why; torchrun may stop the other before it prints.
    # Each message is a line of its own, never run into the other rank's.
    assert errors and all(line.count("rltrain: ") == 1 for line in errors), said
    # Rank 0 names the problem; rank 1 names it as rank 0's, the same kind of error (never an
    # internal error).
    message = rf"rltrain: rank [01]/2: error: (Rank 0 failed: FileExistsError: )?" \
              rf"{re.escape(str(run_dir))} is not an rltrain run .*"
    assert all(re.fullmatch(message, line) for line in errors), said
    assert (run_dir / "config.yaml").read_text() == "not rltrain's\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]


FLAKY = """
import os
import gymnasium as gym


class Flaky(gym.Wrapper):
    \"\"\"CartPole whose step raises on rank 1 only, at its 50th step.\"\"\"

    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 50 and os.environ.get("RANK") == "1":
            raise RuntimeError("rank one's environment broke")
        return self.env.step(action)
"""


def test_a_rank_s_failure_is_reported_by_that_rank_and_named_as_a_peer_s_by_the_others(
        tmp_path: Path) -> None:
    (tmp_path / "flaky.py").write_text(FLAKY)
    done = subprocess.run(
        [*TORCHRUN, "--standalone", "--nproc-per-node=2", "-m", "rltrain.cli", "fit",
         "ppo_cartpole", "env._target_=flaky.Flaky", "env.id=null", "trainer.run_dir=run",
         "trainer.num_steps=4096", "trainer.enable_progress_bar=false",
         "trainer.enable_console=false"],
        capture_output=True, text=True, timeout=120, env=environment(), cwd=tmp_path)
    assert done.returncode != 0
    said = done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines()
              if line.startswith("rltrain: ") and "warning" not in line]
    assert "internal error" not in done.stderr and "a bug in rltrain" not in done.stderr, said
    # The rank whose environment broke says so, as rank 1 (it exits first, so it has printed).
    assert any(line.startswith("rltrain: rank 1/2: Training failed after")
               and "rank one's environment broke" in line for line in errors), said
    # Rank 0, when torchrun lets it print, names the failure as another rank's.
    for line in errors:
        if line.startswith("rltrain: rank 0/2"):
            assert "lost the other ranks of this run" in line, said
