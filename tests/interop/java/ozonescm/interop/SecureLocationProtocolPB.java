package ozonescm.interop;

import org.apache.hadoop.ipc.ProtocolInfo;
import org.apache.hadoop.security.KerberosInfo;
import ozonescm.wire.container.StorageContainerLocationProtocolProtos.StorageContainerLocationProtocolService;

/** The location (admin) protocol with Ozone's Kerberos annotation: the client expects the server principal that
 *  hdds.scm.kerberos.principal names (with _HOST), as Ozone's StorageContainerLocationProtocolPB does. */
@ProtocolInfo(protocolName = "org.apache.hadoop.hdds.scm.protocol.StorageContainerLocationProtocol", protocolVersion = 1)
@KerberosInfo(serverPrincipal = "hdds.scm.kerberos.principal")
public interface SecureLocationProtocolPB extends StorageContainerLocationProtocolService.BlockingInterface {
}
