"""Hadoop RPC edge: Ozone's own components speak to this SCM over Hadoop IPC.

``codec`` is the pure framing core (no I/O), ``server`` the asyncio edge around it, ``convert``
carries values between the project's messages and Ozone's wire messages (``proto/ozone/``), and one
translator per protocol dispatches on ``cmdType`` to the SCM facade (``block_translator``).
"""
