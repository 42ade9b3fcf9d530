"""What ``ozone-scm local run`` prints about an HA quorum once its workload ran (``make run``): the ring, each
SCM's addresses, which datanodes speak which transport, the workload's figures and commands to try next."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scm_server.cli.output import console
from scm_server.client.ha_admin import Roles
from scm_server.local.quorum import HALocalCluster, describe_transports


def print_summary(cluster: HALocalCluster, summary: Mapping[str, Any]) -> None:
    roles: Roles = summary["roles"]
    views = {v["node"]: v for v in summary["views"]}
    cluster_ids = sorted({v.get("clusterId", "?") for v in views.values()})
    by_node = {p.node_id: p for p in roles.peers}
    out = console.print
    out(f"[bold]SCM HA quorum[/]: term {roles.term}, commit index {roles.commit_index}, "
        f"cluster id{'s' if len(cluster_ids) > 1 else ''} {', '.join(cluster_ids)}", soft_wrap=True)
    for s in cluster.scms:
        p = by_node.get(s.node_id or "")
        v = views.get(s.node_id, {})
        out(f"  [bold]{s.node_id}[/] {p.line if p else '(not a member)'}  applied={v.get('applied', '-')}  "
            f"clusterID={v.get('clusterId', '?')}", soft_wrap=True)
        out(f"      gRPC: admin/client {s.client_address}  block {s.block_address}  datanode {s.datanode_address}  "
            f"ratis 127.0.0.1:{s.ratis_port}  inter-SCM 127.0.0.1:{s.grpc_port}", soft_wrap=True)
        served = ["security"] if cluster.secure is not None else list(cluster.HADOOP_RPC_KEYS)
        out("      Hadoop RPC on Ozone's port keys (Ozone's protocols, SIMPLE auth): "
            + "  ".join(f"{p} 127.0.0.1:{s.hadoop_ports[p]}" for p in served), soft_wrap=True)
        out(f"      web {s.http_url}/  metrics {s.http_url}/prom  log {s.log_path}", soft_wrap=True)
    transports = summary.get("transports") or {}
    if transports:
        out("[bold]datanode transports[/]:", soft_wrap=True)
        for line in describe_transports(cluster, transports):
            out(f"  {line}", soft_wrap=True, highlight=False)
    open_pipelines = summary["open_pipelines"]
    out(
        f"[bold]datanodes[/]: {summary['healthy_datanodes']}/{summary['datanodes']} HEALTHY; "
        f"[bold]pipelines[/]: {len(open_pipelines)} OPEN (RATIS/THREE: {open_pipelines.count('THREE')}, "
        f"RATIS/ONE: {open_pipelines.count('ONE')}); [bold]safemode[/]: "
        f"{'OFF on every SCM' if not any(summary['in_safe_mode']) else summary['in_safe_mode']}",
        soft_wrap=True,
    )
    out(
        f"[bold]workload[/]: {summary['blocks']} blocks in {summary['seconds']:.2f}s = "
        f"{summary['ops_per_second']:,.0f} blocks/s (p50 {summary['p50_ms']:.2f} ms, p99 {summary['p99_ms']:.2f} ms) "
        f"into {summary['containers']} containers; duplicate block ids: {summary['duplicates']}",
        soft_wrap=True,
    )
    security = summary.get("security")
    if security:
        out(f"[bold]security[/]: mutual TLS on every port; root CA serial {security['root_serial']} "
            f"(sha256 {security['root_sha256'][:16]}...); admin client config {security['admin_conf']}", soft_wrap=True)
        for line in security["scms"]:
            out(f"  {line}", soft_wrap=True)
    conf = cluster.secure.admin_conf_dir if cluster.secure is not None else cluster.scms[0].conf_dir
    out(
        f"Try: ozone-scm --conf {conf} admin scm roles\n"
        f"     ozone-scm --conf {conf} admin scm transfer -r\n"
        f"     ozone-scm --conf {conf} admin safemode status\n"
        f"     ozone-scm --conf {conf} admin container list"
        + (f"\n     ozone-scm --conf {conf} admin cert list" if security else ""),
        soft_wrap=True,
    )
