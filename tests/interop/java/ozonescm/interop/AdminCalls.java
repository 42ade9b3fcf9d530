package ozonescm.interop;

import java.net.InetSocketAddress;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.ipc.ProtobufRpcEngine2;
import org.apache.hadoop.ipc.RPC;
import org.apache.hadoop.ipc.RemoteException;
import org.apache.hadoop.net.NetUtils;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.thirdparty.protobuf.ServiceException;

import ozonescm.wire.container.StorageContainerLocationProtocolProtos.ScmContainerLocationRequest;
import ozonescm.wire.container.StorageContainerLocationProtocolProtos.ScmContainerLocationResponse;
import ozonescm.wire.container.StorageContainerLocationProtocolProtos;
import ozonescm.wire.hdds.HddsProtos;
import ozonescm.wire.security.SCMSecurityProtocolProtos;
import ozonescm.wire.security.SCMSecurityProtocolProtos.SCMSecurityRequest;
import ozonescm.wire.security.SCMSecurityProtocolProtos.SCMSecurityResponse;

/**
 * Hadoop's own client calling every served cmdType of StorageContainerLocationProtocol (what `ozone admin`
 * sends) and of SCMSecurityProtocol; one line per call, "cmdType outcome...", for the Python test to check.
 */
final class AdminCalls {
  private final Configuration conf;

  AdminCalls(Configuration conf) {
    this.conf = conf;
    RPC.setProtocolEngine(conf, StorageContainerLocationProtocolPB.class, ProtobufRpcEngine2.class);
    RPC.setProtocolEngine(conf, SCMSecurityProtocolPB.class, ProtobufRpcEngine2.class);
  }

  private <T> T proxy(Class<T> protocol, String address) throws Exception {
    InetSocketAddress addr = NetUtils.createSocketAddr(address);
    return RPC.getProxy(protocol, RPC.getProtocolVersion(protocol), addr, UserGroupInformation.getCurrentUser(), conf,
        NetUtils.getDefaultSocketFactory(conf), 5000);
  }

  private static String error(ServiceException e) {
    Throwable cause = e.getCause();
    if (cause instanceof RemoteException) {
      RemoteException remote = (RemoteException) cause;
      return "ERROR " + remote.getClassName() + " " + remote.getMessage().replace('\n', ' ');
    }
    return "ERROR " + cause;
  }

  // ---- StorageContainerLocationProtocol ----

  private StorageContainerLocationProtocolPB loc;

  private ScmContainerLocationResponse call(String name, ScmContainerLocationRequest.Builder request) {
    StorageContainerLocationProtocolProtos.Type type = StorageContainerLocationProtocolProtos.Type.valueOf(name);
    try {
      ScmContainerLocationResponse resp = loc.submitRequest(null, request.setCmdType(type).setTraceID("j-" + name).build());
      if (resp.getCmdType() != type || !resp.getTraceID().equals("j-" + name)) {
        throw new IllegalStateException(name + ": answered " + resp.getCmdType() + " " + resp.getTraceID());
      }
      return resp;
    } catch (ServiceException e) {
      System.out.println(name + " " + error(e));
      return null;
    }
  }

  private static void fact(String name, ScmContainerLocationResponse resp, String detail) {
    if (resp != null) {
      System.out.println(name + " " + resp.getStatus() + " " + detail);
    }
  }

  private static HddsProtos.PipelineID pid(HddsProtos.Pipeline p) {
    return p.getId();
  }

  void location(String address) throws Exception {
    loc = proxy(StorageContainerLocationProtocolPB.class, address);
    ScmContainerLocationResponse r;
    r = call("InSafeMode", ScmContainerLocationRequest.newBuilder()
        .setInSafeModeRequest(StorageContainerLocationProtocolProtos.InSafeModeRequestProto.newBuilder()));
    fact("InSafeMode", r, r == null ? "" : "inSafeMode=" + r.getInSafeModeResponse().getInSafeMode());
    r = call("GetSafeModeRuleStatuses", ScmContainerLocationRequest.newBuilder()
        .setGetSafeModeRuleStatusesRequest(StorageContainerLocationProtocolProtos.GetSafeModeRuleStatusesRequestProto.newBuilder()));
    fact("GetSafeModeRuleStatuses", r, r == null ? "" : "rules=" + r.getGetSafeModeRuleStatusesResponse().getSafeModeRuleStatusesProtoCount());
    r = call("ForceExitSafeMode", ScmContainerLocationRequest.newBuilder()
        .setForceExitSafeModeRequest(StorageContainerLocationProtocolProtos.ForceExitSafeModeRequestProto.newBuilder()));
    fact("ForceExitSafeMode", r, r == null ? "" : "exited=" + r.getForceExitSafeModeResponse().getExitedSafeMode());
    r = call("GetScmInfo", ScmContainerLocationRequest.newBuilder().setGetScmInfoRequest(HddsProtos.GetScmInfoRequestProto.newBuilder()));
    fact("GetScmInfo", r, r == null ? "" : r.getGetScmInfoResponse().getClusterId() + " peers=" + r.getGetScmInfoResponse().getPeerRolesCount());
    r = call("QueryNode", ScmContainerLocationRequest.newBuilder().setNodeQueryRequest(
        StorageContainerLocationProtocolProtos.NodeQueryRequestProto.newBuilder().setScope(HddsProtos.QueryScope.CLUSTER)
            .setState(HddsProtos.NodeState.HEALTHY)));
    fact("QueryNode", r, r == null ? "" : "healthy=" + r.getNodeQueryResponse().getDatanodesCount());
    if (r != null && r.getNodeQueryResponse().getDatanodesCount() > 0) {
      HddsProtos.DatanodeDetailsProto dn = r.getNodeQueryResponse().getDatanodes(0).getNodeID();
      java.util.UUID u = java.util.UUID.fromString(dn.getUuid());
      ScmContainerLocationResponse one = call("SingleNodeQuery", ScmContainerLocationRequest.newBuilder().setSingleNodeQueryRequest(
          StorageContainerLocationProtocolProtos.SingleNodeQueryRequestProto.newBuilder().setUuid(HddsProtos.UUID.newBuilder()
              .setMostSigBits(u.getMostSignificantBits()).setLeastSigBits(u.getLeastSignificantBits()))));
      fact("SingleNodeQuery", one, one == null ? "" : "same=" + one.getSingleNodeQueryResponse().getDatanode().getNodeID().getHostName()
          .equals(dn.getHostName()));
    }

    r = call("ListPipelines", ScmContainerLocationRequest.newBuilder()
        .setListPipelineRequest(StorageContainerLocationProtocolProtos.ListPipelineRequestProto.newBuilder()));
    HddsProtos.Pipeline open = null;
    HddsProtos.Pipeline single = null;  // a RATIS/ONE pipeline: what the pipeline commands act on if none can be made
    if (r != null) {
      for (HddsProtos.Pipeline p : r.getListPipelineResponse().getPipelinesList()) {
        if (p.getState() == HddsProtos.PipelineState.PIPELINE_OPEN && p.getFactor() == HddsProtos.ReplicationFactor.THREE) {
          open = p;
        }
        if (p.getState() == HddsProtos.PipelineState.PIPELINE_OPEN && p.getFactor() == HddsProtos.ReplicationFactor.ONE) {
          single = p;
        }
      }
      fact("ListPipelines", r, "pipelines=" + r.getListPipelineResponse().getPipelinesCount() + " open3=" + (open != null));
    }
    if (open != null) {
      r = call("GetPipeline", ScmContainerLocationRequest.newBuilder().setGetPipelineRequest(
          StorageContainerLocationProtocolProtos.GetPipelineRequestProto.newBuilder().setPipelineID(pid(open))));
      fact("GetPipeline", r, r == null ? "" : "same=" + r.getGetPipelineResponse().getPipeline().getId().getId().equals(open.getId().getId())
          + " members=" + r.getGetPipelineResponse().getPipeline().getMembersCount());
    }

    r = call("AllocateContainer", ScmContainerLocationRequest.newBuilder().setContainerRequest(
        StorageContainerLocationProtocolProtos.ContainerRequestProto.newBuilder().setReplicationType(HddsProtos.ReplicationType.RATIS)
            .setReplicationFactor(HddsProtos.ReplicationFactor.THREE).setOwner("java-admin")));
    long cid = -1;
    if (r != null) {
      HddsProtos.ContainerWithPipeline cwp = r.getContainerResponse().getContainerWithPipeline();
      cid = cwp.getContainerInfo().getContainerID();
      fact("AllocateContainer", r, r.getContainerResponse().getErrorCode() + " id=" + cid + " state=" + cwp.getContainerInfo().getState()
          + " owner=" + cwp.getContainerInfo().getOwner() + " members=" + cwp.getPipeline().getMembersCount());
    }
    r = call("GetContainer", ScmContainerLocationRequest.newBuilder().setGetContainerRequest(
        StorageContainerLocationProtocolProtos.GetContainerRequestProto.newBuilder().setContainerID(cid)));
    fact("GetContainer", r, r == null ? "" : "id=" + r.getGetContainerResponse().getContainerInfo().getContainerID());
    r = call("GetContainerWithPipeline", ScmContainerLocationRequest.newBuilder().setGetContainerWithPipelineRequest(
        StorageContainerLocationProtocolProtos.GetContainerWithPipelineRequestProto.newBuilder().setContainerID(cid)));
    fact("GetContainerWithPipeline", r, r == null ? "" : "id=" + r.getGetContainerWithPipelineResponse().getContainerWithPipeline().getContainerInfo().getContainerID()
        + " members=" + r.getGetContainerWithPipelineResponse().getContainerWithPipeline().getPipeline().getMembersCount());
    r = call("GetContainerWithPipelineBatch", ScmContainerLocationRequest.newBuilder().setGetContainerWithPipelineBatchRequest(
        StorageContainerLocationProtocolProtos.GetContainerWithPipelineBatchRequestProto.newBuilder().addContainerIDs(cid)));
    fact("GetContainerWithPipelineBatch", r, r == null ? "" : "n=" + r.getGetContainerWithPipelineBatchResponse().getContainerWithPipelinesCount()
        + " id=" + r.getGetContainerWithPipelineBatchResponse().getContainerWithPipelines(0).getContainerInfo().getContainerID());
    r = call("GetExistContainerWithPipelinesInBatch", ScmContainerLocationRequest.newBuilder().setGetExistContainerWithPipelinesInBatchRequest(
        StorageContainerLocationProtocolProtos.GetExistContainerWithPipelinesInBatchRequestProto.newBuilder()
            .addContainerIDs(cid).addContainerIDs(987654321L)));
    fact("GetExistContainerWithPipelinesInBatch", r, r == null ? "" : "n=" + r.getGetExistContainerWithPipelinesInBatchResponse().getContainerWithPipelinesCount());
    r = call("GetContainerReplicas", ScmContainerLocationRequest.newBuilder().setGetContainerReplicasRequest(
        StorageContainerLocationProtocolProtos.GetContainerReplicasRequestProto.newBuilder().setContainerID(cid)));
    fact("GetContainerReplicas", r, r == null ? "" : "replicas=" + r.getGetContainerReplicasResponse().getContainerReplicaCount());
    r = call("ListContainer", ScmContainerLocationRequest.newBuilder().setScmListContainerRequest(
        StorageContainerLocationProtocolProtos.SCMListContainerRequestProto.newBuilder().setCount(1000)));
    boolean listed = false;
    if (r != null) {
      for (HddsProtos.ContainerInfoProto c : r.getScmListContainerResponse().getContainersList()) {
        listed |= c.getContainerID() == cid;
      }
      fact("ListContainer", r, "listed=" + listed + " total=" + r.getScmListContainerResponse().getContainerCount());
    }
    r = call("GetContainerCount", ScmContainerLocationRequest.newBuilder().setGetContainerCountRequest(
        StorageContainerLocationProtocolProtos.GetContainerCountRequestProto.newBuilder()));
    fact("GetContainerCount", r, r == null ? "" : "count=" + r.getGetContainerCountResponse().getContainerCount());
    r = call("CloseContainer", ScmContainerLocationRequest.newBuilder().setScmCloseContainerRequest(
        StorageContainerLocationProtocolProtos.SCMCloseContainerRequestProto.newBuilder().setContainerID(cid)));
    fact("CloseContainer", r, r == null ? "" : "" + r.getScmCloseContainerResponse().getStatus());

    r = call("AllocatePipeline", ScmContainerLocationRequest.newBuilder().setPipelineRequest(
        StorageContainerLocationProtocolProtos.PipelineRequestProto.newBuilder().setReplicationType(HddsProtos.ReplicationType.RATIS)
            .setReplicationFactor(HddsProtos.ReplicationFactor.ONE)));
    HddsProtos.Pipeline made = null;
    if (r != null) {
      made = r.getPipelineResponse().getPipeline();
      fact("AllocatePipeline", r, r.getPipelineResponse().getErrorCode() + " members=" + made.getMembersCount());
    } else {
      made = single;  // every datanode at its pipeline limit (FAILED_TO_FIND_SUITABLE_NODE above): act on an existing one
    }
    if (made != null) {
      for (String name : new String[] {"DeactivatePipeline", "ActivatePipeline", "ClosePipeline"}) {
        ScmContainerLocationRequest.Builder b = ScmContainerLocationRequest.newBuilder();
        if (name.equals("DeactivatePipeline")) {
          b.setDeactivatePipelineRequest(StorageContainerLocationProtocolProtos.DeactivatePipelineRequestProto.newBuilder().setPipelineID(pid(made)));
        } else if (name.equals("ActivatePipeline")) {
          b.setActivatePipelineRequest(StorageContainerLocationProtocolProtos.ActivatePipelineRequestProto.newBuilder().setPipelineID(pid(made)));
        } else {
          b.setClosePipelineRequest(StorageContainerLocationProtocolProtos.ClosePipelineRequestProto.newBuilder().setPipelineID(pid(made)));
        }
        fact(name, call(name, b), made.getId().getId());
      }
    }

    r = call("StopReplicationManager", ScmContainerLocationRequest.newBuilder()
        .setStopReplicationManagerRequest(StorageContainerLocationProtocolProtos.StopReplicationManagerRequestProto.newBuilder()));
    fact("StopReplicationManager", r, "");
    ScmContainerLocationRequest.Builder status = ScmContainerLocationRequest.newBuilder()
        .setSeplicationManagerStatusRequest(StorageContainerLocationProtocolProtos.ReplicationManagerStatusRequestProto.newBuilder());
    r = call("GetReplicationManagerStatus", status);
    String stopped = r == null ? "?" : "" + r.getReplicationManagerStatusResponse().getIsRunning();
    r = call("StartReplicationManager", ScmContainerLocationRequest.newBuilder()
        .setStartReplicationManagerRequest(StorageContainerLocationProtocolProtos.StartReplicationManagerRequestProto.newBuilder()));
    fact("StartReplicationManager", r, "");
    r = call("GetReplicationManagerStatus", status);
    fact("GetReplicationManagerStatus", r, r == null ? "" : "afterStop=" + stopped + " afterStart=" + r.getReplicationManagerStatusResponse().getIsRunning());
    r = call("GetReplicationManagerReport", ScmContainerLocationRequest.newBuilder()
        .setReplicationManagerReportRequest(StorageContainerLocationProtocolProtos.ReplicationManagerReportRequestProto.newBuilder()));
    fact("GetReplicationManagerReport", r, r == null ? "" : "stats=" + r.getGetReplicationManagerReportResponse().getReport().getStatCount());

    r = call("DecommissionNodes", ScmContainerLocationRequest.newBuilder().setDecommissionNodesRequest(
        StorageContainerLocationProtocolProtos.DecommissionNodesRequestProto.newBuilder().addHosts("no-such-dn.example")));
    fact("DecommissionNodes", r, r == null ? "" : "failed=" + (r.getDecommissionNodesResponse().getFailedHostsCount() == 0 ? ""
        : r.getDecommissionNodesResponse().getFailedHosts(0).getHost()));
    r = call("StartMaintenanceNodes", ScmContainerLocationRequest.newBuilder().setStartMaintenanceNodesRequest(
        StorageContainerLocationProtocolProtos.StartMaintenanceNodesRequestProto.newBuilder().addHosts("no-such-dn.example").setEndInHours(1)));
    fact("StartMaintenanceNodes", r, r == null ? "" : "failed=" + r.getStartMaintenanceNodesResponse().getFailedHostsCount());
    r = call("RecommissionNodes", ScmContainerLocationRequest.newBuilder().setRecommissionNodesRequest(
        StorageContainerLocationProtocolProtos.RecommissionNodesRequestProto.newBuilder().addHosts("no-such-dn.example")));
    fact("RecommissionNodes", r, r == null ? "" : "failed=" + r.getRecommissionNodesResponse().getFailedHostsCount());

    // container tokens are off on this (insecure) ring: an empty token, as Ozone's disabled generator answers
    r = call("GetContainerToken", ScmContainerLocationRequest.newBuilder().setContainerTokenRequest(
        StorageContainerLocationProtocolProtos.GetContainerTokenRequestProto.newBuilder()
            .setContainerID(HddsProtos.ContainerID.newBuilder().setId(1))));
    fact("GetContainerToken", r, r == null ? "" : "kind=" + r.getContainerTokenResponse().getToken().getKind()
        + " identifier=" + r.getContainerTokenResponse().getToken().getIdentifier().size());
    // a refusal (no member scm-x): an error naming the member, and the connection serves on
    call("TransferLeadership", ScmContainerLocationRequest.newBuilder().setTransferScmLeadershipRequest(
        HddsProtos.TransferLeadershipRequestProto.newBuilder().setNewLeaderId("scm-x")));
    r = call("GetContainer", ScmContainerLocationRequest.newBuilder().setGetContainerRequest(
        StorageContainerLocationProtocolProtos.GetContainerRequestProto.newBuilder().setContainerID(987654321L)));
    RPC.stopProxy(loc);
  }

  // ---- SCMSecurityProtocol ----

  void security(String address) throws Exception {
    SCMSecurityProtocolPB sec = proxy(SCMSecurityProtocolPB.class, address);
    SCMSecurityRequest[] requests = {
        SCMSecurityRequest.newBuilder().setCmdType(SCMSecurityProtocolProtos.Type.GetCACertificate)
            .setGetCACertificateRequest(SCMSecurityProtocolProtos.SCMGetCACertificateRequestProto.newBuilder()).build(),
        SCMSecurityRequest.newBuilder().setCmdType(SCMSecurityProtocolProtos.Type.GetRootCACertificate).build(),
        SCMSecurityRequest.newBuilder().setCmdType(SCMSecurityProtocolProtos.Type.GetAllRootCaCertificates)
            .setGetAllRootCaCertificatesRequestProto(SCMSecurityProtocolProtos.SCMGetAllRootCaCertificatesRequestProto.newBuilder()).build(),
        SCMSecurityRequest.newBuilder().setCmdType(SCMSecurityProtocolProtos.Type.ListCACertificate)
            .setListCACertificateRequestProto(SCMSecurityProtocolProtos.SCMListCACertificateRequestProto.newBuilder()).build(),
        SCMSecurityRequest.newBuilder().setCmdType(SCMSecurityProtocolProtos.Type.GetCertificate)
            .setGetCertificateRequest(SCMSecurityProtocolProtos.SCMGetCertificateRequestProto.newBuilder().setCertSerialId("1")).build(),
        SCMSecurityRequest.newBuilder().setCmdType(SCMSecurityProtocolProtos.Type.ListCertificate)
            .setListCertificateRequest(SCMSecurityProtocolProtos.SCMListCertificateRequestProto.newBuilder()
                .setRole(HddsProtos.NodeType.DATANODE).setCount(10)).build(),
        SCMSecurityRequest.newBuilder().setCmdType(SCMSecurityProtocolProtos.Type.GetDataNodeCertificate)
            .setGetDataNodeCertRequest(SCMSecurityProtocolProtos.SCMGetDataNodeCertRequestProto.newBuilder()
                .setDatanodeDetails(HddsProtos.DatanodeDetailsProto.newBuilder().setIpAddress("127.0.0.1").setHostName("java-dn"))
                .setCSR("-----BEGIN CERTIFICATE REQUEST-----")).build(),
        SCMSecurityRequest.newBuilder().setCmdType(SCMSecurityProtocolProtos.Type.GetCrls)
            .setGetCrlsRequest(SCMSecurityProtocolProtos.SCMGetCrlsRequestProto.newBuilder().addCrlId(1)).build(),
    };
    for (SCMSecurityRequest request : requests) {
      String name = request.getCmdType().name();
      try {
        SCMSecurityResponse resp = sec.submitRequest(null, request.toBuilder().setTraceID("j-" + name).build());
        System.out.println(name + " " + resp.getStatus() + " success=" + resp.getSuccess() + " trace=" + resp.getTraceID()
            + " " + resp.getMessage().replace('\n', ' '));
      } catch (ServiceException e) {
        System.out.println(name + " " + error(e));
      }
    }
    RPC.stopProxy(sec);
  }
}
