package ozonescm.interop;

import java.net.InetSocketAddress;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.ipc.ProtobufRpcEngine2;
import org.apache.hadoop.ipc.RPC;
import org.apache.hadoop.ipc.RemoteException;
import org.apache.hadoop.net.NetUtils;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.thirdparty.protobuf.ServiceException;

import ozonescm.wire.hdds.HddsProtos;
import ozonescm.wire.symmetric.SCMSecretKeyProtocolProtos;
import ozonescm.wire.symmetric.SCMSecretKeyProtocolProtos.SCMSecretKeyProtocolService;
import ozonescm.wire.symmetric.SCMSecretKeyProtocolProtos.SCMSecretKeyRequest;
import ozonescm.wire.symmetric.SCMSecretKeyProtocolProtos.SCMSecretKeyResponse;

/**
 * Hadoop's own client calling SCMSecretKeyProtocol under each of the three protocol names Ozone registers; one line
 * per call, "<name> <cmdType> outcome...", for the Python test to compare with what our own client reads.
 */
final class SecretKeyCalls {
  private final Configuration conf;

  SecretKeyCalls(Configuration conf) {
    this.conf = conf;
    for (Class<?> c : new Class<?>[] {SecretKeyProtocolDatanodePB.class, SecretKeyProtocolOmPB.class,
        SecretKeyProtocolScmPB.class}) {
      RPC.setProtocolEngine(conf, c, ProtobufRpcEngine2.class);
    }
  }

  private <T> T proxy(Class<T> protocol, String address) throws Exception {
    InetSocketAddress addr = NetUtils.createSocketAddr(address);
    return RPC.getProxy(protocol, RPC.getProtocolVersion(protocol), addr, UserGroupInformation.getCurrentUser(), conf,
        NetUtils.getDefaultSocketFactory(conf), 5000);
  }

  private static UUID uuid(HddsProtos.UUID id) {
    return new UUID(id.getMostSigBits(), id.getLeastSigBits());
  }

  private static String key(SCMSecretKeyProtocolProtos.ManagedSecretKey k) {
    return "id=" + uuid(k.getId()) + " algorithm=" + k.getAlgorithm() + " bytes=" + k.getEncoded().size()
        + " created=" + k.getCreationTime() + " expires=" + k.getExpiryTime();
  }

  private static void call(String name, SCMSecretKeyProtocolService.BlockingInterface p, SCMSecretKeyRequest request) {
    String cmd = request.getCmdType().name();
    try {
      SCMSecretKeyResponse r = p.submitRequest(null, request.toBuilder().setTraceID("j-" + cmd).build());
      StringBuilder out = new StringBuilder(name + " " + cmd + " " + r.getStatus() + " success=" + r.getSuccess()
          + " trace=" + r.getTraceID());
      if (r.hasCurrentSecretKeyResponseProto()) {
        out.append(" ").append(key(r.getCurrentSecretKeyResponseProto().getSecretKey()));
      }
      if (r.hasGetSecretKeyResponseProto()) {
        out.append(r.getGetSecretKeyResponseProto().hasSecretKey()
            ? " " + key(r.getGetSecretKeyResponseProto().getSecretKey()) : " absent");
      }
      if (r.hasSecretKeysListResponseProto()) {
        out.append(" count=").append(r.getSecretKeysListResponseProto().getSecretKeysCount());
      }
      if (r.hasCheckAndRotateResponseProto()) {
        out.append(" rotated=").append(r.getCheckAndRotateResponseProto().getStatus());
      }
      if (!r.getSuccess()) {
        out.append(" ").append(r.getMessage().replace('\n', ' '));
      }
      System.out.println(out);
    } catch (ServiceException e) {
      Throwable cause = e.getCause();
      String what = cause instanceof RemoteException
          ? ((RemoteException) cause).getClassName() + " " + cause.getMessage().replace('\n', ' ') : String.valueOf(cause);
      System.out.println(name + " " + cmd + " ERROR " + what);
    }
  }

  void run(String address) throws Exception {
    SCMSecretKeyProtocolService.BlockingInterface[] proxies = {
        proxy(SecretKeyProtocolDatanodePB.class, address),
        proxy(SecretKeyProtocolOmPB.class, address),
        proxy(SecretKeyProtocolScmPB.class, address),
    };
    String[] names = {"datanode", "om", "scm"};
    SCMSecretKeyRequest current = SCMSecretKeyRequest.newBuilder()
        .setCmdType(SCMSecretKeyProtocolProtos.Type.GetCurrentSecretKey).build();
    for (int i = 0; i < proxies.length; i++) {
      call(names[i], proxies[i], current);
    }
    SCMSecretKeyResponse r = proxies[0].submitRequest(null, current);
    HddsProtos.UUID id = r.getCurrentSecretKeyResponseProto().getSecretKey().getId();
    call("datanode", proxies[0], SCMSecretKeyRequest.newBuilder().setCmdType(SCMSecretKeyProtocolProtos.Type.GetSecretKey)
        .setGetSecretKeyRequest(SCMSecretKeyProtocolProtos.SCMGetSecretKeyRequest.newBuilder().setSecretKeyId(id)).build());
    HddsProtos.UUID unknown = HddsProtos.UUID.newBuilder().setMostSigBits(1).setLeastSigBits(2).build();
    call("unknown", proxies[0], SCMSecretKeyRequest.newBuilder().setCmdType(SCMSecretKeyProtocolProtos.Type.GetSecretKey)
        .setGetSecretKeyRequest(SCMSecretKeyProtocolProtos.SCMGetSecretKeyRequest.newBuilder().setSecretKeyId(unknown)).build());
    call("om", proxies[1], SCMSecretKeyRequest.newBuilder()
        .setCmdType(SCMSecretKeyProtocolProtos.Type.GetAllSecretKeys).build());
    call("scm", proxies[2], SCMSecretKeyRequest.newBuilder().setCmdType(SCMSecretKeyProtocolProtos.Type.CheckAndRotate)
        .setCheckAndRotateRequest(SCMSecretKeyProtocolProtos.SCMGetCheckAndRotateRequest.newBuilder().setForce(true)).build());
    for (Object p : proxies) {
      RPC.stopProxy(p);
    }
  }
}
