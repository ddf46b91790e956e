"""When interval renderers write a row (rltrain/observe/renderers/schedule.py): at each
multiple of the interval a step reaches, once at the end unless a row was just written, and on
the same multiples after a resume."""

from __future__ import annotations

import pytest

from rltrain.observe.renderers.schedule import LogSchedule


def test_rows_fall_on_the_multiples_a_step_reaches_and_once_at_the_end() -> None:
    schedule = LogSchedule(100)
    schedule.start(0)
    due = [steps for steps in range(30, 331, 30) if schedule.due(steps)]
    assert due == [120, 210, 300]  # the first step at or past 100, 200, 300
    assert schedule.final_due(330) and not schedule.final_due(330)
    ended_on_a_row = LogSchedule(100)
    ended_on_a_row.start(0)
    assert ended_on_a_row.due(100) and not ended_on_a_row.final_due(100)


def test_a_resumed_run_keeps_the_multiples_and_writes_no_row_of_its_start() -> None:
    schedule = LogSchedule(100)
    schedule.start(250)
    assert not schedule.due(280) and schedule.due(300)
    nothing_left = LogSchedule(100)
    nothing_left.start(400)
    assert not nothing_left.final_due(400)  # the run it continues wrote that row


def test_an_interval_below_one_env_step_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^log_interval must be >= 1 env step; got 0\.$"):
        LogSchedule(0)
