package ozonescm.interop;

import org.apache.hadoop.ipc.ProtocolInfo;
import ozonescm.wire.symmetric.SCMSecretKeyProtocolProtos.SCMSecretKeyProtocolService;

/** SCMSecretKeyProtocol under the name Ozone's scm callers use: Ozone's protocol name and version, our stubs. */
@ProtocolInfo(protocolName = "org.apache.hadoop.hdds.protocol.SecretKeyProtocolScm", protocolVersion = 1)
public interface SecretKeyProtocolScmPB extends SCMSecretKeyProtocolService.BlockingInterface {
}
