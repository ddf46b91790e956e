"""The benchmarks that run Stable-Baselines3 beside rltrain end with one line naming the extra
to install when it is missing, not with a ModuleNotFoundError traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks import compare_dqn
from benchmarks._util import require_sb3


@pytest.fixture
def without_sb3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # import raises, as uninstalled


def test_require_sb3_names_the_extra(without_sb3: None) -> None:
    with pytest.raises(SystemExit) as stop:
        require_sb3("benchmarks.x")
    message = str(stop.value.code)
    assert message.startswith("benchmarks.x runs Stable-Baselines3, which is not installed")
    assert "pip install 'rltrain[bench]'" in message and "\n" not in message


def test_compare_dqn_without_the_extra_stops_with_that_line(
        without_sb3: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["compare_dqn", "--repeats", "0", "--seeds", "0"])

    def measure(*args: object, **kwargs: object) -> None:
        raise AssertionError("compare_dqn started a run without Stable-Baselines3")

    monkeypatch.setattr(compare_dqn, "measure", measure)
    with pytest.raises(SystemExit) as stop:
        compare_dqn.main()
    assert "pip install 'rltrain[bench]'" in str(stop.value.code)
    assert "--libraries rltrain handwritten" in str(stop.value.code)


def test_a_life_restart_refills_zero_fills_or_keeps_the_stack() -> None:
    from collections import deque

    import numpy as np

    from benchmarks.atari_life_restart import restart_stack

    old, new = np.full((2, 2), 7, np.uint8), np.full((2, 2), 9, np.uint8)
    for fill, expected in [("repeat", [9, 9, 9, 9]), ("zeros", [0, 0, 0, 9]),
                           ("keep", [7, 7, 7, 9])]:
        stack = deque([old] * 4, maxlen=4)
        restart_stack(stack, new, fill)
        assert [int(frame[0, 0]) for frame in stack] == expected, fill


def test_a_groups_restart_scores_are_read_back_by_seed_label_and_restart(
        tmp_path: Path) -> None:
    from benchmarks._util import write_results
    from benchmarks.atari_life_restart import restart_scores

    def played(name: str, **means: float) -> None:
        write_results(str(tmp_path / f"atari_life_restart_breakout_{name}"), {"runs": [
            {"restart": restart.replace("_", "+"), "mean": mean, "scores": [mean]}
            for restart, mean in means.items()]})

    played("refill_seed3", repeat=12.5, repeat_noops=14.0)
    played("refill_seed12", zeros=3.0)  # not played on "repeat": left out
    played("refill-more_seed1", repeat=99.0)  # another label
    assert restart_scores(tmp_path, "breakout", "refill", "repeat") == {3: 12.5}
    assert restart_scores(tmp_path, "breakout", "refill", "repeat+noops") == {3: 14.0}
    assert restart_scores(tmp_path, "breakout", "refill-more", "repeat") == {1: 99.0}
    assert restart_scores(tmp_path, "pong", "refill", "repeat") == {}
