"""Compiled forward passes: ``trainer.compile`` (off by default).

``compile_networks`` compiles, in place, the forward of each network an agent holds
(``nn.Module.compile``): the training loss's forward passes, and through AOTAutograd their
backward, run as compiled graphs, and so do the acting forward passes of the policies that
share those networks. The optimizer step stays the fused Adam kernel (already one kernel per
parameter group, ``rltrain.optim.fused``).

- Random draws come from torch's generator, as in eager code (:func:`compile_networks`).
- Checkpoints are unchanged: an in-place compile keeps the modules and their ``state_dict``
  keys, so a compiled run's checkpoint loads into an eager agent and back.
- Shapes are static (``dynamic=False``): the strategies train on fixed batch sizes, and each
  distinct shape (the training batch, the acting batch of ``num_envs``, the evaluation's) is
  one graph, compiled on first use.
- On CUDA, ``"reduce-overhead"`` also captures the graphs as CUDA graphs; on a CPU it is the
  default mode. ``"max-autotune"`` searches kernel configurations (long compiles).
- Inductor's compile cache (``TORCHINDUCTOR_CACHE_DIR``, by default under the system's temporary
  folder) is reused by later runs and resumes of the same networks on the same machine:
  ``compile_seconds`` shows the difference.
"""

from __future__ import annotations

from typing import Any

from torch import nn

#: The values of ``trainer.compile`` and the ``torch.compile`` mode each gives (None: off).
COMPILE_MODES: dict[Any, str | None] = {
    False: None, True: "default", "default": "default", "reduce-overhead": "reduce-overhead",
    "max-autotune": "max-autotune"}


def compile_mode(value: Any) -> str | None:
    """``trainer.compile`` as a ``torch.compile`` mode (None: off); ``ValueError`` naming the
    accepted values otherwise."""
    if isinstance(value, bool | str) and value in COMPILE_MODES:
        return COMPILE_MODES[value]
    raise ValueError(f"compile must be false, true, 'default', 'reduce-overhead' (CUDA graphs "
                     f"on CUDA) or 'max-autotune'; got {value!r}.")


def networks(module: nn.Module) -> list[nn.Module]:
    """The outermost modules under ``module`` whose forward is not PyTorch's own: an agent's
    networks (a container such as ``nn.ModuleList`` is looked into instead)."""
    out: list[nn.Module] = []
    for child in module.children():
        if type(child).__module__.startswith("torch."):
            out.extend(networks(child))
        elif any(True for _ in child.parameters()):
            out.append(child)
    return out


def compile_networks(agent: nn.Module, mode: str) -> list[nn.Module]:
    """Compile the forward of each of ``agent``'s :func:`networks` in place; returns them.

    Random draws in compiled code (SAC's reparameterised actions, dropout) come from torch's
    own generator, as in eager code (inductor's ``fallback_random``), not from inductor's: the
    same draws as an eager run, and a generator the checkpoint saves and restores, which exact
    resume needs."""
    import torch._inductor.config

    torch._inductor.config.fallback_random = True
    compiled = networks(agent)
    for network in compiled:
        network.compile(mode=mode, dynamic=False)
    return compiled


def compile_seconds() -> float:
    """Seconds this process has spent compiling with ``torch.compile`` so far (dynamo's own
    measure of its outermost compile calls)."""
    from torch._dynamo.utils import compilation_time_metrics

    return float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))


def is_compiled(module: nn.Module) -> bool:
    """Whether ``module``'s forward was compiled in place."""
    return getattr(module, "_compiled_call_impl", None) is not None
