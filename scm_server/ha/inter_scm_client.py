"""Client side of the inter-SCM protocol (proto/scm_ha.proto), used from inside an SCM.

* :func:`download_checkpoint`: a follower that Raft told to install a snapshot (notification
  mode) streams a checkpoint of the leader's scm.db (Ozone's ``SCMSnapshotProvider``), checks
  its sha256 and unpacks it under the snapshot dir;
* :func:`add_scm`: a bootstrapped SCM's first start asks the leader to add it to the ring
  (Ozone's ``HAUtils.addSCM``), following NotLeader hints, with bounded retries and backoff;
* :func:`get_roles`: the leader's commit index, captured by followers for the datanode-report gate.

Every call opens a fresh channel from the unresolved ``host:port`` name, so a peer whose IP
changed (a restarted pod) is found again (HDDS-15514). Errors come back as our own exceptions
(trailing metadata ``x-scm-result`` / ``x-scm-leader-*``, decoded here without importing the
server layer).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import shutil
import tarfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

from scm_server import grpc_options
from scm_server.exceptions import NotLeaderException, ResultCodes, SCMException
from scm_server.metadata.archive import extract_files
from scm_server.proto import hdds_pb2, scm_ha_pb2, scm_ha_pb2_grpc
from scm_server.security.tls import ChannelSecurity, make_channel

LOG = logging.getLogger(__name__)

RESULT_KEY = "x-scm-result"
LEADER_ID_KEY = "x-scm-leader-id"
LEADER_ADDRESS_KEY = "x-scm-leader-address"

# Liveness PINGs (generous: checkpoint streams are large), quick reconnect and DNS re-resolution (a peer
# back on a new IP is found again).
CHANNEL_OPTIONS = grpc_options.channel_options(5.0, max_message_bytes=64 << 20)


def error_metadata(exc: SCMException, leader_address: str = "") -> tuple[tuple[str, str], ...]:
    md = [(RESULT_KEY, exc.result.value)]
    if isinstance(exc, NotLeaderException):
        if exc.leader_id:
            md.append((LEADER_ID_KEY, exc.leader_id))
        if leader_address or exc.leader_address:
            md.append((LEADER_ADDRESS_KEY, leader_address or exc.leader_address))
    return tuple(md)


def decode_error(err: grpc.aio.AioRpcError) -> SCMException | None:
    """The SCMException the server raised, or None for a transport failure."""
    md: dict[str, str] = {}
    for item in err.trailing_metadata() or ():
        key, value = item[0], item[1]
        md[str(key).lower()] = value.decode() if isinstance(value, bytes) else str(value)
    name = md.get(RESULT_KEY)
    if name is None:
        return None
    try:
        result = ResultCodes(name)
    except ValueError:
        result = ResultCodes.INTERNAL_ERROR
    details = err.details() or ""
    if result is ResultCodes.SCM_NOT_LEADER:
        return NotLeaderException(details, md.get(LEADER_ID_KEY, ""), md.get(LEADER_ADDRESS_KEY, ""))
    prefix = f"{result.value}: "
    return SCMException(result, details[len(prefix) :] if details.startswith(prefix) else details)


def channel(address: str, security: ChannelSecurity | None = None) -> grpc.aio.Channel:
    """Insecure, or mutual TLS with this SCM's own certificate (``security``)."""
    return make_channel(address, security, CHANNEL_OPTIONS)


# ---------------------------------------------------------------------------------------------
# checkpoint download
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownloadedCheckpoint:
    db_path: Path  # an scm.db directory, ready for SCMMetadataStore.replace_from_checkpoint
    transaction_info: hdds_pb2.TransactionInfoProto
    cluster_id: str
    size: int
    source: str


class CheckpointError(SCMException):
    def __init__(self, message: str) -> None:
        super().__init__(ResultCodes.IO_EXCEPTION, message)


async def download_checkpoint(
    address: str, cluster_id: str, dest_root: Path, *, timeout: float = 300.0, security: ChannelSecurity | None = None
) -> DownloadedCheckpoint:
    """Stream a checkpoint tarball from ``address`` and unpack it under ``dest_root``."""
    dest_root.mkdir(parents=True, exist_ok=True)
    work = dest_root / f"download-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    tar_path = work / "scm.db.tar.gz"
    digest = hashlib.sha256()
    trx: hdds_pb2.TransactionInfoProto | None = None
    remote_cluster = ""
    expected_sha = ""
    total = 0
    size = 0
    try:
        async with channel(address, security) as ch:
            stub = scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch)
            call = stub.Download(scm_ha_pb2.CopyDBCheckpointRequestProto(clusterId=cluster_id), timeout=timeout)
            with tar_path.open("wb") as out:
                async for msg in call:
                    if msg.HasField("transactionInfo"):
                        trx = hdds_pb2.TransactionInfoProto()
                        trx.CopyFrom(msg.transactionInfo)
                        total = msg.totalSize
                        remote_cluster = msg.clusterId
                    if msg.HasField("data"):
                        digest.update(msg.data)
                        out.write(msg.data)
                        size += len(msg.data)
                    if msg.HasField("sha256"):
                        expected_sha = msg.sha256
    except grpc.aio.AioRpcError as err:
        shutil.rmtree(work, ignore_errors=True)
        exc = decode_error(err)
        if exc is not None:
            raise exc from err
        raise CheckpointError(f"checkpoint download from {address} failed: {err.code().name} {err.details()}") from err
    try:
        if trx is None:
            raise CheckpointError(f"checkpoint stream from {address} carried no transaction info header")
        if not expected_sha:
            raise CheckpointError(f"checkpoint stream from {address} ended without its sha256 trailer (truncated?)")
        if digest.hexdigest() != expected_sha or (total and size != total):
            raise CheckpointError(
                f"checkpoint from {address} is corrupt: sha256 {digest.hexdigest()} != {expected_sha} "
                f"or size {size} != {total}"
            )
        if remote_cluster and remote_cluster != cluster_id:
            raise SCMException(
                ResultCodes.INVALID_CLUSTER_ID,
                f"checkpoint from {address} belongs to cluster {remote_cluster}, this SCM is in {cluster_id}",
            )
        unpack = work / "unpacked"
        unpack.mkdir()
        try:
            with tarfile.open(tar_path, "r:gz") as tar:
                extract_files(tar, unpack)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise CheckpointError(f"checkpoint from {address} cannot be unpacked: {exc}") from exc
        tar_path.unlink()
        db_path = unpack / "scm.db"
        if not db_path.is_dir():
            raise CheckpointError(f"checkpoint from {address} does not contain an scm.db directory")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return DownloadedCheckpoint(db_path, trx, remote_cluster or cluster_id, size, address)


def pack_checkpoint(db_path: Path) -> bytes:
    """gzip'd tar of an scm.db directory (arcname ``scm.db``)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        tar.add(str(db_path), arcname="scm.db")
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# AddSCM / GetScmRatisRoles
# ---------------------------------------------------------------------------------------------


async def add_scm(
    addresses: Sequence[str],
    request: scm_ha_pb2.AddScmRequestProto,
    *,
    attempts: int = 30,
    backoff_start: float = 0.5,
    backoff_max: float = 5.0,
    rpc_timeout: float = 180.0,
    security: ChannelSecurity | None = None,
) -> str:
    """Ask the leader (found by trying ``addresses`` and following hints) to add this SCM.

    Returns the address that accepted. Raises SCMException on a refusal (e.g. INVALID_CLUSTER_ID)
    and ``SCMException(TIMEOUT)`` when no leader accepted within ``attempts`` rounds.
    """
    errors: list[str] = []
    delay = backoff_start
    queue = list(addresses)
    for attempt in range(1, attempts + 1):
        tried: set[str] = set()
        while queue:
            address = queue.pop(0)
            if address in tried:
                continue
            tried.add(address)
            try:
                async with channel(address, security) as ch:
                    resp = await scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch).AddSCM(request, timeout=rpc_timeout)
                if resp.success:
                    return address
                errors.append(f"{address}: {resp.message}")
            except grpc.aio.AioRpcError as err:
                exc = decode_error(err)
                if isinstance(exc, NotLeaderException):
                    errors.append(f"{address}: not the leader (hint {exc.leader_address or 'none'})")
                    if exc.leader_address and exc.leader_address not in tried:
                        queue.insert(0, exc.leader_address)
                    continue
                if exc is not None and exc.result in (ResultCodes.INVALID_CLUSTER_ID, ResultCodes.INVALID_REQUEST):
                    raise exc from err
                errors.append(f"{address}: {exc or f'{err.code().name} {err.details()}'}")
        queue = list(addresses)
        LOG.info("AddSCM not accepted yet (attempt %d/%d): %s", attempt, attempts, errors[-1] if errors else "")
        if attempt < attempts:
            await asyncio.sleep(delay)
            delay = min(delay * 2, backoff_max)
    raise SCMException(
        ResultCodes.TIMEOUT,
        f"no SCM leader accepted AddSCM for {request.scmId} after {attempts} rounds over {', '.join(addresses)}; "
        f"last error: {errors[-1] if errors else 'none'}",
    )


async def get_roles(
    address: str, *, timeout: float = 3.0, security: ChannelSecurity | None = None
) -> scm_ha_pb2.ScmRatisRolesResponseProto:
    async with channel(address, security) as ch:
        return await scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch).GetScmRatisRoles(
            scm_ha_pb2.ScmRatisRolesRequestProto(), timeout=timeout
        )
