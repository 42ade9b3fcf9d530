"""The anchors the Raft benchmark runs beside ours: etcd's native gRPC API (``etcd_grpc``) and a PySyncObj replica
(``pysyncobj_node``, started as its own process)."""
