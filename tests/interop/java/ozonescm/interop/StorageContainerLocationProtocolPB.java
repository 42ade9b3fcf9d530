package ozonescm.interop;

import org.apache.hadoop.ipc.ProtocolInfo;
import ozonescm.wire.container.StorageContainerLocationProtocolProtos.StorageContainerLocationProtocolService;

/** The location (admin) protocol as Hadoop's RPC engine sees it: Ozone's protocol name and version, our stubs. */
@ProtocolInfo(protocolName = "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol", protocolVersion = 1)
public interface StorageContainerLocationProtocolPB extends StorageContainerLocationProtocolService.BlockingInterface {
}
