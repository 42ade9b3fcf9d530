"""``ozone-scm migrate from-ozone``: a way in for a cluster that runs on Ozone's own SCM (docs/migration.md).

    ozone-scm [--conf DIR] migrate from-ozone --ozone-db <ozone.scm.db.dirs>/scm.db [--to DIR]
        [--ozone-version FILE] [--ozone-ratis-dir DIR] [--dry-run]

Run on the member of our ring that starts first (the primordial one), with its ozone-site.xml, after every
Ozone SCM has stopped. ``--dry-run`` prints what would be carried over and what cannot be, and writes nothing.
"""

from __future__ import annotations

from pathlib import Path

import click

from scm_server.cli.context import CliContext, pass_ctx
from scm_server.exceptions import StorageError


@click.group("migrate")
def migrate() -> None:
    """Carry an existing cluster's SCM state over to this SCM."""


@migrate.command("from-ozone")
@click.option("--ozone-db", "ozone_db", required=True, type=click.Path(path_type=Path),
              help="The stopped Ozone SCM's scm.db (<ozone.scm.db.dirs>/scm.db); opened read-only.")
@click.option("--ozone-version", "version_file", type=click.Path(path_type=Path), default=None,
              help="Ozone's SCM VERSION file (default: scm/current/VERSION beside scm.db).")
@click.option("--ozone-ratis-dir", "ratis_dir", type=click.Path(path_type=Path), default=None,
              help="Ozone's ozone.scm.ha.ratis.storage.dir (default: scm.ratis beside scm.db), checked to hold "
                   "no applied entry scm.db lacks.")
@click.option("--to", "to_dir", type=click.Path(path_type=Path), default=None,
              help="This SCM's metadata directory (sets ozone.metadata.dirs and ozone.scm.db.dirs); must be empty.")
@click.option("--dry-run", is_flag=True, help="Print what would be carried over (and what not, and why); write nothing.")
@pass_ctx
def from_ozone(ctx: CliContext, ozone_db: Path, version_file: Path | None, ratis_dir: Path | None,
               to_dir: Path | None, dry_run: bool) -> None:
    """Build this SCM's store from a stopped Ozone SCM: clusterID, scmUuid, containers, pipelines, pending block
    deletions and the ID ceilings, so that datanodes and the OM continue with the same cluster."""
    from scm_server.migrate.from_ozone import MigrationRefused, OzoneSources, migrate_from_ozone, plan_from

    sources = OzoneSources.from_db(ozone_db, version_file, ratis_dir)
    try:
        if dry_run:
            plan = plan_from(sources)
            click.echo(f"Dry run: nothing written. From {ozone_db} this SCM would carry over:")
            for line in plan.summary_lines():
                click.echo(f"  {line}")
            if plan.refusals:
                raise click.ClickException(f"the migration would be refused: {plan.refusals[0]}")
            return
        conf = ctx.conf
        if to_dir is not None:
            conf.set("ozone.metadata.dirs", str(to_dir))
            conf.set("ozone.scm.db.dirs", str(to_dir))
        r = migrate_from_ozone(conf, sources)
    except (MigrationRefused, StorageError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"Migrated cluster {r.cluster_id} (SCM id {r.scm_id}) at term {r.term} index {r.index}: {r.containers} "
        f"containers, {r.pipelines} pipelines, {r.deleted_blocks} deleted-block transactions; sequence ceilings "
        + ", ".join(f"{k}={v}" for k, v in sorted(r.sequence_ids.items()))
        + ". Start this SCM, then add members with `scm --bootstrap`"
    )
