"""Errors a person can act on (issue 11 item 4), tried the way they were found: real processes.

* a garbage configuration value on each path (admin CLI, daemon, datanode simulator): one line
  naming the key, no traceback;
* client-side argument errors name the parameter;
* an unreachable SCM: one status line (piped) or one line updated in place (terminal), then the
  final error, not a line per retry;
* a gRPC client pointed at the SCM's HTTP port: one warning line per connection in the SCM's
  log, no aiohttp traceback, and the CLI's error says which port to use;
* tables never cut IDs, piped or on an 80-column terminal;
* the daemon reads no configuration key that its up-front check (``check_daemon_config``) skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from scm_harness import ScmUnderTest, run_cli

from scm_server.conf import OzoneConfiguration
from scm_server.local.cluster import LocalCluster
from scm_server.local.members import http_ok
from scm_server.ports import dead_address
from scm_server.server.config_check import check_daemon_config

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow

OZONE_SCM = str(Path(sys.executable).with_name("ozone-scm"))


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OZONE-SITE.XML_")}
    full_env.pop("OZONE_CONF_DIR", None)
    full_env.update(env or {})
    return subprocess.run([OZONE_SCM, *args], capture_output=True, text=True, timeout=timeout, env=full_env)


def on_a_terminal(args: list[str], env: dict[str, str], columns: int = 80, timeout: float = 60) -> str:
    """Run ``ozone-scm args`` on a pseudo-terminal of ``columns`` columns (util-linux ``script``)."""
    script = shutil.which("script")
    assert script, "the `script` command (util-linux) is needed to run the CLI on a terminal; apt-get install util-linux"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OZONE-SITE.XML_")}
    full_env.update(env, COLUMNS=str(columns), LINES="40", TERM="xterm")
    # `script` runs the command through $SHELL; shells such as dash drop variables whose names are not
    # identifiers (OZONE-SITE.XML_*), so pass them again through env(1), quoted
    assignments = [f"{k}={v}" for k, v in env.items()]
    command = shlex.join(["env", *assignments, OZONE_SCM, *args])
    proc = subprocess.run([script, "-qec", command, "/dev/null"], capture_output=True, timeout=timeout, env=full_env)
    return proc.stdout.decode(errors="replace")  # bytes: keep the carriage returns of in-place updates


def screen_lines(out: str) -> list[str]:
    """What stays on the screen, by a minimal terminal model: text, carriage return, newline,
    erase line (ESC[2K) and cursor up (ESC[nA); other escape sequences are ignored."""
    lines = [""]
    row, col = 0, 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", out):
        if token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            col = 0
            if row == len(lines):
                lines.append("")
        elif token.startswith("\x1b["):
            if token.endswith("K") and token[2:-1] == "2":
                lines[row] = ""
            elif token.endswith("A"):
                row = max(0, row - int(token[2:-1] or 1))
        else:
            line = lines[row]
            lines[row] = line[:col] + token + line[col + len(token):]
            col += len(token)
    return [line for line in lines if line.strip()]




def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def scm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScmUnderTest]:
    under_test = ScmUnderTest(tmp_path_factory.mktemp("errors"), datanodes=3, racks=2)
    try:
        under_test.wait_ready()
        yield under_test
    finally:
        under_test.close()


# ------------------------------------------------------------------------------ configuration


def test_garbage_port_on_the_admin_cli_is_one_line(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 3)
    cluster.write_configs()
    key = "ozone.scm.client.grpc.port.scmservice.scm2"
    proc = cli("--conf", str(cluster.scms[0].conf_dir), "admin", "safemode", "status",
               env={f"OZONE-SITE.XML_{key}": "notaport"})
    assert proc.returncode == 1
    assert one_error_line(proc) == f"Error: {key}: invalid port 'notaport'; use a number from 1 to 65535 (e.g. {key}=9860)"


def test_garbage_on_the_daemon_and_the_simulator_is_one_line(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 3)
    cluster.write_configs()
    conf = str(cluster.scms[0].conf_dir)
    daemon = cli("--conf", conf, "scm", env={"OZONE-SITE.XML_ozone.scm.stale.node.interval": "99999999999999999999999"})
    assert daemon.returncode == 1 and "Traceback" not in daemon.stderr
    errors = [line for line in daemon.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "ozone.scm.stale.node.interval: duration '99999999999999999999999' is too large" \
        in errors[0], daemon.stderr
    sim = cli("--conf", conf, "datanode-sim", "--count", "1",
              env={"OZONE-SITE.XML_ozone.scm.address.scmservice.scm3": "not a host"})
    assert sim.returncode == 1
    assert "ozone.scm.address.scmservice.scm3: invalid host 'not a host'" in one_error_line(sim)


def test_an_unknown_placement_class_or_schema_stops_the_daemon_with_one_line(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 1)
    cluster.write_configs()
    conf = str(cluster.scms[0].conf_dir)
    daemon = cli("--conf", conf, "scm", env={"OZONE-SITE.XML_ozone.scm.container.placement.impl": "RackWise"})
    assert daemon.returncode == 1 and "Traceback" not in daemon.stderr
    errors = [line for line in daemon.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, daemon.stderr
    assert "ozone.scm.container.placement.impl: unknown class 'RackWise'; use one of SCMContainerPlacementRackAware, " \
        "SCMContainerPlacementRackScatter, SCMContainerPlacementCapacity, SCMContainerPlacementRandom" in errors[0]
    schema = cli("--conf", conf, "scm", env={
        "OZONE-SITE.XML_ozone.scm.network.topology.schema.file": str(tmp_path / "missing.xml")})
    assert schema.returncode == 1 and "Traceback" not in schema.stderr
    errors = [line for line in schema.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "ozone.scm.network.topology.schema.file: cannot read" in errors[0], schema.stderr


def test_the_daemon_reads_no_key_its_check_skips(tmp_path: Path) -> None:
    """Start a real daemon in-process with every configuration read recorded: each key it reads
    must be one ``check_daemon_config`` reads too, so the check stays complete as code changes."""
    from scm_server.ha.bootstrap import scm_init
    from scm_server.server import daemon

    cluster = LocalCluster(tmp_path, 1)
    cluster.write_configs()
    conf_dir = cluster.scms[0].conf_dir
    read: set[str] = set()
    original = OzoneConfiguration.get_str

    def recording(self: OzoneConfiguration, key: str, default: str | None = None) -> str | None:
        read.add(key)
        return original(self, key, default)

    mp = pytest.MonkeyPatch()
    mp.setattr(OzoneConfiguration, "get_str", recording)
    try:
        conf = OzoneConfiguration.load(conf_dir, env={})
        assert scm_init(conf, security=None)
        checked_conf = OzoneConfiguration.load(conf_dir, env={})
        read.clear()
        check_daemon_config(checked_conf)
        checked = set(read)
        read.clear()

        async def run_until_serving() -> None:
            stop = asyncio.Event()
            task = asyncio.create_task(daemon.serve(OzoneConfiguration.load(conf_dir, env={}), stop))
            url = cluster.scms[0].http_url + "/health"
            for _ in range(600):
                if task.done():
                    task.result()
                ok = await asyncio.to_thread(http_ok, url)
                if ok:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the in-process daemon did not serve /health within 60s")
            await asyncio.sleep(1.0)  # let the periodic services run once (they may read keys late)
            stop.set()
            await task

        asyncio.run(run_until_serving())
    finally:
        mp.undo()
    missing = sorted(read - checked)
    assert not missing, f"the daemon reads keys check_daemon_config does not check: {missing}"
    assert len(read) > 20


# ------------------------------------------------------------------------------ arguments


def test_argument_errors_name_the_parameter(scm: ScmUnderTest) -> None:
    conf = str(scm.conf_dir)
    proc = cli("--conf", conf, "admin", "container", "list", "--count", "-1")
    assert proc.returncode == 2 and "Invalid value for '--count'" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("--conf", conf, "admin", "container", "info", "99999999999999999999999")
    assert proc.returncode == 2 and "Invalid value for 'CONTAINER_ID'" in proc.stderr
    proc = cli("--conf", conf, "datanode-sim", "--container-size", "lots")
    assert proc.returncode == 2 and "Invalid value for '--container-size'" in proc.stderr
    # the public client API names the method and the parameter
    with pytest.raises(ValueError, match=r"list_containers: count=-1 is invalid; use an integer from 0 to 4294967295"):
        scm.client.list_containers(0, -1)
    with pytest.raises(ValueError, match=r"decommission_nodes: hosts='sim-dn-0' is invalid; use a list"):
        scm.client.decommission_nodes("sim-dn-0")
    with pytest.raises(ValueError, match=r"allocate_block: replication_factor=7 is invalid; use one of"):
        scm.client.allocate_block(1024, 1, replication_factor=7)


# ------------------------------------------------------------------------------ unreachable


RETRY_ENV = {"OZONE-SITE.XML_hdds.scmclient.failover.max.retry": "8",
             "OZONE-SITE.XML_hdds.scmclient.failover.retry.interval": "100ms"}


def test_an_unreachable_scm_piped_is_one_status_line_and_the_error() -> None:
    address = dead_address()
    proc = cli("admin", "--scm", address, "safemode", "status", env=RETRY_ENV)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith(f"SCM at {address} unreachable; retrying up to 8 times")
    assert lines[1].startswith(f"Error: cannot reach SCM at {address}")


def test_an_unreachable_scm_on_a_terminal_updates_one_line() -> None:
    address = dead_address()
    out = on_a_terminal(["admin", "--scm", address, "safemode", "status"], RETRY_ENV)
    assert "retry 2/8" in out and "retry 8/8" in out, out  # the line was updated as attempts went on
    assert out.count("unreachable; retry") >= 3
    # every frame is redrawn in place (a carriage return, no newline) and cleared at the end:
    # only the error stays on the screen
    visible = screen_lines(out)
    assert len(visible) == 1 and visible[0].startswith("Error: cannot reach SCM"), visible


# ------------------------------------------------------------------------------ wrong port


def test_a_grpc_client_on_the_http_port_gets_one_warning_per_connection(scm: ScmUnderTest) -> None:
    http = scm.cluster.scms[0].http_url.removeprefix("http://")
    log = scm.cluster.scms[0].log_path
    before = log.read_text(errors="replace")
    proc = cli("admin", "--scm", http, "safemode", "status",
               env={"OZONE-SITE.XML_hdds.scmclient.failover.max.retry": "3",
                    "OZONE-SITE.XML_hdds.scmclient.failover.retry.interval": "100ms"})
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[-1]
    assert "answers HTTP/1 (the SCM's web port?); admin commands use ozone.scm.client.grpc.port" in error

    def warnings() -> list[str]:
        new = log.read_text(errors="replace")[len(before):]
        return [line for line in new.splitlines() if "speaks HTTP/2" in line]

    found = scm.wait(lambda: warnings(), 10, "the SCM to log the rejected connections")
    new = log.read_text(errors="replace")[len(before):]
    assert "Traceback" not in new and "Error handling request" not in new, new
    assert all(" WARNING aiohttp.server: web server: rejected a connection from 127.0.0.1" in w for w in found)
    # one line per connection, not a flood: the client made 1 + 3 attempts; within one attempt's deadline
    # the channel may reconnect after its minimum reconnect backoff (scm_server/grpc_options.py), so an
    # attempt opens a few connections at most
    assert 1 <= len(found) <= 4 * 3, found


# ------------------------------------------------------------------------------ tables


def test_tables_print_whole_ids_piped_and_on_80_columns(scm: ScmUnderTest) -> None:
    conf = str(scm.conf_dir)
    pipelines = json.loads(run_cli(scm.conf_dir, "admin", "pipeline", "list", "--json").stdout)
    nodes = json.loads(run_cli(scm.conf_dir, "admin", "datanode", "list", "--json").stdout)
    ids = [p["id"]["id"] for p in pipelines] + [n["uuid"] for n in nodes]
    hosts = [f"{n['hostName']}{n['networkLocation']}" for n in nodes]
    assert ids and hosts
    piped = run_cli(scm.conf_dir, "admin", "pipeline", "list").stdout + \
        run_cli(scm.conf_dir, "admin", "datanode", "list").stdout
    narrow = on_a_terminal(["--conf", conf, "admin", "pipeline", "list"], {}, columns=80) + \
        on_a_terminal(["--conf", conf, "admin", "datanode", "list"], {}, columns=80)
    for text in (piped, narrow):
        assert "…" not in text
        for value in ids:
            assert value in text, f"{value} not printed whole:\n{text}"
    members = [h for h in hosts if any(h in line for line in piped.splitlines())]
    assert members, f"pipeline members (host/rack) not printed whole:\n{piped}"
    # a wide terminal still gets the bordered table, with whole values
    wide = on_a_terminal(["--conf", conf, "admin", "datanode", "list"], {}, columns=200)
    assert "┃" in wide and all(n["uuid"] in wide for n in nodes)
