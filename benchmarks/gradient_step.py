"""The parts of one DQN gradient step, timed alone: what any library's DQN pays per step.

A 256x256 MLP on CartPole-sized inputs (4 features, 2 actions), batch 64, one torch thread, as in
``compare_dqn``. Each part is timed over ``--calls`` calls after a warm-up, ``--repeats`` times
(median, min-max). From the parts, the ceiling: the env steps per second of a loop that paid
only for the arithmetic (target forward, online forward and backward, fused Adam), the raw
vector env step and a batch-1 forward to act, at RL-Zoo's 0.5 gradient steps per env step:
once with the fused Adam step as ``Optimizer.step`` runs it, once with the kernel alone (a
stricter ceiling: no wrapper at all).

    python -m benchmarks.gradient_step [--calls 500] [--repeats 5]
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable, Collection

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks._util import median_range, table, write_results
from rltrain.optim import clip_grad_norm, fused_adam_step

#: µs per env step of CartPole-v1's vector env x1 (``benchmarks.limits``), in the ceiling.
ENV_STEP = 36.2
#: The two Adam steps a ceiling is computed with (loosest first).
CEILING_STEPS = ("Adam step, fused, Optimizer.step", "the fused Adam kernel alone")


def time_parts(calls: int, repeats: int,
               names: Collection[str] | None = None) -> dict[str, list[float]]:
    """µs per call of each part (those in ``names``; default all), ``repeats`` times (one
    torch thread from here on)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 2))
    target = copy.deepcopy(net).requires_grad_(False)
    params = list(net.parameters())
    optimizers = {"plain": torch.optim.Adam(params, lr=1e-3, foreach=False),
                  "foreach": torch.optim.Adam(params, lr=1e-3, foreach=True),
                  "fused": torch.optim.Adam(params, lr=1e-3, fused=True)}
    obs, next_obs, one = torch.randn(64, 4), torch.randn(64, 4), torch.randn(1, 4)
    actions, rewards = torch.randint(0, 2, (64,)), torch.randn(64)
    net(obs).sum().backward()  # gradients for the optimizer and clipping timings
    grads = [p.grad for p in params if p.grad is not None]

    def target_forward() -> None:
        with torch.no_grad():
            target(next_obs).max(1)

    def online_forward_backward() -> None:
        q = net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        F.huber_loss(q, rewards).backward()  # type: ignore[no-untyped-call]

    def act() -> None:
        with torch.inference_mode():
            net(one).argmax(1)

    def full_step() -> None:
        with torch.no_grad():
            y = rewards + 0.99 * target(next_obs).max(1).values
        q = net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        loss = F.huber_loss(q, y)
        optimizers["fused"].zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        clip_grad_norm([p.grad for p in params if p.grad is not None], 10.0)
        fused_adam_step(optimizers["fused"])

    optimizers["fused"].step()  # creates its state, for the kernel-alone timing
    state = [optimizers["fused"].state[p] for p in params]
    tensors: list[torch.Tensor] = list(params)

    def fused_kernel_alone() -> None:
        # What Adam.step(fused=True) runs, without Optimizer.step's wrapper (profiler record,
        # hooks, grad-mode and dynamo checks) and its per-call parameter grouping.
        steps = [s["step"] for s in state]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(list(tensors), grads, [s["exp_avg"] for s in state],
                           [s["exp_avg_sq"] for s in state], [], steps, lr=1e-3, beta1=0.9,
                           beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False,
                           maximize=False)

    weight, rows64 = torch.randn(256, 256), torch.randn(64, 256)
    parts: dict[str, Callable[[], object]] = {
        "matrix product 64x256 @ 256x256": lambda: rows64 @ weight,
        "target forward (no grad)": target_forward,
        "online forward + backward": online_forward_backward,
        "Adam step, plain (SB3's default on CPU)": optimizers["plain"].step,
        "Adam step, foreach": optimizers["foreach"].step,
        "Adam step, fused, Optimizer.step": optimizers["fused"].step,
        "Adam step, fused, torch.optim.adam.adam (rltrain)": lambda: fused_adam_step(
            optimizers["fused"]),
        "the fused Adam kernel alone": fused_kernel_alone,
        "clip_grad_norm_ (torch)": lambda: nn.utils.clip_grad_norm_(params, 10.0, foreach=True),
        "clip_grad_norm (rltrain)": lambda: clip_grad_norm(grads, 10.0),
        "acting forward, batch 1": act,
        "whole gradient step (rltrain's parts)": full_step,
    }
    if names is not None:
        parts = {name: parts[name] for name in names}
    micros: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(repeats):
        for name, part in parts.items():
            for _ in range(50):
                part()
            start = time.perf_counter()
            for _ in range(calls):
                part()
            micros[name].append(1e6 * (time.perf_counter() - start) / calls)
    return micros


def arithmetic(micros: dict[str, list[float]], adam_step: str) -> float:
    """µs of one gradient step's arithmetic: target forward, online forward and backward,
    and ``adam_step`` (medians)."""
    def med(name: str) -> float:
        return sorted(micros[name])[len(micros[name]) // 2]

    return (med("target forward (no grad)") + med("online forward + backward")
            + med(adam_step))


def ceiling(micros: dict[str, list[float]], adam_step: str) -> float:
    """Env steps per second of a loop paying only for the arithmetic (with ``adam_step``) at
    0.5 gradient steps per env step, the raw vector env step and a batch-1 forward."""
    act = sorted(micros["acting forward, batch 1"])[len(micros["acting forward, batch 1"]) // 2]
    return 1e6 / (0.5 * arithmetic(micros, adam_step) + ENV_STEP + act)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    micros = time_parts(args.calls, args.repeats)
    print(table(["part", "µs per call"], [[n, median_range(v)] for n, v in micros.items()]))
    for adam_step in CEILING_STEPS:
        print(f"arithmetic of one gradient step with {adam_step!r}: "
              f"{arithmetic(micros, adam_step):.0f} µs; ceiling at 0.5 gradient steps per env "
              f"step: {ceiling(micros, adam_step):.0f} env steps/s")
    path = write_results("gradient_step", {
        "args": vars(args), "microseconds": micros,
        "ceiling_env_steps_per_second": ceiling(micros, CEILING_STEPS[0]),
        "ceiling_with_the_kernel_alone": ceiling(micros, CEILING_STEPS[1])})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
