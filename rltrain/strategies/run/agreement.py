"""What the ranks of a run agree on as they go: stop requests, the episodes each one ended (for
the logs and the episode count), and which parts of a checkpoint each one writes. With one
process each answer is the plain one (the request as made, the episodes at once, the whole
state), so the run's loop reads the same at one process and at N."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from rltrain.checkpoint import Stateful
from rltrain.observe.events import EpisodeEnd
from rltrain.observe.processor import EventProcessor
from rltrain.runtime.cadence import is_multiple
from rltrain.runtime.distributed import DistributedContext
from rltrain.runtime.interrupt import Interrupter
from rltrain.types import Progress

#: The parts every rank holds the same copy of, saved once (by rank 0); every other part (the
#: runner's envs, the storage, the random streams, a strategy's own parts) is each rank's own.
SHARED_PARTS = frozenset({"agent", "optimization", "metrics"})

#: Numbers an episode travels as: env steps, sub-env, return, length, terminated.
FIELDS = 5
#: Episodes per rank the first all-gather of an agreement carries at most (40 KB); when a
#: rank ended more since the last agreement, a second all-gather carries the rest. The
#: tensors are sized by the episodes there are, never by ``sync_interval`` alone.
FIRST_EPISODES = 1024


class Agreement:
    """Every ``interval`` vector steps (and when the run asks: before a save, at the end),
    one all-gather of every rank's stop request and of the episodes it ended since the last
    agreement. Every rank then counts every rank's episodes (``progress.episodes`` stays the
    same on every rank) and emits their EpisodeEnd events, as sub-env ``rank * num_envs + i``,
    so rank 0's logs cover them all; and a request on any rank stops every rank, at the same
    vector step, with the first requesting rank's reason.

    Args:
        distributed: The run's processes.
        interrupter: This rank's stop request (a signal, a callback, another thread).
        events: This rank's events (rank 0's reach the renderers).
        progress: The run's counters.
        num_envs: Sub-envs per rank.
        interval: Vector steps between agreements (``sync_interval``).
    """

    def __init__(self, distributed: DistributedContext, interrupter: Interrupter,
                 events: EventProcessor, progress: Progress, *, num_envs: int,
                 interval: int) -> None:
        self.distributed, self.interrupter = distributed, interrupter
        self.events, self.progress = events, progress
        self.num_envs, self.interval = num_envs, interval
        #: True once the ranks agreed to stop.
        self.stopped = False
        self._unshared: list[EpisodeEnd] = []

    def stop_requested(self) -> bool:
        """True once a stop was requested: with one process, as soon as it is; with several,
        once the ranks agreed on it (at the same vector step on every rank)."""
        if not self.distributed.distributed:
            return self.interrupter.stop_requested()
        return self.stopped

    def episodes_ended(self, episodes: list[EpisodeEnd]) -> None:
        """The episodes this rank ended in the vector step just taken: emitted at once with
        one process; with several, the ranks' episodes at their next agreement (every
        ``interval`` vector steps)."""
        if not self.distributed.distributed:
            for episode in episodes:
                self.events.emit(episode)
            return
        self._unshared += episodes
        if is_multiple(self.progress.vector_steps, self.interval):
            self.agree()

    def split(self, parts: Mapping[str, Stateful],
              state: Callable[[Mapping[str, Stateful]], dict[str, Any]]
              ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """What this rank's save writes: ``state(parts)`` and no shard with one process; with
        several, the shared parts' state (:data:`SHARED_PARTS`, on rank 0, which writes it)
        and this rank's own parts, its shard."""
        if not self.distributed.distributed:
            return state(parts), None
        shared = {name: part for name, part in parts.items() if name in SHARED_PARTS}
        own = {name: part.state_dict() for name, part in parts.items()
               if name not in SHARED_PARTS}
        return (state(shared) if self.distributed.is_main else {}), own

    def agree(self) -> None:
        """Exchange the stop requests and episodes now (every rank must call it at the same
        point; a no-op with one process)."""
        context = self.distributed
        if not context.distributed:
            return
        episodes, self._unshared = self._unshared, []
        first = min(self.num_envs * self.interval, FIRST_EPISODES)
        header = [float(self.interrupter.stop_requested()), float(len(episodes))]
        rows = context.all_gather(_packed(header, episodes[:first], first)).tolist()
        counts = [int(values[1]) for values in rows]
        rest = max(counts) - first  # the same on every rank: each saw every count
        more = (context.all_gather(_packed([], episodes[first:], rest)).tolist()
                if rest > 0 else [[] for _ in rows])
        for rank, (values, count) in enumerate(zip(rows, counts, strict=True)):
            fields = (values[2:2 + FIELDS * min(count, first)]
                      + more[rank][:FIELDS * max(count - first, 0)])
            for j in range(0, len(fields), FIELDS):
                steps, index, ret, length, terminated = fields[j:j + FIELDS]
                if rank != context.rank:
                    self.progress.episodes += 1
                self.events.emit(EpisodeEnd(
                    env_steps=int(steps), env_index=rank * self.num_envs + int(index),
                    episode_return=ret, episode_length=int(length),
                    terminated=bool(terminated)))
        if any(values[0] for values in rows) and not self.stopped:
            reasons = context.all_gather_object(self.interrupter.reason)
            rank, reason = next((r, why) for r, why in enumerate(reasons) if why is not None)
            if self.interrupter.reason is None:
                self.interrupter.stop(f"{reason} (on rank {rank})")
            self.stopped = True


def _packed(header: list[float], episodes: list[EpisodeEnd], slots: int) -> torch.Tensor:
    """``header``, then ``slots`` episodes of :data:`FIELDS` numbers each (``episodes``
    first, zeros after): one rank's part of an all-gather, of the same size on every rank."""
    row = torch.zeros(len(header) + FIELDS * slots, dtype=torch.float64)
    row[:len(header)] = torch.tensor(header, dtype=torch.float64)
    if episodes:
        row[len(header):len(header) + FIELDS * len(episodes)] = torch.tensor(
            [[e.env_steps, e.env_index, e.episode_return, e.episode_length, e.terminated]
             for e in episodes], dtype=torch.float64).reshape(-1)
    return row
