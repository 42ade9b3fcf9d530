package ozonescm.interop;

import org.apache.hadoop.ipc.ProtocolInfo;
import ozonescm.wire.security.SCMSecurityProtocolProtos.SCMSecurityProtocolService;

/** The security protocol as Hadoop's RPC engine sees it: Ozone's protocol name and version, our stubs. */
@ProtocolInfo(protocolName = "org.apache.hadoop.hdds.protocol.SCMSecurityProtocol", protocolVersion = 1)
public interface SCMSecurityProtocolPB extends SCMSecurityProtocolService.BlockingInterface {
}
