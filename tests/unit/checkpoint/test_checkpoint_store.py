"""The storage seam of checkpoints: a second store is one class. An in-memory store written here
(no rltrain file edited) holds a whole run's checkpoints; a run resumed from it equals the run
trained straight, bit for bit; its files are checked as local ones are."""

from __future__ import annotations

import hashlib
import io
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import QUIET, assert_same_tensors, dqn, env_snapshot, small

from rltrain import Trainer
from rltrain.checkpoint import Checkpointer, CheckpointIO, LocalFiles, read_checkpoint


class FourMethodStore(CheckpointIO):
    """The least a store implements: the four abstract methods (the rest is CheckpointIO's)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def write_bytes(self, name: str, data: bytes) -> None:
        self.files[name] = bytes(data)

    def read_bytes(self, name: str) -> bytes:
        if name not in self.files:
            raise FileNotFoundError(self.where(name))
        return self.files[name]

    def names(self) -> list[str]:
        return list(self.files)

    def remove(self, name: str) -> None:
        self.files.pop(name, None)


class MemoryStore(FourMethodStore):
    """Checkpoint files as bytes in a dict (what an object store's client would hold), with
    the optional methods of its own."""

    def __init__(self, bucket: str) -> None:
        super().__init__()
        self.bucket = bucket

    @property
    def location(self) -> str:
        return f"memory://{self.bucket}"

    def save(self, state: dict[str, Any], name: str) -> dict[str, Any]:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        self.files[name] = data = buffer.getvalue()
        return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def load(self, name: str) -> Any:
        return torch.load(io.BytesIO(self.files[name]), weights_only=True)

    def size(self, name: str) -> int | None:
        return len(self.files[name]) if name in self.files else None

    def sha256(self, name: str) -> str:
        return hashlib.sha256(self.files[name]).hexdigest()


def fit(run_dir: Path, store: CheckpointIO, num_steps: int, **kwargs: Any) -> Trainer:
    trainer = Trainer(num_steps=num_steps, strategy=small(), run_dir=run_dir, eval_interval=400,
                      eval_episodes=2, checkpoint_interval=300, checkpoint_io=store, **QUIET)
    trainer.fit("CartPole-v1", dqn(), **kwargs)
    return trainer


def test_a_run_resumed_from_an_in_memory_store_equals_the_straight_run(tmp_path: Path) -> None:
    straight, split = MemoryStore("straight"), MemoryStore("split")
    fit(tmp_path / "a", straight, 1200)
    fit(tmp_path / "b", split, 600)
    assert "checkpoint-600.pt" in split.files and "best.pt" in split.files
    fit(tmp_path / "b", split, 1200, ckpt_path="last")
    kept = sorted(n for n in split.files if n.startswith("checkpoint-"))
    assert kept == ["checkpoint-1200.pt", "checkpoint-600.pt", "checkpoint-900.pt"]  # keep 3
    assert not (tmp_path / "a" / "checkpoints").exists()  # nothing written to local files
    a = Checkpointer(store=straight).read("last.pt")
    b = Checkpointer(store=split).read("last.pt")
    assert a["progress"]["env_steps"] == b["progress"]["env_steps"] == 1200
    assert_same_tensors(a, b, skip={"config", "versions", "envs"})
    assert env_snapshot(a["runner"]["envs"]) == env_snapshot(b["runner"]["envs"])


def test_a_stored_file_that_does_not_match_its_checksum_is_skipped_for_an_intact_one(
        tmp_path: Path) -> None:
    store = MemoryStore("run")
    fit(tmp_path / "run", store, 900)
    store.files["checkpoint-900.pt"] = store.files["checkpoint-900.pt"][:-10]  # truncated
    checkpointer = Checkpointer(store=store)
    with pytest.warns(UserWarning, match=r"memory://run/checkpoint-900\.pt: it has"):
        assert checkpointer.resolve("last") == Path("memory://run/checkpoint-600.pt")
    with pytest.raises(ValueError, match="is corrupt"):
        checkpointer.read("checkpoint-900.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert checkpointer.read("last.pt")["progress"]["env_steps"] == 600


def test_the_local_store_is_the_default(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path / "checkpoints")
    assert isinstance(checkpointer.store, LocalFiles)
    saved = checkpointer.save({"x": torch.ones(2)}, env_steps=5)
    assert saved.path == tmp_path / "checkpoints" / "checkpoint-5.pt" and saved.path.is_file()
    assert torch.equal(read_checkpoint(tmp_path / "checkpoints" / "last.pt")["x"],
                       torch.ones(2))


def test_a_store_of_four_methods_resumes_a_run_bit_for_bit(tmp_path: Path) -> None:
    straight, split = FourMethodStore(), FourMethodStore()
    fit(tmp_path / "a", straight, 1200)
    fit(tmp_path / "b", split, 600)
    fit(tmp_path / "b", split, 1200, ckpt_path="last")
    assert not (tmp_path / "a" / "checkpoints").exists()  # nothing written to local files
    a = Checkpointer(store=straight).read("last.pt")
    b = Checkpointer(store=split).read("last.pt")
    assert a["progress"]["env_steps"] == b["progress"]["env_steps"] == 1200
    assert_same_tensors(a, b, skip={"config", "versions", "envs"})
    assert env_snapshot(a["runner"]["envs"]) == env_snapshot(b["runner"]["envs"])
    assert straight.size("nothing.pt") is None
    assert straight.sha256("last.pt") == hashlib.sha256(straight.files["last.pt"]).hexdigest()
    straight.files["last.pt"] = b"not a checkpoint"
    with pytest.raises(ValueError, match=r"^<FourMethodStore>/last.pt is not a"):
        straight.load("last.pt")
