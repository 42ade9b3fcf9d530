"""Upgrades: Ozone's HDDS layout features and the SCM's upgrade finalization (``ozone admin scm finalizeupgrade``).

``layout`` is pure (the feature table, the finalization checkpoints and the statuses they report);
``finalization`` drives finalization on the leader through the replicated FinalizationStateManager.
"""
