"""``rltrain.settings.module_finder``: a dotted module path found as the import system would
find it, with no module imported (importing runs code: what an untrusted config names is
checked first), namespace packages inside unimported ones included."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rltrain.settings.module_finder import MODULE_NAME, find_module_path


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``pkg/__init__.py`` (its import would raise), ``pkg/space/`` (a namespace package),
    ``pkg/space/leaf.py``, and a plain module ``plain.py``, on the search path."""
    (tmp_path / "pkg" / "space").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (tmp_path / "pkg" / "space" / "leaf.py").write_text("raise RuntimeError('imported')\n")
    (tmp_path / "plain.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_each_module_of_a_dotted_path_is_found_and_none_imported(tree: Path) -> None:
    found = find_module_path("pkg.space.leaf")
    assert [m.name for m in found] == ["pkg", "pkg.space", "pkg.space.leaf"]
    assert found[0].origin == str(tree / "pkg" / "__init__.py")
    assert found[0].locations == (str(tree / "pkg"),)
    assert found[1].origin is None and found[1].locations == (str(tree / "pkg" / "space"),)
    assert found[2].origin == str(tree / "pkg" / "space" / "leaf.py") and not found[2].locations
    assert not {"pkg", "pkg.space", "pkg.space.leaf"} & set(sys.modules)


def test_a_missing_module_or_a_submodule_of_a_plain_module_is_an_import_error(
        tree: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match=r"pkg\.missing"):
        find_module_path("pkg.missing")
    with pytest.raises(ImportError, match="'plain' is not a package"):
        find_module_path("plain.inner")
    assert "plain" not in sys.modules


def test_an_imported_module_is_read_from_sys_modules() -> None:
    found = find_module_path("json.decoder")
    assert found[-1].origin == sys.modules["json.decoder"].__file__


@pytest.mark.parametrize(("name", "ok"), [("a.b_c.D1", True), ("a..b", False), ("1a", False),
                                          ("a.b/c", False), ("os;x", False)])
def test_module_names_are_dotted_identifiers(name: str, ok: bool) -> None:
    assert bool(MODULE_NAME.fullmatch(name)) is ok
