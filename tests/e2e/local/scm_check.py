"""Ask every member of a ring what it holds: cluster ID, scmUuid, the leader it knows, and (once it has applied the
leader's commit index) the sha256 digest of every replicated table (``GetTableDigests``, the RPC behind comparing
``debug ldb`` scans across SCMs). Prints one JSON object.

Run as a separate process by ``operator_env.Env.verify_consistent`` (``python -m tests.e2e.local.scm_check``), so the
test process, which also forks every Pod's processes, never holds gRPC state across a fork. Under mutual TLS it
presents the client certificate given by ``--tls-dir`` (``tls.crt``, ``tls.key``, ``ca.crt``: the operator's client
Secret) and checks each member's certificate against its DNS name. With ``--revoked-tls-dir`` (a removed member's
certificate Secret) it also reports what SCM's revocation listing holds and how a call presenting that certificate
ends; with ``--transfer-to MEMBER`` it moves leadership there instead, and with ``--last-contact MEMBER`` it reports
how long ago that member last answered the leader (the leader's published view); with ``--containers`` it lists
the container IDs the ring holds (through its leader, on the client port). Test support only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from scm_server.client.config import SCMClientConfig
from scm_server.client.ha_admin import HAAdminClient
from scm_server.client.scm_client import SCMClient
from scm_server.client.security_admin import SCMSecurityClient
from scm_server.security.keystore import Material
from scm_server.security.tls import StaticClientSecurity


def _security(tls_dir: Path | None) -> StaticClientSecurity | None:
    if tls_dir is None:
        return None
    root = x509.load_pem_x509_certificate((tls_dir / "ca.crt").read_bytes())
    chain = [c for c in x509.load_pem_x509_certificates((tls_dir / "tls.crt").read_bytes()) if c != root]
    key = serialization.load_pem_private_key((tls_dir / "tls.key").read_bytes(), password=None)
    return StaticClientSecurity(Material(key, tuple(chain), (root,)))  # type: ignore[arg-type]


def _client(ip: str, host: str, security: StaticClientSecurity | None, timeout: float) -> HAAdminClient:
    options = [("grpc.ssl_target_name_override", host)] if security is not None else []
    return HAAdminClient([f"{ip}:9895"], rounds=3, timeout=timeout, security=security, channel_options=options)


async def check(members: dict[str, tuple[str, str]], security: StaticClientSecurity | None) -> dict[str, Any]:
    out: dict[str, Any] = {"members": {}}
    for m, (ip, host) in members.items():
        async with _client(ip, host, security, 5) as c:
            info = await c.scm_info()
        out["members"][m] = {"clusterId": info.clusterId, "scmId": info.scmId, "leaderId": info.leaderId}
    leaders = [m for m, v in out["members"].items() if v["leaderId"] and v["leaderId"] == v["scmId"]]
    if len(leaders) != 1:
        out["error"] = f"expected one leader among the members, found {leaders}"
        return out
    ip, host = members[leaders[0]]
    async with _client(ip, host, security, 5) as c:
        out["commitIndex"] = commit = (await c.roles()).commit_index
    out["leader"] = leaders[0]
    for m, (ip, host) in members.items():
        async with _client(ip, host, security, 40) as c:
            d = await c.table_digests(f"{ip}:9895", min_applied_index=commit, wait=30)
        out["members"][m]["appliedIndex"] = d.transactionInfo.index
        out["members"][m]["digests"] = sorted([t.table, t.sha256, t.count] for t in d.digests)
    return out


async def containers(members: dict[str, tuple[str, str]], security: StaticClientSecurity | None) -> dict[str, Any]:
    addresses = [f"{ip}:19860" for ip, _ in members.values()]  # the gRPC client port
    ids: list[int] = []
    async with SCMClient(addresses, SCMClientConfig(max_retries=50, retry_interval=0.2, rpc_timeout=5.0),
                         security=security) as c:
        start = 0
        while True:
            batch, _ = await c.list_containers(start_id=start, count=1000)
            ids.extend(int(x.containerID) for x in batch)
            if len(batch) < 1000:
                break
            start = ids[-1] + 1
    return {"containers": sorted(set(ids))}


async def revocation(
    members: dict[str, tuple[str, str]], security: StaticClientSecurity | None, revoked_tls: Path
) -> dict[str, Any]:
    """The revoked serials SCM lists (recorded and external), and the answer to a call made with ``revoked_tls``."""
    ip, host = next(iter(members.values()))
    options = [("grpc.ssl_target_name_override", host)]
    config = SCMClientConfig(max_retries=3, retry_interval=0.5, rpc_timeout=10)
    async with SCMSecurityClient([f"{ip}:19860"], config, security=security, channel_options=options) as c:
        listing = await c.list_certificates(revoked=True)
    serials = [i.certificate.serialId for i in listing.certificates] + [r.serialId for r in listing.externalRevocations]
    refused = ""
    try:
        async with _client(ip, host, _security(revoked_tls), 5) as c:
            await c.scm_info()
    except grpc.aio.AioRpcError as exc:
        refused = f"{exc.code().name}: {exc.details()}"
    except Exception as exc:  # the client may wrap the gRPC error
        refused = f"{type(exc).__name__}: {exc}"
    return {"revokedSerials": serials, "removedMemberCall": refused or "answered"}


async def transfer(members: dict[str, tuple[str, str]], security: StaticClientSecurity | None, to: str) -> dict[str, Any]:
    """Move leadership to member ``to`` (a test's setup, as ``ozone admin scm transfer`` would)."""
    ip, host = members[to]
    async with _client(ip, host, security, 5) as c:
        target = (await c.scm_info()).scmId
    for ip, host in members.values():
        async with _client(ip, host, security, 10) as c:
            info = await c.scm_info()
            if info.leaderId and info.leaderId == info.scmId:
                return {"transferredTo": await c.transfer(target)}
    return {"transferredTo": None, "note": "no member said it leads"}


async def last_contact(members: dict[str, tuple[str, str]], security: StaticClientSecurity | None,
                       member: str) -> dict[str, Any]:
    """How long ago ``member`` last answered the leader, as the leader publishes it (GetScmRatisRoles), asking
    only the other members (``member`` may be frozen). The leader names a follower's node ID only if its own
    configuration lists it (a leader started before the member joined does not), so the peer is matched by its Raft
    host too; ``found`` is False when the leader's answer has no such peer (then nothing is known of its contact)."""
    member_host = members[member][1] if member in members else None
    for m, (ip, host) in members.items():
        if m == member:
            continue
        async with _client(ip, host, security, 5) as c:
            info = await c.scm_info()
            if info.leaderId and info.leaderId == info.scmId:
                roles = await c.roles()
                peer = next((p for p in roles.peers if p.node_id == member or (member_host and p.host == member_host)),
                            None)
                return {"leader": m, "electionTimeout": roles.election_timeout, "found": peer is not None,
                        "lastContact": peer.last_contact if peer is not None else None}
    return {"leader": None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("members", nargs="+", help="member=ip=host")
    ap.add_argument("--tls-dir", type=Path)
    ap.add_argument("--revoked-tls-dir", type=Path, help="a removed member's certificate Secret, written out")
    ap.add_argument("--transfer-to", help="move leadership to this member")
    ap.add_argument("--last-contact", help="report how long ago this member last answered the leader")
    ap.add_argument("--containers", action="store_true", help="list the container IDs the ring holds")
    args = ap.parse_args(argv)
    members = {}
    for item in args.members:
        m, ip, host = item.split("=")
        members[m] = (ip, host)
    security = _security(args.tls_dir)
    if args.containers:
        print(json.dumps(asyncio.run(containers(members, security))))
    elif args.last_contact is not None:
        print(json.dumps(asyncio.run(last_contact(members, security, args.last_contact))))
    elif args.transfer_to is not None:
        print(json.dumps(asyncio.run(transfer(members, security, args.transfer_to))))
    elif args.revoked_tls_dir is not None:
        print(json.dumps(asyncio.run(revocation(members, security, args.revoked_tls_dir))))
    else:
        print(json.dumps(asyncio.run(check(members, security))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
