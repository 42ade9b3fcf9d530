"""``ozone-scm debug verify``: check a recorded history for linearizability, offline.

Called by ``cli/main.py`` (registered under ``debug``). It reads one file through
``scm_server.verify.formats``, runs ``scm_server.verify.check_operations`` and renders the
report; it talks to no SCM and writes nothing unless ``--report DIR`` is given.

Exit codes: 0 linearizable, 3 not linearizable, 4 undecided within the budget (the reason is
printed), 1 a file or option that cannot be used (one line on stderr), 2 click usage errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from scm_server.verify import Verdict, check_operations, render_text, write_report
from scm_server.verify.formats import FORMATS, MODELS, HistoryFormatError, load_operations, make_model
from scm_server.verify.linearizability import DEFAULT_MAX_MEMO_BYTES

EXIT_CODES = {Verdict.OK: 0, Verdict.ILLEGAL: 3, Verdict.UNKNOWN: 4}


@click.command("verify")
@click.option("--model", "model_name", required=True, type=click.Choice(MODELS),
              help="register: one read/write/cas register (Jepsen etcd); kv: get/put/append/cas per key.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="History format (default: detected from the first line).")
@click.option("--timeout", type=click.FloatRange(min=0.001), default=60.0, show_default=True,
              help="Seconds the search may take in all; undecided partitions then give 'unknown'.")
@click.option("--max-memory", "max_memory_mib", type=click.IntRange(min=1),
              default=DEFAULT_MAX_MEMO_BYTES >> 20, show_default=True,
              help="MiB the search's memo cache may use; beyond it the verdict is 'unknown' with the reason.")
@click.option("--kv-initial", type=click.Choice(["absent", "empty"]), default="absent", show_default=True,
              help="kv model: a key never written reads as absent (nil/None) or as the empty string.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write <name>.txt and <name>.html (timeline) into this directory.")
@click.option("--max-lines", type=click.IntRange(min=1), default=60, show_default=True,
              help="Operations listed around the violation on stdout (the --report files list all).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict and per-partition results as JSON.")
@click.argument("history", type=click.Path(path_type=Path))
def verify(
    model_name: str, fmt: str | None, timeout: float, max_memory_mib: int, kv_initial: str,
    report_dir: Path | None, max_lines: int, as_json: bool, history: Path,
) -> None:
    """Check the recorded HISTORY (JSON lines from HistoryRecorder, Jepsen log lines or Jepsen EDN
    maps) against a sequential model and print the verdict.

    \b
    ozone-scm debug verify --model register tests/verify/data/jepsen-etcd/etcd_000.log
    ozone-scm debug verify --model kv /tmp/chaos-x/history.jsonl --report /tmp/chaos-x
    """
    try:
        ops, read_fmt = load_operations(history, model_name, fmt)
        model = make_model(model_name, kv_initial="" if kv_initial == "empty" else None)
        result = check_operations(model, ops, timeout=timeout, max_memo_bytes=max_memory_mib << 20)
    except HistoryFormatError as exc:
        raise click.ClickException(str(exc)) from exc
    except ValueError as exc:  # a model refusing an operation (e.g. append to a number)
        raise click.ClickException(f"{history}: {exc}") from exc
    written: list[Path] = []
    if report_dir is not None:
        written = write_report(result, model, report_dir, history.stem)
    if as_json:
        click.echo(json.dumps({
            "file": str(history), "format": read_fmt, "model": model_name,
            "verdict": result.verdict.value, "reason": result.reason, "ops": result.ops_checked,
            "elapsedSeconds": round(result.elapsed, 6),
            "partitions": [
                {"key": p.key, "verdict": p.verdict.value, "ops": len(p.ops), "modelSteps": p.explored,
                 "memoEntries": p.memo_entries, "elapsedSeconds": round(p.elapsed, 6), "reason": p.reason}
                for p in result.partitions
            ],
            "reportFiles": [str(p) for p in written],
        }, indent=2))
    else:
        click.echo(f"{history} ({read_fmt}, model {model_name})")
        click.echo(render_text(result, model, history.name, max_ops=max_lines), nl=False)
        for p in written:
            click.echo(f"report: {p}")
    raise click.exceptions.Exit(EXIT_CODES[result.verdict])
