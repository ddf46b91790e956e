"""One rule for "an interval fell due": a count (env steps, vector steps, gradient steps,
evaluations) that moved from ``before`` to ``after`` crossed every multiple of the interval in
``(before, after]``, however far it moved in one go (a vector step of 8 sub-envs is 8 env
steps). Evaluations, checkpoints, training rounds, log rows, the ranks' agreements, recorded
evaluations and an agent's every-n-th gradient step all read it."""

from __future__ import annotations


def crossed(before: int, after: int, interval: int) -> int:
    """How many multiples of ``interval`` (>= 1) lie in ``(before, after]``."""
    return after // interval - before // interval


def is_multiple(count: int, interval: int) -> bool:
    """Whether ``count`` itself is a multiple of ``interval``: the step that took the count
    from ``count - 1`` to ``count`` crossed one (the n-th, 2n-th, ... of a count from 1).
    Read once per gradient step: one operation."""
    return count % interval == 0


def next_multiple(count: int, interval: int) -> int:
    """The first multiple of ``interval`` above ``count``."""
    return (count // interval + 1) * interval
