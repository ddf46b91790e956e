"""Several processes training one agent: the distributed context, read from what ``torchrun``
sets, and the few collectives the framework uses.

A run of one process gets :data:`SINGLE`, whose collectives do nothing, so no code branches on
the world size. A run under ``torchrun --nproc-per-node=N`` (``--nnodes``, ``--node-rank`` or
a c10d rendezvous for several machines) gets a :class:`DistributedContext` of the *global* rank
(``RANK``), never the local one: on a second node, local rank 0 is not rank 0. Gradients are
averaged over the ranks in :class:`~rltrain.optim.Optimization`; everything else the framework
agrees on (stop requests, the episodes ended, a new best evaluation) goes through the helpers
here, at points every rank reaches at the same step.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")

#: The variables ``torchrun`` sets in every process it starts.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT")


class DistributedError(RuntimeError):
    """Another rank failed at a point where every rank must agree (the error names it)."""


class PeerLost(DistributedError):
    """A collective failed because another rank of the run is gone (it failed, and its own
    message says why, or it was killed)."""


@contextlib.contextmanager
def _with_peers(rank: int, world_size: int) -> Iterator[None]:
    """Raise a collective's failure (gloo's "Connection closed by peer", NCCL's errors) as a
    :class:`PeerLost` naming this rank, instead of the backend's own words alone."""
    try:
        yield
    except DistributedError:
        raise
    except RuntimeError as error:
        first = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
        raise PeerLost(
            f"rank {rank} of {world_size} lost the other ranks of this run in a collective: "
            "another rank failed (its own 'rltrain:' line says why) or was killed (torchrun's "
            f"summary names its rank). The backend said: {first}") from error


@dataclass(frozen=True)
class DistributedContext:
    """Which process this is among the run's processes, and the collectives between them.

    Attributes:
        rank: The global rank, 0 to ``world_size - 1`` (``RANK``). Rank 0 writes the run
            directory, the logs, the evaluations and the shared checkpoint parts.
        world_size: Processes in the run, over every node (``WORLD_SIZE``). Default 1.
        local_rank: The rank among this node's processes (``LOCAL_RANK``): which GPU it uses.
        local_world_size: Processes on this node (``LOCAL_WORLD_SIZE``): the devices per node.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        """True on rank 0 (and in a run of one process)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when the run has more than one process."""
        return self.world_size > 1

    @property
    def num_nodes(self) -> int:
        """Nodes in the run (``world_size / local_world_size``)."""
        return max(1, self.world_size // max(1, self.local_world_size))

    def _peers(self) -> contextlib.AbstractContextManager[None]:
        return _with_peers(self.rank, self.world_size)

    def barrier(self) -> None:
        """Wait until every rank is here."""
        if self.distributed:
            with self._peers():
                dist.barrier()

    def all_reduce_(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` in place over the ranks (``"sum"``, ``"max"``, ``"min"``);
        returns it."""
        if self.distributed:
            with self._peers():
                dist.all_reduce(tensor, op={"sum": dist.ReduceOp.SUM,
                                            "max": dist.ReduceOp.MAX,
                                            "min": dist.ReduceOp.MIN}[op])
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` (of the same shape on every rank), stacked in rank order:
        ``[world_size, *tensor.shape]``."""
        if not self.distributed:
            return tensor.unsqueeze(0)
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        with self._peers():
            dist.all_gather(out, tensor.contiguous())
        return torch.stack(out)

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is True on any rank."""
        if not self.distributed:
            return flag
        return bool(self.all_reduce_(torch.tensor([float(flag)], device=self.device),
                                     "max").item())

    def mean_std(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and (Bessel-corrected) standard deviation of every rank's ``x`` together:
        with several processes, one all-reduce of the count, sum and sum of squares (float64);
        with one, ``x.mean()`` and ``x.std()``."""
        if not self.distributed:
            return x.mean(), x.std()
        values = x.detach().double()
        moments = torch.stack([torch.tensor(float(x.numel()), dtype=torch.float64,
                                            device=x.device), values.sum(), values.square().sum()])
        mean, std = moments_mean_std(self.all_reduce_(moments))
        return mean.to(x.dtype), std.to(x.dtype)

    def average_gradients_(self, params: Sequence[torch.Tensor], flag: torch.Tensor
                           ) -> torch.Tensor:
        """The gradient-sync service: average the gradients of ``params`` over the ranks (one
        all-reduce of one flat buffer; a missing gradient counts as zeros and is set), with
        ``flag`` (one element, 1.0 for a loss this rank refused) in the same buffer. Returns
        the largest flag of any rank. With one process nothing moves: ``flag`` is returned."""
        if not self.distributed:
            return flag
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([*(g.reshape(-1).float() for g in grads), flag.reshape(1).float()])
        self.all_reduce_(flat)
        flat[:-1].div_(self.world_size)
        offset = 0
        for param, grad in zip(params, grads, strict=True):
            grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
            param.grad = grad
            offset += grad.numel()
        return flat[-1].clamp(max=1.0)

    def broadcast_object(self, value: T) -> T:
        """Rank 0's ``value`` on every rank (pickled: small plain values only)."""
        if not self.distributed:
            return value
        box = [value]
        with self._peers():
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather_object(self, value: T) -> list[T]:
        """Every rank's ``value`` (small plain values only), in rank order."""
        if not self.distributed:
            return [value]
        out: list[Any] = [None] * self.world_size
        with self._peers():
            dist.all_gather_object(out, value)
        return out

    def broadcast_tensors_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Overwrite ``tensors`` on every rank with rank 0's (one collective per dtype and
        device: the tensors are flattened into one buffer)."""
        if not self.distributed:
            return
        for group in _by_kind(tensors):
            flat = torch.cat([t.detach().reshape(-1) for t in group])
            with self._peers():
                dist.broadcast(flat, src=0)
            offset = 0
            for t in group:
                t.data.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()

    def on_main(self, action: Callable[[], T]) -> T:
        """Run ``action`` on rank 0 only and hand its result to every rank; an error there is
        raised on rank 0 as it is, and on the others as the same kind of error (bad input:
        a ``ValueError`` or ``OSError`` of the same class; anything else: a
        :class:`DistributedError`) naming it, so no rank waits for a rank that failed."""
        if not self.distributed:
            return action()
        outcome: tuple[str | None, Any] = (None, None)
        if self.is_main:
            try:
                outcome = (None, action())
            except Exception as error:
                name = next((k for k in FORWARDED if isinstance(error, FORWARDED[k])),
                            "DistributedError")
                self.broadcast_object((name, f"{type(error).__name__}: {error}"))
                raise
        kind, value = self.broadcast_object(outcome)
        if kind is not None:
            raise FORWARDED.get(kind, DistributedError)(f"Rank 0 failed: {value}")
        return value  # type: ignore[no-any-return]

    @property
    def device(self) -> torch.device:
        """The device collectives of this backend take their tensors on."""
        if self.distributed and dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")


#: The errors :meth:`DistributedContext.on_main` raises again on the other ranks as they are
#: (bad input, which the command line reports as such), most specific first.
FORWARDED: dict[str, type[Exception]] = {
    cls.__name__: cls for cls in (FileExistsError, FileNotFoundError, PermissionError,
                                  OSError, ValueError)}

#: The context of a run of one process: every collective is a no-op.
SINGLE = DistributedContext()


def moments_mean_std(moments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and Bessel-corrected standard deviation of values whose count, sum and sum of
    squares are ``moments`` (float64 ``[3]``)."""
    count, total, squares = moments.unbind()
    mean = total / count
    var = ((squares - count * mean.square()) / (count - 1)).clamp(min=0)
    return mean, var.sqrt()


def _by_kind(tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    return list(groups.values())


def launched() -> bool:
    """True when this process was started by ``torchrun`` for a run of several processes."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def exit_process(status: int) -> NoReturn:
    """End this process with ``status``. A process of a run of several (``torchrun``) ends
    with ``os._exit`` once its output is flushed: the C++ teardown of the process group's
    threads at interpreter exit can abort a rank that finished ("terminate called without an
    active exception"), which torchrun reports as a failed run. Call it only when every file
    the process writes is closed: ``os._exit`` skips ``atexit`` handlers and buffered files."""
    if launched():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def connect(device: str | torch.device = "cpu", *, devices: int | str = "auto",
            num_nodes: int | str = "auto", timeout_s: float = 1800.0) -> DistributedContext:
    """The run's context: :data:`SINGLE` outside ``torchrun``; under it, the process group
    joined (gloo for the CPU, NCCL for CUDA; once per process) and the context of this rank.

    ``devices`` (processes per node) and ``num_nodes`` check what was launched: ``"auto"``
    takes it as it is; a number that does not match is an error naming the ``torchrun``
    command that launches it. Raises ``ValueError`` for a run of several processes asked for
    outside ``torchrun``.
    """
    wanted_devices = None if devices == "auto" else int(devices)
    wanted_nodes = None if num_nodes == "auto" else int(num_nodes)
    if dist.is_available() and dist.is_initialized():
        context = DistributedContext(
            rank=dist.get_rank(), world_size=dist.get_world_size(),
            local_rank=int(os.environ.get("LOCAL_RANK", dist.get_rank())),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size())))
    elif launched():
        context = DistributedContext(
            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])))
    else:
        context = SINGLE
    _check_launch(context, wanted_devices, wanted_nodes)
    if context.distributed and not dist.is_initialized():
        _join(context, torch.device(device), timeout_s)
    return context


def _check_launch(context: DistributedContext, devices: int | None,
                  num_nodes: int | None) -> None:
    for name, value in (("devices", devices), ("num_nodes", num_nodes)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1 or 'auto'; got {value}.")
    want_devices = devices if devices is not None else context.local_world_size
    want_nodes = num_nodes if num_nodes is not None else context.num_nodes
    command = (f"torchrun --nproc-per-node={want_devices}"
               + (f" --nnodes={want_nodes} --node-rank=<this node's rank> "
                  "--rdzv-backend=c10d --rdzv-endpoint=<host of node 0>:29400"
                  if want_nodes > 1 else "") + " -m rltrain.cli fit ...")
    if not context.distributed and want_devices * want_nodes > 1:
        raise ValueError(
            f"devices={want_devices} x num_nodes={want_nodes} asks for "
            f"{want_devices * want_nodes} processes, but this process was not started by "
            f"torchrun. Launch it as: {command} (or leave devices and num_nodes at 'auto').")
    if context.distributed and (want_devices != context.local_world_size
                                or want_nodes != context.num_nodes):
        raise ValueError(
            f"devices={want_devices} and num_nodes={want_nodes} do not match the launch: "
            f"torchrun started {context.local_world_size} processes per node on "
            f"{context.num_nodes} node(s). Launch it as: {command}, or leave devices and "
            "num_nodes at 'auto'.")


def _join(context: DistributedContext, device: torch.device, timeout_s: float) -> None:
    backend = "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(context.local_rank)
    dist.init_process_group(backend, rank=context.rank, world_size=context.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    atexit.register(_leave)


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def rank_device(device: torch.device, context: DistributedContext) -> torch.device:
    """``device`` for this rank: a CUDA device without an index becomes ``cuda:<local_rank>``
    in a run of several processes (one GPU per process)."""
    if context.distributed and device.type == "cuda":
        if device.index is not None and context.local_world_size > 1:
            raise ValueError(
                f"device {str(device)!r} would put all {context.local_world_size} processes of "
                "this node on one GPU; give device='cuda', and each process takes the GPU of "
                "its LOCAL_RANK.")
        return torch.device("cuda", context.local_rank if device.index is None
                            else device.index)
    return device
