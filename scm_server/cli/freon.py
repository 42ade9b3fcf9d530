"""``ozone-scm freon stb``: Ozone's scm-throughput-benchmark against a running SCM."""

from __future__ import annotations

import asyncio
import json

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from scm_server.cli import params
from scm_server.cli.context import CliContext, pass_ctx
from scm_server.cli.output import console, print_table
from scm_server.client.scm_client import SCMClient, parse_addresses
from scm_server.local import throughput
from scm_server.server import endpoints


@click.group()
def freon() -> None:
    """Load generators and benchmarks."""


def results_table(results: list[throughput.BenchResult]) -> Table:
    table = Table(title="SCM throughput")
    for col in ("benchmark", "ops", "seconds", "ops/s", "p50 ms", "p90 ms", "p99 ms"):
        table.add_column(col, justify="right" if col != "benchmark" else "left")
    for r in results:
        table.add_row(
            r.mode, str(r.operations), f"{r.seconds:.2f}", f"{r.ops_per_second:,.0f}",
            f"{r.percentile(50):.2f}", f"{r.percentile(90):.2f}", f"{r.percentile(99):.2f}",
        )
    return table


@freon.command("stb")
@click.option("--benchmark", "mode", type=click.Choice(throughput.MODES), required=True)
@click.option("--scm", "scm", default=None, metavar="HOST:PORT", help="SCM client address (default from config).")
@click.option("--scm-datanode", "scm_dn", default=None, metavar="HOST:PORT",
              help="SCM datanode-protocol address (default from config).")
@click.option("--scm-http", default=None, help="SCM http address for /prom (ProcessReports).")
@click.option("--num-blocks", default=1000, show_default=True, type=params.POSITIVE)
@click.option("--num-threads", default=4, show_default=True, type=params.POSITIVE)
@click.option("--num-containers", default=100, show_default=True, type=params.POSITIVE)
@click.option("--num-datanodes", default=10, show_default=True, type=params.POSITIVE)
@click.option("--num-heartbeats", default=4, show_default=True, type=params.POSITIVE)
@click.option("--block-size", default=4096, show_default=True, type=params.POSITIVE)
@click.option("--batch", default=1, show_default=True, type=params.COUNT, help="Blocks per AllocateBlocks call (numBlocks).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def stb(
    ctx: CliContext, mode: str, scm: str | None, scm_dn: str | None, scm_http: str | None, num_blocks: int,
    num_threads: int, num_containers: int, num_datanodes: int, num_heartbeats: int, block_size: int,
    batch: int, as_json: bool,
) -> None:
    """SCM throughput benchmark (Ozone's `freon stb`)."""
    get = ctx.conf.get_str
    admin_addrs = parse_addresses(scm) if scm else endpoints.protocol_addresses(get, endpoints.Protocol.CLIENT)
    dn_addrs = parse_addresses(scm_dn) if scm_dn else endpoints.protocol_addresses(get, endpoints.Protocol.DATANODE)
    http_url = f"http://{scm_http}" if scm_http and not scm_http.startswith("http") else scm_http
    results = asyncio.run(_run(
        mode, admin_addrs, dn_addrs, http_url, num_blocks, num_threads, num_containers, num_datanodes,
        num_heartbeats, block_size, batch, ctx,
    ))
    if as_json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print_table(results_table(results))


async def _run(
    mode: str, admin_addrs: list[str], dn_addrs: list[str], http_url: str | None, num_blocks: int,
    num_threads: int, num_containers: int, num_datanodes: int, num_heartbeats: int, block_size: int,
    batch: int, ctx: CliContext,
) -> list[throughput.BenchResult]:
    async with SCMClient(admin_addrs, ctx.client_config()) as admin:
        with console.status("registering datanodes, waiting for pipelines, leaving safemode"):
            sim = await throughput.prepare_cluster(admin, dn_addrs, num_datanodes)
        try:
            results = [await throughput.bench_ping(admin, 500, num_threads)]
            total = {"AllocateBlocks": num_blocks, "AllocateContainers": num_containers,
                     "ProcessReports": len(sim.datanodes) * num_heartbeats}[mode]
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console, transient=True) as progress:
                task = progress.add_task(mode, total=total)

                def advance(n: int) -> None:
                    progress.advance(task, n)

                if mode == "AllocateBlocks":
                    res, _ = await throughput.bench_allocate_blocks(
                        admin, num_blocks, num_threads, block_size, batch, advance
                    )
                elif mode == "AllocateContainers":
                    res = await throughput.bench_allocate_containers(admin, num_containers, num_threads, advance)
                else:
                    res = await throughput.bench_process_reports(
                        admin, sim, num_containers, num_heartbeats, num_threads, http_url, advance
                    )
            results.append(res)
            return results
        finally:
            await sim.stop()
