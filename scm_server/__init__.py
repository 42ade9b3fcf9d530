"""Apache Ozone's Storage Container Manager (SCM) with Raft high availability, in Python."""

__version__ = "0.1.0"
