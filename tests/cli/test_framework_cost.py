"""``benchmarks.framework_cost``: each loop, run in its own process against a checkout, splits
its time per env step into the env's, the network's and the rest, from inside one run."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import framework_cost

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("loop", "num_envs"), [("rltrain_loop", 1), ("bare_loop", 2)])
def test_a_loops_time_splits_into_env_network_and_the_rest(loop: str, num_envs: int) -> None:
    row = framework_cost.measure(REPO, loop, 2_000, num_envs)
    assert row["env"] > 1.0 and row["net"] > 1.0  # µs per env step: both clocks ran
    assert row["framework"] == pytest.approx(row["total"] - row["env"] - row["net"])
    assert row["framework"] > 0  # the loop does more than step the env and run the network


def test_the_span_leaves_out_the_first_and_last_tenth() -> None:
    assert framework_cost.span(10_000, 1) == (1_000, 9_000)
    assert framework_cost.span(100, 3) == (9, 90)  # whole vector steps of 3
