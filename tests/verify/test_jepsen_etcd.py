"""The checker must agree with Porcupine on every real Jepsen etcd history.

The histories are copied into the repository, ``tests/verify/data/jepsen-etcd/`` (source and
license in its README.md and LICENSE). Missing data is a failure, not a skip: without it this
test would prove nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scm_server.verify import RegisterModel, Verdict, check_operations, parse_jepsen_log

DATA = Path(__file__).resolve().parent / "data" / "jepsen-etcd"


def _verdicts() -> dict[str, str]:
    tsv = DATA / "verdicts.tsv"
    if not tsv.is_file():
        pytest.fail(
            f"Jepsen etcd histories not found: expected {tsv} (tests/verify/data/jepsen-etcd/ is part of "
            f"the repository; restore it with git checkout)"
        )
    out = {}
    for line in tsv.read_text().splitlines():
        if line.strip():
            name, verdict = line.split("\t")
            assert verdict in ("linearizable", "not-linearizable"), f"bad verdict line {line!r}"
            out[name] = verdict
    return out


def test_every_history_has_a_verdict() -> None:
    verdicts = _verdicts()
    logs = {p.name for p in DATA.glob("*.log")}
    assert logs == set(verdicts), f"logs without verdict: {logs - set(verdicts)}; missing: {set(verdicts) - logs}"
    assert len(logs) >= 50


def test_checker_agrees_with_every_jepsen_verdict() -> None:
    verdicts = _verdicts()
    mismatches = []
    started = time.monotonic()
    ops_total = 0
    for name, expected in sorted(verdicts.items()):
        ops = parse_jepsen_log(DATA / name)
        ops_total += len(ops)
        res = check_operations(RegisterModel(), ops, timeout=60)
        want = Verdict.OK if expected == "linearizable" else Verdict.ILLEGAL
        if res.verdict is not want:
            mismatches.append(f"{name}: expected {expected}, got {res.summary()}")
    elapsed = time.monotonic() - started
    print(f"jepsen-etcd: {len(verdicts) - len(mismatches)}/{len(verdicts)} verdicts agree, {ops_total} ops, {elapsed:.2f}s")
    assert not mismatches, "\n".join(mismatches)


def test_parser_reads_both_tab_and_space_separated_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(
        "INFO  jepsen.util - 0\t:invoke\t:write\t3\n"
        "INFO  jepsen.util - 1   :invoke :cas    [3 4]\n"
        "INFO  jepsen.util - 0\t:ok\t:write\t3\n"
        "INFO  jepsen.util - 1   :fail   :cas    [3 4]\n"
        "INFO  jepsen.util - 2\t:invoke\t:read\tnil\n"
        "INFO  jepsen.util - 2\t:fail\t:read\t:timed-out\n"
        "INFO  jepsen.util - 3\t:invoke\t:write\t4\n"
        "INFO  jepsen.util - 3\t:info\t:write\t:timed-out\n"
    )
    ops = parse_jepsen_log(log)
    assert [(o.client_id, o.input.op, o.output) for o in ops][:2] == [(0, "write", None), (1, "cas", False)]
    assert len(ops) == 3 and ops[2].indeterminate
    # the cas failed although the write of 3 completed before it returned: possible only
    # if the cas took effect first
    assert check_operations(RegisterModel(), ops).ok
