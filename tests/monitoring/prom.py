"""A real Prometheus for the monitoring tests: Debian's ``prometheus`` binary (scripts/install_prometheus.sh) on a
loopback port, a temporary configuration and data directory, and a small client of its HTTP API."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from scm_server.ports import free_port

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "charts/ozone-scm-operator/files/ozone-scm-rules.yaml"
DASHBOARD = REPO / "charts/ozone-scm-operator/files/ozone-scm-dashboard.json"
T = TypeVar("T")


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not on PATH: run scripts/install_prometheus.sh (make monitoring-tools)"
    return path


def promtool(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=timeout)


def rules_with_short_for(out: Path, max_for: str) -> Path:
    """The repo's rules file with every ``for`` cut to ``max_for`` (the expressions unchanged), so a test sees an
    alert fire in seconds; the real durations are covered by the promtool unit tests (tests/monitoring/*.yaml)."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = max_for
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def panel_queries(dashboard: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, with the dashboard's variables replaced by what
    selects everything (``$namespace``/``$scm_cluster`` -> ``.*``) and ``$__rate_interval`` by 15s."""
    dash = dashboard if dashboard is not None else json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in (("$namespace", ".*"), ("$scm_cluster", ".*"), ("$__rate_interval", "15s")):
                expr = expr.replace(var, value)
            out.append((panel["title"], expr))
    return out


class Prometheus:
    """One ``prometheus`` process scraping ``targets`` every ``interval`` and evaluating ``rule_files``."""

    def __init__(self, work: Path, scrape_configs: Sequence[Mapping[str, Any]], rule_files: Sequence[Path],
                 interval: str = "1s") -> None:
        self.work = work
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        work.mkdir(parents=True, exist_ok=True)
        self.config = work / "prometheus.yml"
        self.config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": list(scrape_configs),
        }, sort_keys=False))
        check = promtool("check", "config", str(self.config))
        assert check.returncode == 0, f"promtool check config: {check.stdout}{check.stderr}"
        self.log = work / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [tool("prometheus"), f"--config.file={self.config}", f"--storage.tsdb.path={self.work / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
                 "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        self.wait(lambda: self._ready(), timeout, "Prometheus /-/ready")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"].get("alertname") == name]

    def alert_state(self, name: str) -> str:
        """'firing', 'pending' or 'inactive' (no alert of that name)."""
        states = {a["state"] for a in self.alerts(name)}
        return "firing" if "firing" in states else "pending" if "pending" in states else "inactive"

    def targets_up(self, job: str) -> dict[str, str]:
        return {t["scrapeUrl"]: t["health"] for t in self.api("targets")["activeTargets"] if t["labels"]["job"] == job}

    @staticmethod
    def wait(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.25) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(interval)


@contextlib.contextmanager
def running(prom: Prometheus) -> Iterator[Prometheus]:
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()
