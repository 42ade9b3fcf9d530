"""SCM HA boundary: the replicated-call codec and decorator, the state-machine dispatcher, the DB
transaction buffer, SCMContext, SCM services and the SequenceIdGenerator.

Managers mark their replicated mutations with :func:`scm_server.ha.replicate.replicate`; an
:class:`~scm_server.ha.scm_ha_manager_api.SCMHAManager` (the Raft-backed one, or
:class:`~scm_server.ha.scm_ha_manager_stub.SCMHAManagerStub` for a single non-Raft SCM) carries
each request to every SCM, where the dispatcher applies it deterministically.
"""
