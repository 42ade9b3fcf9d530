"""The pure core of SCM security: builders and rules, no I/O, no clock, no network.

Callers (the CA server on the leader, ``scm --init``, the enrolling parties, tests) pass keys,
serial numbers and ``now`` in and get ``cryptography`` objects or plain values back. It must not
import grpc, aiohttp, plyvel, asyncio, time or anything of ``scm_server`` above ``conf`` and
``exceptions`` (``.importlinter``: security-core-is-pure).
"""
