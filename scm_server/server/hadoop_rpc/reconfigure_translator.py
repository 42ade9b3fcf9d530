"""ReconfigureProtocol over Hadoop RPC: ``ozone admin reconfig --service=SCM --address=<host:client port> ...``.

Ozone's SCM serves it on its client port beside StorageContainerLocationProtocol, one Hadoop RPC method per call
(protocol ``org.apache.hadoop.hdds.protocol.ReconfigureProtocol``, version 1), as Hadoop's ReconfigurableBase
under Ozone's ReconfigurationHandler answers:

* ``getServerName``: ``SCM``;
* ``listReconfigureProperties``: the keys this SCM applies at run time, sorted
  (:data:`scm_server.conf.reconfiguration.RECONFIGURABLE`);
* ``startReconfigure``: starts a task in the background and answers at once (``Another reconfiguration task is
  running.`` while one runs): ozone-site.xml is read again, every changed key found, the reconfigurable ones
  applied one by one through the facade (a value the key's group refuses is recorded with its error and not
  applied), the others left for a restart;
* ``getReconfigureStatus``: the task's start time; once it ended, its end time and each applied change (old
  value, new value, error). Before any task: start time 0.

Every SCM answers (each applies its own configuration, as in Ozone). Times come from the facade's clock. Under
Kerberos (an authorizer given) the three calls other than ``getServerName`` are served to administrators only
(``ozone.administrators``, the SCM's own principal), as Ozone's ReconfigurationHandler checks them with the SCM's
``checkAdminAccess``; any other caller gets Ozone's ``AccessControlException`` "Access denied for user P. SCM
superuser privilege is required." and nothing is read or started.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from google.protobuf import message as pb_message

from scm_server.clock import Clock
from scm_server.conf.ozone_configuration import OzoneConfiguration, read_site_xml
from scm_server.conf.reconfiguration import (
    ChangeResult,
    PropertyChange,
    ReconfigurationTaskStatus,
    changed_properties,
    reconfigurable_changes,
)
from scm_server.exceptions import SCMError
from scm_server.hadoop_ipc import Call
from scm_server.proto.ozone import ReconfigureProtocol_pb2 as wire
from scm_server.server.hadoop_rpc.authorization import Authorizer
from scm_server.server.hadoop_rpc.server import IO_EXCEPTION, RpcCallError, parse_request

PROTOCOL = "org.apache.hadoop.hdds.protocol.ReconfigureProtocol"
VERSION = 1
SERVER_NAME = "SCM"
LOG = logging.getLogger(__name__)


class Reconfigurable(Protocol):
    """What the translator needs of the SCM facade."""

    conf: OzoneConfiguration
    clock: Clock

    def reconfigurable_properties(self) -> list[str]: ...

    def reconfigure_property(self, change: PropertyChange) -> None: ...


def status_to_wire(status: ReconfigurationTaskStatus) -> wire.GetReconfigureStatusResponseProto:
    """Ozone's answer: end time and changes only once the task stopped; a missing old value as ``""``."""
    out = wire.GetReconfigureStatusResponseProto(startTime=status.start_ms)
    if status.stopped:
        out.endTime = status.end_ms
        for result in status.results:
            change = out.changes.add(name=result.change.prop, oldValue=result.change.old_value or "")
            if result.change.new_value is not None:
                change.newValue = result.change.new_value
            if result.error is not None:
                change.errorMessage = result.error
    return out


class ReconfigureTranslator:
    """Serves ReconfigureProtocol for one SCM; holds its last reconfiguration task."""

    protocol = PROTOCOL
    version = VERSION
    methods = frozenset({"getServerName", "startReconfigure", "getReconfigureStatus", "listReconfigureProperties"})

    def __init__(self, scm: Reconfigurable, *, authorizer: Authorizer | None = None) -> None:
        self.scm = scm
        self.authorizer = authorizer  # None: no Kerberos, no admin check (SIMPLE authenticates nobody)
        self.status = ReconfigurationTaskStatus()
        self._task: asyncio.Task[None] | None = None

    async def call(self, method: str, call: Call) -> bytes:
        request = {
            "getServerName": wire.GetServerNameRequestProto,
            "startReconfigure": wire.StartReconfigureRequestProto,
            "getReconfigureStatus": wire.GetReconfigureStatusRequestProto,
            "listReconfigureProperties": wire.ListReconfigurePropertiesRequestProto,
        }[method]()
        parse_request(call.body, request)
        if self.authorizer is not None and call.authenticated:
            refusal = self.authorizer.reconfigure(call.user, method)
            if refusal is not None:
                LOG.warning("refused %s to %s: %s", method, call.user, refusal.message)
                raise RpcCallError(refusal.exception_class, refusal.message)
        answer: pb_message.Message
        if method == "getServerName":
            answer = wire.GetServerNameResponseProto(name=SERVER_NAME)
        elif method == "listReconfigureProperties":
            answer = wire.ListReconfigurePropertiesResponseProto(name=self.scm.reconfigurable_properties())
        elif method == "startReconfigure":
            self.start()
            answer = wire.StartReconfigureResponseProto()
        else:
            answer = status_to_wire(self.status)
        return answer.SerializeToString()

    def start(self) -> None:
        """Hadoop's ``startReconfigurationTask``: one task at a time, run in the background."""
        if self._task is not None and not self._task.done():
            raise RpcCallError(IO_EXCEPTION, "Another reconfiguration task is running.")
        self.status = ReconfigurationTaskStatus(start_ms=self.scm.clock.wall_ms())
        self._task = asyncio.get_running_loop().create_task(self._run(), name="scm-reconfiguration")

    async def wait(self) -> None:
        """Until the current task (if any) ended."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        conf = self.scm.conf
        path = conf.site_xml_path
        results: list[ChangeResult] = []
        try:
            site = await asyncio.to_thread(read_site_xml, path) if path is not None else {}
        except (OSError, SCMError) as exc:
            LOG.warning("reconfiguration: cannot read %s: %s", path, exc)
            self.status = ReconfigurationTaskStatus(self.status.start_ms, self.scm.clock.wall_ms(), ())
            return
        changes = changed_properties(dict(conf), dict(conf.with_site(site)))
        for change in reconfigurable_changes(changes):
            error = None
            try:
                self.scm.reconfigure_property(change)
            except SCMError as exc:  # ConfigError: the key's group refuses the value; nothing applied
                error = str(exc)
            results.append(ChangeResult(change, error))
        skipped = [c.prop for c in changes if c not in {r.change for r in results}]
        if skipped:
            LOG.info("reconfiguration: %d changed key(s) take effect only after a restart: %s", len(skipped),
                     ", ".join(skipped))
        LOG.info("reconfiguration completed with %d updated properties", sum(r.error is None for r in results))
        self.status = ReconfigurationTaskStatus(self.status.start_ms, self.scm.clock.wall_ms(), tuple(results))
