"""``ozone-scm``: the command line, mirroring Ozone's ``ozone scm`` / ``ozone admin`` / ``ozone debug``
/ ``ozone freon`` so that an Ozone admin's muscle memory works.

    ozone-scm [--conf DIR] scm [--init [--clusterid ID] | --bootstrap | --restore DIR | --recover [--force]]
                                                                    (no flag: run the daemon)
    ozone-scm admin [--scm HOST:PORT,...] safemode|container|pipeline|replicationmanager|datanode ...
    ozone-scm debug ldb --db=<path> ls | scan --column_family=<cf>
    ozone-scm debug verify --model register|kv FILE
    ozone-scm freon stb --benchmark AllocateBlocks|AllocateContainers|ProcessReports
    ozone-scm datanode-sim --count N --scm HOST:PORT[,...]
    ozone-scm local run|up|status|down [--secure]
    ozone-scm local run --audit
    ozone-scm admin audit export --out DIR [--all-scms];  ozone-scm audit run --input DIR --out DIR
    ozone-scm admin cert list|info|revoke|crl|sign ; ozone-scm cert request|fetch|fetch-ca
    ozone-scm migrate from-ozone --ozone-db <ozone scm.db> [--to DIR] [--dry-run]

Everything talking to a running SCM goes through ``scm_server.client``. ``main`` turns our errors
(SCMException, unreachable SCM, bad configuration) into one clear line on stderr and exit code 1,
never a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click
from rich.markup import escape

from scm_server.cli import params
from scm_server.cli.admin import admin
from scm_server.cli.context import CliContext, pass_ctx
from scm_server.cli.output import err_console, print_json
from scm_server.client.errors import SCMUnavailableError
from scm_server.exceptions import (
    ConfigError,
    NotLeaderException,
    SCMError,
    SCMException,
    StorageError,
    one_line,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--conf", "conf_dir", type=click.Path(path_type=Path), envvar="OZONE_CONF_DIR",
              help="Directory holding ozone-site.xml (default: $OZONE_CONF_DIR).")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.pass_context
def cli(click_ctx: click.Context, conf_dir: Path | None, verbose: int) -> None:
    """Apache Ozone Storage Container Manager (Python), with Raft HA."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    click_ctx.obj = CliContext(conf_dir)


@cli.command("scm")
@click.option("--init", "do_init", is_flag=True, help="Initialise this SCM's storage (primordial SCM).")
@click.option("--clusterid", default=None, help="Cluster id for --init (CID-<uuid> or a UUID).")
@click.option("--bootstrap", "do_bootstrap", is_flag=True, help="Prepare a non-primordial SCM of an HA ring.")
@click.option("--restore", "restore_dir", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="Create a new one-member ring on this (empty) SCM from a backup (`admin scm backup`).")
@click.option("--recover", "do_recover", is_flag=True,
              help="Lost quorum: make this stopped survivor the only member of its ring (keeps its whole log).")
@click.option("--force", is_flag=True, help="--recover even though a majority of the old ring still answers.")
@click.option("--root-ca-cert", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="With --restore of a secure ring: the ring's root CA certificate (when the backup holds no keys).")
@click.option("--root-ca-key", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="With --restore of a secure ring: the root CA private key (mode 0600), with --root-ca-cert.")
@click.option("--termination-log", type=click.Path(path_type=Path), default=None,
              help="With --bootstrap: a refusal because this volume holds another cluster's data is also written "
                   "here as one line starting 'ForeignVolume:' (e.g. /dev/termination-log).")
@pass_ctx
def scm_command(
    ctx: CliContext, do_init: bool, clusterid: str | None, do_bootstrap: bool, restore_dir: Path | None,
    do_recover: bool, force: bool, root_ca_cert: Path | None, root_ca_key: Path | None, termination_log: Path | None,
) -> None:
    """Run the SCM daemon in the foreground, or --init / --bootstrap / --restore / --recover its storage."""
    if sum(map(bool, (do_init, do_bootstrap, restore_dir, do_recover))) > 1 and not (do_init and do_bootstrap):
        raise click.UsageError("give one of --init/--bootstrap, --restore DIR or --recover")
    if clusterid and not (do_init or restore_dir):
        raise click.UsageError("--clusterid only applies to --init (and to --restore, as a check)")
    if force and not do_recover:
        raise click.UsageError("--force only applies to --recover")
    if (root_ca_cert or root_ca_key) and not restore_dir:
        raise click.UsageError("--root-ca-cert/--root-ca-key only apply to --restore")
    if termination_log is not None and not do_bootstrap:
        raise click.UsageError("--termination-log only applies to --bootstrap")
    if restore_dir is not None or do_recover:
        from scm_server.ha.recovery import RecoveryFailed, scm_recover, scm_restore

        try:
            if restore_dir is not None:
                r = scm_restore(ctx.conf, restore_dir, cluster_id=clusterid, root_cert_file=root_ca_cert,
                                root_key_file=root_ca_key)
                click.echo(f"Restored cluster {r.cluster_id} at term {r.term} index {r.index} as a one-member ring "
                           f"(SCM id {r.scm_id}); start this SCM, then add members with `scm --bootstrap`")
                if r.retired_scm_certificates:
                    click.echo(f"Revoked the old ring's SCM certificates (cessationOfOperation): "
                               f"{', '.join(r.retired_scm_certificates)}")
            else:
                rec = scm_recover(ctx.conf, force=force)
                click.echo(f"Recovered: SCM {rec.scm_id} is now the only member (removed "
                           f"{', '.join(rec.removed)}; log kept through index {rec.last_index}); start it, then "
                           "add members with `scm --bootstrap` on empty storage")
        except (RecoveryFailed, StorageError) as exc:
            raise click.ClickException(str(exc)) from exc
        return
    if do_init or do_bootstrap:
        from scm_server.conf.security import SecurityConfig
        from scm_server.ha.bootstrap import BootstrapError, scm_bootstrap, scm_init

        logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
        # the security configuration is parsed once here and handed to both steps
        try:
            security = SecurityConfig.if_enabled(ctx.conf)
        except ConfigError as exc:
            if do_init:
                raise BootstrapError(f"SCM init failed: security: {exc}") from exc
            raise click.ClickException(f"SCM bootstrap failed: security: {exc}") from exc
        ok = scm_init(ctx.conf, clusterid, security=security) if do_init else True
        if ok and do_bootstrap:
            ok = scm_bootstrap(ctx.conf, security=security, termination_log=termination_log)
        if not ok:
            raise click.ClickException("SCM " + ("init" if do_init else "bootstrap") + " failed")
        return
    from scm_server.server import daemon

    logging.getLogger().setLevel(min(logging.getLogger().level, logging.INFO))
    code = daemon.run(ctx.unchecked_conf)
    if code:
        sys.exit(code)


@cli.group()
def debug() -> None:
    """Debugging tools (ldb, verify)."""


@debug.group()
@click.option("--db", "db_path", required=True, type=click.Path(path_type=Path), help="Path to scm.db.")
@click.pass_context
def ldb(click_ctx: click.Context, db_path: Path) -> None:
    """Read scm.db (LevelDB) offline or from a copy while SCM runs."""
    click_ctx.meta["ldb_db"] = db_path


@ldb.command("ls")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def ldb_ls(click_ctx: click.Context, as_json: bool) -> None:
    """List the column families (tables) of scm.db."""
    from scm_server.metadata import ldb as ldb_backend

    families = ldb_backend.list_column_families(click_ctx.meta["ldb_db"])
    if as_json:
        print_json(families)
        return
    for cf in families:
        click.echo(f"{cf['name']}\t{cf['count']}")


@ldb.command("scan")
@click.option("--column_family", "--column-family", "column_family", required=True, help="Table name, e.g. containers.")
@click.option("--with-keys/--without-keys", default=True, show_default=True)
@click.option("--limit", type=params.NON_NEGATIVE, default=None)
@click.pass_context
def ldb_scan(click_ctx: click.Context, column_family: str, with_keys: bool, limit: int | None) -> None:
    """Print one JSON line per entry of a column family."""
    from scm_server.metadata import ldb as ldb_backend

    for line in ldb_backend.scan(click_ctx.meta["ldb_db"], column_family, limit=limit, with_keys=with_keys):
        click.echo(line)


cli.add_command(admin)


def _register_optional() -> None:
    from scm_server.cli.datanode_sim_cmd import datanode_sim
    from scm_server.cli.freon import freon
    from scm_server.cli.local import local

    cli.add_command(freon)
    cli.add_command(datanode_sim)
    cli.add_command(local)
    from scm_server.cli.verify_cmd import verify

    debug.add_command(verify)
    # `ozone-scm admin scm roles|transfer|decommission` lives in the HA helper's module.
    from scm_server.cli.admin_scm import scm as admin_scm_group

    admin.add_command(admin_scm_group, "scm")
    # what Ozone's `ozone admin` has beyond our gRPC admin service, over SCM's Hadoop RPC client port
    from scm_server.cli import admin_ozone
    from scm_server.cli.admin import container as admin_container_group
    from scm_server.cli.admin import datanode as admin_datanode_group

    admin_datanode_group.add_command(admin_ozone.usageinfo)
    admin_datanode_group.add_command(admin_ozone.datanode_status)
    admin_container_group.add_command(admin_ozone.reconcile)
    admin.add_command(admin_ozone.containerbalancer)
    admin.add_command(admin_ozone.reconfig)
    admin_scm_group.add_command(admin_ozone.finalization_status)
    admin_scm_group.add_command(admin_ozone.finalize_upgrade)
    admin_scm_group.add_command(admin_ozone.deleted_blocks_txn)
    # `ozone-scm admin cert ...` and `ozone-scm cert ...`: the security helper's module.
    from scm_server.cli.admin_cert import cert as admin_cert_group
    from scm_server.cli.admin_cert import cert_tools

    admin.add_command(admin_cert_group, "cert")
    cli.add_command(cert_tools, "cert")

    # The replication audit: `admin audit export` and `audit run` (docs/audit.md).
    from scm_server.cli.audit import admin_audit, audit

    admin.add_command(admin_audit, "audit")
    cli.add_command(audit)

    # `ozone-scm migrate from-ozone`: a way in from Ozone's own SCM (docs/migration.md)
    from scm_server.cli.migrate import migrate

    cli.add_command(migrate)


_register_optional()


def _fail(message: str) -> int:
    from scm_server.cli.feedback import stop_all

    stop_all()  # a retry status line must not share the line with the error
    err_console.print("[red]Error:[/] " + escape(one_line(message)), highlight=False, soft_wrap=True)
    return 1


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        rv = cli.main(args=args, prog_name="ozone-scm", standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(_fail("aborted"))
    except click.ClickException as exc:
        from scm_server.cli.feedback import stop_all

        stop_all()
        exc.show()
        sys.exit(exc.exit_code)
    except SCMUnavailableError as exc:
        from scm_server.cli.feedback import unavailable_hint

        sys.exit(_fail(str(exc) + unavailable_hint(str(exc))))
    except NotLeaderException as exc:
        sys.exit(_fail(f"{exc} — no leader answered; retry or pass --scm with the leader's address"))
    except SCMException as exc:
        sys.exit(_fail(str(exc)))
    except (ConfigError, StorageError) as exc:
        sys.exit(_fail(str(exc)))
    except SCMError as exc:
        sys.exit(_fail(str(exc)))
    except BrokenPipeError:
        os._exit(0)
    except KeyboardInterrupt:
        sys.exit(130)
    if isinstance(rv, int) and rv:
        sys.exit(rv)


if __name__ == "__main__":
    main()
