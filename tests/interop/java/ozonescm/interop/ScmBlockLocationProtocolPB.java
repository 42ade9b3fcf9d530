package ozonescm.interop;

import org.apache.hadoop.ipc.ProtocolInfo;
import ozonescm.wire.block.ScmBlockLocationProtocolProtos.ScmBlockLocationProtocolService;

/** The block protocol as Hadoop's RPC engine sees it: Ozone's protocol name and version, our generated stubs. */
@ProtocolInfo(protocolName = "org.apache.hadoop.hdds.scm.protocol.ScmBlockLocationProtocol", protocolVersion = 1)
public interface ScmBlockLocationProtocolPB extends ScmBlockLocationProtocolService.BlockingInterface {
}
