"""A step added to ``planner.Action`` and handled nowhere fails type checking where the steps are performed.

The operator package and the simulated world are copied into a temporary directory, a new step class joins the
``Action`` union there, and mypy (the project's own configuration, ``[tool.mypy]`` of pyproject.toml) checks the
copy: it must report the new step at the ``assert_never`` of ``Reconciler.act`` and of ``World.apply``, and
nothing else.
"""

from __future__ import annotations

import pathlib
import shutil
import tomllib

import mypy.api

from ozone_scm_operator.planner import actions

ROOT = pathlib.Path(__file__).resolve().parents[3]
NEW_STEP = '''

@dataclasses.dataclass(frozen=True, kw_only=True)
class Frobnicate(Step):
    """A step nobody performs yet."""

    how_hard: int
'''


def _copy(tmp: pathlib.Path) -> pathlib.Path:
    package = tmp / "operator" / "ozone_scm_operator"
    shutil.copytree(ROOT / "operator" / "ozone_scm_operator", package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "tests" / "operator" / "unit").mkdir(parents=True)
    for name in ("__init__.py", "operator/__init__.py", "operator/unit/__init__.py", "operator/unit/sim.py"):
        shutil.copy(ROOT / "tests" / name, tmp / "tests" / name)
    return package


def _add_step(package: pathlib.Path) -> None:
    path = package / "planner" / "actions.py"
    text = path.read_text()
    union = "Action: TypeAlias = (\n    Apply\n"
    assert union in text
    text = text.replace(union, "Action: TypeAlias = (\n    Frobnicate\n    | Apply\n")
    text = text.replace("\n\nAction: TypeAlias = (", NEW_STEP + "\n\nAction: TypeAlias = (", 1)
    path.write_text(text)


def _ini(section: str, values: dict[str, object]) -> str:
    def text(v: object) -> str:
        return ",".join(map(str, v)) if isinstance(v, list) else str(v)

    return f"[{section}]\n" + "".join(f"{k} = {text(v)}\n" for k, v in values.items()) + "\n"


def _line_of(path: pathlib.Path, needle: str) -> int:
    lines = [i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    assert len(lines) == 1, (path, needle, lines)
    return lines[0]


def test_a_step_nobody_handles_fails_type_checking(tmp_path: pathlib.Path) -> None:
    assert "Frobnicate" not in {c.__name__ for c in actions.ACTIONS}
    package = _copy(tmp_path)
    _add_step(package)
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    reconciler = package / "reconciler.py"
    sim = tmp_path / "tests" / "operator" / "unit" / "sim.py"
    (tmp_path / "mypy.ini").write_text(  # the project's settings, pointed at the copy
        _ini("mypy", {**{k: v for k, v in config.items() if k not in ("files", "exclude", "overrides")},
                      "mypy_path": f"{tmp_path / 'operator'}:{tmp_path}"})
        + "".join(_ini(f"mypy-{m}", {k: v for k, v in o.items() if k != "module"})
                  for o in config.get("overrides", ()) for m in o["module"])
    )
    stdout, stderr, status = mypy.api.run([
        "--config-file", str(tmp_path / "mypy.ini"), "--cache-dir", str(tmp_path / "cache"),
        "--no-error-summary", "--show-absolute-path", str(package), str(sim),
    ])
    assert status == 1, (stdout, stderr)
    errors = [line for line in stdout.splitlines() if ": error: " in line]
    where = {
        (str(reconciler), _line_of(reconciler, "assert_never(a)")),
        (str(sim), _line_of(sim, "assert_never(a)")),
    }
    found = {(line.split(":")[0], int(line.split(":")[1])) for line in errors}
    assert found == where, stdout
    assert all('"Frobnicate"' in line and "assert_never" in line for line in errors), stdout
