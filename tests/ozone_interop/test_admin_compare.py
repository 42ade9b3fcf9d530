"""Every `ozone admin` command that reaches SCM, run by Ozone 2.2.0's own CLI against Ozone's SCM ring and
against ours in the same test, the two outputs compared field by field.

Both rings get the same cluster (three Ozone datanodes, Ozone's OM) and the same steps: a volume, a bucket and a
key written, the cluster left to settle (every datanode in its RATIS/ONE pipeline, a RATIS/THREE pipeline open),
then the commands of `COMMANDS`, each with `--json` where Ozone's CLI offers it. One ring runs at a time (memory
is shared); each side's answers are kept under run-data/ozone-interop/admin-compare/<side>.json for a look.

What is compared:
- a JSON answer is flattened into paths (list positions folded to ``[]``) and, per path, the set of values seen:
  the same paths on both sides (same fields), and the same strings at each path (same states, same enum
  spellings). Numbers, UUIDs, host:port pairs and timestamps are reduced to their kind, since they depend on the
  run (IDs, ports, sizes written at that moment);
- a text answer is compared line by line, after the same reductions, as a set of lines;
- the exit code of every command.

What differs and is allowed is listed in one place, `ALLOWED`, with a reason each (and documented in
docs/ozone-compatibility.md, "Differences from Ozone's SCM in `ozone admin` output"). Anything else fails the test.
Run by `make ozone-interop` (markers ozone_interop and ozone_compare) when both rings are asked for (no
OZONE_INTEROP_SCM): a comparison needs both, so `OZONE_INTEROP_SCM=ours|ozone make ozone-interop` leaves it out.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.ozone_interop.ozone_procs import ADMIN_MAIN, REPO, OzoneCluster, Timings, wait_for

pytestmark = [pytest.mark.ozone_interop, pytest.mark.ozone_compare, pytest.mark.timeout(2400)]

VOLUME = "cmpvol"
BUCKET = "cmpbucket"
OUT = REPO / "run-data" / "ozone-interop" / "admin-compare"
REPLICATION_INTERVAL = "15s"  # hdds.scm.replication.thread.interval on both rings (default 5 minutes)


@dataclass(frozen=True)
class Command:
    """One `ozone admin` invocation. ``name`` keys the answers and the allowances; ``args`` may hold the
    placeholders {container} (the key's container ID), {one_pipeline} (a RATIS/ONE pipeline's ID), {scm1} (the first
    SCM's client address) and {dn_uuid} (a datanode's UUID), filled from the ring the command runs on."""

    name: str
    args: tuple[str, ...]
    json: bool = False


def cmd(name: str, *args: str, json_out: bool = False) -> Command:
    return Command(name, tuple(args), json_out)


# The order matters only for the commands that change something and change it back (replication manager stop and
# start, pipeline deactivate and activate): each is followed by the command that shows the change.
COMMANDS: list[Command] = [
    cmd("safemode status", "safemode", "status"),
    cmd("safemode wait", "safemode", "wait", "-t", "30"),
    cmd("safemode exit", "safemode", "exit"),
    cmd("container list", "container", "list", json_out=True),
    cmd("container list --state OPEN", "container", "list", "--state", "OPEN", json_out=True),
    cmd("container list --state CLOSED", "container", "list", "--state", "CLOSED", json_out=True),
    cmd("container list -t RATIS -r THREE", "container", "list", "-t", "RATIS", "-r", "THREE", json_out=True),
    cmd("container list --count 1", "container", "list", "--count", "1", json_out=True),
    cmd("container info --json", "container", "info", "{container}", "--json", json_out=True),
    cmd("container info", "container", "info", "{container}"),
    cmd("container report --json", "container", "report", "--json", json_out=True),
    cmd("container report", "container", "report"),
    cmd("container info (no such container)", "container", "info", "999999"),
    cmd("container reconcile (OPEN)", "container", "reconcile", "{container}"),
    cmd("pipeline list --json", "pipeline", "list", "--json", json_out=True),
    cmd("pipeline list", "pipeline", "list"),
    cmd("pipeline list --filter-by-factor ONE", "pipeline", "list", "--filter-by-factor", "ONE", "--json",
        json_out=True),
    cmd("pipeline deactivate", "pipeline", "deactivate", "{one_pipeline}"),
    cmd("pipeline list --state DORMANT", "pipeline", "list", "--state", "DORMANT", "--json", json_out=True),
    cmd("pipeline activate", "pipeline", "activate", "{one_pipeline}"),
    cmd("pipeline list --state DORMANT (after activate)", "pipeline", "list", "--state", "DORMANT", "--json",
        json_out=True),
    cmd("datanode list --json", "datanode", "list", "--json", json_out=True),
    cmd("datanode list", "datanode", "list"),
    cmd("datanode list --node-id", "datanode", "list", "--node-id", "{dn_uuid}", "--json", json_out=True),
    cmd("datanode usageinfo --most-used --json", "datanode", "usageinfo", "--most-used", "--count", "3", "--json",
        json_out=True),
    cmd("datanode usageinfo --least-used", "datanode", "usageinfo", "--least-used", "--count", "3"),
    cmd("datanode usageinfo --node-id --json", "datanode", "usageinfo", "--node-id", "{dn_uuid}", "--json",
        json_out=True),
    cmd("datanode status decommission --json", "datanode", "status", "decommission", "--json", json_out=True),
    cmd("datanode status decommission", "datanode", "status", "decommission"),
    cmd("printTopology", "printTopology"),
    cmd("printTopology -o", "printTopology", "-o"),
    cmd("printTopology --json", "printTopology", "--json", json_out=True),
    cmd("replicationmanager status", "replicationmanager", "status"),
    cmd("replicationmanager stop", "replicationmanager", "stop"),
    cmd("replicationmanager status (stopped)", "replicationmanager", "status"),
    cmd("replicationmanager start", "replicationmanager", "start"),
    cmd("replicationmanager status (started)", "replicationmanager", "status"),
    cmd("containerbalancer status", "containerbalancer", "status"),
    cmd("containerbalancer status -H", "containerbalancer", "status", "-H"),
    cmd("containerbalancer stop (not running)", "containerbalancer", "stop"),
    cmd("scm roles", "scm", "roles"),
    cmd("scm roles --json", "scm", "roles", "--json", json_out=True),
    cmd("scm roles --table", "scm", "roles", "--table"),
    cmd("scm finalizationstatus", "scm", "finalizationstatus"),
    cmd("scm finalizeupgrade", "scm", "finalizeupgrade"),
    cmd("scm deletedBlocksTxn summary", "scm", "deletedBlocksTxn", "summary"),
    cmd("reconfig properties", "reconfig", "--service=SCM", "--address={scm1}", "properties"),
    cmd("reconfig status", "reconfig", "--service=SCM", "--address={scm1}", "status"),
]

@dataclass(frozen=True)
class Allowed:
    """A difference allowed: the commands (a regular expression over `Command.name`), where (a regular expression
    over a flattened JSON path, "line:<reduced line>" or "exit"), and why."""

    commands: str
    where: str
    reason: str

    def covers(self, d: Difference) -> bool:
        return bool(re.fullmatch(self.commands, d.command) and re.fullmatch(self.where, d.where))


PIPELINE_JSON = r"pipeline list.*|container info --json"
# The differences allowed, in one place, a reason each; kept in step with docs/ozone-compatibility.md
# ("Differences from Ozone's SCM in `ozone admin` output").
ALLOWED: list[Allowed] = [
    Allowed(PIPELINE_JSON, r"(\[\]\.|pipeline\.)suggestedLeaderId\..*",
            "our pipeline record keeps one leader field, the suggested leader until the datanodes report the "
            "elected one; Ozone's keeps the suggestion apart (suggestedLeaderID), ours does not send it"),
    Allowed(r"scm finalizationstatus", r"line:(FINALIZATION_DONE|ALREADY_FINALIZED)",
            "upgrade finalization is being reworked on its own branch (Ozone 2.2.0 answers FINALIZATION_DONE on a "
            "ring that never upgraded); not changed here"),
    Allowed(r"reconfig properties", r"line:.*",
            "ours reconfigures at run time only the keys it applies while running (docs/ozone-compatibility.md, "
            "ReconfigureProtocol); Ozone 2.2.0 also lists the replication manager's intervals, the EC pipeline "
            "minimum, the administrators and tracing keys"),
    Allowed(r"container reconcile \(OPEN\)|container info \(no such container\)",
            r"line:[A-Z_]+: .*|line:(Cannot reconcile container <n> in state OPEN\.|Container #<n> not found)",
            "the same text, ours after the result code (our SCMException's message starts with it, which our own "
            "clients read; Ozone's carries no code over Hadoop RPC)"),
    Allowed(r"container list --count 1", r"line:Displaying <n> out of <n> containers\. Container list has more "
            r"containers\.",
            "Ozone's SCM keeps up to ozone.scm.pipeline.owner.container.count open containers per pipeline and "
            "had made a second one by then; ours had one, so the CLI had nothing more to announce"),
]


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


@dataclass(frozen=True)
class Difference:
    command: str
    where: str  # a JSON path, "line:<line>", "exit" or "json"
    ozone: str
    ours: str

    def __str__(self) -> str:
        return f"{self.command} | {self.where} | Ozone: {self.ozone} | ours: {self.ours}"


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
    lines_left = {reduce_text(ln).rstrip() for t in texts for ln in ozone[t].splitlines() if ln.strip() and not noise(ln)}
    lines_right = {reduce_text(ln).rstrip() for t in texts for ln in ours[t].splitlines() if ln.strip() and not noise(ln)}
    for line in sorted(lines_left - lines_right):
        diffs.append(Difference(name, f"line:{line}", "present", "missing"))
    for line in sorted(lines_right - lines_left):
        diffs.append(Difference(name, f"line:{line}", "missing", "present"))
    return diffs


def noise(line: str) -> bool:
    """A log line of the CLI's own JVM (a WARN of its logger on stderr), not an answer."""
    return bool(re.match(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d+ (WARN|INFO|DEBUG)\b", line)) or line.startswith(
        "\tat ")


def allowance(d: Difference) -> Allowed | None:
    return next((a for a in ALLOWED if a.covers(d)), None)


def unexplained(diffs: list[Difference]) -> list[Difference]:
    return [d for d in diffs if allowance(d) is None]


# ---------------------------------------------------------------------------------------------- the rings


def settle(c: OzoneCluster, tmp: Path) -> dict[str, str]:
    """The same state on either ring: a key written (a container holds it), every datanode in its RATIS/ONE
    pipeline and a RATIS/THREE pipeline open. Returns the placeholders of `Command.args`."""
    c.sh("volume", "create", f"/{VOLUME}")
    c.sh("bucket", "create", f"/{VOLUME}/{BUCKET}")
    src = tmp / "key.in"
    src.write_bytes(b"field by field\n" * 4096)
    c.sh("key", "put", f"/{VOLUME}/{BUCKET}/key1", str(src))
    n = len(c.datanodes)

    def settled() -> list[dict[str, Any]] | None:
        pipelines = json.loads(c.admin("pipeline", "list", "--json"))
        open_ones = [p for p in pipelines if p.get("pipelineState") == "OPEN"]
        ones = [p for p in open_ones if p["replicationConfig"].get("replicationFactor") == "ONE"]
        threes = [p for p in open_ones if p["replicationConfig"].get("replicationFactor") == "THREE"]
        return pipelines if len(ones) == n and threes else None

    pipelines = wait_for(f"{n} RATIS/ONE pipelines and a RATIS/THREE one open", settled, 120, interval=2)
    # both SCMs run the ReplicationManager's first pass one interval after start (Ozone's loop waits the
    # interval before looking again, and so does ours): with the short interval of REPLICATION_INTERVAL both
    # have a report (`container report` says "not available until ..." before)
    wait_for("the ReplicationManager's first report", lambda: True if json.loads(
        c.admin("container", "report", "--json"))["reportTimeStamp"] else None, 120, interval=3)
    info = json.loads(c.sh("key", "info", f"/{VOLUME}/{BUCKET}/key1"))
    container = str(info["ozoneKeyLocations"][0]["containerID"])
    one = next(p for p in pipelines if p["replicationConfig"].get("replicationFactor") == "ONE")
    usage = json.loads(c.admin("datanode", "usageinfo", "--most-used", "--count", "1", "--json"))
    return {
        "container": container,
        "one_pipeline": str(one["id"]["id"]),
        "scm1": f"127.0.0.1:{c.scms[0].client_port}",
        "dn_uuid": usage[0]["datanodeDetails"]["uuidString"],
    }


def run_side(side: str, classpath: str, tmp: Path, timings: Timings) -> dict[str, dict[str, Any]]:
    base = REPO / "run-data" / "ozone-interop" / f"admin-compare-{side}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    cluster = OzoneCluster(base, classpath, scm_side=side, timings=timings,
                           extra_props={"hdds.scm.replication.thread.interval": REPLICATION_INTERVAL})
    start = time.monotonic()
    cluster.start()
    answers: dict[str, dict[str, Any]] = {}
    try:
        timings.add(f"{side}: cluster start", time.monotonic() - start)
        start = time.monotonic()
        values = settle(cluster, tmp)
        timings.add(f"{side}: key written, pipelines settled", time.monotonic() - start)
        start = time.monotonic()
        for command in COMMANDS:
            args = [a.format(**values) for a in command.args]
            result = cluster.tool(ADMIN_MAIN, *args)
            answers[command.name] = {"args": args, "rc": result.returncode, "stdout": result.stdout,
                                     "stderr": result.stderr[-4000:]}
        timings.add(f"{side}: {len(COMMANDS)} ozone admin commands", time.monotonic() - start)
    finally:
        cluster.stop()
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{side}.json").write_text(json.dumps(answers, indent=1, sort_keys=True))
    return answers


def compare_all(ozone: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]) -> list[Difference]:
    diffs: list[Difference] = []
    for command in COMMANDS:
        diffs.extend(compare_answers(command.name, ozone[command.name], ours[command.name], command.json))
    return diffs


def test_every_admin_command_field_by_field(ozone_classpath: tuple[str, str], tmp_path: Path,
                                            request: pytest.FixtureRequest) -> None:
    classpath, note = ozone_classpath
    timings = Timings(jars=note)
    answers = {}
    for side in ("ozone", "ours"):  # one ring at a time: the memory is shared
        (tmp_path / side).mkdir()
        answers[side] = run_side(side, classpath, tmp_path / side, timings)
    diffs = compare_all(answers["ozone"], answers["ours"])
    stale = [a for a in ALLOWED if not any(a.covers(d) for d in diffs)]
    report = "\n".join([timings.report(), "differences (allowed ones marked):",
                        *(("  allowed  " if allowance(d) else "  NEW      ") + str(d) for d in diffs),
                        *(f"  not seen this run (allowed): {a.commands} | {a.where}" for a in stale)])
    (OUT / "differences.txt").write_text(report + "\n")
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            print("\n" + report)
    bad = unexplained(diffs)
    assert not bad, "differences from Ozone's SCM not in ALLOWED:\n" + "\n".join(str(d) for d in bad)
