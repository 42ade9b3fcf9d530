#!/usr/bin/env python3
"""What Kerberos costs on Hadoop RPC: handshake latency and call throughput per ``hadoop.rpc.protection``.

A real MIT KDC on loopback (``tests/kerberos/kdc.py``; Debian's krb5-kdc, ``make kerberos-tools``), our asyncio
Hadoop RPC server in this process with a no-op handler, and the test client written to Hadoop's SASL exchange
(``tests/kerberos/sasl_client.py``, PyPI gssapi). Rows, interleaved over ``--rounds`` rounds:

* SIMPLE (no SASL) as the anchor, then authentication, integrity and privacy;
* ``connect``: a new connection up to the first answered call (preamble, SASL, context, one call), sequential;
* ``calls``: ``--calls`` calls on one connection, ``--window`` in flight (answers awaited in order).

Prints the median of the rounds and writes bench/results/kerberos_rpc.json. Client and server share this process
(and the machine's two cores), so the figures are the SASL/GSSAPI cost of both sides together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # `python bench/kerberos_rpc.py`: import tests.* from this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scm_server import hadoop_ipc as codec
from scm_server.conf import OzoneConfiguration
from scm_server.hadoop_ipc import Call
from scm_server.hadoop_sasl import Qop
from scm_server.server.hadoop_rpc.kerberos import KerberosSettings, RpcSecurity, canonical_hostname
from scm_server.server.hadoop_rpc.server import HadoopRpcServer
from tests.kerberos.kdc import MiniKdc
from tests.kerberos.sasl_client import KerberosClient

PROTOCOL = "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol"


class Noop:
    protocol = PROTOCOL
    version = 1
    methods = frozenset({"noop"})

    async def call(self, method: str, call: Call) -> bytes:
        return b"ok"


async def serve(kdc: MiniKdc, keytab: Path, qop: Qop | None) -> tuple[HadoopRpcServer, int]:
    security = None
    if qop is not None:
        conf = OzoneConfiguration()
        for k, v in {
            "hadoop.security.authentication": "kerberos",
            "hdds.scm.kerberos.principal": f"scm/_HOST@{kdc.realm}",
            "hdds.scm.kerberos.keytab.file": str(keytab),
            "hadoop.rpc.protection": qop.hadoop_name,
        }.items():
            conf.set(k, v)
        settings = KerberosSettings.from_conf(conf, "localhost")
        assert settings is not None
        security = RpcSecurity.load(settings)
    server = HadoopRpcServer([Noop()], security=security, idle_timeout=60)
    return server, await server.start("127.0.0.1", 0)


async def connect(port: int, ccache: Path, qop: Qop | None) -> KerberosClient:
    client = await KerberosClient.open(port)
    if qop is None:
        client.writer.write(codec.encode_preamble() + codec.encode_context(client.client_id, PROTOCOL, "bench"))
    else:
        await client.authenticate(ccache)
        client.send_context(PROTOCOL)
    return client


async def connect_row(port: int, ccache: Path, qop: Qop | None, n: int) -> dict[str, float]:
    latencies = []
    for _ in range(n):
        start = time.perf_counter()
        client = await connect(port, ccache, qop)
        answer = await client.call(0, PROTOCOL, "noop", b"")
        assert answer.header.status == codec.Status.SUCCESS
        latencies.append(time.perf_counter() - start)
        client.close()
    latencies.sort()
    return {"p50_ms": 1000 * statistics.median(latencies), "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))]}


async def calls_row(port: int, ccache: Path, qop: Qop | None, n: int, window: int) -> dict[str, float]:
    client = await connect(port, ccache, qop)
    start = time.perf_counter()
    sent = 0
    received = 0
    while received < n:
        while sent < n and sent - received < window:
            client.send_call(sent, PROTOCOL, "noop", b"")
            sent += 1
        answer = await client.receive()
        assert answer.header.status == codec.Status.SUCCESS
        received += 1
    seconds = time.perf_counter() - start
    client.close()
    return {"calls_per_s": n / seconds}


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kdc = MiniKdc.start(Path(tmp) / "kdc")
        os.environ.update(kdc.env())
        try:
            keytab = kdc.keytab(f"scm/{canonical_hostname('localhost')}", "scm")
            ccache = kdc.kinit("bench", kdc.keytab("bench"))
            rows: dict[str, list[dict[str, float]]] = {}
            for _ in range(args.rounds):
                for qop in (None, *Qop):
                    name = "simple" if qop is None else qop.hadoop_name
                    server, port = await serve(kdc, keytab, qop)
                    try:
                        row = await connect_row(port, ccache, qop, args.connects)
                        row.update(await calls_row(port, ccache, qop, args.calls, args.window))
                    finally:
                        await server.stop()
                    rows.setdefault(name, []).append(row)
        finally:
            kdc.stop()
    result = {
        name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in rows.items()
    }
    print(f"{'protection':<15}{'connect p50 ms':>16}{'connect p99 ms':>16}{'calls/s':>10}{'vs simple':>11}")
    base = result["simple"]["calls_per_s"]
    for name, r in result.items():
        print(f"{name:<15}{r['p50_ms']:>16.2f}{r['p99_ms']:>16.2f}{r['calls_per_s']:>10.0f}"
              f"{r['calls_per_s'] / base:>11.2f}")
    out = Path(__file__).resolve().parent / "results" / "kerberos_rpc.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "machine": platform.node(), "load": os.getloadavg(),
                               "rows": result}, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connects", type=int, default=50)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--window", type=int, default=16)
    asyncio.run(main(parser.parse_args()))
