"""``rltrain tune --storage``: one study, several real ``rltrain tune`` workers on a real
PostgreSQL server (initdb'd in a temporary folder, on a free port) or on Optuna's journal file
(whose heartbeat rltrain keeps itself), one worker SIGKILLed twice
mid-trial: every trial completes once, each killed trial resumes its own run directory from a
checkpoint (its metrics show the segments), ``best.yaml`` is the best trial's config and every
recorded objective is the mean of the run's evaluations read back from its ``metrics.jsonl``."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from benchmarks.servers import postgres_missing
from benchmarks.study_workers import evaluations, run_study

optuna = pytest.importorskip("optuna")
pytestmark = pytest.mark.slow

TRIALS, STEPS, INTERVAL = 6, 2048, 256


@pytest.mark.parametrize("journal", [False, True], ids=["postgresql", "journal-file"])
def test_workers_take_over_a_killed_workers_trials(tmp_path: Path, journal: bool) -> None:
    if not journal and postgres_missing() is not None:
        pytest.skip(f"no PostgreSQL here: {postgres_missing()}")
    outcome = run_study(tmp_path, TRIALS, 3, STEPS, INTERVAL, journal=journal)
    study, trials, killed, setup = outcome.study, outcome.trials, outcome.killed, outcome.setup
    assert setup.storage.startswith("journal:" if journal else "postgresql://")
    assert "password" not in (study / "tune.json").read_text()
    complete = Counter(t.system_attrs.get("failed_trial", t.number) for t in trials
                       if t.state.name == "COMPLETE")
    first_attempts = [t.number for t in trials if "failed_trial" not in t.system_attrs]
    assert len(first_attempts) == TRIALS  # no trial asked twice, none beyond --trials
    assert complete == Counter(first_attempts), complete  # each completed exactly once
    taken = {t.system_attrs["failed_trial"] for t in trials if "failed_trial" in t.system_attrs}
    joined = "".join(outcome.outputs)
    # Every killed trial is taken over; a live worker's trial only when its heartbeats came
    # late (a loaded machine), which that worker says, stopping its own copy of the run.
    assert set(killed) <= taken, (taken, killed)
    late = taken - set(killed)
    assert all(f"trial {n}: taken over by another worker" in joined for n in late), joined
    assert all(t.state.name == "FAIL" for t in trials if t.number in killed)
    for number in killed:  # resumed under its own run number, from a checkpoint
        assert f"trial {number}: resumed" in joined and "taken over" in joined
        rows = [json.loads(r) for r in (study / f"trial-{number:04d}" / "metrics.jsonl")
                .read_text().splitlines()]
        starts = [r["env_steps"] for r in rows if r["event"] == "start"]
        assert len(starts) >= 2 and starts[0] == 0 and all(s > 0 for s in starts[1:]), starts
    for t in trials:  # every recorded objective, recomputed from the run's own metrics
        if t.state.name == "COMPLETE":
            run = study / f"trial-{t.system_attrs.get('failed_trial', t.number):04d}"
            found = evaluations(run)
            assert sorted(found) == list(range(INTERVAL, STEPS + 1, INTERVAL))
            assert json.loads((run / "summary.json").read_text())["env_steps"] == STEPS
            assert t.value == pytest.approx(sum(found.values()) / len(found), abs=1e-9)
    best = max((t for t in trials if t.state.name == "COMPLETE"), key=lambda t: t.value)
    written = yaml.safe_load((study / "best.yaml").read_text())
    expected = setup.compose(best.params)
    for key, value in best.params.items():
        section, name = key.split(".", 1)
        assert written[section][name] == pytest.approx(value)
        assert expected[section][name] == pytest.approx(value)
    assert written["trainer"]["num_steps"] == STEPS and written["trainer"]["run_dir"] is None
    assert os.path.exists(study / "trial-0000.log")


def test_a_trial_another_worker_failed_is_not_recorded_twice(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    """A worker whose trial another worker failed meanwhile (its heartbeats came late) says so
    and goes on: Optuna refuses to tell a failed trial (a ValueError, the CI failure of stop
    50), which is not a crash of the worker."""
    from rltrain.cli.study_storage import Heartbeats, open_storage
    from rltrain.cli.tune_record import Setup
    from rltrain.cli.tune_worker import Tuner
    from rltrain.settings.targets import Trust

    url = f"sqlite:///{tmp_path / 'study.db'}"
    mine = optuna.create_study(storage=open_storage(optuna, url, 5), study_name="s")
    other = optuna.load_study(storage=open_storage(optuna, url, 5), study_name="s")
    beats, their_beats = Heartbeats(optuna, mine, 5), Heartbeats(optuna, other, 5)
    tuner = Tuner(optuna, mine, beats, Setup(config={}, space={}), [], tmp_path, [], Trust())
    trial = mine.ask()
    assert beats.claim(trial)
    their_beats.hand_back(other._storage.get_trial(trial._trial_id))
    assert tuner._tell(trial, 1.0) is False
    assert f"trial {trial.number}: taken over by another worker" in capsys.readouterr().out
    states = [t.state.name for t in mine.get_trials()]
    assert states == ["FAIL", "WAITING"]  # failed once, queued again; never COMPLETE here
    beats.close()
    their_beats.close()


def test_workers_sharing_a_study_sample_their_own_settings(tmp_path: Path) -> None:
    """Two workers started on a shared study sample apart: their samplers' seeds come from the
    OS, not from what the workers know (a study's trial count plus the process id coincided
    for two workers started back to back, and they ran the same settings)."""
    from rltrain.cli.tune import _study
    from rltrain.cli.tune_record import Setup

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    setup = Setup(config={}, space={}, storage=url, name="shared")
    first = _study(optuna, url, setup, continuing=False)
    second = _study(optuna, url, setup, continuing=True)  # the same process: the same pid
    drawn = [[study.ask().suggest_float("lr", 1e-5, 1e-2, log=True) for _ in range(3)]
             for study in (first, second)]
    assert drawn[0] != drawn[1]
    alone = Setup(config={}, space={}, name="alone")  # one worker on its own file: reproducible
    again = [_study(optuna, f"sqlite:///{tmp_path / f'{i}.db'}", alone, continuing=False).ask()
             .suggest_float("lr", 1e-5, 1e-2, log=True) for i in range(2)]
    assert again[0] == again[1]


def test_a_trial_failed_before_its_worker_marked_it_is_left_to_whoever_asks(
        tmp_path: Path) -> None:
    """A trial another worker fails between this worker's ``ask`` and its mark (the CI failure
    of stop 60: Optuna's UpdateFinishedTrialError crashed the worker) is not claimed: no
    heartbeat kept for it, and it stays queued again for whichever worker asks next."""
    from rltrain.cli.study_storage import Heartbeats, open_storage

    url = f"sqlite:///{tmp_path / 'study.db'}"
    mine = optuna.create_study(storage=open_storage(optuna, url, 5), study_name="s")
    other = optuna.load_study(storage=open_storage(optuna, url, 5), study_name="s")
    beats, their_beats = Heartbeats(optuna, mine, 5), Heartbeats(optuna, other, 5)
    trial = mine.ask()
    their_beats.hand_back(other._storage.get_trial(trial._trial_id))
    assert beats.claim(trial) is False
    assert not beats._held
    assert [t.state.name for t in mine.get_trials()] == ["FAIL", "WAITING"]
    queued = mine.ask()  # the next worker to ask takes it, and claims it
    assert mine._storage.get_trial(queued._trial_id).system_attrs["failed_trial"] == trial.number
    assert beats.claim(queued)
    beats.close()
    their_beats.close()


@pytest.mark.parametrize("earlier_tune_alive", [False, True], ids=["lock-free", "lock-held"])
def test_unmarked_trials_are_taken_over_one_heartbeat_after_first_seen(
        tmp_path: Path, earlier_tune_alive: bool) -> None:
    """A running trial without rltrain's mark is an earlier rltrain's (it kept no heartbeats)
    only if it is still unmarked one heartbeat after it was first seen: a trial a live worker
    has just asked for is marked within moments and never taken over. An earlier rltrain's
    trial is left alone while that rltrain's ``tune`` holds its lock."""
    import fcntl

    from rltrain.cli.study_storage import OLD_LOCK, Heartbeats, open_storage

    url = f"sqlite:///{tmp_path / 'study.db'}"
    mine = optuna.create_study(storage=open_storage(optuna, url, 1), study_name="s")
    other = optuna.load_study(storage=open_storage(optuna, url, 1), study_name="s")
    lock = (tmp_path / OLD_LOCK).open("w")
    if earlier_tune_alive:
        fcntl.flock(lock, fcntl.LOCK_EX)
    beats = Heartbeats(optuna, mine, 1, tmp_path)
    their_beats = Heartbeats(optuna, other, 1, tmp_path)
    left = other.ask()  # the earlier rltrain's: never marked
    just_asked = other.ask()  # a live worker's, between its ask and its mark
    beats.take_over()
    assert [t.state.name for t in mine.get_trials()] == ["RUNNING", "RUNNING"]
    assert their_beats.claim(just_asked)
    time.sleep(1.2)
    beats.take_over()
    states = {t.number: t.state.name for t in mine.get_trials()}
    if earlier_tune_alive:
        assert states == {left.number: "RUNNING", just_asked.number: "RUNNING"}
    else:
        assert states == {left.number: "FAIL", just_asked.number: "RUNNING", 2: "WAITING"}
        assert mine.get_trials()[2].system_attrs["failed_trial"] == left.number
    lock.close()
    beats.close()
    their_beats.close()


def test_an_attempt_queued_again_is_unmarked_and_not_stale_until_a_worker_takes_it(
        tmp_path: Path) -> None:
    """Optuna copies a failed trial's attributes into the attempt it queues: the copy must not
    pass for marked (a worker that died before marking it would leave it running for ever), nor
    for stale by the inherited heartbeat of a journal (it would be failed again at once)."""
    from rltrain.cli.study_storage import JOURNAL_HEARTBEAT, Heartbeats, marked, open_storage

    url = f"journal:{tmp_path / 'journal.log'}"
    mine = optuna.create_study(storage=open_storage(optuna, url, 1), study_name="s")
    beats = Heartbeats(optuna, mine, 1)
    first = mine.ask()
    assert beats.claim(first) and marked(mine._storage.get_trial(first._trial_id))
    mine._storage.set_trial_system_attr(first._trial_id, JOURNAL_HEARTBEAT, time.time() - 600)
    beats.hand_back(mine._storage.get_trial(first._trial_id))
    again = mine.ask()  # the queued copy, with the first attempt's mark and old heartbeat
    copy = mine._storage.get_trial(again._trial_id)
    assert copy.user_attrs["rltrain:heartbeats"] == first.number and not marked(copy)
    beats._last_check = float("-inf")
    beats.take_over()  # not stale: its heartbeat counts from when it was taken
    assert mine._storage.get_trial(again._trial_id).state.name == "RUNNING"
    assert beats.claim(again) and marked(mine._storage.get_trial(again._trial_id))
    legacy = mine.ask()  # rltrain before 2026-12-07 marked True: trusted on a first attempt
    legacy.set_user_attr("rltrain:heartbeats", True)
    assert marked(mine._storage.get_trial(legacy._trial_id))
    beats.close()
