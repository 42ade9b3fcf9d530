"""``ozone-scm admin ...``: Ozone's ``ozone admin`` subcommands over ``scm_server.client``.

Thin: parse options, call the client, print (``--json`` where Ozone has it, rich tables
otherwise). Errors propagate to ``main`` which prints them without a traceback.
"""

from __future__ import annotations

import time

import click
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from scm_server.cli import admin_ozone, params
from scm_server.cli.context import CliContext, pass_ctx
from scm_server.cli.output import (
    console,
    container_info_dict,
    container_table,
    node_table,
    node_to_dict,
    pipeline_table,
    print_json,
    print_table,
    report_text,
    report_to_dict,
    to_dict,
    topology_text,
)
from scm_server.proto import hdds_pb2

STATE_CHOICE = click.Choice([hdds_pb2.LifeCycleState.Name(v) for v in hdds_pb2.LifeCycleState.values()])
TYPE_CHOICE = click.Choice(["RATIS", "STAND_ALONE"])
FACTOR_CHOICE = click.Choice(["ONE", "THREE"])


@click.group()
@click.option("--scm", "scm", metavar="HOST:PORT[,HOST:PORT]",
              help="SCM client address(es); default from ozone.scm.names / ozone.scm.nodes.<svc>.")
@click.option("--local", "local_read", is_flag=True,
              help="Ask the one SCM given with --scm for its own view, even if it is a follower "
                   "(labelled with who answered and its role). Default: the leader answers.")
@pass_ctx
def admin(ctx: CliContext, scm: str | None, local_read: bool) -> None:
    """Administer a running SCM (safemode, containers, pipelines, datanodes, replication)."""
    if scm:
        ctx.scm_override = scm
    ctx.local_read = local_read


# ---------------------------------------------------------------- safemode
@admin.group()
def safemode() -> None:
    """Safe mode status, force exit, wait."""


@safemode.command("status")
@click.option("--verbose", is_flag=True, help="Also show each safemode rule.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def safemode_status(ctx: CliContext, verbose: bool, as_json: bool) -> None:
    with ctx.client() as c:
        status = c.in_safe_mode()
        rules = c.safe_mode_rule_statuses() if (verbose or as_json) else []
    if as_json:
        print_json({
            "inSafeMode": status.in_safe_mode,
            "preCheckComplete": status.pre_check_complete,
            "rules": [{"name": r.ruleName, "validated": r.validate, "status": r.statusText} for r in rules],
        })
        return
    console.print("SCM is in safe mode." if status.in_safe_mode else "SCM is out of safe mode.")
    for r in rules:
        console.print(f"  {'[green]✓' if r.validate else '[red]✗'}[/] {r.ruleName}: {r.statusText}")


@safemode.command("exit")
@pass_ctx
def safemode_exit(ctx: CliContext) -> None:
    with ctx.client() as c:
        exited = c.force_exit_safe_mode()
    console.print("SCM exit safe mode successfully." if exited else "SCM did not exit safe mode.")


@safemode.command("wait")
@click.option("-t", "--timeout", default=30, show_default=True, type=params.NON_NEGATIVE, help="Seconds to wait.")
@pass_ctx
def safemode_wait(ctx: CliContext, timeout: int) -> None:
    deadline = time.monotonic() + timeout
    with ctx.client() as c, Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                       console=console, transient=True) as progress:
        task = progress.add_task("waiting for SCM to leave safe mode", total=None)
        while True:
            if not c.in_safe_mode().in_safe_mode:
                break
            if time.monotonic() >= deadline:
                raise click.ClickException(f"SCM is still in safe mode after {timeout}s")
            progress.update(task)
            time.sleep(0.5)
    console.print("SCM is out of safe mode.")


# ---------------------------------------------------------------- container
@admin.group()
def container() -> None:
    """Container list / info / report / create / close."""


@container.command("list")
@click.option("--start", default=0, show_default=True, type=params.CONTAINER_START, help="First container id.")
@click.option("--count", "-c", default=20, show_default=True, type=params.COUNT, help="Maximum containers to list.")
@click.option("--state", type=STATE_CHOICE, default=None)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def container_list(ctx: CliContext, start: int, count: int, state: str | None, as_json: bool) -> None:
    with ctx.client() as c:
        containers, total = c.list_containers(
            start, count, hdds_pb2.LifeCycleState.Value(state) if state else None
        )
    if as_json:
        print_json([to_dict(x) for x in containers])
        return
    print_table(container_table(containers))
    if total > len(containers):
        console.print(f"(showing {len(containers)} of {total}; use --start/--count)")


@container.command("info")
@click.argument("container_id", type=params.CONTAINER_ID)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def container_info(ctx: CliContext, container_id: int, as_json: bool) -> None:
    with ctx.client() as c:
        cwp, replicas = c.get_container_with_pipeline(container_id)
    data = container_info_dict(cwp, replicas)
    if as_json:
        print_json(data)
        return
    info = cwp.containerInfo
    console.print(f"Container id: {info.containerID}")
    console.print(f"State: {hdds_pb2.LifeCycleState.Name(info.state)}")
    console.print(f"Pipeline id: {info.pipelineID.id}")
    console.print(
        f"Replication: {hdds_pb2.ReplicationType.Name(info.replicationType)}/"
        f"{hdds_pb2.ReplicationFactor.Name(info.replicationFactor)}"
    )
    console.print(f"Used bytes: {info.usedBytes}  Keys: {info.numberOfKeys}  Owner: {info.owner}")
    console.print("Replicas:")
    for r in data["replicas"]:
        dn = r["datanodeDetails"]
        console.print(f"  {dn['hostName']} ({dn['uuid']}) {dn['networkLocation']}: {r['state']} bcsId={r['bcsId']}")


@container.command("report")
@click.option("--json", "as_json", is_flag=True)
@click.option("--suppress", is_flag=True, help="Suppress the container(s) from future reports.")
@click.option("--unsuppress", is_flag=True, help="Include the container(s) in future reports again.")
@click.argument("container_ids", nargs=-1, type=click.IntRange(min=1))
@pass_ctx
def container_report(ctx: CliContext, as_json: bool, suppress: bool, unsuppress: bool,
                     container_ids: tuple[int, ...]) -> None:
    """The ReplicationManager's container report; with --suppress/--unsuppress and container IDs, mark them
    (as `ozone admin container report --suppress|--unsuppress <id>...`)."""
    if suppress and unsuppress:
        raise click.UsageError("give --suppress or --unsuppress, not both")
    if suppress or unsuppress:
        if not container_ids:
            raise click.UsageError(f"--{'suppress' if suppress else 'unsuppress'} needs one or more container IDs")
        admin_ozone.suppress_containers(ctx, list(container_ids), suppress)
        return
    if container_ids:
        raise click.UsageError("container IDs go with --suppress or --unsuppress")
    with ctx.client() as c:
        report = c.replication_manager_report()
    if as_json:
        print_json(report_to_dict(report))
    else:
        print(report_text(report), end="")


@container.command("create")
@click.option("--owner", "-o", default="OZONE", show_default=True)
@click.option("--type", "rtype", type=TYPE_CHOICE, default="RATIS", show_default=True)
@click.option("--factor", type=FACTOR_CHOICE, default="THREE", show_default=True)
@pass_ctx
def container_create(ctx: CliContext, owner: str, rtype: str, factor: str) -> None:
    with ctx.client() as c:
        cwp = c.allocate_container(
            hdds_pb2.ReplicationType.Value(rtype), hdds_pb2.ReplicationFactor.Value(factor), owner
        )
    console.print(f"Container {cwp.containerInfo.containerID} is created.")


@container.command("close")
@click.argument("container_id", type=params.CONTAINER_ID)
@pass_ctx
def container_close(ctx: CliContext, container_id: int) -> None:
    with ctx.client() as c:
        c.close_container(container_id)
    console.print(f"Container {container_id} is being closed.")


# ---------------------------------------------------------------- pipeline
@admin.group()
def pipeline() -> None:
    """Pipeline list / create / close / activate / deactivate."""


@pipeline.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--state", default=None, help="Filter: OPEN, ALLOCATED, DORMANT, CLOSED.")
@pass_ctx
def pipeline_list(ctx: CliContext, as_json: bool, state: str | None) -> None:
    with ctx.client() as c:
        pipelines = c.list_pipelines()
    if state:
        wanted = state.upper() if state.upper().startswith("PIPELINE_") else f"PIPELINE_{state.upper()}"
        pipelines = [p for p in pipelines if hdds_pb2.PipelineState.Name(p.state) == wanted]
    if as_json:
        print_json([to_dict(p) for p in pipelines])
    else:
        print_table(pipeline_table(pipelines))


@pipeline.command("create")
@click.option("--type", "rtype", type=TYPE_CHOICE, default="RATIS", show_default=True)
@click.option("--factor", type=FACTOR_CHOICE, default="ONE", show_default=True)
@pass_ctx
def pipeline_create(ctx: CliContext, rtype: str, factor: str) -> None:
    with ctx.client() as c:
        p = c.create_pipeline(hdds_pb2.ReplicationType.Value(rtype), hdds_pb2.ReplicationFactor.Value(factor))
    console.print(f"Pipeline {p.id.id} ({hdds_pb2.PipelineState.Name(p.state)}) is created.")


def _pipeline_op(name: str, method: str, done: str) -> None:
    @pipeline.command(name)
    @click.argument("pipeline_id")
    @pass_ctx
    def cmd(ctx: CliContext, pipeline_id: str) -> None:
        with ctx.client() as c:
            getattr(c, method)(pipeline_id)
        console.print(f"Pipeline {pipeline_id} {done}.")

    cmd.__doc__ = f"{name.capitalize()} a pipeline."


_pipeline_op("close", "close_pipeline", "is closed")
_pipeline_op("activate", "activate_pipeline", "is activated")
_pipeline_op("deactivate", "deactivate_pipeline", "is deactivated")


# ---------------------------------------------------------------- replication manager
@admin.group()
def replicationmanager() -> None:
    """Replication Manager start / stop / status."""


@replicationmanager.command("start")
@pass_ctx
def rm_start(ctx: CliContext) -> None:
    with ctx.client() as c:
        c.start_replication_manager()
    console.print("Starting ReplicationManager...")


@replicationmanager.command("stop")
@pass_ctx
def rm_stop(ctx: CliContext) -> None:
    with ctx.client() as c:
        c.stop_replication_manager()
    console.print("Stopping ReplicationManager...")


@replicationmanager.command("status")
@pass_ctx
def rm_status(ctx: CliContext) -> None:
    with ctx.client() as c:
        running = c.replication_manager_status()
    console.print("ReplicationManager is Running." if running else "ReplicationManager is Not Running.")


# ---------------------------------------------------------------- datanode
@admin.group()
def datanode() -> None:
    """Datanode list / decommission / maintenance / recommission."""


@datanode.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--operational-state", "op_state", default=None,
              type=click.Choice([hdds_pb2.NodeOperationalState.Name(v) for v in hdds_pb2.NodeOperationalState.values()]))
@click.option("--node-state", "node_state", default=None,
              type=click.Choice([hdds_pb2.NodeState.Name(v) for v in hdds_pb2.NodeState.values()]))
@click.option("--nodes-with-failed-volumes", "failed_volumes", is_flag=True,
              help="Only the datanodes with a failed volume in their last node report.")
@pass_ctx
def datanode_list(ctx: CliContext, as_json: bool, op_state: str | None, node_state: str | None,
                  failed_volumes: bool) -> None:
    with ctx.client() as c:
        nodes = c.query_nodes(
            hdds_pb2.NodeState.Value(node_state) if node_state else None,
            hdds_pb2.NodeOperationalState.Value(op_state) if op_state else None,
        )
    if failed_volumes:
        nodes = [n for n in nodes if n.failedVolumes]
    if as_json:
        print_json([node_to_dict(n) for n in nodes])
    else:
        print_table(node_table(nodes))


@admin.command("printTopology")
@click.option("--full-info", "full_info", is_flag=True, help="Also each datanode's ports and operational state.")
@click.option("--operational-state", "op_state", default=None,
              type=click.Choice([hdds_pb2.NodeOperationalState.Name(v) for v in hdds_pb2.NodeOperationalState.values()]))
@click.option("--node-state", "node_state", default=None,
              type=click.Choice([hdds_pb2.NodeState.Name(v) for v in hdds_pb2.NodeState.values()]))
@pass_ctx
def print_topology(ctx: CliContext, full_info: bool, op_state: str | None, node_state: str | None) -> None:
    """Datanodes by health state and network location (rack), as ``ozone admin printTopology``."""
    with ctx.client() as c:
        nodes = c.query_nodes(
            hdds_pb2.NodeState.Value(node_state) if node_state else None,
            hdds_pb2.NodeOperationalState.Value(op_state) if op_state else None,
        )
    click.echo(topology_text(nodes, full_info))


_VERBS = {"decommissioning": "decommission", "maintenance": "start maintenance of",
          "recommissioning": "recommission"}


def _print_admin_errors(action: str, hosts: tuple[str, ...], errors: list[object]) -> None:
    """One line on stderr per host that failed (exit 1); the started ones on stdout."""
    failed = {str(getattr(e, "host", "")) for e in errors}
    started = [h for h in hosts if h not in failed]
    if started:
        console.print(f"Started {action} of datanode(s): {', '.join(started)}")
    for e in errors:
        click.echo(f"Error: cannot {_VERBS.get(action, action)} {getattr(e, 'host', '')}: {getattr(e, 'error', e)}",
                   err=True)
    if errors:
        raise click.exceptions.Exit(1)


@datanode.command("decommission")
@click.argument("hosts", nargs=-1, required=True)
@click.option("--force", is_flag=True)
@pass_ctx
def datanode_decommission(ctx: CliContext, hosts: tuple[str, ...], force: bool) -> None:
    with ctx.client() as c:
        errors = c.decommission_nodes(list(hosts), force)
    _print_admin_errors("decommissioning", hosts, errors)


@datanode.command("maintenance")
@click.argument("hosts", nargs=-1, required=True)
@click.option("--end", default=0, show_default=True, type=params.NON_NEGATIVE,
              help="Hours until maintenance ends (0 = forever).")
@pass_ctx
def datanode_maintenance(ctx: CliContext, hosts: tuple[str, ...], end: int) -> None:
    with ctx.client() as c:
        errors = c.start_maintenance_nodes(list(hosts), end)
    _print_admin_errors("maintenance", hosts, errors)


@datanode.command("recommission")
@click.argument("hosts", nargs=-1, required=True)
@pass_ctx
def datanode_recommission(ctx: CliContext, hosts: tuple[str, ...]) -> None:
    with ctx.client() as c:
        errors = c.recommission_nodes(list(hosts))
    _print_admin_errors("recommissioning", hosts, errors)
