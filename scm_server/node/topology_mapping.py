"""Resolving a registering datanode's network location: Hadoop's mappings, with their file reads and processes.

Called by the SCM facade at registration (gRPC and Hadoop RPC registrations both reach
``StorageContainerManager.register_datanode``). Every SCM of a ring resolves on its own, as Ozone's SCMs do: a
network location is soft state, like the rest of a datanode's registration.

``net.topology.node.switch.mapping.impl`` picks the mapping (short or full Java class name):

* ``org.apache.hadoop.net.TableMapping`` reads ``net.topology.table.file.name`` on its first resolution (Hadoop's
  RawTableMapping); a name not in the table is on ``/default-rack``; a file that cannot be read gives every
  datanode ``/default-rack``.
* ``org.apache.hadoop.net.ScriptBasedMapping`` runs ``net.topology.script.file.name`` with at most
  ``net.topology.script.number.args`` names per run and reads one location per name from its output; with no
  script every datanode is on ``/default-rack``. A run that fails, prints the wrong count or outlives
  ``ozone.scm.network.topology.script.timeout`` resolves nothing (the process is killed).

Both sit behind Hadoop's CachedDNSToSwitchMapping (successful answers cached by name). A resolution that fails,
or answers a location the schema refuses, gives the datanode ``/default-rack`` and one warning naming it.

With the key unset and no table file, the SCM keeps the location the datanode reports (``/default-rack`` for
Ozone's datanodes; the simulator reports its racks). The decisions (schema, table and output parsing, batches,
cache) are pure, in :mod:`scm_server.node.topology`; this module holds only the reads and the processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from scm_server.conf import TopologyConfig
from scm_server.conf.groups import TABLE_MAPPING
from scm_server.exceptions import ConfigError
from scm_server.node import topology
from scm_server.node.topology import MappingCache, NodeSchema
from scm_server.proto import hdds_pb2

log = logging.getLogger(__name__)

TABLE_FILE_KEY = "net.topology.table.file.name"
SCRIPT_TIMEOUT_KEY = "ozone.scm.network.topology.script.timeout"
SCHEMA_FILE_KEY = "ozone.scm.network.topology.schema.file"


@dataclass(frozen=True)
class Resolution:
    """One location per name asked, or None and why the mapping could not answer."""

    locations: list[str] | None
    reason: str = ""


class DNSToSwitchMapping(Protocol):
    """Hadoop's DNSToSwitchMapping, awaited: the locations of ``names``, in order."""

    async def resolve(self, names: list[str]) -> Resolution: ...


class KeepReported:
    """No mapping configured: the datanode's own location stands (see the module docstring)."""

    async def resolve(self, names: list[str]) -> Resolution:
        return Resolution(None, "")


class TableMapping:
    def __init__(self, table_file: str | None) -> None:
        self.table_file = table_file
        self._table: dict[str, str] | None = None
        self._failure = ""
        self.cache = MappingCache()

    def _load(self) -> None:
        if self._table is not None or self._failure:
            return
        if not self.table_file:
            self._table = {}
            log.warning("%s not configured: every datanode is on %s", TABLE_FILE_KEY, topology.DEFAULT_RACK)
            return
        try:
            text = Path(self.table_file).read_text(encoding="utf-8")
        except OSError as exc:
            self._failure = f"cannot read the topology table {self.table_file} ({exc.strerror or exc})"
            return
        self._table, ignored = topology.parse_table(text)
        for line in ignored:
            log.warning("topology table %s: line does not have two columns, ignored: %s", self.table_file, line)

    async def resolve(self, names: list[str]) -> Resolution:
        cached = self.cache.get(names)
        if cached is not None:
            return Resolution(cached)
        self._load()
        if self._table is None:
            return Resolution(None, self._failure)
        missing = self.cache.uncached(names)
        self.cache.store(missing, topology.lookup_table(self._table, missing))
        return Resolution(self.cache.get(names))

    def reload(self) -> None:
        """Hadoop's reloadCachedMappings: forget the table and the cache; the next resolution reads the file."""
        self._table, self._failure = None, ""
        self.cache.clear()


class ScriptBasedMapping:
    def __init__(self, script: str | None, max_args: int, timeout_s: float) -> None:
        self.script = script
        self.max_args = max_args
        self.timeout_s = timeout_s
        self.cache = MappingCache()
        self.runs = 0

    async def resolve(self, names: list[str]) -> Resolution:
        cached = self.cache.get(names)
        if cached is not None:
            return Resolution(cached)
        missing = self.cache.uncached(names)
        if not self.script:
            return Resolution([topology.DEFAULT_RACK] * len(names))
        for batch in topology.script_batches(missing, self.max_args):
            locations, reason = await self._run(batch)
            if locations is None:
                return Resolution(None, reason)
            self.cache.store(batch, locations)
        return Resolution(self.cache.get(names))

    async def _run(self, batch: list[str]) -> tuple[list[str] | None, str]:
        script = self.script or ""
        self.runs += 1
        try:
            proc = await asyncio.create_subprocess_exec(
                script, *batch,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            return None, f"cannot run script {script} ({exc.strerror or exc})"
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return None, f"script {script} did not finish within {self.timeout_s:g}s ({SCRIPT_TIMEOUT_KEY}); killed"
        if proc.returncode != 0:
            detail = err.decode(errors="replace").strip().splitlines()
            tail = f": {detail[-1]}" if detail else ""
            return None, f"script {script} exited with status {proc.returncode}{tail}"
        return topology.parse_script_output(out.decode(errors="replace"), len(batch), script)


class NetworkLocationResolver:
    """A datanode's network location at registration: the mapping's answer checked against the schema."""

    def __init__(self, mapping: DNSToSwitchMapping, schema: NodeSchema, use_hostname: bool) -> None:
        self.mapping = mapping
        self.schema = schema
        self.use_hostname = use_hostname

    async def resolve(self, details: hdds_pb2.DatanodeDetailsProto) -> str:
        """The location to record for ``details``; never raises. A failed resolution or a location the schema
        refuses gives the schema's default location and one warning naming the datanode."""
        if isinstance(self.mapping, KeepReported):
            reported, _ = topology.check_location(details.networkLocation, self.schema) if details.networkLocation else (
                None, "")
            return reported or self.schema.default_location
        name = topology.name_to_resolve(details.ipAddress, details.hostName, self.use_hostname)
        result = await self.mapping.resolve([name])
        problem = result.reason
        if result.locations is not None:
            location, problem = topology.check_location(result.locations[0], self.schema)
            if location is not None:
                return location
        fallback = self.schema.default_location
        log.warning(
            "could not resolve the network location of datanode %s (%s, %s): %s; using %s",
            details.uuid, details.hostName or "-", details.ipAddress or "-", problem or "no answer", fallback,
        )
        return fallback


def load_schema(file_name: str) -> NodeSchema:
    """``ozone.scm.network.topology.schema.file``: the built-in default schema by its name, else a file.
    Raises ConfigError for an unreadable file, a malformed schema or one this SCM does not serve."""
    name = file_name.strip() or topology.DEFAULT_SCHEMA_FILE
    if name == topology.DEFAULT_SCHEMA_FILE:
        text = topology.DEFAULT_SCHEMA_XML
    else:
        try:
            text = Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"{SCHEMA_FILE_KEY}: cannot read {name} ({exc.strerror or exc}); give the path of an Ozone topology "
                f"schema (.xml or .yaml) or unset the key for {topology.DEFAULT_SCHEMA_FILE}"
            ) from None
    try:
        return topology.check_served(topology.parse_schema(name, text), name)
    except topology.SchemaError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(SCHEMA_FILE_KEY) else f"{SCHEMA_FILE_KEY}: {message}") from None


def mapping_from_config(config: TopologyConfig) -> DNSToSwitchMapping:
    chosen = config.mapping
    if chosen is None:
        return KeepReported()
    if chosen == TABLE_MAPPING:
        return TableMapping(config.table_file)
    return ScriptBasedMapping(config.script_file, config.script_number_args, config.script_timeout.total_seconds())


def resolver_from_config(config: TopologyConfig) -> NetworkLocationResolver:
    """Checked at start: an unreadable or unserved schema raises ConfigError (the group checked the rest)."""
    return NetworkLocationResolver(mapping_from_config(config), load_schema(config.schema_file),
                                   config.use_datanode_hostname)
