"""The built-in default table (conf.DEFAULTS) and the typed groups' dataclass defaults must agree.

Defaults are declared twice on purpose (the string table mirrors ozone-default.xml and feeds error examples;
the dataclass fields are what code reads), so this test stops the two from drifting apart.
"""

from __future__ import annotations

import dataclasses

import pytest

from scm_server.conf import groups
from scm_server.conf.ozone_configuration import OzoneConfiguration

GROUPS = [
    groups.SafeModeConfig,
    groups.NodeManagerConfig,
    groups.PipelineConfig,
    groups.ReplicationManagerConfig,
    groups.BlockConfig,
    groups.SCMHAConfig,
]


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.__name__)
def test_group_defaults_match_the_default_table(group: type) -> None:
    parsed = group.from_conf(OzoneConfiguration())  # type: ignore[attr-defined]
    declared = group()
    differing = {
        f.metadata.get("key", f.name): (getattr(parsed, f.name), getattr(declared, f.name))
        for f in dataclasses.fields(group)
        if getattr(parsed, f.name) != getattr(declared, f.name)
    }
    assert differing == {}


def test_scm_config_defaults_match_with_the_required_key_set() -> None:
    conf = OzoneConfiguration()
    conf.set("ozone.metadata.dirs", "/data/metadata")
    parsed = groups.SCMConfig.from_conf(conf)
    declared_fields = {f.name: f for f in dataclasses.fields(groups.SCMConfig)}
    for name, field in declared_fields.items():
        if name == "metadata_dirs":  # required, set above
            continue
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        assert getattr(parsed, name) == default, field.metadata.get("key", name)
