"""The protocol names our Hadoop RPC translators serve are the ones Ozone 2.2.0's clients put in their
RequestHeaderProto (each *ProtocolPB interface's @ProtocolInfo): a real OM opens its block-protocol connection
as org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol, and a name off by one package is refused."""

from scm_server.client import hadoop_rpc as client
from scm_server.server.hadoop_rpc import (
    block_translator,
    datanode_translator,
    location_translator,
    security_translator,
)


def test_block_protocol_name_is_ozones() -> None:
    assert block_translator.PROTOCOL == "org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol"
    assert client.BLOCK_PROTOCOL == block_translator.PROTOCOL


def test_other_protocol_names_are_ozones() -> None:
    assert datanode_translator.PROTOCOL == "org.apache.hadoop.ozone.protocol.StorageContainerDatanodeProtocol"
    assert location_translator.PROTOCOL == "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol"
    assert security_translator.PROTOCOL == "org.apache.hadoop.hdds.protocol.SCMSecurityProtocol"
    assert {block_translator.VERSION, datanode_translator.VERSION, location_translator.VERSION,
            security_translator.VERSION} == {1}
