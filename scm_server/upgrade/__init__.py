"""Upgrades: the SCM's upgrade finalization (``ozone admin scm finalizeupgrade``).

``finalization`` drives finalization on the leader through the replicated FinalizationStateManager; Ozone's HDDS
layout features, the finalization checkpoints and the statuses they report are values in
:mod:`scm_server.hdds_layout`, low in the house because storage, HA, the node manager and the simulator read them.
"""
