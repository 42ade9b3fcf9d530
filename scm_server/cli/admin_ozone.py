"""``ozone-scm admin`` commands that Ozone's ``ozone admin`` has and our gRPC admin service does not serve yet:
they speak Ozone's own protocols to SCM's Hadoop RPC client port, as ``ozone admin`` does, and print what it
prints.

* ``admin datanode usageinfo`` and ``admin datanode status decommission``;
* ``admin container reconcile``;
* ``admin containerbalancer status [-v]|start [options]|stop``;
* ``admin scm finalizationstatus|finalizeupgrade`` and ``admin scm deletedBlocksTxn summary``;
* ``admin reconfig --address HOST:PORT properties|start|status`` (ReconfigureProtocol, one SCM).

The addresses are the SCMs' Hadoop RPC client ports (``ozone.scm.client.port``, per node) from the
configuration, or ``--scm`` given to ``admin``. An SCM with ``ozone.security.enabled`` does not serve that port
yet (SIMPLE authentication only), so these commands refuse to run against a secure configuration, saying so.
Registered on the groups of :mod:`scm_server.cli.admin` and :mod:`scm_server.cli.admin_scm` by ``main``.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from scm_server.cli.context import CliContext, pass_ctx
from scm_server.cli.output import print_json
from scm_server.client.hadoop_rpc import LocationClient, reconfigure_call
from scm_server.conf.security import SecurityConfig
from scm_server.proto.ozone import ReconfigureProtocol_pb2 as wire_reconf
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.server import endpoints

T = TypeVar("T")
Request = wire_loc.ScmContainerLocationRequest
Response = wire_loc.ScmContainerLocationResponse


def hadoop_client_addresses(ctx: CliContext) -> list[str]:
    """``--scm`` if given, else every SCM's Hadoop RPC client port; a one-line refusal on a secure setup."""
    if SecurityConfig.from_conf(ctx.conf).security_enabled:
        raise click.UsageError(
            "this command speaks Ozone's protocol to SCM's Hadoop RPC client port (ozone.scm.client.port), which "
            "an SCM with ozone.security.enabled=true does not serve yet (SIMPLE authentication only)"
        )
    return ctx.scm_addresses(endpoints.Protocol.CLIENT_HADOOP)


def _submit(ctx: CliContext, request: Request) -> Response:
    return _run(ctx, lambda client: client.submit(request))


def _run(ctx: CliContext, call: Callable[[LocationClient], Awaitable[T]]) -> T:
    addresses = hadoop_client_addresses(ctx)

    async def go() -> T:
        async with LocationClient(addresses, attempts=10, retry_interval=0.5) as client:
            return await call(client)

    return asyncio.run(go())


# ---------------------------------------------------------------- datanodes
@click.command("usageinfo")
@click.option("--uuid", "dn_uuid", default="", help="The datanode with this UUID.")
@click.option("--address", default="", help="The datanode(s) at this IP address or host name.")
@click.option("-m", "--most-used", "most_used", is_flag=True, help="The most used datanodes.")
@click.option("-l", "--least-used", "least_used", is_flag=True, help="The least used datanodes.")
@click.option("-c", "--count", default=3, show_default=True, type=click.IntRange(min=1), help="How many (with -m/-l).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def usageinfo(ctx: CliContext, dn_uuid: str, address: str, most_used: bool, least_used: bool, count: int,
              as_json: bool) -> None:
    """Datanodes' capacity, use and load (as `ozone admin datanode usageinfo`)."""
    chosen = sum(bool(x) for x in (dn_uuid, address, most_used, least_used))
    if chosen != 1:
        raise click.UsageError("give exactly one of --uuid, --address, --most-used, --least-used")
    req = wire_loc.DatanodeUsageInfoRequestProto()
    if dn_uuid:
        req.uuid = dn_uuid
    elif address:
        req.ipaddress = address
    else:
        req.mostUsed = most_used
        req.count = count
    infos = _submit(ctx, Request(cmdType=wire_loc.DatanodeUsageInfo, DatanodeUsageInfoRequest=req)
                    ).DatanodeUsageInfoResponse.info
    rows: list[dict[str, int | str]] = [{
        "uuid": i.node.uuid, "ipAddress": i.node.ipAddress, "hostName": i.node.hostName,
        "ozoneCapacity": i.capacity, "ozoneUsed": i.used, "ozoneAvailable": i.remaining,
        "committed": i.committed, "containerCount": i.containerCount, "pipelineCount": i.pipelineCount,
    } for i in infos]
    if as_json:
        print_json(rows)
        return
    click.echo(f"Usage Information ({len(rows)} Datanodes)\n")
    for r in rows:
        capacity, used = int(r["ozoneCapacity"]), int(r["ozoneUsed"])
        used_pct = 100.0 * used / capacity if capacity else 0.0
        for label, value in (("ID", r["uuid"]), ("IP Address", r["ipAddress"]), ("Hostname", r["hostName"]),
                             ("Ozone Capacity", r["ozoneCapacity"]), ("Ozone Used", r["ozoneUsed"]),
                             ("Ozone Used %", f"{used_pct:.2f}%"), ("Ozone Available", r["ozoneAvailable"]),
                             ("Pipeline(s)", r["pipelineCount"]), ("Container(s)", r["containerCount"])):
            click.echo(f"{label:<24}: {value}")
        click.echo()


@click.group("status")
def datanode_status() -> None:
    """Datanodes' admin workflows."""


@datanode_status.command("decommission")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def decommission_status(ctx: CliContext, as_json: bool) -> None:
    """Decommissioning datanodes and the containers holding each back (as `ozone admin datanode status
    decommission`)."""

    async def go(client: LocationClient) -> list[dict[str, object]]:
        nodes = (await client.submit(Request(
            cmdType=wire_loc.QueryNode,
            nodeQueryRequest=wire_loc.NodeQueryRequestProto(opState=wire.DECOMMISSIONING, scope=wire.CLUSTER),
        ))).nodeQueryResponse.datanodes
        out: list[dict[str, object]] = []
        for node in nodes:
            held = (await client.submit(Request(
                cmdType=wire_loc.GetContainersOnDecomNode,
                getContainersOnDecomNodeRequest=wire_loc.GetContainersOnDecomNodeRequestProto(
                    datanodeDetails=node.nodeID),
            ))).getContainersOnDecomNodeResponse.containersOnDecomNode
            out.append({"uuid": node.nodeID.uuid, "hostName": node.nodeID.hostName,
                        "ipAddress": node.nodeID.ipAddress,
                        "containers": {e.name: [c.id for c in e.id] for e in held}})
        return out

    nodes = _run(ctx, go)
    if as_json:
        print_json(nodes)
        return
    click.echo(f"\nDecommission Status: DECOMMISSIONING - {len(nodes)} node(s)")
    for n in nodes:
        click.echo(f"\nDatanode: {n['uuid']} ({n['ipAddress']}/{n['hostName']})")
        click.echo(str(n["containers"]))


# ---------------------------------------------------------------- containers
@click.command("reconcile")
@click.argument("container_id", type=click.IntRange(min=1))
@pass_ctx
def reconcile(ctx: CliContext, container_id: int) -> None:
    """Reconcile a closed container's replicas with each other (as `ozone admin container reconcile`)."""
    _submit(ctx, Request(cmdType=wire_loc.ReconcileContainer,
                         reconcileContainerRequest=wire_loc.ReconcileContainerRequestProto(containerID=container_id)))
    click.echo(f"Reconciliation has been triggered for container {container_id}.")


def suppress_containers(ctx: CliContext, container_ids: list[int], suppress: bool) -> None:
    """`container report --suppress|--unsuppress ID...` (SuppressContainer): mark the containers so the
    ReplicationManager's report leaves them out (or counts them again); names the ones SCM could not mark."""
    answer = _submit(ctx, Request(cmdType=wire_loc.SuppressContainer, suppressContainerRequest=(
        wire_loc.SuppressContainerRequestProto(containerIDs=container_ids, suppress=suppress))))
    failed = list(answer.suppressContainerResponse.failedContainerIDs)
    verb = "suppress" if suppress else "unsuppress"
    done = [cid for cid in container_ids if cid not in failed]
    if done:
        click.echo(f"{verb.capitalize()}ed container(s): {', '.join(map(str, done))}")
    if failed:
        raise click.ClickException(f"Failed to {verb} container(s): {', '.join(map(str, failed))} (each must "
                                   "exist; see `admin container info <id>`)")


# ---------------------------------------------------------------- the balancer
@click.group("containerbalancer")
def containerbalancer() -> None:
    """The container balancer's status, start, stop (Ozone's ``ozone admin containerbalancer``)."""


@containerbalancer.command("status")
@click.option("-v", "--verbose", is_flag=True, help="The run's configuration and its iterations' figures.")
@pass_ctx
def balancer_status(ctx: CliContext, verbose: bool) -> None:
    if not verbose:
        running = _submit(ctx, Request(cmdType=wire_loc.GetContainerBalancerStatus,
                                       containerBalancerStatusRequest=wire_loc.ContainerBalancerStatusRequestProto())
                          ).containerBalancerStatusResponse.isRunning
        click.echo("ContainerBalancer is Running." if running else "ContainerBalancer is Not Running.")
        return
    answer = _submit(ctx, Request(
        cmdType=wire_loc.GetContainerBalancerStatusInfo,
        containerBalancerStatusInfoRequest=wire_loc.ContainerBalancerStatusInfoRequestProto(),
    )).containerBalancerStatusInfoResponse
    if not answer.isRunning:
        click.echo("ContainerBalancer is Not Running.")
        return
    info = answer.containerBalancerStatusInfo
    c = info.configuration
    started = datetime.datetime.fromtimestamp(info.startedAt, tz=datetime.UTC)
    click.echo("ContainerBalancer is Running.")
    click.echo(f"Started at: {started:%Y-%m-%d %H:%M:%S} UTC")
    click.echo("Container Balancer Configuration values:")
    for key, value in (
        ("Threshold", f"{float(c.utilizationThreshold):g}"),
        ("Max Datanodes to Involve per Iteration(percent)", c.datanodesInvolvedMaxPercentagePerIteration),
        ("Max Size to Move per Iteration", f"{c.sizeMovedMaxPerIteration >> 30}GB"),
        ("Max Size Entering Target per Iteration", f"{c.sizeEnteringTargetMax >> 30}GB"),
        ("Max Size Leaving Source per Iteration", f"{c.sizeLeavingSourceMax >> 30}GB"),
        ("Number of Iterations", c.iterations),
        ("Time Limit for Single Container's Movement", f"{c.moveTimeout // 60000}min"),
        ("Time Limit for Single Container's Replication", f"{c.moveReplicationTimeout // 60000}min"),
        ("Interval between each Iteration", f"{c.balancingIterationInterval // 60000}min"),
        ("Whether to Enable Network Topology", str(c.moveNetworkTopologyEnable).lower()),
        ("Container IDs to Exclude from Balancing", c.excludeContainers or "None"),
        ("Datanodes Specified to be Balanced", c.includeDatanodes or "None"),
        ("Datanodes Excluded from Balancing", c.excludeDatanodes or "None"),
    ):
        click.echo(f"{key:<50}{value}")
    for it in info.iterationsStatusInfo:
        click.echo("")
        click.echo(f"Iteration number {it.iterationNumber}")
        click.echo(f"Iteration duration {it.iterationDuration} sec")
        click.echo(f"Iteration result {it.iterationResult}")
        click.echo(f"Size scheduled to move {it.sizeScheduledForMove} B")
        click.echo(f"Moved data size {it.dataSizeMoved} B")
        click.echo(f"Scheduled to move containers {it.containerMovesScheduled}")
        click.echo(f"Already moved containers {it.containerMovesCompleted}")
        click.echo(f"Failed to move containers {it.containerMovesFailed}")
        click.echo(f"Failed to move containers by timeout {it.containerMovesTimeout}")
        for title, rows in (("Entered data to nodes", it.sizeEnteringNodes), ("Exited data from nodes", it.sizeLeavingNodes)):
            click.echo(title)
            for row in rows:
                click.echo(f"{row.uuid} <- {row.dataVolume} B" if title.startswith("Entered")
                           else f"{row.uuid} -> {row.dataVolume} B")


@containerbalancer.command("start")
@click.option("-t", "--threshold", type=float, help="Percentage deviation from the cluster's average utilization "
              "beyond which a datanode is rebalanced, in [0, 100) (hdds.container.balancer.utilization.threshold).")
@click.option("-i", "--iterations", type=int, help="Iterations to run, positive or -1 (until balanced).")
@click.option("-d", "--max-datanodes-percentage-to-involve-per-iteration", "max_datanodes", type=int,
              help="Percentage of healthy, in-service datanodes one iteration may involve, in [0, 100].")
@click.option("-s", "--max-size-to-move-per-iteration-in-gb", "max_size", type=int,
              help="GB one iteration may move.")
@click.option("-e", "--max-size-entering-target-in-gb", "max_entering", type=int,
              help="GB that may enter one target datanode per iteration.")
@click.option("-l", "--max-size-leaving-source-in-gb", "max_leaving", type=int,
              help="GB that may leave one source datanode per iteration.")
@click.option("--balancing-iteration-interval-minutes", "interval", type=int, help="Minutes between iterations.")
@click.option("--move-timeout-minutes", "move_timeout", type=int, help="Minutes one container's move may take.")
@click.option("--move-replication-timeout-minutes", "replication_timeout", type=int,
              help="Minutes the replication within one move may take (less than the move timeout).")
@click.option("--move-network-topology-enable", "topology", type=bool, help="Take the network topology into account.")
@click.option("--include-datanodes", help="Only these datanodes (host names or IPs, comma-separated).")
@click.option("--exclude-datanodes", help="Leave these datanodes out (host names or IPs, comma-separated).")
@click.option("--include-containers", help="Only these container ids (comma-separated).")
@click.option("--exclude-containers", help="Never move these container ids (comma-separated).")
@pass_ctx
def balancer_start(ctx: CliContext, threshold: float | None, iterations: int | None, max_datanodes: int | None,
                   max_size: int | None, max_entering: int | None, max_leaving: int | None, interval: int | None,
                   move_timeout: int | None, replication_timeout: int | None, topology: bool | None,
                   include_datanodes: str | None, exclude_datanodes: str | None, include_containers: str | None,
                   exclude_containers: str | None) -> None:
    given: dict[str, Any] = {
        "threshold": threshold, "iterations": iterations, "maxDatanodesPercentageToInvolvePerIteration": max_datanodes,
        "maxSizeToMovePerIterationInGB": max_size, "maxSizeEnteringTargetInGB": max_entering,
        "maxSizeLeavingSourceInGB": max_leaving, "balancingInterval": interval, "moveTimeout": move_timeout,
        "moveReplicationTimeout": replication_timeout, "networkTopologyEnable": topology,
        "includeNodes": include_datanodes, "excludeNodes": exclude_datanodes,
        "includeContainers": include_containers, "excludeContainers": exclude_containers,
    }
    options = wire_loc.StartContainerBalancerRequestProto(**{k: v for k, v in given.items() if v is not None})
    answer = _submit(ctx, Request(cmdType=wire_loc.StartContainerBalancer, startContainerBalancerRequest=options)
                     ).startContainerBalancerResponse
    if answer.start:
        click.echo("Container Balancer started successfully.")
        return
    raise click.ClickException(f"Failed to start Container Balancer. Failure reason: {answer.message}")


@containerbalancer.command("stop")
@pass_ctx
def balancer_stop(ctx: CliContext) -> None:
    _submit(ctx, Request(cmdType=wire_loc.StopContainerBalancer,
                         stopContainerBalancerRequest=wire_loc.StopContainerBalancerRequestProto()))
    click.echo("Container Balancer stopped.")


# ---------------------------------------------------------------- upgrades, deleted blocks
def _progress(client_id: str, *, takeover: bool = False, readonly: bool = False) -> Request:
    return Request(
        cmdType=wire_loc.QueryUpgradeFinalizationProgress,
        queryUpgradeFinalizationProgressRequest=wire_loc.QueryUpgradeFinalizationProgressRequestProto(
            upgradeClientId=client_id, takeover=takeover, readonly=readonly),
    )


@click.command("finalizationstatus")
@pass_ctx
def finalization_status(ctx: CliContext) -> None:
    """The SCM's upgrade finalization status (as `ozone admin scm finalizationstatus`)."""
    status = _submit(ctx, _progress(f"Upgrade-Client-{uuid.uuid4()}", readonly=True)
                     ).queryUpgradeFinalizationProgressResponse.status
    click.echo(wire.UpgradeFinalizationStatus.Status.Name(status.status))


FINALIZATION_POLL_S = 0.5  # how often Ozone's CLI asks for progress


@click.command("finalizeupgrade")
@click.option("--takeover", is_flag=True,
              help="Forces takeover of monitoring from another client, if finalization has already been started "
                   "and did not finish yet.")
@pass_ctx
def finalize_upgrade(ctx: CliContext, takeover: bool) -> None:
    """Finalize the SCM's upgrade (as `ozone admin scm finalizeupgrade`): start it, then print its messages
    until it is done."""
    client_id = f"Upgrade-Client-{uuid.uuid4()}"
    Status = wire.UpgradeFinalizationStatus

    async def finalize(client: LocationClient) -> None:
        started = (await client.submit(Request(
            cmdType=wire_loc.FinalizeScmUpgrade,
            finalizeScmUpgradeRequest=wire_loc.FinalizeScmUpgradeRequestProto(upgradeClientId=client_id),
        ))).finalizeScmUpgradeResponse.status
        if started.status == Status.ALREADY_FINALIZED:
            click.echo("Upgrade has already been finalized.")
            click.echo("Exiting...")
            return
        if started.status != Status.STARTING_FINALIZATION:
            raise click.ClickException(
                f"Invalid response from Storage Container Manager. Current finalization status is: "
                f"{Status.Status.Name(started.status)}")
        while True:
            await asyncio.sleep(FINALIZATION_POLL_S)
            progress = (await client.submit(_progress(client_id, takeover=takeover))
                        ).queryUpgradeFinalizationProgressResponse.status
            if progress.status == Status.ALREADY_FINALIZED:
                click.echo("Finalization already finished.")
                click.echo("Exiting...")
                return
            if progress.status in (Status.FINALIZATION_IN_PROGRESS, Status.FINALIZATION_DONE):
                for message in progress.messages:
                    click.echo(message)
            if progress.status == Status.FINALIZATION_DONE:
                click.echo("Exiting...")
                click.echo("Finalization of Storage Container Manager's metadata upgrade finished.")
                return

    _run(ctx, finalize)


@click.group("deletedBlocksTxn")
def deleted_blocks_txn() -> None:
    """The deleted-block transaction log."""


@deleted_blocks_txn.command("summary")
@pass_ctx
def deleted_blocks_summary(ctx: CliContext) -> None:
    """How many deleted-block transactions and blocks are pending (as `ozone admin scm deletedBlocksTxn
    summary`)."""
    answer = _submit(ctx, Request(cmdType=wire_loc.GetDeletedBlocksTransactionSummary,
                                  getDeletedBlocksTxnSummaryRequest=wire_loc.GetDeletedBlocksTxnSummaryRequestProto())
                     ).getDeletedBlocksTxnSummaryResponse
    if not answer.HasField("summary"):
        click.echo("DeletedBlocksTransaction summary is not available")
        return
    s = answer.summary
    click.echo("DeletedBlocksTransaction summary:")
    click.echo(f"  Total number of transactions: {s.totalTransactionCount}")
    click.echo(f"  Total number of blocks: {s.totalBlockCount}")
    click.echo(f"  Total size of blocks: {s.totalBlockSize}")
    click.echo(f"  Total replicated size of blocks: {s.totalBlockReplicatedSize}")


# ---------------------------------------------------------------- reconfiguration
@click.group("reconfig")
@click.option("--address", required=True, metavar="HOST:PORT", help="The SCM's Hadoop RPC client address.")
def reconfig(address: str) -> None:
    """Reconfigure one SCM at run time (as `ozone admin reconfig --service=SCM`)."""


def _reconfig_address(click_ctx: click.Context) -> str:
    parent = click_ctx.parent
    assert parent is not None
    address: str = parent.params["address"]
    cli_ctx = click_ctx.find_object(CliContext)
    assert cli_ctx is not None  # the root command makes it
    hadoop_client_addresses(cli_ctx)  # the secure-setup refusal
    return address


@reconfig.command("properties")
@click.pass_context
def reconfig_properties(click_ctx: click.Context) -> None:
    address = _reconfig_address(click_ctx)
    names = asyncio.run(reconfigure_call(address, "listReconfigureProperties",
                                         wire_reconf.ListReconfigurePropertiesRequestProto(),
                                         wire_reconf.ListReconfigurePropertiesResponseProto)).name
    click.echo(f"SCM: Node [{address}] Reconfigurable properties:")
    for name in names:
        click.echo(name)


@reconfig.command("start")
@click.pass_context
def reconfig_start(click_ctx: click.Context) -> None:
    address = _reconfig_address(click_ctx)
    asyncio.run(reconfigure_call(address, "startReconfigure", wire_reconf.StartReconfigureRequestProto(),
                                 wire_reconf.StartReconfigureResponseProto))
    click.echo(f"SCM: Started reconfiguration task on node [{address}].")


@reconfig.command("status")
@click.pass_context
def reconfig_status(click_ctx: click.Context) -> None:
    address = _reconfig_address(click_ctx)
    status = asyncio.run(reconfigure_call(address, "getReconfigureStatus",
                                          wire_reconf.GetReconfigureStatusRequestProto(),
                                          wire_reconf.GetReconfigureStatusResponseProto))
    head = f"SCM: Reconfiguring status for node [{address}]: "
    if status.startTime <= 0:
        click.echo(head + "no task was found.")
        return
    started = _when(status.startTime)
    if not status.HasField("endTime"):
        click.echo(head + f"started at {started} and is still running.")
        return
    click.echo(head + f"started at {started} and finished at {_when(status.endTime)}.")
    for change in status.changes:
        verdict = "FAILED: Change" if change.HasField("errorMessage") else "SUCCESS: Changed"
        new = change.newValue if change.HasField("newValue") else None
        click.echo(f'{verdict} property {change.name}\n\tFrom: "{change.oldValue}"\n\tTo: "{new}"')
        if change.HasField("errorMessage"):
            click.echo(f"\tError: {change.errorMessage}.")


def _when(epoch_ms: int) -> str:
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC).isoformat(timespec="seconds")
