"""Recording client histories, reading Jepsen logs, and saving/loading histories.

Where it sits: concurrent asyncio clients (chaos tests, SCM HA tests) call
``recorder.invoke(client, input)`` just before sending a request and complete the
returned handle with ``ok(output)`` (definite result), ``fail()`` (definitely did NOT take
effect, e.g. rejected before reaching the leader) or ``info()`` (outcome unknown: timeout,
connection lost after sending). :meth:`HistoryRecorder.operations` turns that into the
:class:`~scm_server.verify.linearizability.Operation` list the checker wants: failed
operations are dropped, unknown and still-pending ones get return time +inf and output
UNKNOWN (Jepsen's ``:info``). Timestamps come from one monotonic clock.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scm_server.verify.linearizability import UNKNOWN, Operation
from scm_server.verify.models import KvInput, RegisterInput

_PENDING, _OK, _FAIL, _INFO = "invoke", "ok", "fail", "info"


@dataclass(slots=True)
class RecordedOp:
    """One operation as recorded (``status`` is invoke/ok/fail/info)."""

    client_id: Hashable
    input: Any
    call: float
    status: str = _PENDING
    output: Any = None
    ret: float = math.inf
    error: str = ""


class OpHandle:
    """Completes one recorded operation exactly once."""

    __slots__ = ("_clock", "_op")

    def __init__(self, op: RecordedOp, clock: Callable[[], float]) -> None:
        self._op = op
        self._clock = clock

    @property
    def done(self) -> bool:
        return self._op.status != _PENDING

    def _finish(self, status: str, output: Any, error: str) -> None:
        if self._op.status != _PENDING:
            raise RuntimeError(
                f"operation {self._op.input!r} of client {self._op.client_id!r} was already completed as "
                f"{self._op.status}; complete each operation once"
            )
        self._op.ret = self._clock()
        self._op.status = status
        self._op.output = output
        self._op.error = error

    def ok(self, output: Any = None) -> None:
        """The operation took effect with this result."""
        self._finish(_OK, output, "")

    def fail(self, error: str = "") -> None:
        """The operation definitely did not take effect."""
        self._finish(_FAIL, None, error)

    def info(self, error: str = "") -> None:
        """The outcome is unknown: it may have taken effect, at any time after the call."""
        self._finish(_INFO, UNKNOWN, error)


class HistoryRecorder:
    """Thread-unsafe, asyncio-friendly recorder of invoke/ok/fail/info events."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._ops: list[RecordedOp] = []

    def invoke(self, client_id: Hashable, inp: Any) -> OpHandle:
        op = RecordedOp(client_id, inp, self._clock())
        self._ops.append(op)
        return OpHandle(op, self._clock)

    @contextmanager
    def record(self, client_id: Hashable, inp: Any) -> Iterator[OpHandle]:
        """``with rec.record(c, inp) as h: h.ok(await call())`` — an exception that escapes
        before the handle is completed records the operation as indeterminate (info)."""
        handle = self.invoke(client_id, inp)
        try:
            yield handle
        except BaseException as exc:
            if not handle.done:
                handle.info(f"{type(exc).__name__}: {exc}")
            raise
        if not handle.done:
            handle.info("not completed")

    @property
    def recorded(self) -> list[RecordedOp]:
        return list(self._ops)

    def counts(self) -> dict[str, int]:
        out = {_OK: 0, _FAIL: 0, _INFO: 0, _PENDING: 0}
        for op in self._ops:
            out[op.status] += 1
        return out

    def operations(self) -> list[Operation]:
        """Operations for the checker: failed ones dropped, unknown/pending ones at +inf."""
        return to_operations(self._ops)

    def save(self, path: Path) -> None:
        save_history(self._ops, path)


def to_operations(recorded: list[RecordedOp]) -> list[Operation]:
    ops = []
    for r in recorded:
        if r.status == _FAIL:
            continue
        if r.status == _OK:
            ops.append(Operation(r.client_id, r.input, r.call, r.output, r.ret))
        else:
            ops.append(Operation(r.client_id, r.input, r.call, UNKNOWN, math.inf))
    return ops


# ---------------------------------------------------------------------------------------
# JSON (one object per line) so failing histories can be kept and re-checked later

_INPUT_TYPES: dict[str, type[Any]] = {"KvInput": KvInput, "RegisterInput": RegisterInput}


def _encode_input(inp: Any) -> Any:
    name = type(inp).__name__
    if name in _INPUT_TYPES:
        return {"type": name, "fields": list(inp)}
    return {"type": "raw", "value": inp}


def _decode_input(obj: Any) -> Any:
    if obj["type"] == "raw":
        return obj["value"]
    return _INPUT_TYPES[obj["type"]](*obj["fields"])


def save_history(recorded: list[RecordedOp], path: Path) -> None:
    with path.open("w") as f:
        for r in recorded:
            f.write(
                json.dumps(
                    {
                        "client": r.client_id,
                        "input": _encode_input(r.input),
                        "call": r.call,
                        "status": r.status,
                        "output": None if r.output is UNKNOWN else r.output,
                        "ret": None if r.ret == math.inf else r.ret,
                        "error": r.error,
                    }
                )
                + "\n"
            )


def load_history(path: Path) -> list[RecordedOp]:
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        status = d["status"]
        output = UNKNOWN if status in (_INFO, _PENDING) else d["output"]
        ret = math.inf if d["ret"] is None else d["ret"]
        out.append(RecordedOp(d["client"], _decode_input(d["input"]), d["call"], status, output, ret, d["error"]))
    return out


# ---------------------------------------------------------------------------------------
# Jepsen etcd logs (Porcupine's test_data/jepsen format)

_JEPSEN_LINE = re.compile(
    r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(invoke|ok|fail|info)\s+:(read|write|cas)\s+(.*?)\s*$"
)


def _jepsen_value(text: str) -> Any:
    return None if text == "nil" else int(text)


def parse_jepsen_log(path: Path) -> list[Operation]:
    """Parse a Jepsen etcd register log into operations on :class:`RegisterModel`.

    ``:ok`` completes an operation; ``:fail`` of a cas is a definite "compare failed"
    (output False); ``:fail`` of a read (timed out) means no effect and is dropped; ``:info``
    is indeterminate; operations still open at the end are indeterminate too.
    """
    open_ops: dict[int, tuple[RegisterInput, float]] = {}
    ops: list[Operation] = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        m = _JEPSEN_LINE.match(line)
        if m is None:
            raise ValueError(f"{path}:{lineno}: not a Jepsen etcd history line: {line!r}")
        proc, kind, f, value = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        t = float(lineno)
        if kind == "invoke":
            if proc in open_ops:
                raise ValueError(f"{path}:{lineno}: process {proc} invokes while its previous op is open")
            if f == "read":
                inp = RegisterInput("read")
            elif f == "write":
                inp = RegisterInput("write", _jepsen_value(value))
            else:
                a, b = value.strip("[]").split()
                inp = RegisterInput("cas", _jepsen_value(b), _jepsen_value(a))
            open_ops[proc] = (inp, t)
            continue
        if proc not in open_ops:
            raise ValueError(f"{path}:{lineno}: completion for process {proc} without an open invoke")
        inp, call = open_ops.pop(proc)
        read_value = _jepsen_value(value) if f == "read" and kind == "ok" else None
        done = jepsen_completion(proc, inp, call, kind, f, read_value, t)
        if done is not None:
            ops.append(done)
    for proc, (inp, call) in open_ops.items():
        ops.append(Operation(proc, inp, call, UNKNOWN, math.inf))
    return ops


def jepsen_completion(
    proc: Hashable, inp: Any, call: float, kind: str, f: str, read_value: Any, t: float
) -> Operation | None:
    """Jepsen's meaning of a completion (``kind`` ok/fail/info of function ``f``): ``:ok`` gives the
    read value, True for a cas, None otherwise; ``:fail`` of a cas is a definite "compare failed"
    (False), of anything else no effect at all (None: drop it); ``:info`` is indeterminate."""
    if kind == "ok":
        out: Any = read_value if f in ("read", "get") else (True if f == "cas" else None)
        return Operation(proc, inp, call, out, t)
    if kind == "fail":
        return Operation(proc, inp, call, False, t) if f == "cas" else None
    return Operation(proc, inp, call, UNKNOWN, math.inf)
