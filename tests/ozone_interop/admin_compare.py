"""The field-by-field comparison of `ozone admin` answers (Ozone's SCM ring against ours), as pure functions, and
the list of allowed differences, read from docs/ozone-compatibility.md.

What is compared:
- a JSON answer is flattened into paths (list positions folded to ``[]``) and, per path, the set of values seen:
  the same paths on both sides (same fields), and the same strings at each path (same states, same enum
  spellings). Numbers, UUIDs, host:port pairs and timestamps are reduced to their kind, since they depend on the
  run (IDs, ports, sizes written at that moment);
- a text answer is compared line by line, after the same reductions, as a set of lines;
- the exit code of every command.

The differences allowed live in one place: the table between the ``admin-compare:allowed`` markers of
docs/ozone-compatibility.md ("Differences from Ozone's SCM in `ozone admin` output"), one row each: the commands (a
regular expression over the command's name), where (a regular expression over a flattened JSON path,
``line:<reduced line>`` or ``exit``) and why. :func:`load_allowed` reads it; a row that cannot be read fails
loudly, naming the row.

``python -m tests.ozone_interop.admin_compare`` compares the answers the last run kept (run-data/ozone-interop/
admin-compare/{ozone,ours}.json) again with the current rules and the current table, without starting a ring.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ozone-compatibility.md"
ANSWERS = REPO / "run-data" / "ozone-interop" / "admin-compare"
BEGIN = "<!-- admin-compare:allowed:begin"
END = "<!-- admin-compare:allowed:end"


@dataclass(frozen=True)
class Command:
    """One `ozone admin` invocation. ``name`` keys the answers and the allowances; ``args`` may hold
    placeholders (``{container}``, ...) filled from the ring the command runs on."""

    name: str
    args: tuple[str, ...]
    json: bool = False


def cmd(name: str, *args: str, json_out: bool = False) -> Command:
    return Command(name, tuple(args), json_out)


@dataclass(frozen=True)
class Difference:
    command: str
    where: str  # a JSON path, "line:<line>", "exit" or "json"
    ozone: str
    ours: str

    def __str__(self) -> str:
        return f"{self.command} | {self.where} | Ozone: {self.ozone} | ours: {self.ours}"


@dataclass(frozen=True)
class Allowed:
    """A difference allowed: the commands (a regular expression over `Command.name`), where (a regular expression
    over a flattened JSON path, "line:<reduced line>" or "exit"), and why."""

    commands: str
    where: str
    reason: str

    def covers(self, d: Difference) -> bool:
        return bool(re.fullmatch(self.commands, d.command) and re.fullmatch(self.where, d.where))


class AllowedTableError(ValueError):
    """The table of allowed differences in the docs cannot be read."""


def _cells(row: str) -> list[str]:
    """The cells of one Markdown table row; ``\\|`` is a literal bar (as GitHub's tables read it)."""
    body = row.strip()
    if not (body.startswith("|") and body.endswith("|")):
        raise AllowedTableError(f"not a table row (it must start and end with '|'): {row!r}")
    parts = re.split(r"(?<!\\)\|", body[1:-1])
    return [p.strip().replace("\\|", "|") for p in parts]


def _code(cell: str, row: str, column: str) -> str:
    m = re.fullmatch(r"`([^`]+)`", cell)
    if m is None:
        raise AllowedTableError(f"the {column} cell must be one regular expression in backticks: {row!r}")
    try:
        re.compile(m.group(1))
    except re.error as exc:
        raise AllowedTableError(f"the {column} cell is not a regular expression ({exc}): {row!r}") from exc
    return m.group(1)


def parse_allowed(markdown: str) -> list[Allowed]:
    """The rows of the table between the ``admin-compare:allowed`` markers: commands | where | why."""
    lines = markdown.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith(BEGIN)]
    ends = [i for i, ln in enumerate(lines) if ln.startswith(END)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise AllowedTableError(f"expected one '{BEGIN} ...' line and one '{END} ...' line after it")
    rows = [ln for ln in lines[starts[0] + 1:ends[0]] if ln.strip()]
    if len(rows) < 2 or not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", rows[1].replace(" ", "")):
        raise AllowedTableError("the allowed differences must be a Markdown table with a header row")
    allowed = []
    for row in rows[2:]:
        cells = _cells(row)
        if len(cells) != 3:
            raise AllowedTableError(f"expected 3 cells (commands | where | why), found {len(cells)}: {row!r}")
        commands, where, why = cells
        if not why:
            raise AllowedTableError(f"an allowed difference needs its reason: {row!r}")
        allowed.append(Allowed(_code(commands, row, "commands"), _code(where, row, "where"), why))
    return allowed


def load_allowed(doc: Path = DOC) -> list[Allowed]:
    return parse_allowed(doc.read_text())


# ---------------------------------------------------------------------------------------------- normalising

UUID_RE = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
TIME_RE = re.compile(
    r"(?<!\d)\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?(\.\d+)?(Z|[+-]\d{2}:?\d{2})?\b"
    r"|\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d+ [\d:]+ \w+ \d{4}\b"
)
ADDR_RE = re.compile(r"\b(localhost|127\.0\.0\.\d+|[\w.-]+\.local)(:\d+)?\b")
NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(\.\d+)?(?![\w.])")


def reduce_text(value: str) -> str:
    """A string with what depends on the run (UUIDs, times, addresses, numbers) reduced to its kind."""
    value = UUID_RE.sub("<uuid>", value)
    value = TIME_RE.sub("<time>", value)
    value = ADDR_RE.sub("<addr>", value)
    value = NUMBER_RE.sub("<n>", value)
    return value


def reduce_value(value: Any) -> str:
    if value is None:
        return "<null>"
    if isinstance(value, bool):
        return "<bool>"
    if isinstance(value, int | float):
        return "<n>"
    return reduce_text(str(value))


def flatten(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, reduced value) pairs of a JSON document; list positions fold into ``[]``, an empty container is a
    value of its own (``<empty list>``, ``<empty object>``)."""
    if isinstance(value, dict):
        if not value:
            yield path, "<empty object>"
        for key, inner in value.items():
            key = reduce_text(str(key))  # some keys are IDs (replicaIndexes: "<uuid>(host/ip)")
            yield from flatten(inner, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        if not value:
            yield path, "<empty list>"
        for inner in value:
            yield from flatten(inner, f"{path}[]")
    else:
        yield path, reduce_value(value)


def json_payload(stdout: str) -> Any:
    """The JSON document a command printed (some print a line of text before it)."""
    start = min((i for i in (stdout.find("{"), stdout.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise ValueError(f"no JSON in the answer: {stdout[:300]!r}")
    return json.loads(stdout[start:])


def noise(line: str) -> bool:
    """A log line of the CLI's own JVM (a WARN of its logger on stderr, a stack frame), or the notice its failover
    proxy prints when the SCM it asked first sends it to another (which SCM it asks first depends on the run:
    the leader moves under `scm transfer`), not an answer."""
    return bool(re.match(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d+ (WARN|INFO|DEBUG)\b", line)
                or re.match(r"^\S*Exception: .* Retrying in \d+ms after \d+ failover attempt\(s\)\.$", line)
                ) or line.startswith("\tat ")


def compare_answers(name: str, ozone: dict[str, Any], ours: dict[str, Any], is_json: bool) -> list[Difference]:
    """The differences between Ozone's and our answer to one command (each {"rc", "stdout", "stderr"})."""
    diffs: list[Difference] = []
    if (ozone["rc"] == 0) != (ours["rc"] == 0):
        diffs.append(Difference(name, "exit", str(ozone["rc"]), str(ours["rc"])))
    if is_json and ozone["rc"] == 0 and ours["rc"] == 0:
        try:
            left, right = json_payload(ozone["stdout"]), json_payload(ours["stdout"])
        except ValueError as exc:
            return [*diffs, Difference(name, "json", ozone["stdout"][:200], f"{exc}")]
        lvals: dict[str, set[str]] = {}
        rvals: dict[str, set[str]] = {}
        for path, val in flatten(left):
            lvals.setdefault(path, set()).add(val)
        for path, val in flatten(right):
            rvals.setdefault(path, set()).add(val)
        for path in sorted(set(lvals) | set(rvals)):
            lv, rv = lvals.get(path), rvals.get(path)
            if lv != rv:
                diffs.append(Difference(name, path, "missing" if lv is None else ", ".join(sorted(lv)),
                                        "missing" if rv is None else ", ".join(sorted(rv))))
    texts = ("stderr",) if is_json or ozone["rc"] != 0 else ("stdout", "stderr")
    left_lines = {reduce_text(ln).rstrip() for t in texts for ln in ozone[t].splitlines()
                  if ln.strip() and not noise(ln)}
    right_lines = {reduce_text(ln).rstrip() for t in texts for ln in ours[t].splitlines()
                   if ln.strip() and not noise(ln)}
    for line in sorted(left_lines - right_lines):
        diffs.append(Difference(name, f"line:{line}", "present", "missing"))
    for line in sorted(right_lines - left_lines):
        diffs.append(Difference(name, f"line:{line}", "missing", "present"))
    return diffs


def compare_all(commands: Sequence[Command], ozone: dict[str, dict[str, Any]],
                ours: dict[str, dict[str, Any]]) -> list[Difference]:
    diffs: list[Difference] = []
    for command in commands:
        diffs.extend(compare_answers(command.name, ozone[command.name], ours[command.name], command.json))
    return diffs


def allowance(allowed: Sequence[Allowed], d: Difference) -> Allowed | None:
    return next((a for a in allowed if a.covers(d)), None)


def report(diffs: Sequence[Difference], allowed: Sequence[Allowed], commands: int) -> str:
    """Every difference (allowed ones marked) and the allowed rows this run did not need."""
    stale = [a for a in allowed if not any(a.covers(d) for d in diffs)]
    bad = [d for d in diffs if allowance(allowed, d) is None]
    return "\n".join([
        f"{commands} ozone admin invocations compared; {len(diffs)} differences, {len(bad)} not allowed:",
        *(("  allowed  " if allowance(allowed, d) else "  NEW      ") + str(d) for d in diffs),
        *(f"  not seen this run (allowed): {a.commands} | {a.where}" for a in stale),
    ])


def main(argv: Sequence[str]) -> int:
    from tests.ozone_interop.test_admin_compare import COMMANDS

    base = Path(argv[0]) if argv else ANSWERS
    ozone = json.loads((base / "ozone.json").read_text())
    ours = json.loads((base / "ours.json").read_text())
    commands = [c for c in COMMANDS if c.name in ozone and c.name in ours]
    allowed = load_allowed()
    diffs = compare_all(commands, ozone, ours)
    print(report(diffs, allowed, len(commands)))
    return 1 if any(allowance(allowed, d) is None for d in diffs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
