"""What the typed groups read a configuration through: :class:`ConfigSource`.

The groups (:mod:`scm_server.conf.groups`, :mod:`scm_server.conf.security`) parse any source that answers these
calls; :class:`~scm_server.conf.ozone_configuration.OzoneConfiguration` is the one the daemons use. The groups sit
below the layered store: the store's default layer is generated from the groups' declarations
(:mod:`scm_server.conf.defaults`), so the groups may not import the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol


class ConfigSource(Protocol):
    """A key/value configuration with Ozone's lookups (empty values read as unset)."""

    def __contains__(self, key: object) -> bool: ...

    def __iter__(self) -> Iterator[str]: ...

    def get_str(self, key: str, default: str | None = None) -> str | None: ...

    def get_bool(self, key: str, default: bool | None = None) -> bool | None: ...

    def get_trimmed_list(self, key: str) -> list[str]: ...

    def require(self, key: str, example: str) -> str: ...

    def get_for_node(self, key: str, service_id: str | None, node_id: str | None) -> str | None: ...

    def source_of(self, key: str) -> str:
        """Where the key's effective value comes from, for error messages."""
        ...
