package ozonescm.interop;

import java.net.InetSocketAddress;
import java.security.PrivilegedExceptionAction;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.ipc.ProtobufRpcEngine2;
import org.apache.hadoop.ipc.RPC;
import org.apache.hadoop.ipc.RemoteException;
import org.apache.hadoop.net.NetUtils;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.thirdparty.protobuf.ServiceException;

import ozonescm.wire.container.StorageContainerLocationProtocolProtos;
import ozonescm.wire.container.StorageContainerLocationProtocolProtos.ScmContainerLocationRequest;
import ozonescm.wire.container.StorageContainerLocationProtocolProtos.ScmContainerLocationResponse;
import ozonescm.wire.hdds.HddsProtos;

/**
 * Hadoop's own IPC client with Kerberos (UserGroupInformation.loginUserFromKeytab, SaslRpcClient, GSSAPI in the
 * JDK) against this project's SCM, driven by tests/kerberos/test_java_client_kerberos.py. Prints one line per fact.
 *
 *   PRINCIPAL KEYTAB PROTECTION ADDRESS    GetScmInfo, then ForceExitSafeMode (an admin command)
 */
public final class KerberosCalls {
  public static void main(String[] args) throws Exception {
    String principal = args[0];
    String keytab = args[1];
    String protection = args[2];
    String address = args[3];
    Configuration conf = new Configuration();
    conf.set("hadoop.security.authentication", "kerberos");
    conf.set("hadoop.rpc.protection", protection);
    conf.set("hdds.scm.kerberos.principal", args.length > 4 ? args[4] : "scm/_HOST@EXAMPLE.COM");
    conf.setInt("ipc.client.connect.max.retries", 0);
    conf.setInt("ipc.client.connect.timeout", 5000);
    conf.setInt("ipc.client.rpc-timeout.ms", 10000);
    RPC.setProtocolEngine(conf, SecureLocationProtocolPB.class, ProtobufRpcEngine2.class);
    UserGroupInformation.setConfiguration(conf);
    UserGroupInformation.loginUserFromKeytab(principal, keytab);
    UserGroupInformation ugi = UserGroupInformation.getLoginUser();
    System.out.println("LOGIN " + ugi.getUserName() + " " + ugi.getAuthenticationMethod());
    ugi.doAs((PrivilegedExceptionAction<Void>) () -> {
      InetSocketAddress addr = NetUtils.createSocketAddr(address);
      SecureLocationProtocolPB loc = RPC.getProxy(SecureLocationProtocolPB.class,
          RPC.getProtocolVersion(SecureLocationProtocolPB.class), addr, ugi, conf,
          NetUtils.getDefaultSocketFactory(conf), 10000);
      call(loc, "GetScmInfo", ScmContainerLocationRequest.newBuilder()
          .setGetScmInfoRequest(HddsProtos.GetScmInfoRequestProto.newBuilder()));
      call(loc, "ForceExitSafeMode", ScmContainerLocationRequest.newBuilder()
          .setForceExitSafeModeRequest(StorageContainerLocationProtocolProtos.ForceExitSafeModeRequestProto.newBuilder()));
      RPC.stopProxy(loc);
      return null;
    });
  }

  private static void call(SecureLocationProtocolPB loc, String name, ScmContainerLocationRequest.Builder request) {
    StorageContainerLocationProtocolProtos.Type type = StorageContainerLocationProtocolProtos.Type.valueOf(name);
    try {
      ScmContainerLocationResponse resp = loc.submitRequest(null, request.setCmdType(type).setTraceID("k").build());
      String detail = type == StorageContainerLocationProtocolProtos.Type.GetScmInfo
          ? resp.getGetScmInfoResponse().getClusterId() : "";
      System.out.println(name + " " + resp.getStatus() + " " + detail);
    } catch (ServiceException e) {
      Throwable cause = e.getCause();
      if (cause instanceof RemoteException) {
        RemoteException remote = (RemoteException) cause;
        System.out.println(name + " ERROR " + remote.getClassName() + " " + remote.getMessage().replace('\n', ' '));
      } else {
        System.out.println(name + " ERROR " + cause);
      }
    }
  }
}
