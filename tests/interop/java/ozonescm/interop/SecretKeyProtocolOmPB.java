package ozonescm.interop;

import org.apache.hadoop.ipc.ProtocolInfo;
import ozonescm.wire.symmetric.SCMSecretKeyProtocolProtos.SCMSecretKeyProtocolService;

/** SCMSecretKeyProtocol under the name Ozone's om callers use: Ozone's protocol name and version, our stubs. */
@ProtocolInfo(protocolName = "org.apache.hadoop.hdds.protocol.SecretKeyProtocolOm", protocolVersion = 1)
public interface SecretKeyProtocolOmPB extends SCMSecretKeyProtocolService.BlockingInterface {
}
