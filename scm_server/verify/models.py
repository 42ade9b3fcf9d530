"""Sequential specifications ("models") that histories are checked against.

Where it sits: :func:`scm_server.verify.linearizability.check_operations` asks a model for
its initial state, for ``step(state, input, output) -> (legal, new_state)`` and for a
partition of the history into independent sub-histories. States must be hashable (they
key the memo cache) and immutable.

Every model accepts :data:`~scm_server.verify.linearizability.UNKNOWN` as the output of
an indeterminate operation: the step is then legal from any state and applies the
operation's effect, and since its return is at +infinity the checker may also place it
after everything else (i.e. it never happened).

Models here:

- :class:`RegisterModel`: one register with read / write / cas, the shape of Jepsen's
  etcd histories (the register starts as ``None``, Jepsen's ``nil``);
- :class:`KvModel`: a key-value store with get / put / append / cas, partitioned per key
  (each key an independent sub-history), used for the demo Raft KV server's chaos tests and
  for Jepsen-style get/put/append histories (``KvModel(initial="")``);
- :func:`check_unique_ids`: the check for ID generators (SCM sequence IDs, container IDs):
  no ID is handed out twice, and optionally IDs grow in real-time order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scm_server.verify.linearizability import UNKNOWN, Operation


class Model:
    """Base class of models (each a :class:`~scm_server.verify.linearizability.SequentialModel`);
    subclasses override :meth:`init` and :meth:`step`."""

    name = "model"

    def init(self) -> Hashable:
        raise NotImplementedError

    def step(self, state: Any, inp: Any, out: Any) -> tuple[bool, Any]:
        raise NotImplementedError

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]:
        """Independent sub-histories; the default is the whole history."""
        return [list(ops)]

    def partition_key(self, op: Operation) -> str:
        """A label for the partition an operation belongs to (reports only)."""
        return ""

    def is_read_only(self, inp: Any) -> bool:
        """True when the operation cannot change state (indeterminate ones are dropped)."""
        return False

    def preserves_state(self, inp: Any, out: Any) -> bool:
        """True if the operation, with this output, leaves the state unchanged wherever it is
        legal (a read with a definite result, a CAS that definitely failed). The checker
        linearizes such operations eagerly; answering False is always safe."""
        return False

    def describe_operation(self, inp: Any, out: Any) -> str:
        return f"{inp!r} -> {out!r}"

    def describe_state(self, state: Any) -> str:
        return repr(state)


# ---------------------------------------------------------------------------------------
# Single register (Jepsen etcd histories)


class RegisterInput(NamedTuple):
    """``op`` is "read", "write" or "cas"; a cas replaces ``expected`` with ``value``."""

    op: str
    value: Any = None
    expected: Any = None


def read() -> RegisterInput:
    return RegisterInput("read")


def write(value: Any) -> RegisterInput:
    return RegisterInput("write", value)


def cas(expected: Any, value: Any) -> RegisterInput:
    return RegisterInput("cas", value, expected)


def _register_step(state: Any, op: str, value: Any, expected: Any, out: Any) -> tuple[bool, Any]:
    if op == "read" or op == "get":
        return (out is UNKNOWN or out == state), state
    if op == "write" or op == "put":
        return True, value
    if op == "cas":
        if out is UNKNOWN:
            return True, (value if state == expected else state)
        if state == expected:
            return out is True, value
        return out is False, state
    raise ValueError(f"unknown register operation {op!r}: expected read/get, write/put or cas")


class RegisterModel(Model):
    """One register: read returns the value (``None`` if never written), write sets it,
    cas(expected, value) returns True and sets ``value`` iff the register holds ``expected``."""

    name = "register"

    def __init__(self, initial: Hashable = None) -> None:
        self._initial = initial

    def init(self) -> Hashable:
        return self._initial

    def step(self, state: Any, inp: RegisterInput, out: Any) -> tuple[bool, Any]:
        return _register_step(state, inp.op, inp.value, inp.expected, out)

    def is_read_only(self, inp: RegisterInput) -> bool:
        return inp.op == "read"

    def preserves_state(self, inp: RegisterInput, out: Any) -> bool:
        return out is not UNKNOWN and (inp.op == "read" or (inp.op == "cas" and out is False))

    def describe_operation(self, inp: RegisterInput, out: Any) -> str:
        res = "?" if out is UNKNOWN else repr(out)
        if inp.op == "read":
            return f"read() -> {res}"
        if inp.op == "write":
            return f"write({inp.value!r}) -> {'?' if out is UNKNOWN else 'ok'}"
        return f"cas({inp.expected!r}, {inp.value!r}) -> {res}"


# ---------------------------------------------------------------------------------------
# Key-value store, partitioned per key


class KvInput(NamedTuple):
    """``op`` is "get", "put", "append" or "cas"; append concatenates ``value`` to the key's
    string value (a key never written holds the model's initial value, absent = empty for
    append); a cas replaces ``expected`` (``None`` = absent) with ``value`` and returns True,
    or returns False and changes nothing."""

    op: str
    key: str
    value: Any = None
    expected: Any = None


def kv_get(key: str) -> KvInput:
    return KvInput("get", key)


def kv_put(key: str, value: Any) -> KvInput:
    return KvInput("put", key, value)


def kv_append(key: str, value: str) -> KvInput:
    return KvInput("append", key, value)


def kv_cas(key: str, expected: Any, value: Any) -> KvInput:
    return KvInput("cas", key, value, expected)


KV_OPS = ("get", "put", "append", "cas")


class KvModel(Model):
    """A key-value store with get / put / append / cas; by P-compositionality each key is
    checked as its own sub-history.

    Outputs: get -> the value (the initial value if never written); put and append -> anything
    (ignored); cas -> bool. ``initial`` is the value of a key never written: ``None`` (absent,
    the demo KV server's semantics) or ``""`` (the get/put/append stores of Jepsen-style tests,
    where a get of a fresh key returns the empty string). Append treats an absent key as empty.
    """

    name = "kv"

    def __init__(self, initial: str | None = None) -> None:
        self._initial = initial

    def init(self) -> Hashable:
        return self._initial

    def step(self, state: Any, inp: KvInput, out: Any) -> tuple[bool, Any]:
        if inp.op == "append":
            base = "" if state is None else state
            if not isinstance(base, str) or not isinstance(inp.value, str):
                raise ValueError(
                    f"append({inp.key!r}, {inp.value!r}) to the value {state!r}: append needs string values "
                    "on a key (do not mix it with non-string puts)"
                )
            return True, base + inp.value
        if inp.op not in KV_OPS:
            raise ValueError(f"unknown key-value operation {inp.op!r}: expected one of {', '.join(KV_OPS)}")
        return _register_step(state, inp.op, inp.value, inp.expected, out)

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]:
        by_key: dict[str, list[Operation]] = defaultdict(list)
        for op in ops:
            by_key[op.input.key].append(op)
        return [by_key[k] for k in sorted(by_key, key=str)]

    def partition_key(self, op: Operation) -> str:
        return str(op.input.key)

    def is_read_only(self, inp: KvInput) -> bool:
        return inp.op == "get"

    def preserves_state(self, inp: KvInput, out: Any) -> bool:
        return out is not UNKNOWN and (inp.op == "get" or (inp.op == "cas" and out is False))

    def describe_operation(self, inp: KvInput, out: Any) -> str:
        res = "?" if out is UNKNOWN else repr(out)
        if inp.op == "get":
            return f"get({inp.key}) -> {res}"
        if inp.op in ("put", "append"):
            return f"{inp.op}({inp.key}, {inp.value!r}) -> {'?' if out is UNKNOWN else 'ok'}"
        return f"cas({inp.key}, {inp.expected!r}, {inp.value!r}) -> {res}"


# ---------------------------------------------------------------------------------------
# Unique IDs (SCM sequence ID / container ID allocation)


@dataclass(slots=True)
class UniqueIdResult:
    """Outcome of :func:`check_unique_ids`; ``ok`` is False if any problem was found."""

    ids_checked: int
    duplicates: dict[Any, list[Operation]] = field(default_factory=dict)
    order_violations: list[tuple[Operation, Operation]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.duplicates and not self.order_violations

    def describe(self) -> str:
        if self.ok:
            return f"ok: {self.ids_checked} ids, all distinct"
        lines = [f"{len(self.duplicates)} id(s) handed out more than once, "
                 f"{len(self.order_violations)} real-time order violation(s)"]
        for ident, ops in list(self.duplicates.items())[:10]:
            clients = ", ".join(f"client {o.client_id} at {o.call}..{o.ret}" for o in ops)
            lines.append(f"  id {ident!r}: {clients}")
        for a, b in self.order_violations[:10]:
            lines.append(f"  {a.output!r} (returned at {a.ret}) then {b.output!r} (invoked at {b.call})")
        return "\n".join(lines)


def _ids_of(output: Any) -> list[Any]:
    if isinstance(output, (list, tuple, range, set, frozenset)):
        return list(output)
    return [output]


def check_unique_ids(ops: Iterable[Operation], *, require_increasing: bool = False) -> UniqueIdResult:
    """Check that no ID is handed out twice among the successful operations.

    An operation's output is one ID or a collection of IDs (a batch, e.g. a range of
    container IDs). Indeterminate operations are ignored (their IDs were never observed).
    With ``require_increasing``, an operation that starts after another returned must get
    only IDs greater than all of the earlier one's (a monotonic sequence generator).
    """
    done = [op for op in ops if not op.indeterminate]
    owners: dict[Any, list[Operation]] = defaultdict(list)
    count = 0
    for op in done:
        for ident in _ids_of(op.output):
            owners[ident].append(op)
            count += 1
    result = UniqueIdResult(count, {k: v for k, v in owners.items() if len(v) > 1})
    if require_increasing:
        # Sweep in call order, keeping the largest ID among ops that returned before it.
        by_ret = sorted((op for op in done if _ids_of(op.output)), key=lambda o: o.ret)
        by_call = sorted((op for op in done if _ids_of(op.output)), key=lambda o: o.call)
        j = 0
        best: Operation | None = None
        best_max: Any = None
        for op in by_call:
            while j < len(by_ret) and by_ret[j].ret < op.call:
                m = max(_ids_of(by_ret[j].output))
                if best_max is None or m > best_max:
                    best_max, best = m, by_ret[j]
                j += 1
            if best is not None and min(_ids_of(op.output)) <= best_max:
                result.order_violations.append((best, op))
    return result
