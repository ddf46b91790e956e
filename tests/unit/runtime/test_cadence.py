"""The one rule for "an interval fell due" (rltrain/runtime/cadence.py), against a count that
moves one at a time and one that jumps."""

from __future__ import annotations

import pytest

from rltrain.runtime.cadence import crossed, is_multiple, next_multiple


@pytest.mark.parametrize("interval", [1, 3, 7, 256])
def test_crossed_counts_every_multiple_whatever_the_jump(interval: int) -> None:
    for before in range(0, 3 * interval + 2):
        for jump in (0, 1, 2, interval, 2 * interval + 1):
            after = before + jump
            expected = sum(1 for n in range(before + 1, after + 1) if n % interval == 0)
            assert crossed(before, after, interval) == expected


def test_is_multiple_is_the_nth_step_and_a_phase_shift_is_the_first() -> None:
    assert [g for g in range(1, 11) if is_multiple(g, 4)] == [4, 8]  # DQN's target copies
    assert [g for g in range(1, 11) if is_multiple(g - 1, 4)] == [1, 5, 9]  # TD3's actor


def test_next_multiple_is_above_the_count() -> None:
    assert [next_multiple(c, 5) for c in (0, 4, 5, 6, 10)] == [5, 5, 10, 10, 15]
