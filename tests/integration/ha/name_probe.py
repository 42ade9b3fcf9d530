"""A client process for the moved-member test: allocates blocks through ``SCMClient`` using SCM *names*
(resolved in its own mount namespace) and prints one JSON line per call outcome change:
``{"t": wall-clock seconds, "ok": bool, "address": SCM that answered or was tried}``.

Run by tests/integration/ha/test_new_address.py as ``python name_probe.py ADDR[,ADDR] SECONDS``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from scm_server.client import SCMClient, SCMClientConfig
from scm_server.exceptions import SCMError
from scm_server.proto import hdds_pb2


async def main(addresses: str, seconds: float) -> None:
    config = SCMClientConfig(max_retries=50, retry_interval=0.1, rpc_timeout=30)
    end = time.monotonic() + seconds
    last: tuple[bool, str] | None = None
    async with SCMClient(addresses, config) as client:
        while time.monotonic() < end:
            try:
                await client.allocate_block(1 << 20, 1, hdds_pb2.RATIS, hdds_pb2.THREE, "probe")
                state = (True, client.current_address)
            except SCMError as exc:
                state = (False, f"{client.current_address}: {str(exc)[:120]}")
            if state != last:
                print(json.dumps({"t": time.time(), "ok": state[0], "address": state[1]}), flush=True)
                last = state
            await asyncio.sleep(0.02)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
