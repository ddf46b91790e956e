"""docs/results.md is what scripts/results_page.py writes from benchmarks/results/: a result
file added or changed without the page written again fails here."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest
from conftest import ROOT

pytest.importorskip("rliable")


@pytest.fixture(scope="module")
def results_page() -> ModuleType:
    spec = importlib.util.spec_from_file_location("results_page",
                                                  ROOT / "scripts" / "results_page.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_page"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def page(results_page: ModuleType) -> str:
    """The page as the script writes it now (its bootstraps take a while: once)."""
    return str(results_page.page())


@pytest.mark.slow
def test_the_results_page_is_written_from_the_result_files(page: str) -> None:
    assert "## PPO on Atari Breakout" in page and "| rltrain |" in page
    assert (ROOT / "docs" / "results.md").read_text(encoding="utf-8") == page, (
        "docs/results.md is out of date: python scripts/results_page.py > docs/results.md")


def test_published_iterations_are_placed_at_the_env_step_they_end_within_the_budget(
        results_page: ModuleType) -> None:
    published = {"env_steps_per_iteration": 250_000,
                 "runs": [[-20.0, -19.0, -18.0, -17.0, -16.0], [-21.0, -20.0, -19.0, -18.0, -17.0]]}
    curve = results_page.dopamine_curve(published, 1_000_000)
    assert list(curve) == [250_000, 500_000, 750_000, 1_000_000]  # the fifth ends past it
    assert curve[250_000] == [-20.0, -21.0] and curve[1_000_000] == [-17.0, -18.0]


def test_the_pong_section_names_the_random_policy_and_the_published_scores(
        results_page: ModuleType) -> None:
    lines = results_page.reference_section(results_page.REFERENCES[0])
    text = "\n".join(lines)
    random = results_page._load("atari_dqn_pong_random_seed0")
    assert f"Random policy on the same evaluation pipeline: {random['mean']:.1f}" in text
    assert "20.6 at 10,000,000 env steps" in text  # RL Zoo's DQN on Pong
    runs, peer = (results_page.REFERENCES[0].curves(name) for name in ("rltrain", "sb3"))
    assert ("| Dopamine DQN | " in text) == bool(runs or peer)
    assert all(f"| SB3 seed {seed} | " in text for seed in peer)
    assert "--library sb3 --preset dqn_atari" in text


@pytest.mark.slow
def test_the_summary_has_each_workloads_verdicts_and_links_to_its_section(
        results_page: ModuleType, page: str) -> None:
    summary, _, sections = page.partition("## At a glance")[2].partition("\n## ")
    for work in results_page.WORKLOADS:
        row = next(line for line in summary.splitlines()
                   if line.startswith(f"| [{work.title}]({results_page.anchor(work.title)}) |"))
        section = sections.split(f"{work.title}\n\n", 1)[1].split("\n## ", 1)[0]
        said = [line.removeprefix("Verdict: ").removeprefix("Verdict (fewer is better): ")
                .removesuffix(".") for line in section.splitlines()
                if line.startswith("Verdict")]
        assert said and all(f"| {verdict} " in row for verdict in said), (row, said)
    for ref in results_page.REFERENCES:  # no peer verdict: its seeds, linked
        runs = ref.curves("rltrain")
        assert f"| [{ref.title}]({results_page.anchor(ref.title)}) | " in summary
        assert f"| {len(runs)} and {len(ref.curves('sb3'))} SB3 (planned " in summary
        if runs:  # each seed's last evaluation, in seed order; no interval over so few
            finals = ", ".join(f"{runs[seed][-1][1]:.1f}" for seed in sorted(runs))
            assert f"| per seed {finals} |" in summary
    assert results_page.anchor("PPO on Atari Breakout, rltrain on Gymnasium's envs (before "
                               "2026-12-06)") == ("#ppo-on-atari-breakout-rltrain-on-"
                                                  "gymnasiums-envs-before-2026-12-06")
