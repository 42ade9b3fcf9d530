"""Secure SCM HA, the layer below HA: certificates, keys, mutual TLS, authorization, enrolment.

Everything here sits below :mod:`scm_server.ha` and is used by it, by the servicers, the client, the
CLI and the datanode simulator; it never imports ``scm_server.ha`` nor the CA runtime on top of HA
(:mod:`scm_server.ca`: the CA server that replicates through Raft, and the per-SCM security runtime
with recording, reloads and renewal), checked by import-linter.

Layout (the pure part first, effects at the edges, as the Raft core and the managers do):

* :mod:`scm_server.security.core`: PURE builders and rules over ``cryptography``: keys in,
  certificates/CSRs/CRLs out, identities read from certificates, the authorization table and the
  validation of certificate requests. Every function takes an injected ``now`` (and keys and
  serials); nothing there opens a file or a socket or reads the clock (checked by import-linter).
* :mod:`scm_server.security.keystore`: the on-disk layout of keys and certificates (Ozone's
  ``<metadata>/scm/{ca,sub-ca}/{keys,certs}``, datanodes' ``dn/``); atomic writes.
* :mod:`scm_server.security.tls`: gRPC credentials (dynamic on the server side, so a renewed
  certificate is served without a restart), the one channel factory every client uses, and the
  server interceptor that authenticates each call (revocation, cluster) and authorizes it.
* :mod:`scm_server.security.init`: what ``scm --init`` / ``scm --bootstrap`` do when security is on.
* :mod:`scm_server.security.cert_client`: the enrolling/renewing side (bootstrapping SCMs,
  datanodes, the CLI's ``cert`` commands).
"""
