"""``import operator`` is the standard library's module under pytest, never this folder nor the repository's
``operator/`` (the operator project's folder, never a package itself): the test tree is the package ``tests``, so this
folder is ``tests.operator`` and neither ``tests/`` nor a folder holding an ``operator`` package is on ``sys.path``."""

import importlib.util
import operator
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def test_operator_is_the_standard_library_module() -> None:
    assert operator.itemgetter(1)("ab") == "b"
    assert operator.__file__ is not None and Path(operator.__file__).resolve().parent == STDLIB
    spec = importlib.util.find_spec("operator")
    assert spec is not None and spec.origin is not None and Path(spec.origin).resolve().parent == STDLIB


def test_this_folder_is_imported_by_its_full_name() -> None:
    assert __name__ == "tests.operator.test_no_shadowing"
    assert __package__ == "tests.operator"


def test_no_path_entry_offers_a_package_named_operator() -> None:
    """Checked on ``sys.path`` itself: ``operator`` is imported at interpreter start-up, so a shadowing entry would
    only bite a process that imports it later (``python -S``)."""
    assert not (ROOT / "operator" / "__init__.py").exists()
    entries = [Path(p or ".").resolve() for p in sys.path]
    shadows = [e for e in entries if e != STDLIB and ((e / "operator" / "__init__.py").exists()
                                                      or (e / "operator.py").exists())]
    assert shadows == []


def test_a_fresh_interpreter_at_the_root_gets_the_standard_library_module() -> None:
    """``python -S`` from the repository root, where ``operator/`` is a folder: a folder without ``__init__.py`` is a
    namespace portion, which never wins over a module found anywhere on the path."""
    code = "import operator; print(operator.__file__)"
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()).resolve().parent == STDLIB
