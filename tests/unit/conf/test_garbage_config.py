"""Every configuration key on every path, fed garbage: one line naming the key, never a traceback.

Issue 11 item 4: ``OZONE-SITE.XML_ozone.scm.client.port.<svc>.<node>=notaport`` made the admin
CLI print a 53-line traceback. The paths are the real entry point (``scm_server.cli.main.main``)
run in-process with the configuration given as Ozone's images give it, ``OZONE-SITE.XML_<key>``
environment variables over an ``ozone-site.xml``:

* ``daemon``: ``ozone-scm scm`` (storage not initialised, so an accepted configuration ends in
  "SCM not initialized" before anything is opened or bound);
* ``admin`` / ``admin-scm``: ``ozone-scm admin safemode status`` / ``admin scm roles``, with the
  client replaced at the network edge by a stub that records "reached the network";
* ``datanode-sim`` and ``freon``: their commands, with the part that starts simulated datanodes
  replaced the same way.

The keys are not listed by hand: each path is run once on a valid HA and a valid single-SCM
configuration while every key it reads is recorded; those are the keys fed garbage. Each example
must either be accepted (the path reaches its network stub / "not initialized") or stop with
exit code 1 and exactly one line that names the key. Any other exception fails the test with its
traceback. The real-process versions are in ``tests/integration/test_actionable_errors.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scm_server.cli import admin_scm, datanode_sim_cmd, freon
from scm_server.cli import feedback as cli_feedback
from scm_server.cli.main import main
from scm_server.conf import OzoneConfiguration
from scm_server.conf.addresses import ADDRESS_KEYS, PORT_KEYS
from scm_server.local.cluster import site_xml

SVC = "scmservice"
ENV = "OZONE-SITE.XML_"
NASTY = ["notaport", "-1", "0", "65536", "99999999999999999999999", "5 XB", "a b", "é\x1e"]


class Reached(Exception):
    """The path accepted its configuration and got as far as the network."""


def ha_site(root: Path) -> dict[str, str]:
    values = {
        "ozone.metadata.dirs": str(root / "meta"),
        "ozone.scm.service.ids": SVC,
        f"ozone.scm.nodes.{SVC}": "scm1,scm2,scm3",
        "ozone.scm.node.id": "scm1",
        "ozone.scm.primordial.node.id": "scm1",
    }
    for i, n in enumerate(("scm1", "scm2", "scm3")):
        values[f"ozone.scm.address.{SVC}.{n}"] = "127.0.0.1"
        for key, port in (("ozone.scm.client.grpc.port", 19860), ("ozone.scm.datanode.grpc.port", 19861),
                          ("ozone.scm.block.client.grpc.port", 19863), ("ozone.scm.ratis.port", 19894),
                          ("ozone.scm.client.port", 29860), ("ozone.scm.datanode.port", 29861),
                          ("ozone.scm.block.client.port", 29863), ("ozone.scm.security.service.port", 29961),
                          ("ozone.scm.grpc.port", 19895)):
            values[f"{key}.{SVC}.{n}"] = str(port + 10 * i)
        values[f"ozone.scm.http-address.{SVC}.{n}"] = f"127.0.0.1:{19876 + 10 * i}"
    return values


def single_site(root: Path) -> dict[str, str]:
    return {
        "ozone.metadata.dirs": str(root / "meta"),
        "ozone.scm.names": "127.0.0.1",
        "ozone.scm.client.address": "127.0.0.1",
        "ozone.scm.client.grpc.port": "19860",
        "ozone.scm.datanode.grpc.port": "19861",
        "ozone.scm.block.client.grpc.port": "19863",
        "ozone.scm.client.port": "29860",
        "ozone.scm.datanode.port": "29861",
        "ozone.scm.block.client.port": "29863",
        "ozone.scm.security.service.port": "29961",
        "ozone.scm.http-address": "127.0.0.1:19876",
        "ozone.scm.ratis.port": "19894",
        "ozone.scm.grpc.port": "19895",
    }


SHAPES: dict[str, Callable[[Path], dict[str, str]]] = {"ha": ha_site, "single": single_site}


def _raise_reached(*_args: Any, **_kwargs: Any) -> Any:
    raise Reached


async def _async_reached(*_args: Any, **_kwargs: Any) -> Any:
    raise Reached


PATHS: dict[str, tuple[list[str], list[tuple[Any, str, Any]]]] = {
    "daemon": (["scm"], []),
    "admin": (["admin", "safemode", "status"], [(cli_feedback, "StatusClient", _raise_reached)]),
    "admin-scm": (["admin", "scm", "roles"], [(admin_scm, "run_sync", _raise_reached)]),
    "datanode-sim": (["datanode-sim", "--count", "1"], [(datanode_sim_cmd, "_run", _async_reached)]),
    "freon": (["freon", "stb", "--benchmark", "AllocateBlocks"], [(freon, "_run", _async_reached)]),
}


@contextlib.contextmanager
def env_value(key: str | None, value: str | None) -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith(ENV) or k == "OZONE_CONF_DIR"}
    for k in saved:
        del os.environ[k]
    if key is not None and value is not None:
        os.environ[ENV + key] = value
    try:
        yield
    finally:
        for k in [k for k in os.environ if k.startswith(ENV)]:
            del os.environ[k]
        os.environ.update(saved)


@contextlib.contextmanager
def recording() -> Iterator[set[str]]:
    keys: set[str] = set()
    original = OzoneConfiguration.get_str

    def get_str(self: OzoneConfiguration, key: str, default: str | None = None) -> str | None:
        keys.add(key)
        return original(self, key, default)

    mp = pytest.MonkeyPatch()
    mp.setattr(OzoneConfiguration, "get_str", get_str)
    try:
        yield keys
    finally:
        mp.undo()


class Runner:
    """Runs one path in-process and classifies the outcome."""

    def __init__(self, path: str, conf_dir: Path, capsys: pytest.CaptureFixture[str],
                 caplog: pytest.LogCaptureFixture) -> None:
        self.argv, self.stubs = PATHS[path]
        self.path = path
        self.conf_dir = conf_dir
        self.capsys = capsys
        self.caplog = caplog

    def run(self, key: str | None = None, value: str | None = None) -> tuple[str, str]:
        """("accepted", "") or ("error", the one line)."""
        mp = pytest.MonkeyPatch()
        for module, name, stub in self.stubs:
            mp.setattr(module, name, stub)
        self.capsys.readouterr()
        self.caplog.clear()
        try:
            with env_value(key, value), self.caplog.at_level(logging.ERROR, logger="scm_server"):
                main(["--conf", str(self.conf_dir), *self.argv])
        except Reached:
            return "accepted", ""
        except SystemExit as exit_:
            return self._classify(exit_.code)
        finally:
            mp.undo()
        raise AssertionError(f"{self.path} returned without reaching the network or failing")

    def _classify(self, code: Any) -> tuple[str, str]:
        if self.path == "daemon":
            messages = [r.getMessage() for r in self.caplog.records if r.levelno >= logging.ERROR]
            assert len(messages) == 1, messages
            if code == 2 and "not initialized" in messages[0]:
                return "accepted", ""
            assert code == 1, (code, messages)
            return "error", messages[0]
        err = self.capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 1, (code, err)
        assert len(lines) == 1, f"expected one line, got:\n{err}"
        return "error", lines[0]


@pytest.fixture(scope="module", params=sorted(SHAPES))
def conf_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(f"conf-{request.param}")
    (root / "conf").mkdir()
    (root / "conf" / "ozone-site.xml").write_text(site_xml(SHAPES[request.param](root)))
    return root / "conf"


_KEYS: dict[tuple[str, Path], list[str]] = {}


def keys_of(runner: Runner) -> list[str]:
    """Every key the path reads on the valid configuration (it must accept that configuration)."""
    cache_key = (runner.path, runner.conf_dir)
    if cache_key not in _KEYS:
        with recording() as keys:
            assert runner.run() == ("accepted", ""), f"{runner.path} refuses the valid configuration"
        _KEYS[cache_key] = sorted(keys)
    return _KEYS[cache_key]


def assert_names_the_key(outcome: tuple[str, str], key: str, value: str) -> None:
    kind, line = outcome
    if kind == "error":
        assert key in line, f"{key}={value!r}: the error does not name the key: {line}"
        assert "Traceback" not in line


GARBAGE = st.one_of(
    st.sampled_from(NASTY),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.builds(lambda n, u: f"{n}{u}", st.integers(-5, 10**22), st.sampled_from(["ms", "s", "m", "h", "d", "MB", "GB",
                                                                                  "xx", ""])),
)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_key_of_every_path_refuses_garbage_in_one_line(
    path: str, conf_dir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    runner = Runner(path, conf_dir, capsys, caplog)
    keys = keys_of(runner)
    assert len(keys) >= 5, keys

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(key=st.sampled_from(keys), value=GARBAGE)
    def property_(key: str, value: str) -> None:
        assert_names_the_key(runner.run(key, value), key, value)

    property_()


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_key_against_the_classic_mistakes(
    path: str, conf_dir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Deterministic sweep: every recorded key with every value of NASTY."""
    runner = Runner(path, conf_dir, capsys, caplog)
    refused = 0
    for key in keys_of(runner):
        for value in NASTY:
            outcome = runner.run(key, value)
            assert_names_the_key(outcome, key, value)
            refused += outcome[0] == "error"
    assert refused > 0


def test_the_reported_example_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ozone-site.xml").write_text(site_xml(ha_site(tmp_path)))
    runner = Runner("admin", tmp_path / "conf", capsys, caplog)
    kind, line = runner.run(f"ozone.scm.client.grpc.port.{SVC}.scm2", "notaport")
    assert kind == "error"
    assert line == (f"Error: ozone.scm.client.grpc.port.{SVC}.scm2: invalid port 'notaport'; use a number from 1 to "
                    f"65535 (e.g. ozone.scm.client.grpc.port.{SVC}.scm2=9860)")


def endpoint_keys(shape: str) -> list[tuple[str, str]]:
    """(key, malformed value) for every SCM port and address key: plain, and for HA also a peer's per-node form."""
    suffixes = [""] + ([f".{SVC}.scm2"] if shape == "ha" else [])
    out = [(key + sfx, "notaport") for key in PORT_KEYS for sfx in suffixes]
    out += [(key + sfx, "127.0.0.1:notaport") for key in ADDRESS_KEYS if key != "ozone.scm.address"
            for sfx in suffixes]
    if shape == "ha":
        out.append((f"ozone.scm.address.{SVC}.scm2", "127.0.0.1:notaport"))
    return out


@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_port_key_is_checked_whether_or_not_the_path_reads_it(
    path: str, conf_dir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29 item 8: the admin CLI reads only the gRPC client ports, and a malformed ``ozone.scm.client.port``
    (Hadoop RPC) passed it with exit 0. Every port and address key, of any transport and any member, set to a
    malformed port, stops every path with one line naming that key."""
    runner = Runner(path, conf_dir, capsys, caplog)
    keys = endpoint_keys("ha" if "ha" in conf_dir.parent.name else "single")
    assert len(keys) >= 14
    for key, value in keys:
        kind, line = runner.run(key, value)
        assert kind == "error", f"{path}: {key}={value!r} was accepted"
        assert f"{key}: invalid port 'notaport'" in line, line
