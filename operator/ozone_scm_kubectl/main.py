"""``kubectl-ozone_scm`` (``kubectl ozone-scm ...``): day-two commands for ``OzoneSCMCluster`` resources.

Every command reads from and writes to the API server only (``kube``); SCM's own answers come through
``scm_server.client`` (``scm``). Actions are requests to the operator, as annotations it honours
(``ozone_scm_operator.directives``) or an ``OzoneSCMBackup`` object; ``--wait`` polls what the operator reports
with a deadline. Exit code 0: done; 1: refused, failed or timed out, with one line saying why.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ozone_scm_operator.directives import (
    ANN_HIBERNATION,
    ANN_RESTARTED_AT,
    ANN_SWITCHOVER_TO,
    member_restart_annotation,
)

from . import bundle, view
from .kube import Kube, PluginError

TOOL = "kubectl-ozone_scm"
POLL = 1.0  # seconds between two looks while waiting


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Ctx:
    def __init__(self, kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
        self.args = (kubeconfig, context, namespace)
        self._kube: Kube | None = None

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            self._kube = Kube(*self.args)
        return self._kube


def _fail(message: str) -> None:
    raise click.ClickException(message)


class Progress:
    """What a wait last saw, for the line that says why it gave up."""

    def __init__(self) -> None:
        self.last = ""


def _cluster_progress(st: dict[str, Any]) -> str:
    ready: dict[str, Any] = next((c for c in st.get("conditions") or () if c.get("type") == "Ready"), {})
    op = st.get("currentOperation") or {}
    text = f"phase {st.get('phase')}, Ready {ready.get('status')} ({ready.get('reason')}: {ready.get('message')})"
    if op:
        text += f", operation {op.get('type')} {op.get('member')} step {op.get('step')}"
    return text


def _wait(what: str, timeout: float, check: Callable[[Progress], str | None], console: Console) -> str:
    """Poll ``check`` (None: not yet; else the outcome line) until it answers or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    progress = Progress()
    with console.status(f"waiting for {what} (up to {timeout:g}s)"):
        while True:
            outcome = check(progress)
            if outcome is not None:
                return outcome
            if time.monotonic() > deadline:
                last = f" (last seen: {progress.last})" if progress.last else ""
                raise PluginError(f"{what}: not done within {timeout:g}s{last}; look again with `kubectl ozone-scm "
                                  "status` (the operator keeps working on it)")
            time.sleep(POLL)


def _timeout_option(default: float) -> Callable[[Any], Any]:
    return click.option("--timeout", type=click.FloatRange(min=1), default=default, show_default=True,
                        help="seconds --wait waits before giving up")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--kubeconfig", envvar=None, default=None, help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
@click.option("--context", default=None, help="kubeconfig context (default: the current one)")
@click.option("-n", "--namespace", default=None, help="namespace (default: the context's, else default)")
@click.pass_context
def cli(ctx: click.Context, kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
    """Day-two commands for OzoneSCMCluster resources (kubectl ozone-scm)."""
    ctx.obj = Ctx(kubeconfig, context, namespace)


# ---------------------------------------------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------------------------------------------


def _summary(k: Kube, name: str) -> dict[str, Any]:
    cluster = k.cluster(name)
    return view.summary(cluster, k.pods(name), k.backups(), _now())


@cli.command()
@click.argument("cluster", required=False)
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_obj
def status(obj: Ctx, cluster: str | None, output: str) -> None:
    """Members, roles, leader, lag, certificate expiry, last backup and audit, conditions (all clusters of the
    namespace when CLUSTER is left out)."""
    k = obj.kube
    names = [cluster] if cluster else [c["metadata"]["name"] for c in k.clusters()]
    if not names:
        _fail(f"no OzoneSCMCluster in namespace {k.namespace} (-n chooses another namespace)")
    summaries = [_summary(k, n) for n in names]
    if output == "json":
        click.echo(json.dumps(summaries[0] if cluster else summaries, indent=1))
        return
    console = Console()
    for s in summaries:
        console.print(view.render_status(s))


# ---------------------------------------------------------------------------------------------------------------
# switchover, restart, hibernate: annotations the operator honours
# ---------------------------------------------------------------------------------------------------------------


def _event_after(k: Kube, cluster: str, reasons: set[str], since: datetime.datetime) -> dict[str, Any] | None:
    evs = [e for e in k.events({cluster}) if e.get("reason") in reasons
           and (view.event_last_seen(e) or since) >= since]
    if not evs:
        return None
    return max(evs, key=lambda e: int((e.get("metadata") or {}).get("resourceVersion") or 0))


@cli.command()
@click.argument("cluster")
@click.argument("member")
@click.option("--wait/--no-wait", default=True, show_default=True, help="wait until the operator reports the outcome")
@_timeout_option(120)
@click.pass_obj
def switchover(obj: Ctx, cluster: str, member: str, wait: bool, timeout: float) -> None:
    """Move Raft leadership to MEMBER (a caught-up voter), through the operator and SCM's transfer call."""
    k = obj.kube
    s = _summary(k, cluster)
    if s.get("leader") == member:
        click.echo(f"{member} already leads {cluster} (term {s.get('term')})")
        return
    why = view.switchover_refusal(s, member)
    if why is not None:
        _fail(f"switchover refused: {why}")
    since = _now().replace(microsecond=0)
    k.annotate(cluster, {ANN_SWITCHOVER_TO: member})
    click.echo(f"asked the operator to move leadership of {cluster} to {member} ({ANN_SWITCHOVER_TO})")
    if not wait:
        return
    console = Console(stderr=True)

    def done(progress: Progress) -> str | None:
        body = k.cluster(cluster)
        ann = body["metadata"].get("annotations") or {}
        if ann.get(ANN_SWITCHOVER_TO) == member:
            progress.last = _cluster_progress(body.get("status") or {})
            return None
        ev = _event_after(k, cluster, {"SwitchoverDone", "SwitchoverRefused", "SwitchoverFailed"}, since)
        if ev is None:
            return "the request was withdrawn before the operator reported an outcome"
        return f"{ev.get('reason')}: {ev.get('message')}"

    outcome = _wait(f"the switchover to {member}", timeout, done, console)
    if not outcome.startswith("SwitchoverDone"):
        _fail(outcome)
    click.echo(outcome)


def _pod_uids(k: Kube, cluster: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"].get("uid", "") for p in k.pods(cluster)}


@cli.command()
@click.argument("cluster")
@click.argument("member", required=False)
@click.option("--wait/--no-wait", default=False, show_default=True,
              help="wait until every restarted member is back and the cluster is Ready")
@_timeout_option(600)
@click.pass_obj
def restart(obj: Ctx, cluster: str, member: str | None, wait: bool, timeout: float) -> None:
    """Restart every member (followers first, the leader last after a transfer), or only MEMBER, through the
    operator's roll and its live-majority gate."""
    k = obj.kube
    s = _summary(k, cluster)
    names = [m["name"] for m in s["members"]]
    if member is not None and member not in names:
        _fail(f"{member} is not a member of {cluster} (members: {', '.join(names) or 'none'})")
    if s["phase"] in ("Hibernated", "Hibernating"):
        _fail(f"{cluster} is {s['phase']}: nothing runs to restart (kubectl ozone-scm hibernate off {cluster})")
    before = _pod_uids(k, cluster)
    stamp = view.format_time(_now())
    key = ANN_RESTARTED_AT if member is None else member_restart_annotation(member)
    k.annotate(cluster, {key: stamp})
    targets = [member] if member else names
    click.echo(f"asked the operator to restart {', '.join(targets)} of {cluster} ({key}={stamp})")
    if not wait:
        return

    def done(progress: Progress) -> str | None:
        now = _pod_uids(k, cluster)
        st = k.cluster(cluster).get("status") or {}
        progress.last = _cluster_progress(st)
        waiting = [t for t in targets if now.get(t) in (None, "", before.get(t))]
        if waiting:
            progress.last += f"; not restarted yet: {', '.join(waiting)}"
            return None
        ready: dict[str, Any] = next((c for c in st.get("conditions") or () if c.get("type") == "Ready"), {})
        if ready.get("status") != "True" or st.get("currentOperation"):
            return None
        return f"restarted {', '.join(targets)}; {ready.get('message')}"

    click.echo(_wait(f"the restart of {', '.join(targets)}", timeout, done, Console(stderr=True)))


@cli.command()
@click.argument("state", type=click.Choice(["on", "off"]))
@click.argument("cluster")
@click.option("--wait/--no-wait", default=False, show_default=True,
              help="wait until the cluster is Hibernated (on) or Ready again (off)")
@_timeout_option(600)
@click.pass_obj
def hibernate(obj: Ctx, state: str, cluster: str, wait: bool, timeout: float) -> None:
    """on: the operator removes the member Pods and keeps their volumes; off: the ring starts again from them."""
    k = obj.kube
    body = k.cluster(cluster)
    st = body.get("status") or {}
    if state == "on" and not st.get("clusterID"):
        _fail(f"{cluster} has not formed its ring yet (no cluster ID in status): there is nothing to hibernate")
    k.annotate(cluster, {ANN_HIBERNATION: state})
    click.echo(f"asked the operator to turn hibernation {state} for {cluster} ({ANN_HIBERNATION}={state})")
    if not wait:
        return

    def done(progress: Progress) -> str | None:
        st = k.cluster(cluster).get("status") or {}
        progress.last = _cluster_progress(st)
        conds = {c.get("type"): c for c in st.get("conditions") or ()}
        if state == "on":
            return f"Hibernated: {conds['Hibernated'].get('message')}" if st.get("phase") == "Hibernated" else None
        ready = conds.get("Ready") or {}
        if ready.get("status") == "True" and not st.get("currentOperation"):
            return f"running again: {ready.get('message')}"
        return None

    click.echo(_wait(f"hibernation {state}", timeout, done, Console(stderr=True)))


# ---------------------------------------------------------------------------------------------------------------
# backup
# ---------------------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("cluster")
@click.option("--name", default=None, help="name of the OzoneSCMBackup (default: CLUSTER-<UTC time>)")
@click.option("--wait/--no-wait", default=False, show_default=True, help="wait until it is Completed or Failed")
@_timeout_option(600)
@click.pass_obj
def backup(obj: Ctx, cluster: str, name: str | None, wait: bool, timeout: float) -> None:
    """Create an OzoneSCMBackup of CLUSTER (the operator takes the snapshot through the leader)."""
    k = obj.kube
    name = name or view.backup_name(cluster, _now())
    why = view.check_name("--name", name)
    if why is not None:
        _fail(why)
    k.cluster(cluster)  # a backup of a cluster that does not exist is refused here, not left Pending
    k.create_backup(view.backup_body(cluster, k.namespace, name))
    click.echo(f"created {view.BACKUP_KIND} {name} of {cluster} in namespace {k.namespace}")
    if not wait:
        return

    def done(progress: Progress) -> str | None:
        st = k.backup(name).get("status") or {}
        phase = st.get("phase")
        progress.last = f"phase {phase or 'none yet'}{': ' + st['message'] if st.get('message') else ''}"
        if phase not in view.BACKUP_PHASES_DONE:
            return None
        return f"{phase}{': ' + st['message'] if st.get('message') else ''}"

    outcome = _wait(f"{view.BACKUP_KIND} {name}", timeout, done, Console(stderr=True))
    if not outcome.startswith("Completed"):
        _fail(f"{view.BACKUP_KIND} {name} {outcome}")
    click.echo(f"{view.BACKUP_KIND} {name} {outcome}")


# ---------------------------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("cluster")
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the zip to write (default: CLUSTER-report-<UTC time>.zip here); never overwritten")
@click.option("--tail", type=click.IntRange(min=1), default=5000, show_default=True,
              help="log lines kept per container")
@click.pass_obj
def report(obj: Ctx, cluster: str, out: Path | None, tail: int) -> None:
    """A support bundle: the resource, Events, Pods, volumes, member logs, scm roles; Secrets and keys redacted."""
    k = obj.kube
    now = _now()
    out = out or Path(f"{cluster}-report-{now.strftime('%Y%m%d%H%M%S')}.zip")
    if out.exists():
        _fail(f"{out} exists; choose another -o (nothing was overwritten)")
    if not out.parent.is_dir():
        _fail(f"{out.parent} is not a directory; create it or choose another -o")
    body = k.cluster(cluster)
    pods = k.pods(cluster)
    pvcs = k.pvcs(cluster)
    logs: dict[str, str] = {}
    for p in pods:
        pname = p["metadata"]["name"]
        spec = p.get("spec") or {}
        for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
            try:
                logs[f"{pname}/{c['name']}.log"] = k.pod_log(pname, c["name"], tail)
            except PluginError as exc:
                logs[f"{pname}/{c['name']}.log"] = f"(no log: {exc})\n"
    secure = bool(((body.get("spec") or {}).get("security") or {}).get("enabled"))
    ips = [ip for p in pods if (ip := (p.get("status") or {}).get("podIP"))]
    from . import scm  # the SCM client (grpc) only where it is used: every other command starts faster

    roles = None if secure else scm.roles(ips)
    involved = {cluster, *(p["metadata"]["name"] for p in pods), *(v["metadata"]["name"] for v in pvcs)}
    contents = bundle.files(
        cluster=body, events=k.events(involved), pods=pods, pvcs=pvcs, secrets=k.secrets(cluster), logs=logs,
        backups=[b for b in (k.backups() or []) if (b.get("spec") or {}).get("cluster") == cluster], roles=roles,
        now=now, tool=TOOL,
    )
    bundle.write_zip(out, contents, top=out.stem)
    click.echo(f"wrote {out} ({len(contents)} files, {out.stat().st_size} bytes; Secrets without data, PEM blocks "
               "redacted)")


def main() -> None:
    try:
        cli(standalone_mode=False, prog_name="kubectl ozone-scm")
    except PluginError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
