"""Secure SCM HA: certificates, CAs, mutual TLS, authorization, renewal and revocation.

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
* :mod:`scm_server.security.ca_server`: the SCM's certificate authority (leader only), which
  issues certificates with serials from the replicated ``CertificateId`` sequence, stores them
  through Raft and records revocations.
* :mod:`scm_server.security.init`: what ``scm --init`` / ``scm --bootstrap`` do when security is on.
* :mod:`scm_server.security.cert_client`: the enrolling/renewing side (bootstrapping SCMs,
  datanodes, the CLI's ``cert`` commands).
"""
