#!/usr/bin/env python3
"""Secure SCM HA benchmark: what security and mutual TLS cost, secure / plain in the same run.

Two 3-SCM quorums run side by side on loopback (separate processes, fsync on, the same settings as
``bench/failover.py``), one plain and one with ``ozone.security.enabled`` + ``hdds.grpc.tls.enabled``
(Ozone's default keys: RSA 2048, SHA256withRSA; CA mode scm), each with 3 simulated datanodes (the
secure ones enrol first). Measurement rounds alternate plain / secure so that load from other
processes on this shared machine hits both alike; medians are reported, with the ratio secure / plain.

1. **AllocateBlocks** through the HA quorum (``freon stb`` code: 8 client tasks, 1 block per call):
   goal ratio >= 0.8.
2. **Raft writes at 64 clients**: AllocateContainers with 64 concurrent client tasks, each call one
   replicated write through the leader's Raft log (the Raft ``Deliver`` streams between SCMs run
   over mutual TLS with the per-message revocation check): goal ratio >= 0.8.
3. **A no-op RPC** (GetScmInfo, 8 tasks): the per-call cost of TLS + the interceptor, for context.
4. **Failover**: client-observed unavailability after SIGKILL of the leader (``--failovers`` runs on
   each quorum, 4 clients): goal secure no worse than plain (ratio ~1).
5. **Certificate issuance on the leader, rate limit on**: ``--certs`` datanode enrolments over the
   wire (security port, 8 concurrent requesters with pre-made CSRs: proof check, CSR checks, a
   replicated ``CertificateId`` serial, signing, a replicated store), per second, with the enrolment
   rate limits at their defaults (``ozone.scm.security.enrollment.rate.*``: every requester here is
   one source, 127.0.0.1, so the per-source limit bounds the rate; refused attempts are retried with
   backoff by the enrolment client and counted); anchor: the raw signing rate of the pure builder in
   this process (same key algorithm), so the ratio is the cost of everything around the signature.

Besides throughput, each phase records the CPU time the three SCM processes spent per operation (from
/proc): a cost ratio that hardly depends on what else a shared machine is doing, printed next to the
throughput ratios.

Writes bench/results/security.json. Bounded: about 5-8 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if not __package__:  # `python bench/security.py`: import bench.* and tests.* from this checkout, as `python -m` does
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import failover as plain_failover
from scm_server.client import SCMClient
from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.local import throughput
from scm_server.local.quorum import HALocalCluster
from scm_server.proto import scm_security_pb2
from scm_server.security.cert_client import SecurityProtocolClient
from scm_server.security.core import certificates as pki
from scm_server.security.core import identity as ids

ROOT = Path(__file__).resolve().parent.parent

SETTINGS = dict(plain_failover.SETTINGS)
CLIENT = plain_failover.CLIENT


def scm_cpu_seconds(cluster: HALocalCluster) -> float:
    """CPU time (user + system) used so far by the cluster's SCM processes, from /proc: a cost
    measure that, unlike throughput, hardly depends on what else the shared machine is doing."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for s in cluster.scms:
        if s.proc is None or s.proc.poll() is not None:
            continue
        with open(f"/proc/{s.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def _round(admin: SCMClient, cluster: HALocalCluster, args: argparse.Namespace) -> dict[str, float]:
    c0 = scm_cpu_seconds(cluster)
    blocks, ids_ = await throughput.bench_allocate_blocks(admin, args.blocks, 8, 4096, 1)
    c1 = scm_cpu_seconds(cluster)
    assert len(ids_) == len(set(ids_)), "duplicate block IDs"
    containers = await throughput.bench_allocate_containers(admin, args.containers, 64)
    c2 = scm_cpu_seconds(cluster)
    ping = await throughput.bench_ping(admin, args.pings, 8)
    c3 = scm_cpu_seconds(cluster)
    return {"AllocateBlocks": blocks.ops_per_second, "AllocateContainers@64": containers.ops_per_second,
            "NoOpRpc": ping.ops_per_second,
            "AllocateBlocks SCM CPU us/op": (c1 - c0) / max(blocks.operations, 1) * 1e6,
            "AllocateContainers@64 SCM CPU us/op": (c2 - c1) / max(containers.operations, 1) * 1e6,
            "NoOpRpc SCM CPU us/op": (c3 - c2) / max(ping.operations, 1) * 1e6}


async def compare_throughput(plain: HALocalCluster, secure: HALocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    rounds: dict[str, list[dict[str, float]]] = {"plain": [], "secure": []}
    async with SCMClient(plain.client_addresses, CLIENT) as a_plain, SCMClient(
        secure.client_addresses, CLIENT, security=secure.client_security
    ) as a_secure:
        sims = [
            await throughput.prepare_cluster(a_plain, plain.datanode_addresses, 3, heartbeat_interval=1.0),
            await throughput.prepare_cluster(a_secure, secure.datanode_addresses, 3, heartbeat_interval=1.0,
                                             security=secure.datanode_security()),
        ]
        try:
            for admin in (a_plain, a_secure):
                await throughput.bench_allocate_blocks(admin, 500, 8, 4096, 1)  # warm-up
            for r in range(args.rounds):
                for name, admin, cluster in (("plain", a_plain, plain), ("secure", a_secure, secure)):
                    result = await _round(admin, cluster, args)
                    rounds[name].append(result)
                    print(f"  round {r + 1} {name:6s} " + "  ".join(f"{k} {v:,.0f}/s" for k, v in result.items()), flush=True)
        finally:
            for sim in sims:
                await sim.stop()
    out: dict[str, Any] = {"rounds": args.rounds}
    for name, rs in rounds.items():
        out[name] = {mode: round(statistics.median(r[mode] for r in rs), 1) for mode in rs[0]}
        out[name + "_rounds"] = rs
    out["secure_over_plain"] = {m: round(out["secure"][m] / v, 3) for m, v in out["plain"].items() if v}
    return out


async def issuance(secure: HALocalCluster, count: int, concurrency: int, spec: pki.KeySpec) -> dict[str, Any]:
    assert secure.secure is not None
    secret = secure.secure.secret_file("datanode").read_text().strip().encode()
    root = pki.load_certificate(secure.secure.root_cert.read_bytes())
    client = SecurityProtocolClient(secure.security_addresses, roots=[root], role="datanode", secret=secret, rounds=100,
                                    backoff_start=0.05, backoff_max=0.5)
    trusted = await client.establish_trust()
    cid = trusted.info.clusterId
    key = pki.generate_key(spec)  # the requesters' key generation is not what is measured
    requests = []
    for i in range(count):
        host = f"bench-dn-{i}"
        csr = pki.build_csr(key, ids.datanode_subject(host, f"u-{i}", cid), spec)
        requests.append((csr, scm_security_pb2.NodeCertDetailsProto(clusterId=cid, uuid=str(uuid.uuid4()), hostName=host)))
    queue = list(requests)
    latencies: list[float] = []

    async def worker() -> None:
        while queue:
            csr, details = queue.pop()
            t0 = time.perf_counter()
            await client.enroll_node(csr, details)
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    # anchor: the pure builder's raw signing rate, same key algorithm, this process
    issuer_key = pki.generate_key(spec)
    issuer = pki.build_root_ca(issuer_key, pki.SubjectInfo("bench-ca"), serial=1, now=datetime.now(UTC),
                               lifetime=timedelta(days=1), spec=spec)
    n = 0
    s0 = time.perf_counter()
    while time.perf_counter() - s0 < 2.0:
        n += 1
        pki.issue_certificate(ids.datanode_subject("h", "u", cid), key.public_key(), issuer=issuer, issuer_key=issuer_key,
                              serial=n + 1, now=datetime.now(UTC), lifetime=timedelta(days=1),
                              profile=pki.Profile.END_ENTITY, spec=spec)
    raw = n / (time.perf_counter() - s0)
    latencies.sort()
    limits = SecurityConfig.from_conf(OzoneConfiguration(secure.settings))
    return {
        "rate_limit": {"per_source_per_s": limits.enrollment_rate_per_source,
                       "per_source_burst": limits.enrollment_rate_per_source_burst,
                       "total_per_s": limits.enrollment_rate_total, "total_burst": limits.enrollment_rate_total_burst},
        "rate_limited_attempts": client.rate_limited,
        "certificates": count, "concurrency": concurrency, "per_second": round(count / wall, 1),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1), "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1),
        "raw_signing_per_second": round(raw, 1), "over_raw_signing": round(count / wall / raw, 3),
        "key": f"{spec.algorithm} {spec.length} {spec.signature}",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--blocks", type=int, default=3000)
    p.add_argument("--containers", type=int, default=640)
    p.add_argument("--pings", type=int, default=3000)
    p.add_argument("--failovers", type=int, default=5)
    p.add_argument("--certs", type=int, default=200)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "security.json")
    args = p.parse_args()
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="scm-security-bench-"))
    spec = pki.KeySpec()  # Ozone's defaults
    out: dict[str, Any] = {}
    plain = HALocalCluster(tmp / "plain", 3, settings=SETTINGS)
    secure = HALocalCluster(tmp / "secure", 3, settings=SETTINGS, secure=True, key_spec=spec)
    try:
        t0 = time.perf_counter()
        plain.start_quorum()
        plain_start = time.perf_counter() - t0
        t0 = time.perf_counter()
        secure.start_quorum()
        secure_start = time.perf_counter() - t0
        out["quorum_start_s"] = {"plain": round(plain_start, 1), "secure": round(secure_start, 1)}
        print(f"quorums up (plain {plain_start:.1f}s, secure {secure_start:.1f}s incl. CA, CSRs, admin certificate)", flush=True)
        print("throughput: plain vs secure 3-SCM quorum, alternating rounds", flush=True)
        out["throughput"] = asyncio.run(compare_throughput(plain, secure, args))
        print(f"certificate issuance: {args.certs} datanode enrolments on the secure leader", flush=True)
        out["issuance"] = asyncio.run(issuance(secure, args.certs, 8, spec))
        plain.stop_all()
        secure.stop_all()
        # Failover on fresh quorums: the throughput rounds left pipelines on datanodes that are gone, so
        # an SCM restarted by a fault could never leave safemode there (its rules wait for reports from
        # those pipelines), and once elected it would refuse every allocation.
        fail: dict[str, Any] = {}
        fresh = {"plain": HALocalCluster(tmp / "plain-failover", 3, settings=SETTINGS),
                 "secure": HALocalCluster(tmp / "secure-failover", 3, settings=SETTINGS, secure=True, key_spec=spec)}
        for name, cluster in fresh.items():
            print(f"failover ({name}): {args.failovers} SIGKILLs of the leader", flush=True)
            try:
                cluster.start_quorum()
                fail[name] = asyncio.run(plain_failover.failover_runs(cluster, args.failovers, 4, "kill"))
            finally:
                cluster.stop_all()
        fail["secure_over_plain_median"] = round(
            fail["secure"]["unavailability_s"]["kill"]["median"] / fail["plain"]["unavailability_s"]["kill"]["median"], 3
        )
        out["failover"] = fail
    finally:
        plain.stop_all()
        secure.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    out["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                      "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]}
    out["wall_seconds"] = round(time.perf_counter() - started, 1)
    t = out["throughput"]
    print(f"\n{'metric':34} {'plain':>12} {'secure':>12} {'secure/plain':>13} goal")
    goals = {"AllocateBlocks": ">= 0.8", "AllocateContainers@64": ">= 0.8", "NoOpRpc": "(context)"}
    for mode, v in t["plain"].items():
        label = mode if "CPU" in mode else mode + " ops/s"
        goal = goals.get(mode, "(cost, lower is better)")
        print(f"{label:34} {v:>12,.0f} {t['secure'][mode]:>12,.0f} {t['secure_over_plain'][mode]:>13.2f} {goal}")
    f = out["failover"]
    print(f"{'failover unavailability median s':34} {f['plain']['unavailability_s']['kill']['median']:>12.2f} "
          f"{f['secure']['unavailability_s']['kill']['median']:>12.2f} {f['secure_over_plain_median']:>13.2f} <= ~1")
    i = out["issuance"]
    print(f"{'certificate issuance /s (leader)':34} {i['raw_signing_per_second']:>12,.0f} {i['per_second']:>12,.1f} "
          f"{i['over_raw_signing']:>13.3f} (anchor: raw signing; p50 {i['p50_ms']} ms; rate limit on: "
          f"{i['rate_limit']['per_source_per_s']:g}/s per source, burst {i['rate_limit']['per_source_burst']}, "
          f"{i['rate_limited_attempts']} attempts refused and retried)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out} ({out['wall_seconds']} s; load average at end {out['machine']['loadavg_at_end']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
