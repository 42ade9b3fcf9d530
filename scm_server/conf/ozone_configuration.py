"""``OzoneConfiguration``: the raw key/value view of Ozone configuration.

Sources, lowest precedence first (as Ozone and its docker images do):

1. built-in defaults (:data:`DEFAULTS`, our slice of ``ozone-default.xml``, generated from the typed groups'
   field declarations and the port table by :mod:`scm_server.conf.defaults`);
2. ``ozone-site.xml`` (Hadoop XML: ``<configuration><property><name/><value/></property>``),
   found via an explicit path, ``--conf`` or ``$OZONE_CONF_DIR/ozone-site.xml``;
3. environment variables ``OZONE-SITE.XML_<key>=<value>`` (the convention of Ozone's images);
4. explicit ``set()`` calls (tests, CLI flags).

Typed getters (``get_duration``, ``get_size``, ...) raise :class:`~scm_server.exceptions.ConfigError`
naming the key, the bad value and a valid example. Per-node values use Ozone's suffix form
``<key>.<serviceId>.<nodeId>`` (see :meth:`OzoneConfiguration.get_for_node`), so several SCMs
on one host can use different ports from one shared file.

This module only reads files and the environment when asked to (``load``); it is the edge.
The typed groups in :mod:`scm_server.conf.groups` are what the rest of the code receives.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path

from scm_server.conf.defaults import DEFAULTS
from scm_server.conf.values import parse_bool, parse_duration, parse_float, parse_int, parse_size
from scm_server.exceptions import ConfigError

__all__ = [
    "DEFAULTS",
    "ENV_PREFIX",
    "OzoneConfiguration",
    "parse_bool",
    "parse_duration",
    "parse_float",
    "parse_int",
    "parse_size",
    "read_site_xml",
]

ENV_PREFIX = "OZONE-SITE.XML_"


def read_site_xml(path: Path) -> dict[str, str]:
    """Read a Hadoop-style XML configuration file. Raises ConfigError on unreadable/malformed XML."""
    try:
        tree = ET.parse(path)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist; pass an existing ozone-site.xml") from None
    except (ET.ParseError, OSError) as exc:
        raise ConfigError(f"configuration file {path} is not valid XML ({exc}); fix the file") from exc
    root = tree.getroot()
    if root.tag != "configuration":
        raise ConfigError(f"configuration file {path}: root element is <{root.tag}>, expected <configuration>")
    result: dict[str, str] = {}
    for prop in root.iter("property"):
        name = prop.findtext("name")
        if not name or not name.strip():
            raise ConfigError(f"configuration file {path}: a <property> has no <name>; add <name>key</name>")
        result[name.strip()] = (prop.findtext("value") or "").strip()
    return result


class OzoneConfiguration(Mapping[str, str]):
    """Layered Ozone configuration (defaults < ozone-site.xml < environment < explicit ``set``)."""

    def __init__(
        self,
        values: Mapping[str, str] | None = None,
        *,
        site_xml: Path | str | None = None,
        env: Mapping[str, str] | None = None,
        defaults: Mapping[str, str] | None = None,
    ) -> None:
        self._defaults: dict[str, str] = dict(DEFAULTS if defaults is None else defaults)
        self._site: dict[str, str] = {}
        self._env: dict[str, str] = {}
        self._overrides: dict[str, str] = dict(values or {})
        self.site_xml_path: Path | None = None
        if site_xml is not None:
            self.add_site_xml(site_xml)
        if env is not None:
            self.add_env(env)

    # ---- construction at the edge ----
    @classmethod
    def load(
        cls,
        conf_path: Path | str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, str] | None = None,
    ) -> OzoneConfiguration:
        """Load like an Ozone daemon: ``conf_path`` (a file or a dir holding ozone-site.xml), else
        ``$OZONE_CONF_DIR/ozone-site.xml`` if it exists; then env overrides."""
        environ = os.environ if env is None else env
        conf = cls(overrides)
        site: Path | None = None
        if conf_path is not None:
            p = Path(conf_path)
            site = p / "ozone-site.xml" if p.is_dir() else p
        elif environ.get("OZONE_CONF_DIR"):
            candidate = Path(environ["OZONE_CONF_DIR"]) / "ozone-site.xml"
            if candidate.exists():
                site = candidate
        if site is not None:
            conf.add_site_xml(site)
        conf.add_env(environ)
        return conf

    def add_site_xml(self, path: Path | str) -> None:
        self.site_xml_path = Path(path)
        self._site.update(read_site_xml(Path(path)))

    def add_env(self, env: Mapping[str, str]) -> None:
        for name, value in env.items():
            if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
                self._env[name[len(ENV_PREFIX) :]] = value

    def set(self, key: str, value: str | int | float | bool) -> None:
        if isinstance(value, bool):
            value = "true" if value else "false"
        self._overrides[key] = str(value)

    def unset(self, key: str) -> None:
        self._overrides.pop(key, None)
        self._env.pop(key, None)
        self._site.pop(key, None)

    def with_site(self, site: Mapping[str, str]) -> OzoneConfiguration:
        """A copy whose ozone-site.xml layer is ``site`` (the file as it reads now, for a run-time
        reconfiguration); the defaults, environment and explicit layers are kept."""
        other = self.copy()
        other._site = dict(site)
        return other

    def set_site_value(self, key: str, value: str | None) -> None:
        """Set (or, with None, remove) ``key`` in the ozone-site.xml layer: a reconfigured key takes the file's
        value, so that a later change of the file is seen again."""
        if value is None:
            self._site.pop(key, None)
        else:
            self._site[key] = value

    def copy(self) -> OzoneConfiguration:
        other = OzoneConfiguration(defaults=self._defaults)
        other._site = dict(self._site)
        other._env = dict(self._env)
        other._overrides = dict(self._overrides)
        other.site_xml_path = self.site_xml_path
        return other

    # ---- Mapping ----
    def _merged(self) -> dict[str, str]:
        return {**self._defaults, **self._site, **self._env, **self._overrides}

    def __getitem__(self, key: str) -> str:
        for layer in (self._overrides, self._env, self._site, self._defaults):
            if key in layer:
                return layer[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())

    def source_of(self, key: str) -> str:
        """Where a key's effective value comes from (for error messages and `ozone-scm getconf`)."""
        if key in self._overrides:
            return "explicit setting"
        if key in self._env:
            return f"environment {ENV_PREFIX}{key}"
        if key in self._site:
            return str(self.site_xml_path or "ozone-site.xml")
        if key in self._defaults:
            return "default"
        return "unset"

    # ---- typed getters ----
    def get_str(self, key: str, default: str | None = None) -> str | None:
        value = self.get(key)
        if value is None or value == "":
            return default
        return value

    def get_trimmed_list(self, key: str) -> list[str]:
        value = self.get_str(key)
        if value is None:
            return []
        return [part.strip() for part in value.split(",") if part.strip()]

    def get_int(self, key: str, default: int | None = None) -> int | None:
        value = self.get_str(key)
        return default if value is None else parse_int(key, value)

    def get_float(self, key: str, default: float | None = None) -> float | None:
        value = self.get_str(key)
        return default if value is None else parse_float(key, value)

    def get_bool(self, key: str, default: bool | None = None) -> bool | None:
        value = self.get_str(key)
        return default if value is None else parse_bool(key, value)

    def get_duration(self, key: str, default: timedelta | None = None, default_unit: str = "ms") -> timedelta | None:
        value = self.get_str(key)
        return default if value is None else parse_duration(key, value, default_unit)

    def get_size(self, key: str, default: int | None = None) -> int | None:
        value = self.get_str(key)
        return default if value is None else parse_size(key, value)

    def require(self, key: str, example: str) -> str:
        value = self.get_str(key)
        if value is None:
            raise ConfigError(f"{key} is required but not set; set it in ozone-site.xml or env (e.g. {key}={example})")
        return value

    def get_for_node(self, key: str, service_id: str | None, node_id: str | None) -> str | None:
        """Ozone's per-node suffix lookup: ``key.serviceId.nodeId``, then ``key.serviceId``, then ``key``."""
        candidates = []
        if service_id and node_id:
            candidates.append(f"{key}.{service_id}.{node_id}")
        if service_id:
            candidates.append(f"{key}.{service_id}")
        candidates.append(key)
        for candidate in candidates:
            value = self.get_str(candidate)
            if value is not None:
                return value
        return None

    def get_int_for_node(self, key: str, service_id: str | None, node_id: str | None) -> int | None:
        value = self.get_for_node(key, service_id, node_id)
        return None if value is None else parse_int(_suffixed(key, service_id, node_id), value)

    def to_site_xml(self) -> str:
        """Render the non-default values as an ozone-site.xml document (used by local clusters)."""
        root = ET.Element("configuration")
        for key, value in sorted({**self._site, **self._env, **self._overrides}.items()):
            prop = ET.SubElement(root, "property")
            ET.SubElement(prop, "name").text = key
            ET.SubElement(prop, "value").text = value
        ET.indent(root)
        return ET.tostring(root, encoding="unicode") + "\n"


def _suffixed(key: str, service_id: str | None, node_id: str | None) -> str:
    return ".".join(p for p in (key, service_id, node_id) if p)
