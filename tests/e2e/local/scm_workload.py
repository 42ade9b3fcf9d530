"""A workload that runs INSIDE a Pod of the local end-to-end tier: simulated datanodes plus a block-allocation client.

Started by the operator scenarios (``operator_env.Env.start_workload``) as a Pod that mounts the cluster's
ConfigMap, so it finds the SCMs the way Ozone clients and datanodes do: by the members' DNS names in
``ozone-site.xml``, which resolve inside the Pod (the kubelet fixture's ``/etc/hosts``) and keep resolving across
Pod restarts (a restarted Pod gets a new address; gRPC re-resolves names on reconnect).

It starts ``--datanodes`` simulated datanodes reporting to every SCM, waits for an open RATIS/THREE pipeline (forcing
the SCM out of safemode once all datanodes registered; on a secure ring they enrol first), writes ``ready`` into ``--out``, then allocates one block
at a time until the file ``stop`` appears there (or ``--duration`` passes), appending one JSON line per call to
``calls.jsonl``: start and end (wall clock), ``ok``, the block ID or the error. The test reads that file: a failed
call, a duplicate block ID, or the longest gap between successful calls are what it judges. Test support only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from scm_server.client.config import SCMClientConfig
from scm_server.client.scm_client import SCMClient
from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.datanode_sim.security import DatanodeSecurity
from scm_server.local.throughput import prepare_cluster
from scm_server.proto import hdds_pb2
from scm_server.security.tls import client_security_from_config
from scm_server.server import endpoints


async def run(conf_dir: Path, out: Path, datanodes: int, duration: float, pause: float) -> int:
    conf = OzoneConfiguration.load(conf_dir)
    get = conf.get_str
    clients = endpoints.protocol_addresses(get, endpoints.Protocol.CLIENT)
    dns = endpoints.protocol_addresses(get, endpoints.Protocol.DATANODE)
    # Generous failover: a call may span an election (about 1-2 s) but must not fail.
    cfg = SCMClientConfig(max_retries=200, retry_interval=0.1, rpc_timeout=5.0)
    out.mkdir(parents=True, exist_ok=True)
    # a secure ring: the client certificate of hdds.x509.client.* (the Pod's environment names the operator's
    # client Secret mounted like a member's), and datanodes that enrol with the datanode enrolment secret first
    security = client_security_from_config(SecurityConfig.from_conf(conf))
    dn_security = DatanodeSecurity.from_conf(
        conf, out / "datanodes", endpoints.protocol_addresses(get, endpoints.Protocol.SECURITY))
    async with SCMClient(clients, cfg, security=security) as admin:
        sim = await prepare_cluster(admin, dns, datanodes, heartbeat_interval=0.5, timeout=120, security=dn_security)
        try:
            (out / "ready").write_text(json.dumps({"clients": clients, "datanodes": dns}))
            deadline = time.monotonic() + duration if duration > 0 else float("inf")
            with open(out / "calls.jsonl", "a", buffering=1) as log:
                while not (out / "stop").exists() and time.monotonic() < deadline:
                    t0 = time.time()
                    try:
                        blocks = await admin.allocate_block(4096, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "e2e")
                        rec = {
                            "t0": t0, "t1": time.time(), "ok": True,
                            "ids": [[b.containerBlockID.containerID, b.containerBlockID.localID] for b in blocks],
                        }
                    except Exception as exc:
                        rec = {"t0": t0, "t1": time.time(), "ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    log.write(json.dumps(rec) + "\n")
                    await asyncio.sleep(pause)
        finally:
            await sim.stop()
    (out / "done").write_text("done")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conf", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--datanodes", type=int, default=3)
    ap.add_argument("--duration", type=float, default=0.0)
    ap.add_argument("--pause", type=float, default=0.02)
    args = ap.parse_args(argv)
    return asyncio.run(run(args.conf, args.out, args.datanodes, args.duration, args.pause))


if __name__ == "__main__":
    sys.exit(main())
