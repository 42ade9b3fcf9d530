"""The pure Raft core: no I/O, no clock, no threads; randomness is injected.

See :mod:`scm_server.raft.core.types` for the contract with the driver.
"""
