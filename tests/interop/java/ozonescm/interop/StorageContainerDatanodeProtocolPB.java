package ozonescm.interop;

import org.apache.hadoop.ipc.ProtocolInfo;
import ozonescm.wire.datanode.StorageContainerDatanodeProtocolProtos.StorageContainerDatanodeProtocolService;

/** The datanode protocol as Hadoop's RPC engine sees it: Ozone's protocol name and version, our generated stubs. */
@ProtocolInfo(protocolName = "org.apache.hadoop.ozone.protocol.StorageContainerDatanodeProtocol", protocolVersion = 1)
public interface StorageContainerDatanodeProtocolPB extends StorageContainerDatanodeProtocolService.BlockingInterface {
}
