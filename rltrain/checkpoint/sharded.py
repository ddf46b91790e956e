"""Checkpoints of a run of several processes: the parts every rank holds the same copy of are
written once, by rank 0, and each rank's own parts (envs, storage, random streams) as its
shard ``<checkpoint>.rank<r>.pt`` beside it, its checksum listed in the checkpoint."""

from __future__ import annotations

from typing import Any

from rltrain.checkpoint.intact import check_entry
from rltrain.checkpoint.io import CheckpointIO
from rltrain.checkpoint.manifest import MAX_SHARDS, SHARD_NAME, Entry, shard_name
from rltrain.runtime.distributed import DistributedContext


def write_shard(store: CheckpointIO, distributed: DistributedContext, state: dict[str, Any],
                shard: dict[str, Any], name: str) -> tuple[dict[str, Any], int]:
    """This rank's ``shard`` of checkpoint ``name`` written beside it (every rank calls), and
    ``state`` with every rank's shard checksum (what rank 0 writes), and the shard count."""
    file = shard_name(name, distributed.rank)
    written = {"file": file, **store.save(shard, file)}
    shards = distributed.all_gather_object(written)
    return {**state, "world_size": distributed.world_size, "shards": shards}, len(shards)


def with_shard(store: CheckpointIO, name: str, state: dict[str, Any],
               distributed: DistributedContext) -> dict[str, Any]:
    """``state`` (read from checkpoint ``name`` of ``store``) with this rank's own parts from
    its shard merged in, verified against the checksum ``state`` lists. Raises ``ValueError``
    when the checkpoint was written by a run of another world size: its per-rank parts (envs,
    storage, random streams) fit only as many processes."""
    where = store.where(name)
    saved_world = state.get("world_size", 1)
    shards = state.get("shards", [])
    if (not isinstance(saved_world, int) or isinstance(saved_world, bool)
            or not 1 <= saved_world <= MAX_SHARDS or not isinstance(shards, list)
            or len(shards) != (saved_world if saved_world > 1 else 0)):
        raise ValueError(f"{where} has no valid world size and shards; it was not written "
                         "by rltrain, or it was altered.")
    if saved_world != distributed.world_size:
        raise ValueError(
            f"{where} was written by a run of {saved_world} process(es) and this run has "
            f"{distributed.world_size}: each rank's environments, experience storage and "
            "random streams are saved for its own rank, so it resumes with the same world "
            f"size only. Resume with {_launch(saved_world)}, or start a new run (evaluate "
            "and load_checkpoint take it at any world size).")
    if saved_world == 1 or state.get("shard_rank") == distributed.rank:
        return state
    expected = shards[distributed.rank]
    file = expected.get("file") if isinstance(expected, dict) else None
    found = SHARD_NAME.fullmatch(file) if isinstance(file, str) else None
    if found is None or not isinstance(file, str) or int(found.group(2)) != distributed.rank:
        raise ValueError(f"{where} names {file!r} as rank {distributed.rank}'s shard, which "
                         "is not a shard file of its folder; it was not written by rltrain, "
                         "or it was altered.")
    problem = check_entry(store, file, Entry(file, 0, sha256=expected.get("sha256"),
                                             bytes=expected.get("bytes")))
    if problem is not None:
        raise ValueError(f"{store.where(file)} (rank {distributed.rank}'s part of {name}) "
                         f"is unusable: {problem}. Resume from another checkpoint.")
    own = store.load(file)
    if not isinstance(own, dict):
        raise ValueError(f"{store.where(file)} is not an rltrain checkpoint shard.")
    return {**state, **own, "shard_rank": distributed.rank}


def _launch(world_size: int) -> str:
    return ("one process (python or rltrain fit, without torchrun)" if world_size == 1
            else f"{world_size} processes (torchrun --nproc-per-node=... with "
                 f"{world_size} in all)")
