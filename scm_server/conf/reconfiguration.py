"""Run-time reconfiguration: which keys an SCM changes without a restart, and the task's outcome as values.

Ozone's SCM serves ``ReconfigureProtocol`` (``ozone admin reconfig --service=SCM --address=<host:port>
properties|start|status``) through Hadoop's ``ReconfigurableBase``: ``start`` re-reads the configuration, finds
every property whose value differs from the running one, and applies those that are reconfigurable, one by
one, recording for each the old value, the new one (a removed key takes its default; none without one) and an
error when it could not be applied; other changed keys are left for the next restart. ``status`` answers the
start time, and once the task ended its end time and those changes.

This module is pure: the keys (:data:`RECONFIGURABLE`, each with the typed group that declares it), the
comparison (:func:`changed_properties`), the re-parsed group with one key changed (:func:`reconfigured_group`,
which raises ConfigError for a value the group refuses) and the status values. Reading ozone-site.xml again and
handing the new groups to the running managers happen at the edges (the reconfigure translator, the facade).

Served, as Ozone 2.2.0's SCM registers them with its ReconfigurationHandler: ``ozone.administrators`` and
``ozone.readonly.administrators`` (the administrator checks of the Hadoop RPC protocols), every
``hdds.scm.replication.*`` key this SCM declares (Ozone's ReplicationManagerConfiguration marks them
reconfigurable), ``hdds.scm.block.deletion.per-interval.max`` (Ozone's ScmConfig) and the two EC pipeline keys
``ozone.scm.ec.pipeline.minimum`` and ``ozone.scm.ec.pipeline.per.volume.factor``, and
``hdds.scm.safemode.log.interval``. Ozone's other reconfigurable keys (the under/over-replicated queue intervals and
quasi-closed-stuck copies of its ReplicationManager, the ``ozone.tracing.*`` keys) govern parts this SCM does not
have and are not listed (docs/ozone-compatibility.md, ReconfigureProtocol).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scm_server.conf.groups import BlockConfig, PipelineConfig, ReplicationManagerConfig, SafeModeConfig
from scm_server.conf.ozone_configuration import OzoneConfiguration

ADMINISTRATORS_KEY = "ozone.administrators"
READONLY_ADMINISTRATORS_KEY = "ozone.readonly.administrators"


@dataclass(frozen=True)
class AdministratorsConfig:
    """Who the administrator checks admit (Ozone's OzoneAdmins): ``ozone.administrators`` and
    ``ozone.readonly.administrators``, comma-separated short names, ``*`` for everyone. The SCM's own user is always
    an administrator besides these (the edge adds it)."""

    administrators: tuple[str, ...] = ()
    readonly_administrators: tuple[str, ...] = ()

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> AdministratorsConfig:
        return cls(tuple(conf.get_trimmed_list(ADMINISTRATORS_KEY)),
                   tuple(conf.get_trimmed_list(READONLY_ADMINISTRATORS_KEY)))


ReconfigurableGroup = ReplicationManagerConfig | BlockConfig | PipelineConfig | SafeModeConfig | AdministratorsConfig


def _keys(cls: type[Any], *fields: str) -> dict[str, type[ReconfigurableGroup]]:
    chosen = [f for f in dataclasses.fields(cls) if not fields or f.name in fields]
    return {str(f.metadata["key"]): cls for f in chosen}


# key -> the typed group that declares it (and whose new value the running managers get)
RECONFIGURABLE: Mapping[str, type[ReconfigurableGroup]] = {
    ADMINISTRATORS_KEY: AdministratorsConfig,
    READONLY_ADMINISTRATORS_KEY: AdministratorsConfig,
    **_keys(ReplicationManagerConfig),
    **_keys(BlockConfig, "deletion_per_interval_max"),
    **_keys(PipelineConfig, "ec_pipeline_minimum", "ec_pipeline_per_volume_factor"),
    **_keys(SafeModeConfig, "log_interval"),
}


@dataclass(frozen=True)
class PropertyChange:
    """A key whose value in the re-read configuration differs from the running one (None: not set)."""

    prop: str
    old_value: str | None
    new_value: str | None


@dataclass(frozen=True)
class ChangeResult:
    change: PropertyChange
    error: str | None  # None: applied


@dataclass(frozen=True)
class ReconfigurationTaskStatus:
    """Hadoop's ReconfigurationTaskStatus: no task yet (start 0), running (end 0), or ended with its results."""

    start_ms: int = 0
    end_ms: int = 0
    results: tuple[ChangeResult, ...] = ()

    @property
    def has_task(self) -> bool:
        return self.start_ms > 0

    @property
    def stopped(self) -> bool:
        return self.end_ms > 0


def changed_properties(old: Mapping[str, str], new: Mapping[str, str]) -> list[PropertyChange]:
    """Every key set in either whose value differs, sorted by key (Hadoop's ``getChangedProperties``)."""
    return [
        PropertyChange(key, old.get(key), new.get(key))
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    ]


def reconfigurable_changes(changes: list[PropertyChange]) -> list[PropertyChange]:
    """The changes a task applies; the rest wait for a restart (as Hadoop's task skips them)."""
    return [c for c in changes if c.prop in RECONFIGURABLE]


def reconfigured_group(conf: OzoneConfiguration, change: PropertyChange) -> ReconfigurableGroup:
    """The group declaring ``change.prop``, parsed from ``conf`` with that one key changed (removed: its
    default); ConfigError (naming the key and the fix) when the group refuses the value."""
    candidate = conf.copy()
    if change.new_value is None:
        candidate.unset(change.prop)
    else:
        candidate.set(change.prop, change.new_value)
    return RECONFIGURABLE[change.prop].from_conf(candidate)
