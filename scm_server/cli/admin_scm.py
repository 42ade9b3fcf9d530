"""``ozone-scm admin scm roles|transfer|decommission``: SCM HA administration (Ozone's ``ozone admin scm``).

Registered under ``ozone-scm admin`` by ``cli/main.py``. Calls go to the SCMs' inter-SCM gRPC
service (``ozone.scm.grpc.port``) through :class:`scm_server.client.ha_admin.HAAdminClient`, which
finds the leader by itself. Addresses come from ``--grpc`` or the configuration
(``ozone.scm.nodes.<serviceId>`` with per-node ``ozone.scm.grpc.port.<serviceId>.<nodeId>``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from scm_server.cli.context import CliContext, pass_ctx
from scm_server.cli.output import print_json, print_table
from scm_server.client.ha_admin import HAAdminClient, PeerRole, Roles, run_sync
from scm_server.client.object_store import ObjectStoreError, is_s3_url, store_for
from scm_server.conf import SCMHAConfig
from scm_server.conf.addresses import parse_port, split_host_port
from scm_server.metadata.backup import (
    BackupError,
    backup_summary,
    delete_backup,
    prepare_out_dir,
    verify_backup,
    write_backup,
)


def grpc_addresses(ctx: CliContext, override: str | None) -> list[str]:
    if override:
        return [a.strip() for a in override.split(",") if a.strip()]
    conf = ctx.conf
    ha = SCMHAConfig.from_conf(conf)
    if ha.is_ha_configured:
        return [n.grpc_address for n in ha.nodes]
    port = parse_port("ozone.scm.grpc.port", conf.get_str("ozone.scm.grpc.port") or "9895")
    hosts = conf.get_trimmed_list("ozone.scm.names") or ["127.0.0.1"]
    return [f"{split_host_port('ozone.scm.names', h)[0]}:{port}" for h in hosts]


@click.group("scm")
@click.option("--grpc", "grpc_override", metavar="HOST:PORT[,HOST:PORT]",
              help="SCM inter-SCM gRPC address(es) (ozone.scm.grpc.port); default from the configuration.")
@click.pass_context
def scm(click_ctx: click.Context, grpc_override: str | None) -> None:
    """SCM HA: roles, leadership transfer, decommission, backup."""
    click_ctx.meta["ha_grpc"] = grpc_override


def _addresses(ctx: CliContext) -> list[str]:
    return grpc_addresses(ctx, click.get_current_context().meta.get("ha_grpc"))


def _state(p: PeerRole) -> str:
    if not p.answered:
        return p.note or "no answer"
    return f"answered{'; ' + p.note if p.note else ''}"


def roles_table(roles: Roles) -> Table:
    table = Table(title=f"SCM roles (term {roles.term}, commit {roles.commit_index}; "
                        f"{roles.answers} of {roles.asked} SCMs answered)")
    for col in ("host:port:ROLE:peerId", "node", "term", "applied", "match", "lag", "answer", "client address"):
        table.add_column(col, overflow="fold")
    for p in roles.peers:
        table.add_row(
            p.line,
            p.node_id or "-",
            "-" if p.term is None else str(p.term),
            "-" if p.applied_index is None else str(p.applied_index),
            "-" if p.match_index is None else str(p.match_index),
            "-" if p.lag is None else str(p.lag),
            _state(p),
            p.client_address or "-",
        )
    return table


@scm.command("roles")
@click.option("--recovery", is_flag=True,
              help="Quorum recovery view: each reachable SCM's last log index and term, and which is most up to date.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--table", "as_table", is_flag=True, help="Rich table (default prints Ozone's line format plus indexes).")
@click.option("--timeout", default=2.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds each SCM has to answer.")
@pass_ctx
def roles_cmd(ctx: CliContext, recovery: bool, as_json: bool, as_table: bool, timeout: float) -> None:
    """List SCMs as host:port:ROLE:peerId. Every SCM is asked at once; each role is what that SCM
    says about itself (UNKNOWN if it did not answer), the leader's view gives match index and lag."""
    roles = run_sync(lambda c: c.roles(timeout=timeout), _addresses(ctx), security=ctx.client_security())
    if recovery:
        _print_recovery(roles, as_json, timeout)
        return
    if as_json:
        print_json(roles.as_dict())
        return
    if as_table:
        print_table(roles_table(roles))
        return
    for p in roles.peers:
        extra = "" if p.lag is None else f" lag={p.lag}"
        if p.answered:
            extra += f" term={p.term} applied={p.applied_index}"
        click.echo(f"{p.line}{extra} ({_state(p)})")
    leader = roles.leader
    click.echo(f"term={roles.term} commitIndex={roles.commit_index} leader={leader.node_id or leader.peer_id if leader else 'none'} "
               f"({roles.answers} of {roles.asked} SCMs answered within {timeout:g}s)")


@scm.command("transfer")
@click.option("-n", "--newLeaderId", "new_leader", metavar="PEER_ID", help="Peer id (scmUuid) of the new leader.")
@click.option("-r", "--random", "random_", is_flag=True, help="Transfer to any caught-up follower.")
@click.option("--id", "service_id", default=None, help="SCM service id (accepted for Ozone compatibility).")
@pass_ctx
def transfer_cmd(ctx: CliContext, new_leader: str | None, random_: bool, service_id: str | None) -> None:
    """Transfer Raft leadership to -n <peerId>, or to any follower with -r."""
    if bool(new_leader) == bool(random_):
        raise click.UsageError("give exactly one of -n <peerId> or -r")
    target = None if random_ else new_leader

    async def go(c: HAAdminClient) -> str:
        return await c.transfer(target)

    leader = run_sync(go, _addresses(ctx), security=ctx.client_security())
    click.echo(f"Transferring leadership to {leader}: done")


@scm.command("decommission")
@click.option("--nodeid", "node_id", required=True, metavar="SCM_ID", help="Peer id (scmUuid) of the SCM to remove.")
@pass_ctx
def decommission_cmd(ctx: CliContext, node_id: str) -> None:
    """Remove an SCM from the HA ring (refused for the current leader: transfer first)."""

    async def go(c: HAAdminClient) -> str:
        return await c.decommission(node_id)

    message = run_sync(go, _addresses(ctx), security=ctx.client_security())
    click.echo(f"Decommissioned SCM {node_id}: {message}")


def _print_recovery(roles: Roles, as_json: bool, timeout: float) -> None:
    best = roles.most_up_to_date
    if as_json:
        print_json(roles.as_dict() | {"mostUpToDate": best.peer_id if best else None})
        return
    for p in roles.peers:
        if p.answered:
            click.echo(f"{p.node_id or '-'} {p.peer_id} role={p.role} lastIndex={p.last_index} "
                       f"lastTerm={p.last_term} applied={p.applied_index}")
        else:
            click.echo(f"{p.node_id or '-'} {p.peer_id} {_state(p)}")
    members = len(roles.peers)
    click.echo(f"{roles.answers} of {members} members answered within {timeout:g}s; a majority is "
               f"{members // 2 + 1}")
    if best is not None:
        click.echo(f"most up to date: {best.node_id or best.peer_id} (lastTerm={best.last_term}, "
                   f"lastIndex={best.last_index}); if the majority is gone for good, stop it and run "
                   "`ozone-scm scm --recover` there")


@scm.group("backup", invoke_without_command=True)
@click.option("--out", "out", type=click.Path(path_type=Path), metavar="DIR",
              help="New (or empty) directory to write the backup into.")
@click.option("--allow-safemode", is_flag=True,
              help="Back up a ring that is in safemode (refused otherwise); the manifest records it.")
@click.option("--include-keys", is_flag=True,
              help="Also the leader's CA private keys and certificates, into DIR/keys (mode 0600). Never by default.")
@click.pass_context
def backup_cmd(click_ctx: click.Context, out: Path | None, allow_safemode: bool, include_keys: bool) -> None:
    """Back up the SCM ring through its leader: a checkpoint of scm.db at one applied index (the one a
    joining member downloads), with term, index, cluster id, membership, VERSION and the sequence-id
    ceilings, and a manifest with the sha256 of every file. `backup verify DIR` checks one offline."""
    if click_ctx.invoked_subcommand is not None:
        return
    if out is None:
        raise click.UsageError("give --out DIR (a new or empty directory)")
    ctx = click_ctx.find_object(CliContext)
    assert ctx is not None
    try:
        prepare_out_dir(out)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from exc
    created = False
    try:
        meta, blob, keys = run_sync(lambda c: c.backup(allow_safemode=allow_safemode, include_keys=include_keys),
                                    _addresses(ctx), security=ctx.client_security())
        created = True
        manifest = write_backup(out, blob, meta, created_ms=int(meta.get("leaderTimeMs", 0)), keys=keys)
    finally:
        if not created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
    for warning in manifest.raw.get("warnings", []):
        click.echo(f"WARNING: {warning}", err=True)
    if include_keys and keys:
        click.echo(f"WARNING: the backup holds private keys ({out / 'keys'}, mode 0600): keep it as secret as the "
                   "SCM hosts", err=True)
    elif include_keys:
        click.echo("WARNING: --include-keys: the leader holds no key files (security off?); none written", err=True)
    click.echo(f"Backup of cluster {manifest.cluster_id} at term {manifest.term} index {manifest.index} "
               f"({len(blob)} bytes) written to {out}")


@backup_cmd.command("verify")
@click.argument("backup_dir", type=click.Path(path_type=Path))
@click.option("--clusterid", default=None, help="Also check the backup belongs to this cluster id.")
@click.option("--status-file", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Also write a JSON summary (clusterID, term, index, createdMs, sizeBytes) to FILE "
                   "(e.g. /dev/termination-log in a Kubernetes Job).")
def backup_verify_cmd(backup_dir: Path, clusterid: str | None, status_file: Path | None) -> None:
    """Check a backup offline: every file's size and sha256 against the manifest, the checkpoint unpacks."""
    try:
        m = verify_backup(backup_dir, clusterid)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from exc
    if status_file is not None:
        try:
            status_file.write_text(json.dumps(backup_summary(m), sort_keys=True) + "\n")
        except OSError as exc:
            raise click.ClickException(f"cannot write --status-file {status_file}: {exc.strerror}; give a writable "
                                       "file") from exc
    click.echo(f"OK: backup of cluster {m.cluster_id} at term {m.term} index {m.index}, "
               f"{len(m.raw['files'])} file(s) verified")


def _s3_options(fn: Any) -> Any:
    fn = click.option("--ca-bundle", type=click.Path(path_type=Path), default=None, metavar="PEM",
                      help="CA certificate(s) that signed the S3 server's certificate (default: AWS_CA_BUNDLE, "
                           "else the system's public CAs).")(fn)
    fn = click.option("--endpoint-url", default=None, metavar="URL",
                      help="The S3 server, http(s)://host[:port] (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL). "
                           "Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN).")(fn)
    return fn


def _write_status(status_file: Path | None, summary: dict[str, Any]) -> None:
    if status_file is None:
        return
    try:
        status_file.write_text(json.dumps(summary, sort_keys=True) + "\n")
    except OSError as exc:
        raise click.ClickException(f"cannot write --status-file {status_file}: {exc.strerror}; give a writable "
                                   "file") from exc


@backup_cmd.command("upload")
@click.argument("backup_dir", type=click.Path(path_type=Path))
@click.argument("url", metavar="s3://BUCKET/PREFIX/NAME/")
@_s3_options
@click.option("--status-file", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Also write the backup's JSON summary (as `backup verify --status-file`) to FILE once uploaded.")
def backup_upload_cmd(backup_dir: Path, url: str, endpoint_url: str | None, ca_bundle: Path | None,
                      status_file: Path | None) -> None:
    """Upload a backup directory to S3-compatible object storage: verified first, every file, the manifest last
    (a prefix without a manifest is never a backup); refused when the prefix already holds anything."""
    try:
        m = store_for(url, endpoint_url, ca_bundle).upload(backup_dir)
    except ObjectStoreError as exc:
        raise click.ClickException(str(exc)) from exc
    _write_status(status_file, backup_summary(m))
    click.echo(f"Uploaded backup of cluster {m.cluster_id} at term {m.term} index {m.index} "
               f"({len(m.raw['files'])} file(s) and the manifest) to {url}")


@backup_cmd.command("download")
@click.argument("url", metavar="s3://BUCKET/PREFIX/NAME/")
@click.argument("backup_dir", type=click.Path(path_type=Path))
@_s3_options
@click.option("--clusterid", default=None, help="Also check the backup belongs to this cluster id.")
def backup_download_cmd(url: str, backup_dir: Path, endpoint_url: str | None, ca_bundle: Path | None,
                        clusterid: str | None) -> None:
    """Download a backup from S3-compatible object storage into a new (or empty) directory and verify it (as
    `backup verify`); on any failure what was written is removed."""
    try:
        m = store_for(url, endpoint_url, ca_bundle).download(backup_dir, clusterid)
    except ObjectStoreError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"OK: backup of cluster {m.cluster_id} at term {m.term} index {m.index} downloaded from {url} to "
               f"{backup_dir}, {len(m.raw['files'])} file(s) verified")


@backup_cmd.command("delete")
@click.argument("backup", metavar="DIR|s3://BUCKET/PREFIX/NAME/")
@_s3_options
def backup_delete_cmd(backup: str, endpoint_url: str | None, ca_bundle: Path | None) -> None:
    """Delete a backup: a directory only when it holds a backup manifest (or is empty), so a mistyped path never
    removes other data; in object storage the manifest first, then the rest, only when every object under the
    prefix is a backup file. A backup that does not exist is already deleted."""
    if is_s3_url(backup):
        try:
            n = store_for(backup, endpoint_url, ca_bundle).delete()
        except ObjectStoreError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(f"Deleted backup {backup} ({n} object(s))" if n else f"{backup} holds nothing; nothing to delete")
        return
    backup_dir = Path(backup)
    try:
        deleted = delete_backup(backup_dir)
    except BackupError as exc:
        raise click.ClickException(f"{exc}; nothing was deleted") from exc
    except OSError as exc:
        raise click.ClickException(f"cannot delete {backup_dir}: {exc.strerror}; check its permissions") from exc
    click.echo(f"Deleted backup {backup_dir}" if deleted else f"{backup_dir} does not exist; nothing to delete")
