"""glibc's heap keeps freed tensor memory once ``fit`` has run (:mod:`rltrain.runtime.heap`).

Each check runs in its own process (the settings hold for the rest of a process) and counts the
process's real minor page faults while it allocates and frees two tensors, 20 times, each round's
a little larger than the last (17 MiB + 512 KiB per round). With glibc's defaults a block larger
than any freed so far gets its own ``mmap``, and ``free`` unmaps it (the adaptive threshold only
rises to the size just freed, and a run's own frees stay below 17 MiB here): every round faults
all its pages in again. With the heap keeping freed memory, blocks below 32 MiB come from the
heap, which reuses what the last round freed.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the heap settings are glibc's")

#: Pages the 20 rounds touch: 2 blocks of 17 MiB + k x 512 KiB in round k = 1..20.
PAGES = sum(2 * (17 * 256 + 128 * k) for k in range(1, 21))

FAULTS = """
import resource, torch

def faults():
    def round_(k):
        # 2 blocks of 17 MiB + k x 512 KiB, every page written
        blocks = [torch.ones(17 * 2**18 + k * 2**17) for _ in range(2)]
        del blocks
    round_(0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for k in range(1, 21):
        round_(k)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
"""


def run(code: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> list[str]:
    """The lines ``FAULTS + code`` prints in a new Python process."""
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    done = subprocess.run([sys.executable, "-c", FAULTS + textwrap.dedent(code)],
                          env={**environment, **(env or {})}, cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=True)
    return done.stdout.splitlines()


@pytest.mark.slow
def test_freed_memory_is_reused_instead_of_faulted_in_again() -> None:
    default, = run("print(faults())")
    message, tuned = run("""
        from rltrain.runtime.heap import keep_freed_memory
        print(keep_freed_memory())
        print(faults())
    """)
    assert int(default) > PAGES * 0.5  # the defaults fault every page in, each round
    assert int(tuned) < PAGES * 0.1
    assert message == "glibc keeps freed memory (trim 256 MiB, top pad 64 MiB, mmap 32 MiB)"


@pytest.mark.slow  # a fresh interpreter (3 s)
def test_the_environments_own_allocator_settings_are_left_alone() -> None:
    message, faults = run("""
        from rltrain.runtime.heap import keep_freed_memory
        print(keep_freed_memory())
        print(faults())
    """, env={"MALLOC_TOP_PAD_": "4096"})
    assert message == "as the environment sets it (MALLOC_TOP_PAD_)"
    assert int(faults) > PAGES * 0.5


@pytest.mark.slow
@pytest.mark.parametrize("keep", [True, False])
def test_fit_keeps_freed_memory_unless_told_not_to(keep: bool, tmp_path: Path) -> None:
    lines = run(f"""
        from rltrain import DQN, DQNConfig, OffPolicyConfig, OffPolicyStrategy, Trainer
        strategy = OffPolicyStrategy(OffPolicyConfig(buffer_size=100, warmup_steps=20,
                                                     batch_size=8, train_interval=10,
                                                     train_steps=1))
        Trainer(num_steps=40, strategy=strategy, run_dir="run", eval_interval=None,
                enable_progress_bar=False, logger=False, enable_metrics_file=False,
                keep_freed_memory={keep}).fit("CartPole-v1", DQN(DQNConfig(hidden_sizes=[8])))
        print(faults())
    """, cwd=tmp_path)
    assert not [line for line in lines if "heap" in line or "glibc" in line]  # no jargon
    if keep:
        assert int(lines[-1]) < PAGES * 0.1
    else:
        assert int(lines[-1]) > PAGES * 0.5
