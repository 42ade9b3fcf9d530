"""``ozone-scm debug verify``: a recorded history checked from the command line, as a user runs it.

Each case runs the installed ``ozone-scm`` in its own process on a file: a Jepsen etcd log,
the JSON lines a chaos test keeps (written by HistoryRecorder.save), and Jepsen EDN maps of a
get/put/append store. Exit codes: 0 linearizable, 3 not, 4 undecided, 1 unusable input.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from scm_server.verify import UNKNOWN, HistoryRecorder, Operation
from scm_server.verify.formats import HistoryFormatError, load_operations, parse_edn
from scm_server.verify.models import KvInput, RegisterInput, kv_get, kv_put

OZONE_SCM = str(Path(sys.executable).with_name("ozone-scm"))
JEPSEN = Path(__file__).resolve().parent / "data" / "jepsen-etcd"


def run(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OZONE_SCM, "debug", "verify", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def recorded_kv_history(path: Path, *, lose_write_on: str | None = None) -> Path:
    """A history as the chaos tests record it: ok, failed and unknown operations on 3 keys."""
    clock = iter(float(x) for x in range(1000))
    rec = HistoryRecorder(clock=lambda: next(clock))
    for key in ("k1", "k2", "k3"):
        rec.invoke(0, kv_put(key, f"{key}-v1")).ok(None)
        rec.invoke(1, kv_put(key, f"{key}-v2")).fail("NOT_LEADER before sending")
        rec.invoke(2, kv_put(key, f"{key}-v3")).info("deadline exceeded")
        seen = None if key == lose_write_on else f"{key}-v1"
        rec.invoke(3, kv_get(key)).ok(seen)
    rec.save(path)
    return path


def test_a_jepsen_log_with_a_violation() -> None:
    proc = run("--model", "register", JEPSEN / "etcd_000.log")
    assert proc.returncode == 3, proc.stderr
    assert "(jepsen-log, model register)" in proc.stdout
    assert "verdict: illegal" in proc.stdout and "stuck: no order lets this op return" in proc.stdout
    assert "longest linearizable prefix found" in proc.stdout


def test_a_linearizable_jepsen_log() -> None:
    proc = run("--model", "register", JEPSEN / "etcd_002.log")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: ok" in proc.stdout and "every partition is linearizable" in proc.stdout


def test_the_json_lines_a_chaos_test_keeps(tmp_path: Path) -> None:
    good = recorded_kv_history(tmp_path / "good.jsonl")
    proc = run("--model", "kv", good)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(jsonl, model kv)" in proc.stdout and "in 3 partitions" in proc.stdout

    bad = recorded_kv_history(tmp_path / "bad.jsonl", lose_write_on="k2")
    proc = run("--model", "kv", bad, "--report", tmp_path / "report", "--json")
    assert proc.returncode == 3, proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == "illegal" and out["format"] == "jsonl"
    by_key = {p["key"]: p["verdict"] for p in out["partitions"]}
    assert by_key["k2"] == "illegal" and by_key["k1"] in ("ok", "unknown")
    assert sorted(Path(p).name for p in out["reportFiles"]) == ["bad.html", "bad.txt"]
    assert "failing partition: 'k2'" in (tmp_path / "report" / "bad.txt").read_text()


EDN_APPENDS = """\
{:process 0, :type :invoke, :f :append, :key "x", :value "a"}
{:process 1, :type :invoke, :f :get, :key "x", :value nil}
{:process 0, :type :ok, :f :append, :key "x", :value "a"}
{:process 1, :type :ok, :f :get, :key "x", :value ""}
{:process 0, :type :invoke, :f :append, :key "x", :value "b"}
{:process 0, :type :ok, :f :append, :key "x", :value "b"}
{:process 2, :type :invoke, :f :get, :key "x", :value nil}
{:process 2, :type :ok, :f :get, :key "x", :value "ab"}
{:process 3, :type :invoke, :f :put, :key "y", :value "p"}
{:process 3, :type :info, :f :put, :key "y", :value :timed-out}
{:process 4, :type :invoke, :f :cas, :key "y", :value ["p" "q"]}
{:process 4, :type :fail, :f :cas, :key "y", :value ["p" "q"]}
"""


def test_jepsen_edn_appends(tmp_path: Path) -> None:
    f = tmp_path / "appends.edn"
    f.write_text(EDN_APPENDS)
    # the first get ran concurrently with the first append and read the empty initial value
    proc = run("--model", "kv", "--kv-initial", "empty", f)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(edn, model kv)" in proc.stdout
    # with absent (nil) as the initial value, "" is a value nobody wrote
    proc = run("--model", "kv", f)
    assert proc.returncode == 3 and "failing partition: 'x'" in proc.stdout
    f.write_text(EDN_APPENDS.replace(':value "ab"}', ':value "ba"}'))
    proc = run("--model", "kv", "--kv-initial", "empty", f)
    assert proc.returncode == 3 and "stuck" in proc.stdout


def test_an_undecided_history_says_why(tmp_path: Path) -> None:
    clock = iter(float(x) for x in range(1000))
    rec = HistoryRecorder(clock=lambda: next(clock))
    for i in range(40):
        rec.invoke(i, kv_put("slow", str(i))).info("timeout")
    rec.invoke(99, kv_get("slow")).ok("never-written")
    path = tmp_path / "slow.jsonl"
    rec.save(path)
    proc = run("--model", "kv", "--timeout", "0.5", path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "verdict: unknown" in proc.stdout and "timed out after 0.5s" in proc.stdout
    proc = run("--model", "kv", "--max-memory", "1", path)
    assert proc.returncode == 4 and "memo cache full" in proc.stdout and "--max-memory" in proc.stdout


@pytest.mark.parametrize(
    ("content", "model", "expected"),
    [
        ("hello world\n", "kv", "not a history this tool reads"),
        ("", "kv", "the file is empty"),
        ('{"client": 0, "input": {"type": "KvInput"\n', "kv", ":1: not JSON"),
        ('{"client": 0}\n', "kv", "lacks the fields HistoryRecorder.save writes"),
        ("INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 0\t:bogus\n", "register",
         ":2: not a Jepsen etcd history line"),
        ('{:process 0, :type :invoke, :f :frob, :key "x", :value 1}\n', "kv", ":1: unknown function :frob"),
        ('{:process 0, :type :invoke, :f :get, :key "x" :value nil\n', "kv", ":1: unclosed '{'"),
        ('{:process 0, :type :ok, :f :get, :key "x", :value nil}\n', "kv", ":1: :ok for process 0 without an open"),
        ('{:process 0, :type :invoke, :f :cas, :key "x", :value 1}\n', "kv", ":1: a :cas needs :value [from to]"),
        ('{:process 0, :type :invoke, :f :read, :value nil}\n', "kv", "holds RegisterInput operations, not kv"),
    ],
)
def test_unusable_input_is_one_line_naming_the_file(tmp_path: Path, content: str, model: str, expected: str) -> None:
    f = tmp_path / "h.txt"
    f.write_text(content)
    line = one_error_line(run("--model", model, f))
    assert str(f) in line and expected in line, line


def test_a_kv_history_checked_as_a_register_names_the_right_model(tmp_path: Path) -> None:
    path = recorded_kv_history(tmp_path / "h.jsonl")
    line = one_error_line(run("--model", "register", path))
    assert "check it with --model kv" in line


def test_a_missing_file_and_a_model_error(tmp_path: Path) -> None:
    assert "no such file" in one_error_line(run("--model", "kv", tmp_path / "nope.jsonl"))
    f = tmp_path / "mixed.edn"
    f.write_text(
        '{:process 0, :type :invoke, :f :put, :key "x", :value 5}\n{:process 0, :type :ok, :f :put, :key "x", :value 5}\n'
        '{:process 0, :type :invoke, :f :append, :key "x", :value "a"}\n'
        '{:process 0, :type :ok, :f :append, :key "x", :value "a"}\n'
    )
    assert "append needs string values" in one_error_line(run("--model", "kv", f))


def test_edn_reader() -> None:
    assert parse_edn('{:a 1, :b "x\\"y", :c [1 nil true], :d :kw, :e 2.5}') == {
        "a": 1, "b": 'x"y', "c": [1, None, True], "d": "kw", "e": 2.5,
    }


def test_edn_times_order_events_when_every_line_has_one(tmp_path: Path) -> None:
    f = tmp_path / "timed.edn"
    f.write_text(
        '{:process 0, :type :invoke, :f :write, :value 1, :time 100}\n'
        '{:process 0, :type :ok, :f :write, :value 1, :time 250}\n'
        '{:process 1, :type :invoke, :f :read, :value nil, :time 300}\n'
        '{:process 1, :type :info, :f :read, :value nil, :time 400}\n'
        '{:process 2, :type :invoke, :f :cas, :value [1 2], :time 500}\n'
    )
    ops, fmt = load_operations(f, "register")
    assert fmt == "edn"
    assert ops[0] == Operation(0, RegisterInput("write", 1), 100.0, None, 250.0)
    assert ops[1].indeterminate and ops[2].indeterminate and ops[2].input == RegisterInput("cas", 2, 1)
    assert ops[2].output is UNKNOWN and ops[2].ret == math.inf
    with pytest.raises(HistoryFormatError, match="unknown model"):
        load_operations(f, "queue")
    assert isinstance(load_operations(recorded_kv_history(tmp_path / "k.jsonl"), "kv")[0][0].input, KvInput)
