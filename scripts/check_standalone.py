"""Check that nothing in the repository reads a path outside it.

Called by ``make lint`` (so ``make test`` and CI run it) and by
``tests/unit/test_standalone_check.py``, which also feeds it hand-made violations. It reads
files only; it must not import the project or touch anything outside the repository.

A fresh clone must build, run and test on its own: no sibling data directory beside it, no host paths.
What it flags, per file type:

* Python: path expressions derived from ``__file__`` (``Path(__file__).parents[N]``,
  ``.parent`` chains, ``os.path.dirname``, ``/ ".."``), followed through module-level names
  such as ``REPO_ROOT``, that climb above the repository root; string constants with a
  leading ``..`` component (relative to the working directory, which is the repository root
  under make).
* Shell, Makefile, Dockerfile, YAML, TOML, config: a leading relative ``..`` outside a
  ``$(dirname "$0")/..`` idiom, and that idiom when it climbs above the root.
* Markdown: relative links whose target lies above the root.
* Every text file: the sibling data directory (its name after ``../``, or followed by ``/data/``;
  see ``SIBLING_DATA``) and absolute paths under host roots that are no part of an installed
  system (``/work``, ``/home``, ...).

Usage: ``python scripts/check_standalone.py [ROOT]``; exits 1 with one line per finding.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# Directories never scanned (build products, environments, data written by runs).
SKIP_DIRS = {".git", ".venv", ".stamps", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
             "__pycache__", "run-data", "dist", "build", ".tools", "node_modules"}
SKIP_SUFFIXES = {".pyc", ".log", ".tsv", ".png", ".jpg", ".gz", ".whl", ".ldb", ".sst"}
SHELL_LIKE_NAMES = {"Makefile", "Dockerfile", "run"}
SHELL_LIKE_SUFFIXES = {".sh", ".mk", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".j2", ".tpl", ".txt", ".xml"}

# These two name the patterns they look for; the test feeds them to the checker instead.
EXEMPT = {"scripts/check_standalone.py", "tests/unit/test_standalone_check.py"}

# Host roots no file of the project may name (the project's own sibling checkout, users' homes).
HOST_ROOTS = re.compile(r"(?<![\w.~/-])/(?:work|home|root|mnt|shared|Users)(?=/|\b)(?![\w-])")
SIBLING_DATA = re.compile(r"\.\./shared\b|(?<![\w-])shared/data/")
LEADING_DOTDOT = re.compile(r"(?:^|(?<=[\s\"'=(:,`\[]))\.\.(?=/|\s|[\"')`]|$)")
DIRNAME_UP = re.compile(r"dirname\s+[\"']?\$\{?(?:0|BASH_SOURCE(?:\[0\])?)\}?[\"']?\s*\)\"?((?:/\.\.)+)")
MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def repo_files(root: Path) -> list[Path]:
    """Tracked and untracked-but-not-ignored files (git), or a plain walk without git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True,
        ).stdout.decode()
        names = [n for n in out.split("\0") if n]
        files = [root / n for n in names]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            files.extend(Path(dirpath) / f for f in filenames)
    keep = []
    for f in files:
        rel = f.relative_to(root)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if f.suffix in SKIP_SUFFIXES or not f.is_file():
            continue
        keep.append(f)
    return sorted(keep)


def _depth(rel: PurePosixPath) -> int:
    """Directories between the repository root and the file (0 for a file at the root)."""
    return len(rel.parts) - 1


# ----------------------------------------------------------------------------- Python


class _PathLevels(ast.NodeVisitor):
    """Follows expressions built from ``__file__`` and reports any that climb above the root.

    A value is tracked as its level relative to the repository root: the file itself sits at
    ``depth + 1`` (its own name counts as one level), its directory at ``depth``, the root at 0.
    Anything below 0 leaves the repository.
    """

    def __init__(self, rel: PurePosixPath) -> None:
        self.rel = rel
        self.names: dict[str, int] = {}
        self.findings: list[Finding] = []

    def level(self, node: ast.expr) -> int | None:
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return _depth(self.rel) + 1
            return self.names.get(node.id)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("Path", "PurePath", "PosixPath") and node.args:
                return self.level(node.args[0])
            if isinstance(func, ast.Attribute):
                if func.attr in ("resolve", "absolute", "expanduser") and not node.args:
                    return self.level(func.value)
                if func.attr in ("abspath", "realpath", "normpath") and node.args:
                    return self.level(node.args[0])
                if func.attr == "dirname" and node.args:
                    inner = self.level(node.args[0])
                    return None if inner is None else inner - 1
                if func.attr == "join" and node.args:
                    base = self.level(node.args[0])
                    if base is None:
                        return None
                    for arg in node.args[1:]:
                        base = self._apply_const(base, arg)
                        if base is None:
                            return None
                    return base
            return None
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            inner = self.level(node.value)
            return None if inner is None else inner - 1
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
            inner = self.level(node.value.value)
            idx = node.slice
            if inner is not None and isinstance(idx, ast.Constant) and isinstance(idx.value, int):
                return inner - 1 - idx.value
            return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            base = self.level(node.left)
            return None if base is None else self._apply_const(base, node.right)
        return None

    @staticmethod
    def _apply_const(base: int, arg: ast.expr) -> int | None:
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            return base  # an unknown component goes down, never up
        for part in arg.value.split("/"):
            if part == "..":
                base -= 1
            elif part not in ("", "."):
                base += 1
        return base

    def check(self, node: ast.expr) -> None:
        lvl = self.level(node)
        if lvl is not None and lvl < 0:
            self.findings.append(Finding(
                str(self.rel), node.lineno, "path built from __file__ climbs above the repository root"))

    def visit_Assign(self, node: ast.Assign) -> None:
        lvl = self.level(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and lvl is not None:
                self.names[target.id] = lvl
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None and isinstance(node.target, ast.Name):
            lvl = self.level(node.value)
            if lvl is not None:
                self.names[node.target.id] = lvl
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.check(child)
            self.visit(child)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and "\n" not in node.value:
            parts = node.value.split("/")
            if len(parts) > 1 and parts[0] == "..":
                self.findings.append(Finding(
                    str(self.rel), node.lineno,
                    f"relative path {node.value!r} leaves the repository (paths resolve from its root)"))


def check_python(rel: PurePosixPath, text: str) -> list[Finding]:
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        return [Finding(str(rel), exc.lineno or 0, f"cannot parse: {exc.msg}")]
    visitor = _PathLevels(rel)
    visitor.visit(tree)
    # one finding per line: an outer expression and its sub-expressions may both climb
    seen: set[int] = set()
    out = []
    for f in visitor.findings:
        if f.line not in seen:
            seen.add(f.line)
            out.append(f)
    return out


# ----------------------------------------------------------------------------- other files


def check_shell_like(rel: PurePosixPath, text: str) -> list[Finding]:
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        for m in DIRNAME_UP.finditer(code):
            ups = m.group(1).count("..")
            if ups > _depth(rel):
                out.append(Finding(str(rel), no, "$(dirname $0)/.. climbs above the repository root"))
        stripped = DIRNAME_UP.sub("", code)
        if LEADING_DOTDOT.search(stripped):
            out.append(Finding(str(rel), no, "relative path starting with '..' leaves the repository"))
    return out


def check_markdown(rel: PurePosixPath, text: str) -> list[Finding]:
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        for m in MD_LINK.finditer(line):
            target = m.group(1)
            if "://" in target or target.startswith(("mailto:", "/")):
                continue
            level = _depth(rel)
            for part in target.split("/"):
                if part == "..":
                    level -= 1
                    if level < 0:
                        out.append(Finding(str(rel), no, f"link {target!r} points above the repository root"))
                        break
                elif part not in ("", "."):
                    level += 1
    return out


def _inside_an_image(rel: PurePosixPath) -> bool:
    """A Dockerfile/Containerfile names paths of the image it builds, not of the host."""
    return rel.name.startswith(("Dockerfile", "Containerfile"))


def check_any(rel: PurePosixPath, text: str) -> list[Finding]:
    out = []
    image = _inside_an_image(rel)
    for no, line in enumerate(text.splitlines(), 1):
        if SIBLING_DATA.search(line):
            out.append(Finding(str(rel), no, "names the shared/ directory beside the checkout; copy the data in"))
        m = None if image else HOST_ROOTS.search(line)
        if m:
            out.append(Finding(str(rel), no, f"names the host path {m.group(0)!r} outside the repository"))
    return out


def check_file(rel: PurePosixPath, text: str) -> list[Finding]:
    findings = check_any(rel, text)
    name = rel.name
    if name.endswith((".py", ".pyi")):
        findings += check_python(rel, text)
    elif name.endswith(".md"):
        findings += check_markdown(rel, text)
    elif name in SHELL_LIKE_NAMES or any(name.endswith(s) for s in SHELL_LIKE_SUFFIXES) or name.startswith("."):
        findings += check_shell_like(rel, text)
    return findings


def check_tree(root: Path, files: Iterable[Path] | None = None) -> Iterator[Finding]:
    for f in files if files is not None else repo_files(root):
        if f.relative_to(root).as_posix() in EXEMPT:
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        yield from check_file(PurePosixPath(f.relative_to(root).as_posix()), text)


def main(argv: list[str]) -> int:
    root = Path(argv[1]).resolve() if len(argv) > 1 else Path(__file__).resolve().parent.parent
    findings = list(check_tree(root))
    for f in findings:
        print(f, file=sys.stderr)
    if findings:
        print(f"check_standalone: {len(findings)} reference(s) to paths outside {root}", file=sys.stderr)
        return 1
    print(f"check_standalone: nothing in {root} reads a path outside it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
