"""Apache Ozone on Kubernetes beside our SCM ring, on the node tier's real single node (``make e2e-node-ozone``).

In a namespace enforcing Pod Security ``restricted``: the chart installed with ``helm install`` (the operator in
its Deployment Pod from the project's image), then ``examples/ozone-on-k8s/`` applied with ``kubectl apply`` as an
Ozone admin would: the ``OzoneSCMCluster`` of three, Ozone's datanodes (a StatefulSet of three with volumes of the
node's StorageClass), its OM (a StatefulSet of one) and a client Pod, all from the Ozone image (``make
ozone-image``: Apache Ozone 2.2.0's released jars). Every Pod is scheduled by kube-scheduler and run by kubelet and
containerd; Ozone's processes find the SCM members through CoreDNS and the headless Service.

One test, its phases in order (each timed, the times printed):

1. Ozone's datanodes register, SCM leaves safe mode, a RATIS/THREE pipeline opens; a volume, a bucket and a key of
   9 MiB + 12345 random bytes go in through ``ozone sh`` (``kubectl exec`` into the client Pod) and come back with
   the same SHA-256;
2. keys are put one after another while the SCM leader's Pod is deleted: the ring elects another leader, the
   operator brings the member back, writing goes on, and every key ``ozone sh`` acknowledged reads back identical;
3. the OzoneSCMCluster's image changes to another tag of the same image: every member is rolled, while the
   datanodes' and the OM's Pods stay the same Pods, never restarted and Ready throughout; a key written after the
   roll reads back.
"""

from __future__ import annotations

import functools
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.controlplane.env import helm
from tests.e2e.controlplane.fixture import RESTRICTED, TOOLS_BIN, RealAPI, wait_until
from tests.e2e.node.cluster import Node, NodeError

pytestmark = [pytest.mark.node, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "ozone-on-k8s"
CHART = REPO / "charts" / "ozone-scm-operator"
OZONE_VERSION = re.search(r"<ozone.version>(.+)</ozone.version>",
                          (REPO / "interop" / "ozone" / "pom.xml").read_text()).group(1)  # type: ignore[union-attr]
OZONE_IMAGE = f"localhost/ozone:{OZONE_VERSION}"
CLUSTER = "scm"  # the OzoneSCMCluster of examples/ozone-on-k8s/00-ozonescmcluster.yaml
MEMBERS = [f"{CLUSTER}-{i}" for i in range(3)]
DATANODES = [f"ozone-datanode-{i}" for i in range(3)]
OM = "ozone-om-0"
CLIENT = "ozone-client"
GROUP, VERSION, PLURAL = "ozone-scm.io", "v1alpha1", "ozonescmclusters"
ROLL_TO = "ozone-scm:0.2.0"  # another tag of the project's image (tests/e2e/node/node_env.TAGS loads it)
KEYS_WHILE_FAILING_OVER = 8

Obj = dict[str, Any]


@pytest.fixture(scope="session")
def ozone_image(node: Node) -> str:
    """The Ozone image (``make ozone-image``) in the node's containerd, under the name the manifests use."""
    try:
        node.import_podman_image(OZONE_IMAGE)
    except NodeError as exc:
        raise AssertionError(f"{OZONE_IMAGE} could not be loaded into the node (build it with "
                             f"`make ozone-image`): {exc}") from None
    return OZONE_IMAGE


class Phases:
    """Seconds per phase of the test, printed at the end (docs/testing.md records a run)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.last = self.start
        self.rows: list[tuple[str, float]] = []

    def done(self, what: str) -> None:
        now = time.monotonic()
        self.rows.append((what, now - self.last))
        self.last = now

    def report(self) -> str:
        rows = [f"  {what:<70} {secs:7.1f} s" for what, secs in self.rows]
        return "\n".join(["ozone-on-k8s phases:", *rows, f"  {'total':<70} {time.monotonic() - self.start:7.1f} s"])


class Ozone:
    """The namespace's Ozone side, reached through kubectl (as an admin would) and the API."""

    def __init__(self, node: Node, ns: str) -> None:
        assert node.cp is not None
        self.node = node
        self.ns = ns
        self.kubeconfig = str(node.cp.admin_kubeconfig)

    @property
    def admin(self) -> RealAPI:
        return self.node.admin()

    def kubectl(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(TOOLS_BIN / "kubectl"), "--kubeconfig", self.kubeconfig, "-n", self.ns, *args],
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def sh(self, script: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A bash script in the client Pod (``ozone sh``/``ozone admin`` inside)."""
        return self.kubectl("exec", CLIENT, "--", "bash", "-c", script, timeout=timeout, check=check)

    def pod(self, name: str) -> Obj | None:
        return self.admin.get_object("v1", "Pod", name, self.ns)

    def cluster(self) -> Obj:
        obj = self.admin.request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{self.ns}/{PLURAL}/{CLUSTER}")
        assert isinstance(obj, dict)
        return obj

    def cluster_ready(self) -> bool:
        obj = self.cluster()
        st = obj.get("status") or {}
        conds = {c["type"]: c["status"] for c in st.get("conditions") or ()}
        members = st.get("members") or ()
        return (conds.get("Ready") == "True" and st.get("observedGeneration") == obj["metadata"].get("generation")
                and not st.get("currentOperation") and len(members) == 3
                and all(m.get("ready") and m.get("state") == "Joined" for m in members))

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        def alive() -> None:
            self.node.check_alive()

        return wait_until(predicate, timeout, what, poll=1.0, alive=alive)

    def diagnose(self) -> str:
        pods = self.kubectl("get", "pods", "-o", "wide", check=False).stdout
        events = self.kubectl("get", "events", "--sort-by=.lastTimestamp", check=False).stdout.splitlines()[-25:]
        return f"{pods}\nlast events:\n" + "\n".join(events)


def pod_ready(p: Obj | None) -> bool:
    if not p or (p.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conds = {c["type"]: c["status"] for c in (p.get("status") or {}).get("conditions") or ()}
    return conds.get("Ready") == "True"


def restarts(p: Obj) -> int:
    return sum(int(c.get("restartCount", 0)) for c in (p.get("status") or {}).get("containerStatuses") or ())


class Watcher(threading.Thread):
    """Polls the datanode and OM Pods while a phase runs: any new Pod (uid), restart or not-Ready moment is kept."""

    def __init__(self, oz: Ozone, names: list[str]) -> None:
        super().__init__(daemon=True)
        self.oz, self.names = oz, names
        self.first = {n: oz.pod(n) for n in names}
        self.troubles: list[str] = []
        self.polls = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for name in self.names:
                before = self.first[name]
                assert before is not None
                try:
                    now = self.oz.pod(name)
                except OSError as exc:  # the API server is on this machine: an error is worth reporting
                    self.troubles.append(f"{name}: API read failed: {exc}")
                    continue
                if now is None or now["metadata"]["uid"] != before["metadata"]["uid"]:
                    self.troubles.append(f"{name}: replaced (was uid {before['metadata']['uid']})")
                elif restarts(now) != restarts(before):
                    self.troubles.append(f"{name}: restarted ({restarts(before)} -> {restarts(now)})")
                elif not pod_ready(now):
                    self.troubles.append(f"{name}: not Ready")
            self.polls += 1
            self.halt.wait(1.0)

    def stop(self) -> list[str]:
        self.halt.set()
        self.join(timeout=30)
        return sorted(set(self.troubles))


def install(oz: Ozone, node: Node) -> None:
    admin = oz.admin
    admin.create_namespace(oz.ns, RESTRICTED)
    node.top_up_volumes(admin)  # three SCM members, three datanodes and the OM each claim a volume
    assert node.cp is not None
    # the operator in its own Deployment Pod (one replica: the node's memory is shared)
    helm(node.cp, "install", "ozone-scm-operator", str(CHART), "--namespace", oz.ns,
         "--set", f"watchNamespaces={{{oz.ns}}}", "--set", "replicaCount=1", "--wait=false")


def ozone_ready(oz: Ozone) -> bool:
    """SCM out of safe mode (it waits for the three datanodes: hdds.scm.safemode.min.datanode) and an OPEN
    RATIS/THREE pipeline (one over the three datanodes), by Ozone's admin tool."""
    try:
        out = oz.sh("ozone admin safemode status; ozone admin pipeline list", timeout=180, check=False).stdout
    except subprocess.TimeoutExpired:  # the client retries its SCM calls for minutes while no leader answers
        return False
    return "out of safe mode" in out.lower() and any("RATIS/THREE" in ln and "OPEN" in ln for ln in out.splitlines())


def put_and_check(oz: Ozone, key: str, size: int) -> None:
    """Put ``size`` random bytes as ``key`` through ``ozone sh`` and read them back: same SHA-256."""
    out = oz.sh(
        f"set -e; head -c {size} /dev/urandom > /tmp/put; ozone sh key put {key} /tmp/put; "
        f"rm -f /tmp/got; ozone sh key get {key} /tmp/got; sha256sum /tmp/put /tmp/got; "
        f"ozone sh key info {key}").stdout
    sums = re.findall(r"^([0-9a-f]{64})\s", out, re.M)
    assert len(sums) == 2 and sums[0] == sums[1], out
    assert f'"dataSize" : {size}' in out and "THREE" in out, out


# The writer run in the client Pod while the leader's Pod is deleted: one `ozone sh key put` (its own JVM) per key;
# "ACK <i> <sha256>" for each put that returned 0, "FAIL <i>" for one that did not.
WRITER = """
mkdir -p /tmp/w
for i in $(seq 0 {last}); do
  head -c 65536 /dev/urandom > /tmp/w/$i
  if ozone sh key put /vol1/bucket1/during-$i /tmp/w/$i 2>/tmp/w/$i.err; then
    echo "ACK $i $(sha256sum < /tmp/w/$i | cut -d' ' -f1)"
  else
    echo "FAIL $i $(tail -n 1 /tmp/w/$i.err)"
  fi
done
"""


def test_ozone_datanodes_om_and_client_beside_our_ring(node: Node, scm_image: str, ozone_image: str) -> None:
    oz = Ozone(node, "ozone")  # the namespace the example's addresses name
    phases = Phases()
    try:
        install(oz, node)
        oz.kubectl("apply", "-f", str(EXAMPLES / "00-ozonescmcluster.yaml"))
        oz.wait(oz.cluster_ready, 600, "OzoneSCMCluster scm Ready with three joined members")
        phases.done("chart + OzoneSCMCluster of 3 Ready")

        oz.kubectl("apply", "-f", str(EXAMPLES))
        for name in [*DATANODES, OM, CLIENT]:
            oz.wait(functools.partial(lambda n: pod_ready(oz.pod(n)), name), 600, f"Pod {name} Ready")
        phases.done("Ozone datanodes x3, OM, client Pods Ready")
        oz.wait(lambda: ozone_ready(oz), 600, "SCM out of safe mode, 3 datanodes, an OPEN RATIS/THREE pipeline")
        phases.done("safe mode exit + RATIS/THREE pipeline (ozone admin)")

        # 1. keys through ozone sh
        oz.sh("set -e; ozone sh volume create /vol1; ozone sh bucket create /vol1/bucket1")
        put_and_check(oz, "/vol1/bucket1/first", 9 * 1024 * 1024 + 12345)
        phases.done("volume, bucket, 9 MiB key put + get (same SHA-256)")

        # 2. the SCM leader's Pod deleted while keys are written
        leader = oz.cluster()["status"]["leader"]
        assert leader in MEMBERS, oz.cluster()["status"]
        assert re.search(rf"{leader}\.{CLUSTER}-headless\S*:\d+:LEADER", oz.sh("ozone admin scm roles").stdout)
        writer = subprocess.Popen(
            [str(TOOLS_BIN / "kubectl"), "--kubeconfig", oz.kubeconfig, "-n", oz.ns, "exec", CLIENT, "--",
             "bash", "-c", WRITER.format(last=KEYS_WHILE_FAILING_OVER - 1)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        assert writer.stdout is not None
        first = writer.stdout.readline().strip()  # one put done before the leader goes
        lines.append(first)
        deleted_uid = oz.pod(leader)["metadata"]["uid"]  # type: ignore[index]
        oz.admin.call_delete("v1", "Pod", leader, oz.ns)
        rest, err = writer.communicate(timeout=1200)
        lines += [ln for ln in rest.splitlines() if ln.strip()]
        assert writer.returncode == 0, f"writer: {err}"
        acked = {int(f[1]): f[2] for f in (ln.split() for ln in lines) if f[0] == "ACK"}
        assert len(lines) == KEYS_WHILE_FAILING_OVER, lines
        assert max(acked, default=-1) >= 1 and len(acked) >= KEYS_WHILE_FAILING_OVER // 2, lines
        oz.wait(lambda: (p := oz.pod(leader)) is not None and p["metadata"]["uid"] != deleted_uid and pod_ready(p),
                600, f"{leader} back (a new Pod) and Ready")
        oz.wait(oz.cluster_ready, 600, "OzoneSCMCluster Ready again after the leader's Pod was deleted")
        new_leader = oz.cluster()["status"]["leader"]
        read = oz.sh("; ".join(f"echo \"$(ozone sh key cat /vol1/bucket1/during-{i} | sha256sum | cut -d' ' -f1) {i}\""
                               for i in sorted(acked)), timeout=900).stdout
        got = {int(f[1]): f[0] for f in (ln.split() for ln in read.splitlines()) if len(f) == 2}
        assert got == acked, f"acknowledged keys read back differently:\nwritten {acked}\nread {got}\n{read}"
        phases.done(f"leader {leader} Pod deleted during {KEYS_WHILE_FAILING_OVER} puts: {len(acked)} acked, "
                    f"all read back (leader now {new_leader})")

        # 3. a member rolled by an image change, datanodes and OM staying up
        watcher = Watcher(oz, [*DATANODES, OM])
        watcher.start()
        before = {m: oz.pod(m)["metadata"]["uid"] for m in MEMBERS}  # type: ignore[index]
        oz.admin.request("PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{oz.ns}/{PLURAL}/{CLUSTER}",
                         {"spec": {"image": ROLL_TO}}, content_type="application/merge-patch+json")

        def rolled() -> bool:
            pods = {m: oz.pod(m) for m in MEMBERS}
            return oz.cluster_ready() and all(
                p is not None and p["spec"]["containers"][0]["image"] == ROLL_TO and p["metadata"]["uid"] != before[m]
                and pod_ready(p) for m, p in pods.items())

        oz.wait(rolled, 900, f"every member rolled to {ROLL_TO}, the cluster Ready")
        put_and_check(oz, "/vol1/bucket1/after-roll", 1024 * 1024)
        troubles = watcher.stop()
        assert watcher.polls > 10 and not troubles, troubles
        phases.done(f"members rolled to {ROLL_TO} ({watcher.polls} polls: datanodes and OM untouched), a key after")
        print("\n" + phases.report())
        print(oz.kubectl("get", "pods", "-o", "wide").stdout)
    except BaseException:
        print("\n" + phases.report())
        print(oz.diagnose())
        raise
    finally:
        oz.kubectl("delete", "namespace", oz.ns, "--wait=false", check=False)
