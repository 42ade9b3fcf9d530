"""The relay that makes Ozone's own SCM's /prom page parseable (prom_repair.py), on a recorded piece of that page:
Prometheus's own parser (promtool, from ``make monitoring-tools``) refuses the page as Ozone serves it and accepts
it relayed, and the label value keeps every character Ozone wrote."""

from __future__ import annotations

import re
import subprocess
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

from tests.monitoring.prom import tool

from .prom_repair import RepairRelay, escape_label_values

PAGE = (Path(__file__).parent / "data" / "ozone_scm_prom_ratisevents.txt").read_text()


def _promtool_errors(text: str) -> str:
    out = subprocess.run([tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                         timeout=60)
    return "\n".join(line for line in (out.stdout + out.stderr).splitlines() if "pars" in line.lower())


def _unescape(value: str) -> str:
    return re.sub(r'\\(["\\n])', lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def test_prometheus_refuses_ozones_page_and_accepts_it_repaired() -> None:
    assert "unescaped new-line" in _promtool_errors(PAGE)
    repaired, escaped = escape_label_values(PAGE)
    assert _promtool_errors(repaired) == ""
    assert escaped == PAGE.split('ratisevents="', 1)[1].split('",hostname', 1)[0].count("\n") + 8  # + 8 quotes


def test_the_value_keeps_every_character_and_the_other_lines_stay_as_they_were() -> None:
    repaired, _ = escape_label_values(PAGE)
    raw_value = PAGE.split('ratisevents="', 1)[1].split('",hostname="vm"}', 1)[0]
    line = next(ln for ln in repaired.splitlines() if "ratisevents=" in ln)
    value = re.search(r'ratisevents="((?:[^"\\]|\\.)*)"', line)
    assert value and _unescape(value.group(1)) == raw_value
    assert line.endswith('",hostname="vm"} 0')
    assert repaired.splitlines()[:3] == PAGE.splitlines()[:3]


def test_a_valid_page_is_unchanged_and_a_repaired_one_is_not_repaired_again() -> None:
    valid = ('# HELP m a "quoted" help text\n# TYPE m gauge\n'
             'm{a="x\\"y\\\\z\\n",b="}",c=",d=\\""} 1\nm{a="plain"} 2\n')
    assert _promtool_errors(valid) == ""
    assert escape_label_values(valid) == (valid, 0)
    once, _ = escape_label_values(PAGE)
    assert escape_label_values(once) == (once, 0)


def test_the_relay_serves_the_repaired_page_and_counts() -> None:
    class Upstream(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        with RepairRelay(f"http://127.0.0.1:{upstream.server_address[1]}/prom") as relay:
            for _ in range(2):
                with urllib.request.urlopen(f"http://127.0.0.1:{relay.port}/prom", timeout=10) as resp:
                    body = resp.read().decode()
            assert body == escape_label_values(PAGE)[0]
            assert relay.pages == 2 and relay.escaped == 2 * escape_label_values(PAGE)[1]
    finally:
        upstream.shutdown()
        upstream.server_close()
    with RepairRelay("http://127.0.0.1:9/prom", timeout=2) as relay:  # nothing listens on port 9 (discard)
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{relay.port}/prom", timeout=10)
            raise AssertionError("the relay answered without its upstream")
        except urllib.error.HTTPError as exc:
            assert exc.code == 502 and "127.0.0.1:9" in exc.read().decode()
