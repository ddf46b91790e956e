"""The package's house rules that no linter checks: the tests mirror the modules (each module
has its ``test_<module>.py``, is imported by a test, or names here the tests that cover it), and
only the command line and the renderers print."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "rltrain"
TESTS = Path(__file__).resolve().parent

#: Modules that no test imports by name, with the tests that exercise them through the
#: Trainer, the command line or a real run: ``"file"`` (it names something of the module) or
#: ``"file::phrase"`` (what it checks of the module, found in its text).
COVERED_BY: dict[str, tuple[str, ...]] = {
    "rltrain.agents.continuous": ("unit/agents/test_sac.py", "unit/agents/test_td3.py"),
    "rltrain.agents.nn.actor_critic": ("unit/agents/test_ppo.py",),
    "rltrain.agents.nn.recurrent": ("unit/agents/test_recurrent_ppo.py",),
    "rltrain.buffers.observations": ("unit/buffers/test_replay_buffer.py",),
    "rltrain.checkpoint.intact": ("scenarios/test_checkpoint_integrity.py",),
    "rltrain.checkpoint.sharded": (
        "scenarios/test_distributed.py::read_checkpoint(path, distributed=",),
    "rltrain.cli.analysis": ("cli/test_compare.py", "cli/test_plot.py", "cli/test_tune.py"),
    "rltrain.cli.compare_figure": ("cli/test_compare.py::the_figure",),
    "rltrain.cli.processes": ("cli/test_seeds.py", "cli/test_tune.py"),
    "rltrain.cli.records": ("scenarios/test_hostile_records.py",),
    "rltrain.config.hints": ("unit/config/test_config.py::Did you mean",
                             "cli/test_first_hour.py::is a list; got"),
    "rltrain.envs.pickling": ("scenarios/test_hostile_runs.py",),
    "rltrain.envs.workers": ("scenarios/test_failures.py", "scenarios/test_hung_envs.py"),
    "rltrain.envs.wrapper_state": ("unit/envs/test_emulator.py", "unit/envs/test_physics.py"),
    "rltrain.inference.export": ("unit/inference/test_policy.py",),
    "rltrain.observe.callbacks": ("unit/trainer/test_trainer.py",),
    "rltrain.observe.model_summary": ("unit/trainer/test_trainer_api.py::model_summary.txt",),
    "rltrain.observe.renderers.logger": ("unit/observe/test_loggers.py",),
    "rltrain.observe.renderers.tensorboard": ("unit/observe/test_renderers.py",),
    "rltrain.strategies.components": ("unit/strategies/test_engine.py",),
    "rltrain.strategies.run.agreement": ("scenarios/test_distributed.py",),
    "rltrain.strategies.run.failure": ("scenarios/test_failures.py",),
    "rltrain.strategies.run.storage": ("unit/strategies/test_engine.py",),
    "rltrain.trainer.description": ("unit/config/test_config.py",),
    "rltrain.trainer.outputs": ("unit/trainer/test_trainer.py::summary.json",
                                "unit/trainer/test_trainer_api.py::model_summary.txt"),
}


def modules() -> dict[str, Path]:
    """Every module of the package but the packages' ``__init__`` and private ones."""
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p
            for p in sorted(PACKAGE.rglob("*.py"))
            if p.name != "__init__.py" and not p.name.startswith("_")}


def imported_by_tests() -> set[str]:
    """The modules a test imports: by their own name, or a name their package exports."""
    found: set[str] = set()
    for test in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(test.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rltrain"):
                assert node.module is not None
                found.add(node.module)
                try:
                    package = importlib.import_module(node.module)
                except ImportError:
                    continue
                for alias in node.names:
                    value = getattr(package, alias.name, None)
                    found.add(str(getattr(value, "__module__", None)
                                  or getattr(value, "__name__", "")))
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
    return found


def public_names(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")}


def test_each_module_has_its_tests_or_names_where_they_are() -> None:
    named = {p.name for p in TESTS.rglob("test_*.py")}
    imported = imported_by_tests()
    uncovered = sorted(m for m, p in modules().items()
                       if f"test_{p.stem}.py" not in named and m not in imported
                       and m not in COVERED_BY)
    assert uncovered == [], ("modules without a test_<module>.py, not imported by a test and "
                             f"not in COVERED_BY: {uncovered}")


def test_the_tests_named_for_a_module_exist_and_exercise_it() -> None:
    found, wrong = modules(), []
    for module, tests in COVERED_BY.items():
        assert module in found, f"{module} is gone: drop it from COVERED_BY"
        words = public_names(found[module]) | {found[module].stem}
        for test in tests:
            path, _, phrase = test.partition("::")
            text = (TESTS / path).read_text(encoding="utf-8")
            named = (phrase in text if phrase else
                     any(re.search(rf"\b{re.escape(w)}\b", text) for w in words))
            if not named:
                wrong.append(f"{path} names nothing of {module} ({phrase or sorted(words)})")
    assert wrong == [], "\n".join(wrong)


def test_only_the_command_line_and_the_renderers_print() -> None:
    allowed = (PACKAGE / "cli", PACKAGE / "observe" / "renderers")
    printing = [f"{p.relative_to(PACKAGE.parent)}:{node.lineno}"
                for p in PACKAGE.rglob("*.py") if not p.is_relative_to(allowed[0])
                and not p.is_relative_to(allowed[1])
                for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"]
    assert printing == [], printing
