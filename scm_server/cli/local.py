"""``ozone-scm local run``: the main job — a local SCM cluster with simulated datanodes.

Steps: lay out ``./run-data`` (config + metadata per SCM), ``scm --init`` (and ``--bootstrap``
for HA nodes), start each SCM as its own process, start N simulated datanodes (in this
process, over gRPC), wait until SCM leaves safemode and pipelines are OPEN, run a short
block-allocation workload (and simulated writes into the allocated containers), then print a
summary and where to look. ``run_local(num_scms=...)`` is the reusable entry point; the HA
issue runs it with 3 SCMs.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from scm_server.cli import params
from scm_server.cli.output import console, print_json, print_table
from scm_server.client.scm_client import SCMClient
from scm_server.datanode_sim import DatanodeSimulator
from scm_server.local import throughput
from scm_server.local.cluster import LocalCluster
from scm_server.proto import hdds_pb2


@click.group()
def local() -> None:
    """Local cluster on loopback (the embedded default)."""


@local.command("run")
@click.option("--scms", "num_scms", default=3, show_default=True, type=params.POSITIVE,
              help="Number of SCM processes: 3 = HA quorum (the main job), 1 = a single SCM without peers.")
@click.option("--datanodes", default=5, show_default=True, type=params.POSITIVE)
@click.option("--racks", default=2, show_default=True, type=params.POSITIVE)
@click.option("--blocks", default=2000, show_default=True, type=params.POSITIVE, help="Blocks to allocate in the workload.")
@click.option("--data-dir", default="run-data", show_default=True, type=click.Path(path_type=Path))
@click.option("--exit-after", is_flag=True, help="Stop everything after the workload instead of waiting for Ctrl-C.")
@click.option("--keep-data", is_flag=True, help="Reuse an existing --data-dir instead of starting fresh.")
@click.option("--audit", "with_audit", is_flag=True,
              help="After the workload, export every SCM and run the Spark replication audit (report under DATA_DIR/audit).")
@click.option("--secure", is_flag=True,
              help="Security and mutual TLS on (root CA, sub-CAs, datanode certificates); HA quorum only.")
@click.option("--ca-mode", type=click.Choice(["scm", "operator"]), default="scm", show_default=True,
              help="With --secure: the primordial SCM makes the root CA (scm), or an external CA holder issues "
                   "every SCM's sub-CA and keeps the root key outside the cluster (operator).")
def local_run(num_scms: int, datanodes: int, racks: int, blocks: int, data_dir: Path, exit_after: bool,
              keep_data: bool, secure: bool, ca_mode: str, with_audit: bool) -> None:
    """Start SCM(s) + simulated datanodes, run a block workload, print where to look."""
    if secure and num_scms < 2:
        raise click.UsageError("--secure runs an HA quorum: use --scms 3 (the default)")
    after = None
    if with_audit:
        from scm_server.cli.local_audit import export_and_audit

        async def after(cluster: LocalCluster) -> None:
            await export_and_audit(cluster.client_addresses, data_dir, security=getattr(cluster, "client_security", None))

    if num_scms > 1:
        # The HA quorum (init + bootstrap on every node, AddSCM on first start) is the HA layer's.
        from scm_server.cli.local_report import print_summary
        from scm_server.local import quorum as ha_local

        ha_local.run_local(num_scms, datanodes, blocks, data_dir, exit_after, keep_data, racks, secure=secure,
                           ca_mode=ca_mode, after=after, report=print_summary)
        return
    run_local(num_scms, datanodes, racks, blocks, data_dir, exit_after, keep_data, after=after)


@local.command("up")
@click.option("--scms", "num_scms", default=3, show_default=True, type=params.POSITIVE)
@click.option("--datanodes", default=5, show_default=True, type=params.POSITIVE)
@click.option("--data-dir", default="run-data", show_default=True, type=click.Path(path_type=Path))
@click.option("--secure", is_flag=True, help="Security and mutual TLS on; writes <data-dir>/admin/conf for the CLI.")
@click.option("--ca-mode", type=click.Choice(["scm", "operator"]), default="scm", show_default=True,
              help="With --secure: root CA made by the primordial SCM (scm), or held outside the cluster (operator).")
@click.option("--hadoop-rpc/--no-hadoop-rpc", "hadoop_rpc", default=None,
              help="Serve Ozone's protocols over Hadoop RPC on Ozone's ports (default: on unless --secure; with "
                   "--secure it needs Kerberos, given with --set).")
@click.option("--set", "overrides", multiple=True, type=params.SETTING, metavar="KEY=VALUE",
              help="A key of every SCM's ozone-site.xml (repeatable), e.g. hdds.scm.kerberos.principal=scm/_HOST@R.")
def local_up(num_scms: int, datanodes: int, data_dir: Path, secure: bool, ca_mode: str, hadoop_rpc: bool | None,
             overrides: tuple[tuple[str, str], ...]) -> None:
    """Start an SCM quorum and simulated datanodes in the background (see `local status` / `local down`)."""
    from scm_server.conf.security import secure_hadoop_rpc_problem
    from scm_server.local import quorum as ha_local

    if secure and num_scms < 2:
        raise click.UsageError("--secure runs an HA quorum: use --scms 3 (the default)")
    settings = dict(overrides)
    serve_hadoop_rpc = (not secure) if hadoop_rpc is None else hadoop_rpc
    if secure and serve_hadoop_rpc:
        problem = secure_hadoop_rpc_problem({**settings, "ozone.security.enabled": "true"})
        if problem is not None:
            raise click.UsageError(f"--hadoop-rpc with --secure: {problem} (keys: --set KEY=VALUE; off: --no-hadoop-rpc)")
    with console.status(f"starting {num_scms} SCM(s) and {datanodes} datanodes under {data_dir}"):
        path = ha_local.up(num_scms, datanodes, data_dir, secure=secure, ca_mode=ca_mode, hadoop_rpc=serve_hadoop_rpc,
                           settings=settings)
    console.print(f"Local cluster is up; state in {path}. `ozone-scm local status` shows roles and addresses.")
    if secure:
        console.print(f"Secure: use `ozone-scm --conf {data_dir}/admin/conf admin ...` (admin client certificate).",
                      highlight=False, soft_wrap=True)


@local.command("status")
@click.option("--data-dir", default="run-data", show_default=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def local_status(data_dir: Path, as_json: bool) -> None:
    """Liveness (found by process identity), roles and addresses of the cluster started by `local up`."""
    from scm_server.local import quorum as ha_local

    try:
        info = ha_local.status(data_dir)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    roles = info["roles"]
    if as_json:
        print_json({**info, "roles": roles.as_dict() if hasattr(roles, "as_dict") else str(roles)})
        return
    certs = info.get("certificates")
    by_node = {p.node_id: p.role for p in roles.peers} if hasattr(roles, "peers") else {}
    table = Table(title=f"Local cluster in {data_dir}")
    columns = ("node", "alive", "pid", "role", "client", "web") + (("cert serial", "cert expiry") if certs is not None
                                                                    else ())
    for col in columns:
        table.add_column(col)
    for s in info["state"]["scms"]:
        name = str(s.get("node_id") or "scm")
        alive = info["alive"].get(name)
        row = [
            name, "yes" if alive else "no", ",".join(map(str, info["pids"].get(name, []))) or "-",
            by_node.get(name, "-") if alive else "-", str(s.get("client", "")), str(s.get("http", "")),
        ]
        if certs is not None:
            c = certs.get(s.get("node_id"), {})
            row += [str(c.get("serial", "-")), str(c.get("notAfter", "-"))]
        table.add_row(*row)
    print_table(table)
    if "datanode_sim_pid" in info["state"]:
        dn = info["pids"].get("datanodes", [])
        console.print(f"datanode simulator: {'running, pid ' + ','.join(map(str, dn)) if dn else 'not running'}")
    if hasattr(roles, "peers"):
        console.print(f"term {roles.term}, commit index {roles.commit_index}, applied index {roles.applied_index}")
        for peer in roles.peers:
            console.print(f"  {peer.line}", highlight=False, soft_wrap=True)
    else:
        console.print(f"roles unavailable: {roles}", highlight=False, soft_wrap=True)


@local.command("down")
@click.option("--data-dir", default="run-data", show_default=True, type=click.Path(path_type=Path))
def local_down(data_dir: Path) -> None:
    """Stop everything `local up` started (and members restarted since), found by process identity."""
    from scm_server.local import quorum as ha_local

    try:
        stopped = ha_local.down(data_dir)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(f"Stopped: {', '.join(stopped) or 'nothing was running'}")


def _member_options(fn: Any) -> Any:
    fn = click.option("--data-dir", default="run-data", show_default=True, type=click.Path(path_type=Path))(fn)
    fn = click.option("--leader", is_flag=True, help="The member that currently leads.")(fn)
    return click.option("--scm", "scm", default=None, metavar="scmN", help="The member, by node id (scm1, scm2, ...).")(fn)


@local.command("stop")
@_member_options
@click.option("--kill", is_flag=True, help="SIGKILL (a crash) instead of SIGTERM (a clean shutdown).")
def local_stop(scm: str | None, leader: bool, data_dir: Path, kill: bool) -> None:
    """Stop one SCM of the local quorum and, if it led, report the new leader."""
    from scm_server.local import members

    try:
        name = members.resolve_target(members.load(data_dir), scm, leader)
        click.echo(members.describe_stop(members.stop(data_dir, name, kill=kill)))
    except members.LocalClusterError as exc:
        raise click.ClickException(str(exc)) from exc


@local.command("start")
@_member_options
def local_start(scm: str | None, leader: bool, data_dir: Path) -> None:
    """Start a stopped SCM of the local quorum again; it rejoins as a follower."""
    from scm_server.local import members

    if leader:
        raise click.UsageError("a stopped member does not lead: name it with --scm scmN")
    try:
        name = members.resolve_target(members.load(data_dir), scm, False)
        click.echo(members.describe_start(members.start(data_dir, name)))
    except members.LocalClusterError as exc:
        raise click.ClickException(str(exc)) from exc


@local.command("restart")
@_member_options
@click.option("--kill", is_flag=True, help="SIGKILL (a crash) instead of SIGTERM before starting again.")
def local_restart(scm: str | None, leader: bool, data_dir: Path, kill: bool) -> None:
    """Stop one SCM (by name or the leader) and start it again."""
    from scm_server.local import members

    try:
        name = members.resolve_target(members.load(data_dir), scm, leader)
        click.echo(members.describe_stop(members.stop(data_dir, name, kill=kill)))
        click.echo(members.describe_start(members.start(data_dir, name)))
    except members.LocalClusterError as exc:
        raise click.ClickException(str(exc)) from exc


def run_local(
    num_scms: int = 1, datanodes: int = 5, racks: int = 2, blocks: int = 2000,
    data_dir: Path = Path("run-data"), exit_after: bool = False, keep_data: bool = False,
    after: Callable[[LocalCluster], Awaitable[None]] | None = None,
) -> None:
    if data_dir.exists() and not keep_data:
        shutil.rmtree(data_dir)
    cluster = LocalCluster(
        data_dir.resolve(), num_scms,
        settings={
            "hdds.scm.safemode.min.datanode": str(min(datanodes, 3)),
            "ozone.scm.stale.node.interval": "10s",
            "ozone.scm.dead.node.interval": "20s",
            "hdds.scm.replication.thread.interval": "3s",
        },
    )
    cluster.write_configs()
    with console.status(f"initialising {num_scms} SCM(s) under {data_dir}"):
        cluster.init()
    try:
        with console.status("starting SCM process(es)"):
            cluster.start_all()
            for i in range(num_scms):
                cluster.wait_serving(i)
        asyncio.run(_workload(cluster, datanodes, racks, blocks, exit_after, after))
    finally:
        with console.status("stopping SCM process(es)"):
            cluster.stop_all()


async def _workload(cluster: LocalCluster, datanodes: int, racks: int, blocks: int, exit_after: bool,
                    after: Callable[[LocalCluster], Awaitable[None]] | None = None) -> None:
    sim = DatanodeSimulator(
        cluster.datanode_addresses, datanodes, heartbeat_interval=0.5, racks=racks,
        admin_addresses=cluster.client_addresses, container_report_interval=30,
    )
    await sim.start()
    try:
        async with SCMClient(cluster.client_addresses) as admin:
            with console.status("waiting for datanodes to register, safemode exit and OPEN pipelines"):
                await _wait_ready(admin, sim, timeout=90)
            with console.status(f"allocating {blocks} blocks"):
                result, ids = await throughput.bench_allocate_blocks(admin, blocks, 8, 4 * 1024 * 1024)
                containers = sorted({cid for cid, _ in ids})
                for cid in containers:
                    await sim.write_to_container(cid, 4 * 1024 * 1024 * 16, 16)
            duplicates = len(ids) - len(set(ids))
            await _summary(cluster, admin, sim, result, len(containers), duplicates)
            if after is not None:
                await after(cluster)
            if not exit_after:
                console.print("\nRunning; press Ctrl-C to stop.")
                stop = asyncio.Event()
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    with contextlib.suppress(NotImplementedError):
                        loop.add_signal_handler(sig, stop.set)
                await stop.wait()
    finally:
        await sim.stop()


async def _wait_ready(admin: SCMClient, sim: DatanodeSimulator, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            safe = await admin.in_safe_mode()
            pipelines = await admin.list_pipelines()
            open_three = [p for p in pipelines if p.state == hdds_pb2.PIPELINE_OPEN and p.factor == hdds_pb2.THREE]
            if sim.registered() == len(sim.datanodes) and not safe.in_safe_mode and open_three:
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise click.ClickException("the cluster did not become ready in time (see run-data/*/scm.log)")
        await asyncio.sleep(0.3)


async def _summary(
    cluster: LocalCluster, admin: SCMClient, sim: DatanodeSimulator, result: throughput.BenchResult,
    containers: int, duplicates: int,
) -> None:
    info = await admin.get_scm_info()
    nodes = await admin.query_nodes()
    pipelines = await admin.list_pipelines()
    report = await admin.replication_manager_report()
    table = Table(title="Local SCM cluster")
    table.add_column("what")
    table.add_column("value")
    table.add_row("cluster id", info.clusterId)
    table.add_row("SCMs", ", ".join(info.peerRoles) or str(cluster.num_scms))
    healthy = sum(1 for n in nodes if n.nodeStates and n.nodeStates[0] == hdds_pb2.HEALTHY)
    table.add_row("datanodes", f"{len(nodes)} registered, {healthy} HEALTHY, racks {sim.racks}")
    table.add_row("pipelines", ", ".join(
        f"{hdds_pb2.PipelineState.Name(s)}={sum(1 for p in pipelines if p.state == s)}"
        for s in sorted({p.state for p in pipelines})
    ))
    listed, total = await admin.list_containers(0, 100_000)
    by_state: dict[str, int] = {}
    for c in listed:
        name = hdds_pb2.LifeCycleState.Name(c.state)
        by_state[name] = by_state.get(name, 0) + 1
    table.add_row("containers", f"{total}: " + ", ".join(f"{k}={v}" for k, v in sorted(by_state.items())))
    health = {c.key: c.count for c in report.stat if c.count and c.key not in by_state}
    if health:
        table.add_row("replication report", ", ".join(f"{k}={v}" for k, v in health.items()))
    table.add_row(
        "workload",
        f"{result.operations} blocks in {result.seconds:.2f}s = {result.ops_per_second:,.0f} blocks/s "
        f"(p50 {result.percentile(50):.2f} ms, p99 {result.percentile(99):.2f} ms) into {containers} containers; "
        f"duplicate block ids: {duplicates}",
    )
    print_table(table)
    console.print("[bold]Where to look[/]")
    for s in cluster.scms:
        console.print(
            f"  {s.node_id or 'scm'}: admin {s.client_address}  web {s.http_url}/  metrics {s.http_url}/prom  "
            f"datanode protocol {s.datanode_address}",
            soft_wrap=True, highlight=False,
        )
    console.print(
        f"Try: ozone-scm admin --scm {','.join(cluster.client_addresses)} container report\n"
        f"     ozone-scm --conf {cluster.scms[0].conf_dir} admin datanode list\n"
        f"Logs: {', '.join(str(s.log_path) for s in cluster.scms)}"
    )
