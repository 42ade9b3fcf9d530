"""Every `ozone admin` command that reaches SCM, run by Ozone 2.2.0's own CLI against Ozone's SCM ring and
against ours in the same test, the two outputs compared field by field.

Both rings get the same cluster (three Ozone datanodes, Ozone's OM) and the same steps: a volume, a bucket and a
key written, the cluster left to settle (every datanode in its RATIS/ONE pipeline, a RATIS/THREE pipeline open),
then the commands of `COMMANDS`, each with `--json` where Ozone's CLI offers it. One ring runs at a time (memory
is shared); each side's answers are kept under run-data/ozone-interop/admin-compare/<side>.json for a look.

The comparison's rules are in tests/ozone_interop/admin_compare.py; the differences allowed are the table in
docs/ozone-compatibility.md ("Differences from Ozone's SCM in `ozone admin` output"), read at the start of the test.
Any difference the table does not allow fails the test; an allowed row this run did not need is reported as "not
seen this run" (a few differences depend on timing, e.g. how many containers a pipeline had opened by then).
ADMIN_COMPARE_OZONE_ANSWERS=<ozone.json of an earlier run> runs only our ring against those recorded answers (a
quicker loop while fixing our side; the report says so). Run by `make ozone-interop` (markers ozone_interop and
ozone_compare) when both rings are asked for (no
OZONE_INTEROP_SCM): a comparison needs both, so `OZONE_INTEROP_SCM=ours|ozone make ozone-interop` leaves it out.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.ozone_interop.admin_compare import (
    ANSWERS,
    Command,
    allowance,
    cmd,
    compare_all,
    load_allowed,
    report,
)
from tests.ozone_interop.ozone_procs import REPO, OzoneCluster, Timings, wait_for

pytestmark = [pytest.mark.ozone_interop, pytest.mark.ozone_compare, pytest.mark.timeout(2400)]

VOLUME = "cmpvol"
BUCKET = "cmpbucket"
OUT = ANSWERS
REPLICATION_INTERVAL = "15s"  # hdds.scm.replication.thread.interval on both rings (default 5 minutes)


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
    # last: they move the leadership (each answer is Ozone's CLI's line; the roles after each show the move)
    cmd("scm transfer -n", "scm", "transfer", "-n", "{follower_peer}"),
    cmd("scm roles (after transfer -n)", "scm", "roles"),
    cmd("scm transfer -r", "scm", "transfer", "-r"),
    cmd("scm roles (after transfer -r)", "scm", "roles"),
]

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
    follower_peer = next(peer for peer, role in sorted(c.scm_peer_ids().values()) if role == "FOLLOWER")
    return {
        "follower_peer": follower_peer,
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
        # every command in one JVM, in order (Ozone's CLI, a new OzoneAdmin each): 52 JVM starts cost minutes of
        # CPU on a shared 2-core machine
        commands = [[a.format(**values) for a in command.args] for command in COMMANDS]
        for command, args, result in zip(COMMANDS, commands, cluster.admin_batch(commands), strict=True):
            answers[command.name] = {"args": args, "rc": result.returncode, "stdout": result.stdout,
                                     "stderr": result.stderr[-4000:]}
        timings.add(f"{side}: {len(COMMANDS)} ozone admin commands (one JVM)", time.monotonic() - start)
    finally:
        cluster.stop()
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{side}.json").write_text(json.dumps(answers, indent=1, sort_keys=True))
    return answers


def test_every_admin_command_field_by_field(ozone_classpath: tuple[str, str], tmp_path: Path,
                                            request: pytest.FixtureRequest) -> None:
    allowed = load_allowed()  # first: a table that cannot be read fails before any ring starts
    classpath, note = ozone_classpath
    timings = Timings(jars=note)
    answers = {}
    recorded = os.environ.get("ADMIN_COMPARE_OZONE_ANSWERS")
    if recorded:  # a quicker loop while fixing our side: Ozone's answers from an earlier run of this test
        answers["ozone"] = json.loads(Path(recorded).read_text())
        missing = [c.name for c in COMMANDS if c.name not in answers["ozone"]]
        assert not missing, f"{recorded} holds no answer to {missing}: run the test without ADMIN_COMPARE_OZONE_ANSWERS"
    for side in ("ours",) if recorded else ("ozone", "ours"):  # one ring at a time: the memory is shared
        (tmp_path / side).mkdir()
        answers[side] = run_side(side, classpath, tmp_path / side, timings)
    diffs = compare_all(COMMANDS, answers["ozone"], answers["ours"])
    origin = f"Ozone's answers recorded earlier in {recorded}, not run now" if recorded else "both rings run now"
    text = "\n".join([timings.report(), origin, report(diffs, allowed, len(COMMANDS))])
    (OUT / "differences.txt").write_text(text + "\n")
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            print("\n" + text)
    bad = [d for d in diffs if allowance(allowed, d) is None]
    assert not bad, ("differences from Ozone's SCM not allowed by docs/ozone-compatibility.md:\n"
                     + "\n".join(str(d) for d in bad))
