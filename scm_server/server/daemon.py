"""The SCM daemon: ``ozone-scm scm`` (foreground) wires configuration, storage, HA and servers.

Start-up order, each step failing with a message that says what to do:

1. load ``OzoneConfiguration`` (``--conf`` dir / ``OZONE_CONF_DIR`` / ``OZONE-SITE.XML_*`` env);
2. check the storage is initialised *without touching it*: the metadata dir must exist and hold a
   valid ``scm/current/VERSION`` ("SCM not initialized: run `ozone-scm scm --init` first");
3. build the SCM facade (``StorageContainerManager.create``) with the HA manager from
   ``scm_server.ha.factory.build_ha_manager`` (Raft) and start it;
4. start the gRPC servers: datanode protocol on ``ozone.scm.datanode.grpc.port`` (19861), block protocol on
   ``ozone.scm.block.client.grpc.port`` (19863), admin (location + block) protocol on
   ``ozone.scm.client.grpc.port`` (19860); Ozone's protocols over Hadoop RPC on Ozone's own keys and ports
   (``ozone.scm.datanode.port`` 9861, ``ozone.scm.block.client.port`` 9863, ``ozone.scm.client.port`` 9860,
   ``ozone.scm.security.service.port`` 9961; :mod:`scm_server.conf.ports`); per-node
   ``<key>.<serviceId>.<nodeId>`` overrides; and the aiohttp server on ``ozone.scm.http-address``; log where
   each endpoint listens;

   with ``ozone.security.enabled`` (:mod:`scm_server.ca.scm_security`): the CA material is
   loaded first (a clear error if it is missing or broken), the security protocol is served on
   ``ozone.scm.security.service.grpc.port`` (TLS, no client certificate), the certificate admin service
   joins the client port, and with ``hdds.grpc.tls.enabled`` every other port demands a client
   certificate chaining to the cluster's root CA at the handshake and runs the per-call
   authentication/authorization interceptor; Hadoop RPC with SIMPLE authentication then serves the
   security protocol's certificate reads alone, and with ``hadoop.security.authentication=kerberos``
   (:mod:`scm_server.server.hadoop_rpc.kerberos`: the keytab is loaded first, a wrong one stops the
   start with one line) serves all four listeners to Kerberos-authenticated callers; ``ozone.http.policy`` adds HTTPS
   (``ozone.scm.https-address``, default 0.0.0.0:9877);
5. run until SIGTERM/SIGINT, then stop servers (with a short grace period) and the SCM.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import ssl
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from aiohttp import web
from google.protobuf.descriptor import EnumDescriptor

from scm_server.ca import secret_key_manager
from scm_server.ca.secret_key_manager import SecretKeyManager
from scm_server.conf import OzoneConfiguration, SCMConfig
from scm_server.conf.reconfiguration import AdministratorsConfig
from scm_server.exceptions import ConfigError, ResultCodes, SCMError, SCMException, StorageError, one_line
from scm_server.grpc_options import server_options
from scm_server.ha import heap
from scm_server.metadata.storage_config import SCMStorageConfig
from scm_server.ozone_metrics import Bean, rpc_activity_bean
from scm_server.proto.ozone import (
    ScmAdminProtocol_pb2,
    ScmServerDatanodeHeartbeatProtocol_pb2,
    ScmServerProtocol_pb2,
)
from scm_server.security.core import principals
from scm_server.security.core.identity import Role
from scm_server.server import endpoints
from scm_server.server.administrators import LiveAdministrators
from scm_server.server.audit_export_service import AuditExportService
from scm_server.server.config_check import check_daemon_config
from scm_server.server.event_loop import event_loop_factory
from scm_server.server.grpc_services import (
    BlockProtocolService,
    DatanodeProtocolService,
    LocationProtocolService,
    RpcMetrics,
    _ServiceBase,
)
from scm_server.server.hadoop_rpc.container_token import ContainerTokens
from scm_server.server.web import INFO_KEY, make_app

if TYPE_CHECKING:
    from scm_server.ca.scm_security import SCMSecurity
    from scm_server.scm import StorageContainerManager
    from scm_server.server.hadoop_rpc.server import HadoopRpcServer

LOG = logging.getLogger("scm_server.daemon")
# Ozone's metrics record of each protocol's per-cmdType counters (Ozone's ProtocolMessageMetrics) and its Type enum
MESSAGE_METRICS_RECORDS: dict[endpoints.Protocol, tuple[str, EnumDescriptor]] = {
    endpoints.Protocol.BLOCK_HADOOP: ("ScmBlockLocationProtocol", ScmServerProtocol_pb2.DESCRIPTOR.enum_types_by_name["Type"]),
    endpoints.Protocol.CLIENT_HADOOP: ("ScmContainerLocationProtocol", ScmAdminProtocol_pb2.DESCRIPTOR.enum_types_by_name["Type"]),
    endpoints.Protocol.DATANODE_HADOOP: ("SCMDatanodeProtocol", ScmServerDatanodeHeartbeatProtocol_pb2.DESCRIPTOR.enum_types_by_name["Type"]),
}
# Hadoop's serverName of each listener (the tag of its RpcActivityForPort<port> bean): the protobuf service of the
# protocol the listener serves first, as Ozone's SCM names them
RPC_SERVER_NAMES: dict[endpoints.Protocol, str] = {
    endpoints.Protocol.CLIENT_HADOOP: "StorageContainerLocationProtocolService",
    endpoints.Protocol.BLOCK_HADOOP: "ScmBlockLocationProtocolService",
    endpoints.Protocol.DATANODE_HADOOP: "StorageContainerDatanodeProtocolService",
    endpoints.Protocol.SECURITY_HADOOP: "SCMSecurityProtocolService",
}
NOT_INITIALIZED = "SCM not initialized: run `ozone-scm scm --init` first"


class DaemonStartupError(SCMError):
    """The daemon cannot start; the message says why and how to fix it."""


def check_storage(conf: OzoneConfiguration) -> SCMStorageConfig:
    """Validate (read-only) that this SCM's storage was initialised; return its VERSION."""
    scm_conf = SCMConfig.from_conf(conf)
    storage_dir = scm_conf.scm_db_dir
    if not storage_dir.is_dir():
        raise DaemonStartupError(
            f"{NOT_INITIALIZED} (metadata directory {storage_dir} does not exist; "
            "check ozone.metadata.dirs / ozone.scm.db.dirs)"
        )
    try:
        storage = SCMStorageConfig(storage_dir)
    except StorageError as exc:
        raise DaemonStartupError(f"cannot start SCM: {exc}") from exc
    if not storage.is_initialized:
        raise DaemonStartupError(f"{NOT_INITIALIZED} (no VERSION file at {storage.version_file})")
    return storage


@dataclasses.dataclass
class Listening:
    datanode: str = ""
    block: str = ""
    block_hadoop: str = ""  # ScmBlockLocationProtocol over Hadoop RPC, when its port key is set
    datanode_hadoop: str = ""  # StorageContainerDatanodeProtocol over Hadoop RPC, likewise
    client_hadoop: str = ""  # StorageContainerLocationProtocol over Hadoop RPC, likewise
    security_hadoop: str = ""  # SCMSecurityProtocol (read calls) over Hadoop RPC, likewise
    client: str = ""
    http: str = ""
    security: str = ""
    https: str = ""

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def local_node(conf: OzoneConfiguration) -> endpoints.ScmNode:
    """This SCM's entry in the configuration (HA: resolved like ``scm --init`` does)."""
    node_id: str | None = None
    try:
        from scm_server.ha.bootstrap import resolve_local_scm

        node_id = resolve_local_scm(conf).node_id
    except ImportError:
        node_id = conf.get_str("ozone.scm.node.id")
    return endpoints.find_node(conf.get_str, node_id)


async def create_scm(
    conf: OzoneConfiguration, storage: SCMStorageConfig, node: endpoints.ScmNode, security: SCMSecurity | None = None
) -> StorageContainerManager:
    """Open scm.db, build the HA manager (``build_ha_manager``: Raft or stub) and the facade."""
    from scm_server.ha.factory import build_ha_manager
    from scm_server.metadata import SCMMetadataStore
    from scm_server.scm import StorageContainerManager

    store = SCMMetadataStore(SCMConfig.from_conf(conf).scm_db_dir)
    store.start()
    try:
        ha_manager = build_ha_manager(conf, storage, store, security=security)
        return await StorageContainerManager.create(
            conf,
            ha_manager=ha_manager,
            node_id=node.node_id,
            metadata_store=store,
            storage_config=storage,
        )
    except BaseException:
        store.stop()
        raise


class SCMDaemon:
    """Owns the facade and its network servers for one SCM process."""

    def __init__(self, conf: OzoneConfiguration) -> None:
        self.conf = conf
        self.scm: StorageContainerManager | None = None
        self.node = local_node(conf)
        self.grpc_servers: list[grpc.aio.Server] = []
        self.hadoop_servers: list[HadoopRpcServer] = []
        self.web_runner: web.AppRunner | None = None
        self.listening = Listening()
        self.security: SCMSecurity | None = None
        self.secret_keys: SecretKeyManager | None = None

    async def start(self) -> None:
        storage = check_storage(self.conf)
        self.security = load_security(self.conf, storage)
        self.scm = scm = await create_scm(self.conf, storage, self.node, security=self.security)
        if self.security is not None:
            self.security.attach(scm)
            self.secret_keys = secret_key_manager.from_config(
                scm.secret_key_state, self.security.config, context=scm.scm_context, clock=scm.clock,
                entropy=os.urandom,
            )
            if self.secret_keys is not None:
                scm.service_manager.register(self.secret_keys.service)
        await scm.start()
        if self.security is not None:
            await self.security.start()
        get = self.conf.get_str
        metrics = RpcMetrics(scm.metrics_registry)
        P = endpoints.Protocol
        layout: list[tuple[endpoints.Protocol, list[_ServiceBase[Any]]]] = [
            (P.DATANODE, [DatanodeProtocolService(scm, P.DATANODE, get, metrics)]),
            (P.BLOCK, [BlockProtocolService(scm, P.BLOCK, get, metrics)]),
            (P.CLIENT, [
                LocationProtocolService(scm, P.CLIENT, get, metrics),
                BlockProtocolService(scm, P.CLIENT, get, metrics),
                AuditExportService(scm, P.CLIENT, get, metrics),
            ]),
        ]
        if self.security is not None:
            from scm_server.server.security_services import SecurityAdminService, SecurityProtocolService

            layout[2][1].append(SecurityAdminService(scm, P.CLIENT, get, metrics, self.security))
            layout.append((P.SECURITY, [SecurityProtocolService(scm, P.SECURITY, get, metrics, self.security)]))
        security = self.security
        for protocol, services in layout:
            transport = security.transport if security is not None else None
            mtls = transport is not None and protocol is not P.SECURITY
            options = server_options()
            if protocol is P.SECURITY and security is not None:  # served only with security on
                # anonymous callers: cap what one can make this SCM buffer (requests are a few KB; answers,
                # such as the CA certificate list, keep the common limit)
                cap = security.config.security_max_message_size
                options = [(k, cap if k == "grpc.max_receive_message_length" else v) for k, v in options]
            server = grpc.aio.server(
                options=options,
                interceptors=list(transport.server_interceptors()) if transport is not None and mtls else None,
            )
            server.add_generic_rpc_handlers(tuple(service.generic_handler() for service in services))
            host = endpoints.bind_host(get, protocol, self.node)
            port = endpoints.port_of(get, protocol, self.node)
            try:
                if protocol is P.SECURITY and security is not None:
                    creds = security.material.server_credentials(require_client_auth=False)
                    bound = server.add_secure_port(f"{host}:{port}", creds)
                elif transport is not None and mtls:
                    bound = server.add_secure_port(f"{host}:{port}", transport.server_credentials())
                else:
                    bound = server.add_insecure_port(f"{host}:{port}")
            except RuntimeError as exc:
                raise DaemonStartupError(
                    f"cannot listen on {host}:{port} for {protocol.name.lower()} protocol ({protocol.port_key}): {exc}"
                ) from exc
            if not bound:
                raise DaemonStartupError(f"cannot listen on {host}:{port} ({protocol.port_key}): port in use?")
            await server.start()
            self.grpc_servers.append(server)
            address = f"{host}:{bound}"
            setattr(self.listening, protocol.name.lower(), address)
            LOG.info(
                "SCM %s protocol (%s) listening on %s%s, gRPC (%s)",
                protocol.name.lower(),
                ", ".join(s.SERVICE for s in services),
                address,
                " (TLS)" if protocol is P.SECURITY else " (mutual TLS)" if mtls else "",
                protocol.port_key,
            )
        await self._start_hadoop_rpc(scm, get)
        await self._start_web(scm, get)
        LOG.info("SCM started: cluster %s, scm id %s", storage.cluster_id, storage.scm_id)

    async def _start_hadoop_rpc(self, scm: StorageContainerManager, get: endpoints.Getter) -> None:
        """Ozone's protocols over Hadoop RPC (SIMPLE authentication) on Ozone's own port keys: the block
        protocol (``ozone.scm.block.client.port``, 9863), the datanode protocol (``ozone.scm.datanode.port``,
        9861), the location (admin) protocol (``ozone.scm.client.port``, 9860) and the security protocol's read
        calls (``ozone.scm.security.service.port``, 9961). With ``ozone.security.enabled`` only the last one."""
        from scm_server.server.hadoop_rpc import secret_key_translator
        from scm_server.server.hadoop_rpc.block_translator import BlockLocationTranslator
        from scm_server.server.hadoop_rpc.datanode_translator import DatanodeTranslator
        from scm_server.server.hadoop_rpc.kerberos import KerberosSettings, RpcSecurity
        from scm_server.server.hadoop_rpc.leadership import Leadership
        from scm_server.server.hadoop_rpc.location_translator import LocationTranslator
        from scm_server.server.hadoop_rpc.message_metrics import MeasuredHandler, ProtocolMessageMetrics
        from scm_server.server.hadoop_rpc.reconfigure_translator import ReconfigureTranslator
        from scm_server.server.hadoop_rpc.secret_key_translator import SecretKeyService
        from scm_server.server.hadoop_rpc.security_translator import (
            SecurityIssuer,
            SecurityReader,
            SecurityTranslator,
        )
        from scm_server.server.hadoop_rpc.server import HadoopRpcMetrics, HadoopRpcServer
        from scm_server.server.hadoop_rpc.settings import HadoopRpcSettings, hadoop_rpc_listeners

        P = endpoints.Protocol
        kerberos = KerberosSettings.from_conf(self.conf, self.node.host)
        rpc_security: RpcSecurity | None = None
        if kerberos is not None:
            try:
                rpc_security = RpcSecurity.load(kerberos)
            except ConfigError as exc:
                raise DaemonStartupError(str(exc)) from exc
        # with Kerberos every caller is authenticated, and calls that bind an identity (secret keys, container
        # tokens) believe nothing else; without it they believe the connection's stated user, as SIMPLE auth does
        require_authentication = kerberos is not None
        # Ozone's administrators always include the user the SCM runs as: under Kerberos, its own principal's short
        # name (the authorizer's starter user), so the SCMs of a ring are administrators of each other's calls
        administrators = LiveAdministrators(
            self._administrators(), always=(rpc_security.authorizer.settings.starter_user,) if rpc_security else ())

        def follow(group: AdministratorsConfig) -> None:  # ozone admin reconfig: from the next call on
            administrators.replace(group.administrators)
            if rpc_security is not None:
                rpc_security.authorizer.set_administrators(group.administrators, group.readonly_administrators)

        scm.administrator_listeners.append(follow)
        wanted, left_out = hadoop_rpc_listeners(secure=self.security is not None, kerberos=kerberos is not None)
        if left_out is not None:
            LOG.info("%s", left_out)
        settings = HadoopRpcSettings.from_conf(self.conf)
        metrics = HadoopRpcMetrics(scm.metrics_registry)
        storage_id = scm.storage_config.scm_id or self.node.node_id or ""
        for protocol in wanted:
            translator: Any
            extra: list[Any] = []
            if protocol is P.BLOCK_HADOOP:
                translator = BlockLocationTranslator(scm, get, storage_id, self.node.host)
            elif protocol is P.CLIENT_HADOOP:
                translator = LocationTranslator(
                    scm, get, storage_id, self.node.host,
                    authorizer=rpc_security.authorizer if rpc_security is not None else None,
                    container_tokens=self._container_tokens(scm, administrators, require_authentication),
                )
                # Ozone serves `ozone admin reconfig` on the client port
                extra = [ReconfigureTranslator(
                    scm, authorizer=rpc_security.authorizer if rpc_security is not None else None)]
            elif protocol is P.SECURITY_HADOOP:
                translator = SecurityTranslator(
                    SecurityReader(self.security) if self.security is not None else None,
                    SecurityIssuer(self.security) if self.security is not None else None,
                    primaries=self._service_primaries(kerberos.principal if kerberos is not None else None),
                    leadership=Leadership(scm, get, P.SECURITY_HADOOP, storage_id, self.node.host),
                    administrators=administrators,
                )
                extra = secret_key_translator.translators(SecretKeyService(
                    self.secret_keys, Leadership(scm, get, P.SECURITY_HADOOP, storage_id, self.node.host),
                    administrators=administrators, require_authentication=require_authentication,
                ))
            else:
                translator = DatanodeTranslator(scm)
            record = MESSAGE_METRICS_RECORDS.get(protocol)
            if record is not None:  # Ozone's per-cmdType counters of the protocol, under Ozone's names on /prom
                name, enum = record
                translator = MeasuredHandler(translator, ProtocolMessageMetrics.of_enum(
                    name, enum, self.node.host).register(scm.metrics_registry))
            server = HadoopRpcServer(
                [translator, *extra], max_frame=settings.max_frame, idle_timeout=settings.idle_timeout,
                name=f"hadoop-rpc {protocol.name.lower()}", metrics=metrics, security=rpc_security,
                server_name=RPC_SERVER_NAMES[protocol],
            )
            host = endpoints.bind_host(get, protocol, self.node)
            port = endpoints.port_of(get, protocol, self.node)
            try:
                bound = await server.start(host, port)
            except OSError as exc:
                raise DaemonStartupError(f"cannot listen on {host}:{port} ({protocol.port_key}): {exc}") from exc
            self.hadoop_servers.append(server)
            setattr(self.listening, protocol.name.lower(), f"{host}:{bound}")
            auth = (
                f"Kerberos as {kerberos.principal}, {'/'.join(q.hadoop_name for q in kerberos.qops)}"
                if kerberos is not None else "SIMPLE auth"
            )
            LOG.info("SCM %s over Hadoop RPC (%s) listening on %s:%s (%s)", translator.protocol, auth, host, bound,
                     protocol.port_key)

    def _rpc_activity_beans(self, hostname: str) -> list[Bean]:
        """Hadoop's RpcActivityForPort<port> bean of every Hadoop RPC listener (Ozone's dashboards read
        rpc_num_open_connections)."""
        return [rpc_activity_bean(s.port, s.server_name, hostname, s.activity()) for s in self.hadoop_servers]

    def _service_primaries(self, scm_principal: str | None) -> dict[Role, str]:
        """Which principals get datanode, OM and SCM certificates (hdds.datanode.kerberos.principal,
        ozone.om.kerberos.principal, hdds.scm.kerberos.principal: the SCMs of a ring share its primary)."""
        if self.security is None:
            return {}
        config = self.security.config
        primaries = {Role.DATANODE: principals.service_primary(config.datanode_kerberos_principal),
                     Role.OM: principals.service_primary(config.om_kerberos_principal)}
        if scm_principal is not None:
            primaries[Role.SCM] = principals.service_primary(scm_principal)
        return primaries

    def _administrators(self) -> tuple[str, ...]:
        return tuple(self.security.config.administrators) if self.security is not None else ()

    def _container_tokens(
        self, scm: StorageContainerManager, administrators: Collection[str], require_authentication: bool
    ) -> ContainerTokens | None:
        """Container tokens are signed when hdds.container.token.enabled and secret keys are on."""
        if self.secret_keys is None or self.security is None or not self.security.config.container_token_enabled:
            return None
        return ContainerTokens(self.secret_keys, scm.clock, administrators, require_authentication)

    async def _start_web(self, scm: StorageContainerManager, get: endpoints.Getter) -> None:
        """HTTP and/or HTTPS (``ozone.http.policy``) serving the same app."""
        policy = self.security.config.https.value if self.security is not None else "HTTP_ONLY"
        http_host, http_port = endpoints.http_address(get, self.node)
        administrators = LiveAdministrators(self._administrators())
        scm.administrator_listeners.append(lambda group: administrators.replace(group.administrators))
        app = make_app(scm, self.listening.as_dict(), self.conf, secure=self.security is not None,
                       administrators=administrators, extra_beans=self._rpc_activity_beans)
        self.web_runner = web.AppRunner(app, access_log=None)
        await self.web_runner.setup()
        sites: list[tuple[str, str, int, Any]] = []
        if policy in ("HTTP_ONLY", "HTTP_AND_HTTPS"):
            self.listening.http = f"{http_host}:{http_port}"
            sites.append(("ozone.scm.http-address", http_host, http_port, None))
        if policy in ("HTTPS_ONLY", "HTTP_AND_HTTPS"):
            https_host, https_port = endpoints.https_address(get, self.node)
            self.listening.https = f"{https_host}:{https_port}"
            sites.append(("ozone.scm.https-address", https_host, https_port, https_context(self.security)))
        for key, host, port, ssl_context in sites:
            site = web.TCPSite(self.web_runner, host, port, ssl_context=ssl_context)
            try:
                await site.start()
            except OSError as exc:
                raise DaemonStartupError(f"cannot listen on {host}:{port} ({key}): {exc}") from exc
        app[INFO_KEY].update(self.listening.as_dict())
        for scheme, address in (("http", self.listening.http), ("https", self.listening.https)):
            if address:
                LOG.info("SCM web UI on %s://%s/ (metrics /prom, /health, /ready, /api/status)", scheme, address)

    async def stop(self) -> None:
        if self.security is not None:
            try:
                await self.security.stop()
            except Exception:
                LOG.exception("stopping the security services failed (continuing the shutdown)")
        hadoop, self.hadoop_servers = self.hadoop_servers, []
        for hserver in hadoop:
            try:
                await hserver.stop()
            except Exception:
                LOG.exception("stopping a Hadoop RPC server failed (continuing the shutdown)")
        servers, self.grpc_servers = self.grpc_servers, []
        for server in servers:
            try:
                await server.stop(grace=1.0)
            except Exception:
                LOG.exception("stopping a gRPC server failed (continuing the shutdown)")
        if self.web_runner is not None:
            try:
                await self.web_runner.cleanup()
            except Exception:
                LOG.exception("stopping the web server failed (continuing the shutdown)")
            self.web_runner = None
        if self.scm is not None:
            scm, self.scm = self.scm, None
            await scm.stop()
            LOG.info("SCM stopped")


def load_security(conf: OzoneConfiguration, storage: SCMStorageConfig) -> SCMSecurity | None:
    """This SCM's security (None when ``ozone.security.enabled`` is false); a clear startup error."""
    from scm_server.ca.scm_security import SCMSecurity

    try:
        return SCMSecurity.load(conf, storage)
    except (ConfigError, ValueError) as exc:
        raise DaemonStartupError(f"cannot start SCM: security: {exc}") from exc


def _pem_text(pem: str | bytes) -> str:
    """PEM as text: ``cadata`` reads bytes as DER."""
    return pem.decode("ascii") if isinstance(pem, bytes) else pem


def https_context(security: Any) -> ssl.SSLContext:
    """Server TLS for the web UI with this SCM's certificate, loaded from the files it already has
    (the keystore, or the mounted sub-CA files in CA mode operator: no key is copied); reloaded when
    the certificate is renewed or swapped."""
    cert_file, key_file = security.certificate_files()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    # a client certificate is asked for, not required (browsers and probes send none): /logLevel serves only a
    # caller whose certificate, issued under this ring's roots, names an administrator
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cadata=_pem_text(security.material.current.roots_pem()))

    def reload(material: Any) -> None:
        ctx.load_cert_chain(str(cert_file), str(key_file))
        ctx.load_verify_locations(cadata=_pem_text(material.roots_pem()))

    security.material.add_listener(reload)
    return ctx


async def serve(conf: OzoneConfiguration, stop_event: asyncio.Event | None = None) -> None:
    """Run the daemon until SIGTERM/SIGINT (or ``stop_event``)."""
    stop_event = stop_event or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop_event.set)
    check_daemon_config(conf)  # every key it reads, before anything is opened: one line naming a bad one
    daemon = SCMDaemon(conf)
    try:
        await daemon.start()
        heap.enable()  # scm.db is loaded: keep it out of full collections (scm_server/ha/heap.py)
        await stop_event.wait()
        LOG.info("shutdown requested")
    finally:
        heap.disable()
        await daemon.stop()


def run(conf: OzoneConfiguration) -> int:
    """Blocking entry point for the CLI. Returns the process exit code."""
    try:
        with asyncio.Runner(loop_factory=event_loop_factory(conf)) as runner:
            runner.run(serve(conf))
    except DaemonStartupError as exc:
        LOG.error("%s", one_line(str(exc)))
        return 2
    except SCMException as exc:
        LOG.error("SCM failed: %s", one_line(str(exc)))
        return 1 if exc.result is not ResultCodes.SCM_NOT_INITIALIZED else 2
    except SCMError as exc:
        LOG.error("SCM failed: %s", one_line(str(exc)))
        return 1
    return 0
