"""Configuration: ``OzoneConfiguration`` (raw key/value sources) and typed config groups.

Configuration is parsed once at the edge (daemon start, CLI, tests) into frozen dataclasses
(:mod:`scm_server.conf.groups`); managers receive those objects and never read raw keys or
the environment themselves. Each key is declared once, in its group's field (key, kind, description,
default text); the raw default table (:mod:`scm_server.conf.defaults`) and docs/operations.md's key tables
(``make config-docs``) are generated from those declarations.
"""

from scm_server.conf.groups import (
    BlockConfig,
    ContainerBalancerConfig,
    NodeManagerConfig,
    PipelineConfig,
    PlacementConfig,
    ReplicationManagerConfig,
    SafeModeConfig,
    SCMConfig,
    SCMConfigurations,
    SCMHAConfig,
    SCMNodeDetails,
    TopologyConfig,
)
from scm_server.conf.ozone_configuration import OzoneConfiguration, parse_duration, parse_size

__all__ = [
    "BlockConfig",
    "ContainerBalancerConfig",
    "NodeManagerConfig",
    "OzoneConfiguration",
    "PipelineConfig",
    "PlacementConfig",
    "ReplicationManagerConfig",
    "SCMConfig",
    "SCMConfigurations",
    "SCMHAConfig",
    "SCMNodeDetails",
    "SafeModeConfig",
    "TopologyConfig",
    "parse_duration",
    "parse_size",
]
