"""glibc's heap settings for training: tensor memory freed at each step stays in the process.

A gradient step allocates and frees the same tensors again and again (activations, gradients,
temporaries). With glibc's defaults, blocks above 128 KiB get their own ``mmap``, unmapped by
``free``, and free memory at the heap's top goes back to the kernel beyond 128 KiB (both limits
rise as glibc adapts, to at most 32 and 64 MiB): the next step faults the same pages in again,
one page at a time, each one zeroed by the kernel. With these settings Dreamer's gradient step
takes almost none of those page faults and runs faster (``docs/benchmarks.md``, "Figures
behind implementation choices" and "Heap settings").

:func:`keep_freed_memory` raises three of ``mallopt``'s settings for the rest of the process:

- ``M_TRIM_THRESHOLD`` to :data:`TRIM_THRESHOLD`: free memory at the heap's top is returned
  to the kernel only beyond 256 MiB;
- ``M_TOP_PAD`` to :data:`TOP_PAD`: the heap grows 64 MiB at a time, not by the request;
- ``M_MMAP_THRESHOLD`` to :data:`MMAP_THRESHOLD`: blocks below 32 MiB (glibc's largest
  accepted value on 64-bit) come from the heap rather than from their own ``mmap``, which each
  ``free`` would unmap.

The cost is memory: up to 256 MiB more than the process's live data may stay resident after a
peak. Nothing is done where glibc is not the C library (macOS, Windows, musl), nor when one of
:data:`ENVIRONMENT` is set (you chose the allocator's settings yourself).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform

#: Free memory at the heap's top kept before any is returned to the kernel (bytes).
TRIM_THRESHOLD = 256 * 2**20
#: Extra memory the heap takes each time it grows (bytes).
TOP_PAD = 64 * 2**20
#: Smallest block given its own ``mmap`` (bytes; glibc refuses more than 32 MiB on 64-bit).
MMAP_THRESHOLD = 32 * 2**20
#: Environment variables that set glibc's allocator: when one is set, it is left as it is.
#: (``LD_PRELOAD`` may bring another allocator.)
ENVIRONMENT = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_",
               "GLIBC_TUNABLES", "LD_PRELOAD")

# glibc's <malloc.h> parameter numbers.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


@functools.cache
def keep_freed_memory() -> str:
    """Set glibc's heap to keep freed memory (see the module's text), once per process;
    returns what was done, in words (the same on every later call)."""
    chosen = [name for name in ENVIRONMENT if os.environ.get(name)]
    if chosen:
        return f"as the environment sets it ({', '.join(chosen)})"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "the C library's own settings (not glibc)"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "the C library's own settings (no mallopt)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    refused = [name for name, parameter, value in (
        ("M_TRIM_THRESHOLD", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        ("M_TOP_PAD", _M_TOP_PAD, TOP_PAD),
        ("M_MMAP_THRESHOLD", _M_MMAP_THRESHOLD, MMAP_THRESHOLD)) if mallopt(parameter, value) != 1]
    if refused:
        return f"glibc refused {', '.join(refused)}"
    return (f"glibc keeps freed memory (trim {TRIM_THRESHOLD // 2**20} MiB, top pad "
            f"{TOP_PAD // 2**20} MiB, mmap {MMAP_THRESHOLD // 2**20} MiB)")
