"""The CA runtime: the SCM's certificate authority and the security of a running SCM, on top of HA.

This room holds what needs the replicated state (it imports :mod:`scm_server.ha`), so that
:mod:`scm_server.security` below it stays usable by HA itself, the client, the CLI and the datanode
simulator (an import contract keeps ``security`` from importing ``ha`` or this room):

* :mod:`scm_server.ca.ca_server`: the SCM's certificate authority (leader only), which issues
  certificates with serials from the replicated ``CertificateId`` sequence, stores them through
  Raft (the ``validCerts``/``validSCMCerts`` tables) and records revocations.
* :mod:`scm_server.ca.scm_security`: security inside one SCM process (``SCMSecurity``): loads the
  CA material, binds the CA server to the facade, records certificates seen on calls (a leader-only
  SCM service), reloads swapped sub-CA files, renews this SCM's sub-CA, and its ``/prom`` metrics.

Who calls it: the SCM daemon (``SCMSecurity.load``/``attach``/``start``/``stop``) and the security
gRPC servicers (:mod:`scm_server.server.security_services`). It never imports the servicers, the
daemon or the CLI.
"""
