"""Parse every configuration key the SCM daemon reads, before it opens or binds anything.

Called by ``scm_server/server/daemon.py`` at the start of ``serve`` (and by the tests that feed
garbage to every key): a malformed value then stops the daemon with one line naming the key, its
value and an example, instead of failing half-started or deep inside a manager. It reads the
configuration only; no storage, no sockets (resolving which configured SCM is this host may look
names up, as the daemon itself does).
"""

from __future__ import annotations

from scm_server.conf import OzoneConfiguration, SCMConfig, SCMConfigurations
from scm_server.conf.addresses import check_endpoint_keys
from scm_server.server import endpoints


def check_daemon_config(conf: OzoneConfiguration) -> None:
    """Raise :class:`~scm_server.exceptions.ConfigError` for the first malformed key the daemon reads."""
    from scm_server.conf.security import SecurityConfig
    from scm_server.ha.bootstrap import resolve_local_scm
    from scm_server.ha.scm_ha_manager import GRPC_BIND_HOST_KEY, bind_address, raft_config_from_conf

    check_endpoint_keys(conf)  # every port and address key set, the peers' and the unused transports' too
    from scm_server.server.event_loop import event_loop_factory

    event_loop_factory(conf)  # ozone.scm.event.loop names a loop this SCM runs on
    scm = SCMConfig.from_conf(conf)
    SecurityConfig.from_conf(conf)
    configs = SCMConfigurations.from_conf(conf)
    from scm_server.node.topology_mapping import load_schema

    load_schema(configs.topology.schema_file)  # readable, well-formed, the 3-level schema
    local = resolve_local_scm(conf)
    node = endpoints.find_node(conf.get_str, local.node_id)
    get = conf.get_str
    for protocol in endpoints.Protocol:
        endpoints.bind_host(get, protocol, node)
        endpoints.port_of(get, protocol, node)
    from scm_server.server.hadoop_rpc.settings import HadoopRpcSettings

    HadoopRpcSettings.from_conf(conf)  # ipc.maximum.data.length, ipc.client.connection.maxidletime
    from scm_server.server.hadoop_rpc.kerberos import KerberosSettings

    KerberosSettings.from_conf(conf, node.host)  # hadoop.security.authentication, the principal, QOP, ACLs, rules
    from scm_server.conf.reconfiguration import AdministratorsConfig

    AdministratorsConfig.from_conf(conf)  # ozone.administrators, ozone.readonly.administrators (also when insecure)
    endpoints.http_address(get, node)
    endpoints.https_address(get, node)
    # every peer's addresses too: servicers name the leader's address in NOT_LEADER answers
    for peer in endpoints.scm_nodes(get):
        for protocol in endpoints.Protocol:
            endpoints.address_of(get, protocol, peer)
    raft_config_from_conf(conf, local, "config-check", scm.scm_db_dir)  # reads ozone.scm.ratis.bind.host
    bind_address(conf, local, GRPC_BIND_HOST_KEY, local.grpc_address)
