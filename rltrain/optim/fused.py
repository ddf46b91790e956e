"""The arithmetic of an optimizer step without PyTorch's per-call wrappers: Adam fused into one
kernel, stepped through its functional form, and the gradient-norm clip.

On a CPU, with the small networks of RL, the wrappers cost as much as the arithmetic:
``Optimizer.step`` around the fused Adam kernel, and ``torch.nn.utils.clip_grad_norm_`` against
what :func:`clip_grad_norm` does (``docs/benchmarks.md``, "Figures behind implementation
choices").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.optim.adam import adam as functional_adam
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks


def adam(params: Iterable[torch.nn.Parameter], *, lr: float, **kwargs: Any) -> torch.optim.Adam:
    """``torch.optim.Adam``, fused into one kernel where the parameters' device supports it.

    The fused step is numerically the same algorithm and on CPU much faster than the plain one,
    which makes up a large share of a DQN gradient step (``docs/benchmarks.md``, "Figures
    behind implementation choices").
    """
    params = list(params)
    fused = bool(params) and all(p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.Adam(params, lr=lr, fused=fused, **kwargs)


def fused_adam_step(optimizer: torch.optim.Optimizer) -> bool:
    """Step a fused ``torch.optim.Adam`` through ``torch.optim.adam.adam``, its public
    functional form: the same kernel with the same arguments, so the same result bit for bit as
    ``optimizer.step()``, without ``Optimizer.step``'s wrapper (profiler record, hook and
    grad-mode handling, dynamo checks, the per-call ``_init_group``), whose cost on a CPU is a
    visible part of a small network's gradient step (``docs/benchmarks.md``, "Figures behind
    implementation choices").

    Returns False, having done nothing, where ``optimizer.step()`` must run instead: another
    optimizer, one not fused, differentiable or capturable parameters, step hooks
    registered (on it or globally) or its ``step`` replaced (an LR scheduler's counter), and
    before its state exists (the first step, which ``step()`` creates). The learning rate and
    betas are read from each param group at every call, so schedules that set them apply.
    """
    if (type(optimizer) is not torch.optim.Adam or not optimizer.defaults.get("fused")
            or "step" in vars(optimizer) or _global_optimizer_pre_hooks
            or _global_optimizer_post_hooks or optimizer._optimizer_step_pre_hooks
            or optimizer._optimizer_step_post_hooks):
        return False
    state = optimizer.state
    groups = []
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        # (a fused Adam holds floating-point parameters only: its constructor refuses others)
        if (group["capturable"] or group["differentiable"]
                or any(p not in state for p in params)):
            return False
        groups.append((group, params, [state[p] for p in params]))
    with torch.no_grad():
        for group, params, states in groups:
            beta1, beta2 = group["betas"]
            functional_adam(
                params, [p.grad for p in params], [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [s["max_exp_avg_sq"] for s in states] if group["amsgrad"] else [],
                [s["step"] for s in states], fused=True, amsgrad=group["amsgrad"],
                beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"],
                eps=group["eps"], maximize=group["maximize"],
                decoupled_weight_decay=group["decoupled_weight_decay"])
    return True


def clip_grad_norm(grads: list[torch.Tensor], max_norm: float) -> None:
    """Scale ``grads`` in place so that their total 2-norm is at most ``max_norm``.

    What ``torch.nn.utils.clip_grad_norm_`` computes, without its per-call grouping and checks,
    which on a CPU cost about as much as the norm itself for a small network's gradients
    (``docs/benchmarks.md``, "Figures behind implementation choices").
    """
    if not grads:
        return
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
