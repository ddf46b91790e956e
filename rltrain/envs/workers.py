"""Async vector envs' worker processes: how a worker sets itself apart from the main process
(:func:`become_worker`), :class:`WorkerVectorEnv` (Gymnasium's ``AsyncVectorEnv`` whose close
never waits on a hung worker), and the calls that await workers within a deadline and name a
worker that died."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from multiprocessing.connection import wait as wait_for_pipes
from typing import Any

from gymnasium.vector import AsyncVectorEnv, VectorEnv
from gymnasium.vector.async_vector_env import AsyncState

from rltrain.envs.errors import SubEnvError
from rltrain.runtime.watchdog import EnvCallHung, call_within, end_processes, exit_words


def become_worker(parent: int, die_with_parent: bool) -> None:
    """In an env worker process: leave Ctrl-C to the main process (which ends its workers),
    let SIGTERM end the worker, drop the main process's alarm and signal watch (inherited
    through ``fork``) and, on Linux, have the kernel kill the worker when the thread that
    started it ends (the main process died, even by SIGKILL)."""
    inherited = signal.set_wakeup_fd(-1)
    if inherited >= 0:
        os.close(inherited)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGALRM"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    if die_with_parent and sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the main process died before the prctl
            os._exit(1)


#: Linux's ``prctl`` option: the signal a process receives when its parent thread ends.
PR_SET_PDEATHSIG = 1
#: Seconds :class:`WorkerVectorEnv`'s close waits for idle workers to close their envs and
#: exit before it terminates them.
CLOSE_TIMEOUT = 10.0


class WorkerVectorEnv(AsyncVectorEnv):
    """Gymnasium's ``AsyncVectorEnv`` (each sub-env in a worker process), whose workers ignore
    Ctrl-C (the main process ends them), die with the main process (Linux), and whose
    :meth:`close` never waits on a hung worker: idle workers are asked to close their envs
    (:data:`CLOSE_TIMEOUT` seconds), busy ones (a step or reset pending: interrupted, timed
    out) are terminated at once; any still alive a second after SIGTERM are killed. Its
    sub-envs save and restore themselves in their workers for checkpoints
    (:mod:`rltrain.envs.persistence`)."""

    #: Each worker's sub-env answers the checkpoint's calls (:class:`_SubEnv`).
    workers_save_sub_envs = True

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        busy = terminate or self._state is not AsyncState.DEFAULT
        wait_s = 0.0 if busy else CLOSE_TIMEOUT if timeout is None else timeout
        if not busy:
            self._ask_to_close(wait_s)
        end_processes(self.processes, wait=wait_s)
        for pipe in self.parent_pipes:
            if pipe is not None:
                pipe.close()

    def _ask_to_close(self, timeout: float) -> None:
        pipes = [pipe for pipe in self.parent_pipes if pipe is not None and not pipe.closed]
        for pipe in pipes:
            try:
                pipe.send(("close", None))
            except OSError:
                continue
        end = time.monotonic() + timeout
        for pipe in pipes:
            try:
                if pipe.poll(max(end - time.monotonic(), 0.0)):
                    pipe.recv()
            except (OSError, EOFError):
                continue


def await_workers(envs: AsyncVectorEnv, timeout: float | None) -> list[int]:
    """Wait until every worker of ``envs`` has answered the call sent to it, at most
    ``timeout`` seconds (None: no limit); returns the sub-envs that have not (none: all
    answered). An :class:`~rltrain.runtime.watchdog.EnvCallHung` raised meanwhile (a stop signal's
    grace) names them."""
    pending = {i: pipe for i, pipe in enumerate(envs.parent_pipes) if pipe is not None}
    end = None if timeout is None else time.monotonic() + timeout
    try:
        while pending:
            left = None if end is None else max(end - time.monotonic(), 0.0)
            ready = wait_for_pipes(list(pending.values()), left)
            if not ready:
                break
            pending = {i: pipe for i, pipe in pending.items() if pipe not in ready}
    except EnvCallHung as hung:
        hung.sub_envs = sorted(pending)
        raise
    return sorted(pending)


def call_vector_env(envs: VectorEnv[Any, Any, Any], call: str, argument: Any,
                    timeout: float | None) -> Any:
    """``envs.step(argument)`` (``call="step"``) or ``envs.reset(seed=argument)``, within
    ``timeout`` seconds (None: no limit) and the grace after a stop signal
    (:func:`~rltrain.runtime.watchdog.call_within`); one past its deadline raises
    :class:`~rltrain.runtime.watchdog.EnvCallHung`. An async vector env's workers are awaited on
    their pipes, so any thread can time them out, whatever the workers do."""
    if not isinstance(envs, AsyncVectorEnv):
        if call == "step":
            return call_within(timeout, envs.step, argument)
        return call_within(timeout, envs.reset, seed=argument)
    try:
        if call == "step":
            envs.step_async(argument)
        else:
            envs.reset_async(seed=argument)
        late = call_within(None, await_workers, envs, timeout)
        if late:
            raise EnvCallHung(f"env_step_timeout={timeout:g} s", sub_envs=late)
        return envs.step_wait() if call == "step" else envs.reset_wait()
    except (EOFError, BrokenPipeError, ConnectionResetError) as error:  # a worker's pipe closed
        raise dead_worker(envs, error) from error


def dead_worker(envs: AsyncVectorEnv, error: BaseException) -> BaseException:
    """What a closed pipe of an async vector env means: the sub-env whose worker process died,
    with its exit status (``error`` itself when every worker is alive)."""
    deadline = time.monotonic() + 1.0  # a pipe can close a moment before its process ends
    while True:
        for index, process in enumerate(envs.processes):
            if not process.is_alive() and process.exitcode is not None:
                return SubEnvError(
                    f"sub-env {index}'s worker process died ({exit_words(process.exitcode)}; "
                    "the OOM killer, a crash in the env's native code, or a kill from outside)",
                    index=index)
        if time.monotonic() > deadline:
            return error
        time.sleep(0.02)
