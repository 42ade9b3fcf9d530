"""Shared CLI state: the loaded configuration and how to reach SCM.

Kept apart from ``main.py`` so every command module (and HA's ``admin_scm.py``) can import it
without importing the whole command tree.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from scm_server.client.config import SCMClientConfig
from scm_server.client.scm_client import parse_addresses
from scm_server.client.sync import SyncSCMClient
from scm_server.conf import OzoneConfiguration
from scm_server.conf.addresses import check_endpoint_keys
from scm_server.conf.security import SecurityConfig
from scm_server.security.tls import FileClientSecurity, client_security_from_config
from scm_server.server import endpoints


@dataclasses.dataclass
class CliContext:
    conf_dir: Path | None
    _conf: OzoneConfiguration | None = None
    scm_override: str | None = None
    local_read: bool = False  # `admin --scm ADDR --local`: that SCM's own view, labelled

    @property
    def conf(self) -> OzoneConfiguration:
        conf = self.unchecked_conf
        # every port and address key, not only those this command reads: one line naming a malformed one
        check_endpoint_keys(conf)
        return conf

    @property
    def unchecked_conf(self) -> OzoneConfiguration:
        """The configuration as loaded, for the daemon, whose own check (``check_daemon_config``, the same port
        rule among others) logs the line a daemon's log must carry."""
        if self._conf is None:
            self._conf = OzoneConfiguration.load(self.conf_dir)
        return self._conf

    def scm_addresses(self, protocol: endpoints.Protocol = endpoints.Protocol.CLIENT) -> list[str]:
        """``--scm`` if given, else every SCM's address for ``protocol`` from the configuration."""
        if self.scm_override:
            try:
                return parse_addresses(self.scm_override)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--scm") from exc
        return endpoints.protocol_addresses(self.conf.get_str, protocol)

    def client_config(self) -> SCMClientConfig:
        return SCMClientConfig.from_getter(self.conf.get_str)

    def client_security(self) -> FileClientSecurity | None:
        """The client certificate under mutual TLS (``hdds.x509.client.*``); None without TLS."""
        return client_security_from_config(SecurityConfig.from_conf(self.conf))

    def client(self) -> SyncSCMClient:
        from scm_server.cli.feedback import StatusClient

        if not self.local_read:
            # retry notices: one updating status line (see cli/feedback.py), not a line per attempt
            return StatusClient(self.scm_addresses(), self.client_config(), security=self.client_security())
        addresses = self.scm_addresses()
        if not self.scm_override or len(addresses) != 1:
            raise click.UsageError("--local asks one SCM for its own view: give that SCM with --scm HOST:PORT")
        return _LabelledClient(addresses, self.client_config(), security=self.client_security(), local_read=True)


class _LabelledClient(SyncSCMClient):
    """A per-SCM view: says on stderr which SCM answered and its role, so it is never mistaken for
    the leader's view."""

    def close(self) -> None:
        label = getattr(self, "last_answer", None)
        super().close()
        if label is not None:
            click.echo(f"(per-SCM view: {label.describe()})", err=True)


pass_ctx = click.make_pass_decorator(CliContext)
