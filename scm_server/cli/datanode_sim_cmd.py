"""``ozone-scm datanode-sim``: run N simulated datanodes against one or more SCMs until Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import click
from rich.live import Live
from rich.table import Table

from scm_server.cli import params
from scm_server.cli.context import CliContext, pass_ctx
from scm_server.client.config import parse_duration_seconds
from scm_server.client.scm_client import parse_addresses
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.datanode_sim.security import DatanodeSecurity
from scm_server.proto import hdds_pb2
from scm_server.security.tls import ChannelSecurity
from scm_server.server import endpoints


def _status_table(sim: DatanodeSimulator) -> Table:
    table = Table(title=f"{len(sim.datanodes)} simulated datanode(s) -> {', '.join(sim.scm_addresses)}")
    for col in ("host", "rack", "endpoints", "heartbeats", "containers", "pipelines", "op state"):
        table.add_column(col, no_wrap=True)
    table.add_column("last error", no_wrap=True, overflow="ellipsis", max_width=28)
    for dn in sim.datanodes:
        table.add_row(
            dn.hostname,
            dn.rack,
            " ".join(ep.state.value for ep in dn.endpoints),
            str(sum(ep.heartbeats for ep in dn.endpoints)),
            str(len(dn.containers)),
            str(len(dn.pipelines)),
            hdds_pb2.NodeOperationalState.Name(dn.op_state),  # type: ignore[arg-type]
            next((ep.last_error or ep.register_error for ep in dn.endpoints if ep.last_error or ep.register_error), "")[:60],
        )
    return table


@click.command("datanode-sim")
@click.option("--count", "-n", default=5, show_default=True, type=params.POSITIVE, help="Number of simulated datanodes.")
@click.option("--scm", "scm", default=None, metavar="HOST:PORT[,HOST:PORT]",
              help="SCM datanode-protocol address(es); default: every SCM's ozone.scm.datanode.grpc.port "
                   "(Ozone's ozone.scm.datanode.port with --protocol hadoop-rpc).")
@click.option("--protocol", type=click.Choice(["grpc", "hadoop-rpc"]), default="grpc", show_default=True,
              help="grpc: our datanode protocol; hadoop-rpc: Ozone's StorageContainerDatanodeProtocol over Hadoop "
                   "RPC (SIMPLE authentication; not on a secure cluster).")
@click.option("--hadoop-rpc-datanodes", default=0, show_default=True, type=params.NON_NEGATIVE,
              help="Mixed transports: this many of the datanodes (the last ones) speak Ozone's datanode protocol "
                   "over Hadoop RPC, the others --protocol.")
@click.option("--hadoop-rpc-scm", default=None, metavar="HOST:PORT[,HOST:PORT]",
              help="With --hadoop-rpc-datanodes: the SCMs' Hadoop RPC datanode addresses "
                   "(default: every SCM's ozone.scm.datanode.port, Ozone's own key).")
@click.option("--follow-containers", default="0s", show_default=True,
              help="Every so often (e.g. 2s; 0s = never) ask SCM for OPEN and CLOSING containers and create the "
                   "replicas their pipelines' datanodes would hold after a client's first write.")
@click.option("--admin-scm", default=None, metavar="HOST:PORT[,...]",
              help="SCM client address(es) for --containers-per-node (default from config).")
@click.option("--heartbeat-interval", default="1s", show_default=True, help="e.g. 500ms, 1s, 30s.")
@click.option("--racks", default=2, show_default=True, type=params.POSITIVE)
@click.option("--containers-per-node", default=0, show_default=True, type=params.NON_NEGATIVE,
              help="Allocate containers through SCM once out of safemode and hold their replicas.")
@click.option("--container-size", default=None, type=params.SIZE,
              help="e.g. 5GB or bytes (default ozone.scm.container.size).")
@click.option("--prefix", default="sim-dn", show_default=True, help="Hostname prefix.")
@click.option("--duration", default=0.0, type=params.SECONDS, help="Seconds to run (0 = until Ctrl-C).")
@click.option("--dn-dir", type=click.Path(path_type=Path), default=None,
              help="Secure clusters: where each datanode keeps its uuid, key and certificate (default ./datanodes).")
@pass_ctx
def datanode_sim(
    ctx: CliContext, count: int, scm: str | None, admin_scm: str | None, heartbeat_interval: str, racks: int,
    containers_per_node: int, container_size: int | None, prefix: str, duration: float, dn_dir: Path | None,
    protocol: str = "grpc", hadoop_rpc_datanodes: int = 0, hadoop_rpc_scm: str | None = None,
    follow_containers: str = "0s",
) -> None:
    """Run simulated datanodes that talk the real datanode protocol (gRPC, or Ozone's over Hadoop RPC) to every SCM."""
    try:
        dn_addresses = parse_addresses(scm) if scm else endpoints.protocol_addresses(
            ctx.conf.get_str,
            endpoints.Protocol.DATANODE_HADOOP if protocol == "hadoop-rpc" else endpoints.Protocol.DATANODE,
        )
        admin_addresses = parse_addresses(admin_scm) if admin_scm else endpoints.protocol_addresses(
            ctx.conf.get_str, endpoints.Protocol.CLIENT
        )
        hadoop_addresses = (
            (parse_addresses(hadoop_rpc_scm) if hadoop_rpc_scm else endpoints.protocol_addresses(
                ctx.conf.get_str, endpoints.Protocol.DATANODE_HADOOP))
            if hadoop_rpc_datanodes else []
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    interval = parse_duration_seconds("--heartbeat-interval", heartbeat_interval)
    follow = parse_duration_seconds("--follow-containers", follow_containers)
    size = container_size or ctx.conf.get_size("ozone.scm.container.size") or 5 << 30
    security = DatanodeSecurity.from_conf(
        ctx.conf, dn_dir or Path("datanodes"), endpoints.protocol_addresses(ctx.conf.get_str, endpoints.Protocol.SECURITY)
    )
    admin_security = ctx.client_security() if security is not None else None
    if hadoop_rpc_datanodes > count:
        raise click.BadParameter(f"{hadoop_rpc_datanodes} is more than --count {count}",
                                 param_hint="--hadoop-rpc-datanodes")
    if (protocol == "hadoop-rpc" or hadoop_rpc_datanodes) and security is not None:
        raise click.BadParameter(
            "the simulated datanodes speak Hadoop RPC with SIMPLE authentication only: not on a secure cluster "
            "(ozone.security.enabled), whose Hadoop RPC listeners take Kerberos callers (Ozone's own datanodes); "
            "use --protocol grpc",
            param_hint="--protocol",
        )
    asyncio.run(_run(dn_addresses, admin_addresses, count, interval, racks, containers_per_node, size, prefix, duration,
                     security, admin_security, protocol, hadoop_addresses, hadoop_rpc_datanodes, follow))


async def _run(
    dn_addresses: list[str], admin_addresses: list[str], count: int, interval: float, racks: int,
    containers_per_node: int, size: int, prefix: str, duration: float,
    security: DatanodeSecurity | None = None, admin_security: ChannelSecurity | None = None,
    protocol: str = "grpc", hadoop_addresses: list[str] | None = None, hadoop_rpc_datanodes: int = 0,
    follow: float = 0.0,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    sim = DatanodeSimulator(
        dn_addresses, count, heartbeat_interval=interval, racks=racks, container_size=size,
        admin_addresses=admin_addresses, name_prefix=prefix, security=security, admin_security=admin_security,
        protocol=protocol, hadoop_rpc_addresses=hadoop_addresses, hadoop_rpc_datanodes=hadoop_rpc_datanodes,
        follow_containers=follow,
    )
    await sim.start()
    populated = containers_per_node <= 0
    deadline = loop.time() + duration if duration > 0 else None
    try:
        with Live(_status_table(sim), refresh_per_second=2) as live:
            while not stop.is_set():
                if deadline is not None and loop.time() >= deadline:
                    break
                if not populated and sim.registered() == count:
                    from scm_server.client.scm_client import SCMClient

                    async with SCMClient(admin_addresses, security=admin_security) as admin:
                        if not (await admin.in_safe_mode()).in_safe_mode:
                            await sim.populate(containers_per_node)
                            populated = True
                live.update(_status_table(sim))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
    finally:
        await sim.stop()
