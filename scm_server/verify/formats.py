"""Reading recorded histories from files, whatever wrote them, for ``ozone-scm debug verify``.

Where it sits: the CLI (``scm_server/cli/verify_cmd.py``) calls :func:`load_operations` with a
path and a model name; tests call it on hand-made files. It reads the one file it is given and
returns :class:`~scm_server.verify.linearizability.Operation` lists; it never runs the checker.
Bad input raises :class:`HistoryFormatError` naming the file, the line and what is wrong.

Three formats, told apart by their first non-blank line:

* ``jsonl``: one JSON object per line, as :meth:`HistoryRecorder.save` writes them (the Raft
  chaos tests keep ``history.jsonl`` next to a failing run);
* ``jepsen-log``: Jepsen's ``jepsen.util`` log lines of a register test (the etcd histories
  in ``tests/verify/data/jepsen-etcd``), read by :func:`~scm_server.verify.history.parse_jepsen_log`;
* ``edn``: one Jepsen operation map per line, e.g.
  ``{:process 0, :type :invoke, :f :append, :key "k1", :value "x"}`` (types ``:invoke``,
  ``:ok``, ``:fail``, ``:info``; functions ``:read``/``:get``, ``:write``/``:put``,
  ``:append``, ``:cas`` with ``[from to]``; ``:key`` makes it a key-value history; ``:time``,
  when every line has one, orders events, otherwise the line order does).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from scm_server.verify.history import jepsen_completion, load_history, parse_jepsen_log, to_operations
from scm_server.verify.linearizability import UNKNOWN, Operation
from scm_server.verify.models import KvInput, KvModel, Model, RegisterInput, RegisterModel

FORMATS = ("jsonl", "jepsen-log", "edn")
MODELS = ("register", "kv")


class HistoryFormatError(ValueError):
    """A history file that cannot be read: the message names the file, line and the fix."""


def make_model(name: str, *, kv_initial: str | None = None) -> Model:
    if name == "register":
        return RegisterModel()
    if name == "kv":
        return KvModel(initial=kv_initial)
    raise HistoryFormatError(f"unknown model {name!r}: use one of {', '.join(MODELS)}")


def detect_format(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            text = line.strip()
            if not text:
                continue
            if text.startswith("{:") or text.startswith("{ :"):
                return "edn"
            if text.startswith("{"):
                return "jsonl"
            if re.match(r"^INFO\s+jepsen\.util\s+-", text):
                return "jepsen-log"
            raise HistoryFormatError(
                f"{path}:1: not a history this tool reads (JSON lines, Jepsen log lines or Jepsen EDN maps): "
                f"{text[:80]!r}"
            )
    raise HistoryFormatError(f"{path}: the file is empty; nothing to check")


def load_operations(path: Path, model: str, fmt: str | None = None) -> tuple[list[Operation], str]:
    """Operations of the history in ``path`` for ``model`` ("register" or "kv"); returns the
    operations and the format read (``fmt`` overrides the detection)."""
    if model not in MODELS:
        raise HistoryFormatError(f"unknown model {model!r}: use one of {', '.join(MODELS)}")
    if not path.is_file():
        raise HistoryFormatError(f"{path}: no such file")
    fmt = fmt or detect_format(path)
    if fmt == "jsonl":
        ops = _load_jsonl(path)
    elif fmt == "jepsen-log":
        try:
            ops = parse_jepsen_log(path)
        except ValueError as exc:
            raise HistoryFormatError(str(exc)) from exc
    elif fmt == "edn":
        ops = _load_edn(path)
    else:
        raise HistoryFormatError(f"unknown history format {fmt!r}: use one of {', '.join(FORMATS)}")
    _check_model_fits(path, ops, model)
    return ops, fmt


def _check_model_fits(path: Path, ops: list[Operation], model: str) -> None:
    want = KvInput if model == "kv" else RegisterInput
    other = "register" if model == "kv" else "kv"
    for op in ops:
        if not isinstance(op.input, want):
            kind = type(op.input).__name__
            hint = f"check it with --model {other}" if kind in ("KvInput", "RegisterInput") else \
                "only register and key-value histories can be checked"
            raise HistoryFormatError(f"{path}: the history holds {kind} operations, not {model} ones; {hint}")


def _load_jsonl(path: Path) -> list[Operation]:
    try:
        return to_operations(load_history(path))
    except json.JSONDecodeError as exc:
        raise HistoryFormatError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from exc
    except (KeyError, TypeError, IndexError) as exc:
        raise HistoryFormatError(
            f"{path}: a line lacks the fields HistoryRecorder.save writes (client, input, call, status, "
            f"output, ret, error): {type(exc).__name__} {exc}"
        ) from exc
    except ValueError as exc:
        raise HistoryFormatError(f"{path}: {exc}") from exc


# --------------------------------------------------------------------------------- EDN

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<open>[{\[(])|(?P<close>[}\])])
      | "(?P<str>(?:[^"\\]|\\.)*)"
      | (?P<atom>[^\s,{}\[\]()"]+)
    )\s*,?""",
    re.VERBOSE,
)
_CLOSE = {"{": "}", "[": "]", "(": ")"}


class _Keyword(str):
    """An EDN keyword (``:ok``), kept apart from strings."""


def _atom(text: str) -> Any:
    if text.startswith(":"):
        return _Keyword(text[1:])
    if text == "nil":
        return None
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return _Keyword(text)  # a bare symbol


def parse_edn(text: str) -> Any:
    """The subset of EDN Jepsen histories use: maps, vectors, lists, keywords, strings,
    integers, floats, nil and booleans."""
    pos = 0
    stack: list[tuple[str, list[Any]]] = []
    result: list[Any] = []
    while pos < len(text):
        if text[pos:].strip(" \t\r\n,") == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"cannot read EDN at column {pos + 1}: {text[pos:pos + 20]!r}")
        pos = m.end()
        value: Any
        if m.group("open"):
            stack.append((m.group("open"), []))
            continue
        if m.group("close"):
            if not stack or _CLOSE[stack[-1][0]] != m.group("close"):
                raise ValueError(f"unbalanced {m.group('close')!r} at column {m.start() + 1}")
            kind, items = stack.pop()
            if kind == "{":
                if len(items) % 2:
                    raise ValueError("a map with an odd number of forms")
                value = {items[i]: items[i + 1] for i in range(0, len(items), 2)}
            else:
                value = items
        elif m.group("str") is not None:
            value = json.loads('"' + m.group("str") + '"')
        else:
            value = _atom(m.group("atom"))
        (stack[-1][1] if stack else result).append(value)
    if stack:
        raise ValueError(f"unclosed {stack[-1][0]!r}")
    if len(result) != 1:
        raise ValueError(f"expected one form per line, found {len(result)}")
    return result[0]


_F_REGISTER = {"read": "read", "get": "read", "write": "write", "put": "write", "cas": "cas"}
_F_KV = {"read": "get", "get": "get", "write": "put", "put": "put", "append": "append", "cas": "cas"}


def _load_edn(path: Path) -> list[Operation]:
    events: list[tuple[int, dict[Any, Any]]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith(";"):
            continue
        try:
            form = parse_edn(line)
        except (ValueError, json.JSONDecodeError) as exc:
            raise HistoryFormatError(f"{path}:{lineno}: {exc}") from exc
        if not isinstance(form, dict):
            raise HistoryFormatError(f"{path}:{lineno}: expected a Jepsen operation map {{:process ..}}, got {line!r}")
        events.append((lineno, form))
    timed = all("time" in ev for _n, ev in events)
    open_ops: dict[Hashable, tuple[Any, float, int]] = {}
    ops: list[Operation] = []
    for lineno, ev in events:
        where = f"{path}:{lineno}"
        try:
            proc = ev["process"]
            kind = str(ev["type"])
            f = str(ev["f"])
        except KeyError as exc:
            raise HistoryFormatError(f"{where}: the operation map lacks :{exc.args[0]}") from exc
        if isinstance(proc, list):
            proc = tuple(proc)
        t = float(ev["time"]) if timed else float(lineno)
        has_key = "key" in ev
        table = _F_KV if has_key else _F_REGISTER
        if f not in table:
            raise HistoryFormatError(
                f"{where}: unknown function :{f}; expected one of {', '.join(':' + k for k in sorted(table))}"
                + ("" if has_key else " (add :key for a key-value history)")
            )
        op_name = table[f]
        value = ev.get("value")
        if kind == "invoke":
            if proc in open_ops:
                raise HistoryFormatError(f"{where}: process {proc} invokes while its previous operation is open")
            inp = _edn_input(where, op_name, ev.get("key"), value, has_key)
            open_ops[proc] = (inp, t, lineno)
            continue
        if kind not in ("ok", "fail", "info"):
            raise HistoryFormatError(f"{where}: unknown :type :{kind}; expected :invoke, :ok, :fail or :info")
        if proc not in open_ops:
            raise HistoryFormatError(f"{where}: :{kind} for process {proc} without an open :invoke")
        inp, call, _line = open_ops.pop(proc)
        done = jepsen_completion(proc, inp, call, kind, op_name, value, t)
        if done is not None:
            ops.append(done)
    for proc, (inp, call, _line) in open_ops.items():
        ops.append(Operation(proc, inp, call, UNKNOWN, math.inf))
    return ops


def _edn_input(where: str, op_name: str, key: Any, value: Any, has_key: bool) -> Any:
    if op_name == "cas":
        if not (isinstance(value, list) and len(value) == 2):
            raise HistoryFormatError(f"{where}: a :cas needs :value [from to], got {value!r}")
        expected, new = value
        return KvInput("cas", key, new, expected) if has_key else RegisterInput("cas", new, expected)
    if op_name in ("read", "get"):
        return KvInput("get", key) if has_key else RegisterInput("read")
    if op_name == "append" and not isinstance(value, str):
        raise HistoryFormatError(f"{where}: an :append needs a string :value, got {value!r}")
    return KvInput(op_name, key, value) if has_key else RegisterInput("write", value)
