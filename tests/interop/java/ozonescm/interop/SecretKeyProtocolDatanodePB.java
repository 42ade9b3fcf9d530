package ozonescm.interop;

import org.apache.hadoop.ipc.ProtocolInfo;
import ozonescm.wire.symmetric.SCMSecretKeyProtocolProtos.SCMSecretKeyProtocolService;

/** SCMSecretKeyProtocol under the name Ozone's datanode callers use: Ozone's protocol name and version, our stubs. */
@ProtocolInfo(protocolName = "org.apache.hadoop.hdds.protocol.SecretKeyProtocolDatanode", protocolVersion = 1)
public interface SecretKeyProtocolDatanodePB extends SCMSecretKeyProtocolService.BlockingInterface {
}
