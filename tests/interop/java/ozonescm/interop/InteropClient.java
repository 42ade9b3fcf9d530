package ozonescm.interop;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.ipc.Client;
import org.apache.hadoop.ipc.ProtobufRpcEngine2;
import org.apache.hadoop.ipc.RPC;
import org.apache.hadoop.ipc.RemoteException;
import org.apache.hadoop.net.NetUtils;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.thirdparty.protobuf.ServiceException;

import ozonescm.wire.block.ScmBlockLocationProtocolProtos.AllocateBlockResponse;
import ozonescm.wire.block.ScmBlockLocationProtocolProtos.AllocateScmBlockRequestProto;
import ozonescm.wire.block.ScmBlockLocationProtocolProtos.DeleteScmKeyBlocksRequestProto;
import ozonescm.wire.block.ScmBlockLocationProtocolProtos.KeyBlocks;
import ozonescm.wire.block.ScmBlockLocationProtocolProtos.SCMBlockLocationRequest;
import ozonescm.wire.block.ScmBlockLocationProtocolProtos.SCMBlockLocationResponse;
import ozonescm.wire.block.ScmBlockLocationProtocolProtos.SortDatanodesRequestProto;
import ozonescm.wire.block.ScmBlockLocationProtocolProtos.Type;
import ozonescm.wire.datanode.StorageContainerDatanodeProtocolProtos;
import ozonescm.wire.hdds.HddsProtos;

/**
 * Hadoop's own IPC client (RPC.getProxy + ProtobufRpcEngine2) against this project's SCM, driven by
 * tests/interop/test_hadoop_rpc_interop.py. Prints one line per fact, "KEY value...", for the test to check.
 *
 *   calls ADDR              every supported cmdType, one unsupported, a same-call retry
 *   allocate N ADDR,ADDR..  N single-block allocations, following ServerNotLeaderException hints
 *   datanode UUID ADDR SLV  a datanode's calls: a heartbeat before registering, GetVersion, Register at software
 *                           layout version 0 (refused, as Ozone refuses a foreign layout), Register at SLV, heartbeats
 *   location ADDR           every served cmdType of StorageContainerLocationProtocol, one unsupported (AdminCalls)
 *   security ADDR           SCMSecurityProtocol's reads, an issuance and a CRL call (AdminCalls)
 */
public final class InteropClient {
  private static final String NOT_LEADER = "org.apache.hadoop.hdds.ratis.ServerNotLeaderException";
  // a leader not ready yet: Ozone's failover proxy retries the same SCM for it (SCMHAUtils.getRetryAction)
  private static final String NO_FAILOVER = "org.apache.hadoop.hdds.scm.ha.RetriableWithNoFailoverException";
  // the two patterns Ozone's ServerNotLeaderException(String) applies to the message (written anew here)
  private static final Pattern NOT_LEADER_TEXT = Pattern.compile(".* Server:(.*?) is not the leader[.]+.*", Pattern.DOTALL);
  private static final Pattern SUGGESTED = Pattern.compile(".*Suggested leader is Server:([^:]*)(:[0-9]+).*", Pattern.DOTALL);

  private final Configuration conf = new Configuration();

  private InteropClient() {
    conf.setInt("ipc.client.connect.max.retries", 0);
    conf.setInt("ipc.client.connect.max.retries.on.timeouts", 0);
    conf.setInt("ipc.client.connect.timeout", 2000);
    conf.setInt("ipc.client.rpc-timeout.ms", 5000);
    RPC.setProtocolEngine(conf, ScmBlockLocationProtocolPB.class, ProtobufRpcEngine2.class);
  }

  private ScmBlockLocationProtocolPB proxy(String address) throws IOException {
    InetSocketAddress addr = NetUtils.createSocketAddr(address);
    return RPC.getProxy(ScmBlockLocationProtocolPB.class, RPC.getProtocolVersion(ScmBlockLocationProtocolPB.class),
        addr, UserGroupInformation.getCurrentUser(), conf, NetUtils.getDefaultSocketFactory(conf), 5000);
  }

  private static SCMBlockLocationRequest allocate(int numBlocks) {
    return SCMBlockLocationRequest.newBuilder()
        .setCmdType(Type.AllocateScmBlock)
        .setTraceID("interop")
        .setAllocateScmBlockRequest(AllocateScmBlockRequestProto.newBuilder()
            .setSize(1024).setNumBlocks(numBlocks).setType(HddsProtos.ReplicationType.RATIS)
            .setFactor(HddsProtos.ReplicationFactor.THREE).setOwner("interop-om"))
        .build();
  }

  private static String ids(SCMBlockLocationResponse resp) {
    StringBuilder out = new StringBuilder();
    for (AllocateBlockResponse b : resp.getAllocateScmBlockResponse().getBlocksList()) {
      out.append(' ').append(b.getContainerBlockID().getContainerID()).append(':').append(b.getContainerBlockID().getLocalID());
    }
    return out.toString().trim();
  }

  private void calls(String address) throws Exception {
    ScmBlockLocationProtocolPB p = proxy(address);
    SCMBlockLocationResponse info = p.send(null, SCMBlockLocationRequest.newBuilder().setCmdType(Type.GetScmInfo)
        .setGetScmInfoRequest(HddsProtos.GetScmInfoRequestProto.newBuilder()).build());
    System.out.println("GetScmInfo " + info.getStatus() + " " + info.getGetScmInfoResponse().getClusterId() + " "
        + info.getGetScmInfoResponse().getScmId());

    SCMBlockLocationResponse blocks = p.send(null, allocate(3));
    if (!blocks.getSuccess()) {
      throw new IllegalStateException("AllocateScmBlock refused: " + blocks.getStatus() + " " + blocks.getMessage());
    }
    System.out.println("AllocateScmBlock " + blocks.getStatus() + " " + ids(blocks));
    AllocateBlockResponse first = blocks.getAllocateScmBlockResponse().getBlocks(0);
    System.out.println("Pipeline " + first.getPipeline().getId().getId() + " members "
        + first.getPipeline().getMembersCount() + " " + first.getPipeline().getType() + "/" + first.getPipeline().getFactor());

    SCMBlockLocationResponse deleted = p.send(null, SCMBlockLocationRequest.newBuilder()
        .setCmdType(Type.DeleteScmKeyBlocks)
        .setDeleteScmKeyBlocksRequest(DeleteScmKeyBlocksRequestProto.newBuilder().addKeyBlocks(KeyBlocks.newBuilder()
            .setKey("/vol/bucket/key1")
            .addBlocks(HddsProtos.BlockID.newBuilder().setContainerBlockID(first.getContainerBlockID()))))
        .build());
    System.out.println("DeleteScmKeyBlocks " + deleted.getStatus() + " "
        + deleted.getDeleteScmKeyBlocksResponse().getResults(0).getObjectKey() + " "
        + deleted.getDeleteScmKeyBlocksResponse().getResults(0).getBlockResults(0).getResult());

    // the pipeline's members sorted for a reader that is its last member: that member first
    HddsProtos.Pipeline pipeline = first.getPipeline();
    HddsProtos.DatanodeDetailsProto reader = pipeline.getMembers(pipeline.getMembersCount() - 1);
    SortDatanodesRequestProto.Builder sortRequest = SortDatanodesRequestProto.newBuilder().setClient(reader.getHostName());
    for (HddsProtos.DatanodeDetailsProto member : pipeline.getMembersList()) {
      sortRequest.addNodeNetworkName(member.getUuid());
    }
    SCMBlockLocationResponse sort = p.send(null, SCMBlockLocationRequest.newBuilder().setCmdType(Type.SortDatanodes)
        .setSortDatanodesRequest(sortRequest).build());
    StringBuilder sorted = new StringBuilder();
    for (HddsProtos.DatanodeDetailsProto node : sort.getSortDatanodesResponse().getNodeList()) {
      sorted.append(' ').append(node.getHostName());
    }
    System.out.println("SortDatanodes " + sort.getStatus() + " reader " + reader.getHostName() + " sorted" + sorted);

    SCMBlockLocationResponse tree = p.send(null, SCMBlockLocationRequest.newBuilder().setCmdType(Type.GetClusterTree).build());
    HddsProtos.InnerNode root = tree.getGetClusterTreeResponse().getClusterTree();
    int racks = root.getChildrenMapCount();
    int leaves = 0;
    for (HddsProtos.ChildrenMap rack : root.getChildrenMapList()) {
      leaves += rack.getNetworkNode().getInnerNode().getChildrenMapCount();
    }
    System.out.println("GetClusterTree " + tree.getStatus() + " success=" + tree.getSuccess() + " root='"
        + root.getNodeTopology().getName() + "' level=" + root.getNodeTopology().getLevel() + " leaves="
        + root.getNumOfLeaves() + " racks=" + racks + " rackLeaves=" + leaves);

    // the same call sent twice (a retry keeps Hadoop's clientId and callId): the same blocks
    Client.setCallIdAndRetryCount(4242, 0, null);
    SCMBlockLocationResponse once = p.send(null, allocate(2));
    Client.setCallIdAndRetryCount(4242, 1, null);
    SCMBlockLocationResponse retried = p.send(null, allocate(2));
    System.out.println("Retry " + ids(once) + " | " + ids(retried));
    RPC.stopProxy(p);
  }

  private void allocateAcrossFailover(int count, String[] addresses) throws Exception {
    List<String> all = new ArrayList<>(List.of(addresses));
    int current = 0;
    Set<String> seen = new HashSet<>();
    int done = 0;
    int failovers = 0;
    ScmBlockLocationProtocolPB p = proxy(all.get(current));
    long deadline = System.currentTimeMillis() + 180_000;
    while (done < count) {
      if (System.currentTimeMillis() > deadline) {
        throw new IllegalStateException("no progress: " + done + " of " + count + " blocks in 180 s");
      }
      try {
        SCMBlockLocationResponse resp = p.send(null, allocate(1));
        if (!resp.getSuccess()) {
          System.out.println("REFUSED " + resp.getStatus() + " " + resp.getMessage().replace('\n', ' '));
          Thread.sleep(100);
          continue;
        }
        String id = ids(resp);
        System.out.println("BLOCK " + all.get(current) + " " + id);
        if (!seen.add(id)) {
          System.out.println("DUPLICATE " + id);
        }
        done++;
      } catch (ServiceException e) {
        Throwable cause = e.getCause();
        String next = null;
        if (cause instanceof RemoteException && NO_FAILOVER.equals(((RemoteException) cause).getClassName())) {
          System.out.println("NOTREADY " + all.get(current) + " " + cause.getMessage().replace('\n', ' '));
          Thread.sleep(100);
          continue;
        }
        if (cause instanceof RemoteException && NOT_LEADER.equals(((RemoteException) cause).getClassName())) {
          String msg = cause.getMessage();
          Matcher m = SUGGESTED.matcher(msg);
          if (NOT_LEADER_TEXT.matcher(msg).matches() && m.matches()) {
            next = m.group(1) + m.group(2);
            System.out.println("HINT " + all.get(current) + " -> " + next);
          } else {
            System.out.println("NOHINT " + all.get(current));
          }
        } else {
          System.out.println("CALLFAILED " + all.get(current) + " " + cause);
        }
        int target = next != null && all.contains(next) ? all.indexOf(next) : (current + 1) % all.size();
        if (target != current) {
          RPC.stopProxy(p);
          current = target;
          p = proxy(all.get(current));
          failovers++;
        } else {
          Thread.sleep(100);
        }
      }
    }
    System.out.println("DONE " + done + " unique " + seen.size() + " failovers " + failovers);
    RPC.stopProxy(p);
  }

  private StorageContainerDatanodeProtocolPB datanodeProxy(String address) throws IOException {
    RPC.setProtocolEngine(conf, StorageContainerDatanodeProtocolPB.class, ProtobufRpcEngine2.class);
    return RPC.getProxy(StorageContainerDatanodeProtocolPB.class,
        RPC.getProtocolVersion(StorageContainerDatanodeProtocolPB.class), NetUtils.createSocketAddr(address),
        UserGroupInformation.getCurrentUser(), conf, NetUtils.getDefaultSocketFactory(conf), 5000);
  }

  private static String commands(StorageContainerDatanodeProtocolProtos.SCMHeartbeatResponseProto answer) {
    StringBuilder out = new StringBuilder();
    for (StorageContainerDatanodeProtocolProtos.SCMCommandProto command : answer.getCommandsList()) {
      out.append(' ').append(command.getCommandType());
    }
    return out.toString().trim();
  }

  private void datanode(String uuid, String address, int softwareLayout) throws Exception {
    StorageContainerDatanodeProtocolPB p = datanodeProxy(address);
    java.util.UUID u = java.util.UUID.fromString(uuid);
    HddsProtos.UUID u128 = HddsProtos.UUID.newBuilder()
        .setMostSigBits(u.getMostSignificantBits()).setLeastSigBits(u.getLeastSignificantBits()).build();
    HddsProtos.DatanodeDetailsProto details = HddsProtos.DatanodeDetailsProto.newBuilder()
        .setUuid(uuid).setUuid128(u128).setId(HddsProtos.DatanodeIDProto.newBuilder().setUuid(u128))
        .setIpAddress("127.0.0.1").setHostName("java-dn-" + uuid.substring(0, 8))
        .addPorts(HddsProtos.Port.newBuilder().setName("RATIS").setValue(9858)).build();
    StorageContainerDatanodeProtocolProtos.NodeReportProto nodeReport = StorageContainerDatanodeProtocolProtos.NodeReportProto.newBuilder().addStorageReport(StorageContainerDatanodeProtocolProtos.StorageReportProto.newBuilder()
        .setStorageUuid("disk-" + uuid).setStorageLocation("/data").setCapacity(1L << 40).setScmUsed(0)
        .setRemaining(1L << 40)).build();
    StorageContainerDatanodeProtocolProtos.SCMHeartbeatRequestProto heartbeat = StorageContainerDatanodeProtocolProtos.SCMHeartbeatRequestProto.newBuilder()
        .setDatanodeDetails(details).setNodeReport(nodeReport).build();

    StorageContainerDatanodeProtocolProtos.SCMDatanodeResponse early = p.submitRequest(null, StorageContainerDatanodeProtocolProtos.SCMDatanodeRequest.newBuilder()
        .setCmdType(StorageContainerDatanodeProtocolProtos.Type.SendHeartbeat).setSendHeartbeatRequest(heartbeat).build());
    System.out.println("EarlyHeartbeat " + early.getStatus() + " " + commands(early.getSendHeartbeatResponse()));

    StorageContainerDatanodeProtocolProtos.SCMDatanodeResponse version = p.submitRequest(null, StorageContainerDatanodeProtocolProtos.SCMDatanodeRequest.newBuilder()
        .setCmdType(StorageContainerDatanodeProtocolProtos.Type.GetVersion).setGetVersionRequest(StorageContainerDatanodeProtocolProtos.SCMVersionRequestProto.newBuilder()).build());
    String cluster = "";
    for (HddsProtos.KeyValue kv : version.getGetVersionResponse().getKeysList()) {
      if (kv.getKey().equals("clusterID")) {
        cluster = kv.getValue();
      }
    }
    System.out.println("GetVersion " + version.getStatus() + " " + cluster);

    for (int layout : new int[] {0, softwareLayout}) {
      StorageContainerDatanodeProtocolProtos.SCMDatanodeResponse registered = p.submitRequest(null, StorageContainerDatanodeProtocolProtos.SCMDatanodeRequest.newBuilder()
          .setCmdType(StorageContainerDatanodeProtocolProtos.Type.Register).setRegisterRequest(StorageContainerDatanodeProtocolProtos.SCMRegisterRequestProto.newBuilder()
              .setExtendedDatanodeDetails(HddsProtos.ExtendedDatanodeDetailsProto.newBuilder().setDatanodeDetails(details)
                  .setVersion("2.2.0"))
              .setNodeReport(nodeReport)
              .setContainerReport(StorageContainerDatanodeProtocolProtos.ContainerReportsProto.newBuilder())
              .setPipelineReports(StorageContainerDatanodeProtocolProtos.PipelineReportsProto.newBuilder())
              .setDataNodeLayoutVersion(StorageContainerDatanodeProtocolProtos.LayoutVersionProto.newBuilder()
                  .setMetadataLayoutVersion(layout).setSoftwareLayoutVersion(layout)))
          .build());
      System.out.println((layout == softwareLayout ? "Register " : "RegisterForeignLayout ") + registered.getStatus()
          + " " + registered.getRegisterResponse().getErrorCode() + " " + registered.getRegisterResponse().getClusterID());
    }

    StorageContainerDatanodeProtocolProtos.SCMDatanodeResponse beat = p.submitRequest(null, StorageContainerDatanodeProtocolProtos.SCMDatanodeRequest.newBuilder()
        .setCmdType(StorageContainerDatanodeProtocolProtos.Type.SendHeartbeat).setSendHeartbeatRequest(heartbeat).build());
    StorageContainerDatanodeProtocolProtos.SCMHeartbeatResponseProto answer = beat.getSendHeartbeatResponse();
    System.out.println("Heartbeat " + beat.getStatus() + " " + answer.getDatanodeUUID()
        + " term=" + (answer.hasTerm() ? answer.getTerm() : -1) + " commands=[" + commands(answer) + "]");
    RPC.stopProxy(p);
  }

  public static void main(String[] args) throws Exception {
    InteropClient client = new InteropClient();
    switch (args[0]) {
      case "calls":
        client.calls(args[1]);
        break;
      case "datanode":
        client.datanode(args[1], args[2], Integer.parseInt(args[3]));
        break;
      case "allocate":
        client.allocateAcrossFailover(Integer.parseInt(args[1]), args[2].split(","));
        break;
      case "location":
        new AdminCalls(client.conf).location(args[1]);
        break;
      case "security":
        new AdminCalls(client.conf).security(args[1]);
        break;
      case "secretkeys":
        new SecretKeyCalls(client.conf).run(args[1]);
        break;
      default:
        throw new IllegalArgumentException("unknown command " + args[0]);
    }
    System.out.flush();
    System.exit(0);
  }
}
