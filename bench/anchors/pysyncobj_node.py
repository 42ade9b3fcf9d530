"""One PySyncObj replica with a tiny client protocol, for bench/raft_bench.py.

PySyncObj has no client protocol: replicated methods are called inside a replica's
process. So each benchmark replica runs this script: a ``SyncObj`` holding a dict with
one ``@replicated set(key, value)``, its FILE journal (``journalFile`` + ``fullDumpFile``,
PySyncObj's durable-ish mode: an mmap, no fsync), default timing (batching on, 100 ms
append-entries period), plus an asyncio TCP server on ``--client-port`` speaking lines:

    P <req-id> <key> <base64-value>\\n  ->  OK <req-id>\\n  |  ER <req-id> <pysyncobj FAIL_REASON>\\n
    S\\n                               ->  S <state 0/1/2> <leader host:port or -> <self host:port>\\n

Requests on one connection may be pipelined; replies carry the request id. The
replicated call is made with a callback (PySyncObj runs its own thread; the callback
hands the reply back to the asyncio loop with ``call_soon_threadsafe``). Writes that
arrive at a follower are forwarded by PySyncObj itself to its leader.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated


class BenchKV(SyncObj):  # type: ignore[misc]
    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_addr, partners, conf)
        self._data: dict[str, bytes] = {}

    @replicated  # type: ignore[misc]
    def set(self, key: str, value: bytes) -> bool:
        self._data[key] = value
        return True


async def serve(obj: BenchKV, port: int) -> None:
    loop = asyncio.get_running_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def reply(line: str) -> None:
            if not writer.is_closing():
                writer.write(line.encode())

        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                parts = line.decode().split()
                if parts[0] == "S":
                    st = obj.getStatus()
                    leader = st["leader"]
                    reply(f"S {int(st['state'])} {leader.address if leader else '-'} {st['self'].address}\n")
                elif parts[0] == "P":
                    rid, key, val = parts[1], parts[2], base64.b64decode(parts[3])

                    def done(result: Any, error: int, rid: str = rid) -> None:
                        msg = f"OK {rid}\n" if error == 0 else f"ER {rid} {error}\n"
                        loop.call_soon_threadsafe(reply, msg)

                    obj.set(key, val, callback=done)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--self", required=True, help="127.0.0.1:PORT of this replica's raft port")
    ap.add_argument("--partners", required=True, help="comma-separated raft addresses of the others")
    ap.add_argument("--client-port", type=int, required=True)
    ap.add_argument("--data-dir", required=True)
    args = ap.parse_args()
    conf = SyncObjConf(
        journalFile=f"{args.data_dir}/journal.bin",
        fullDumpFile=f"{args.data_dir}/dump.bin",
        dynamicMembershipChange=False,
    )
    obj = BenchKV(args.self, args.partners.split(","), conf)
    asyncio.run(serve(obj, args.client_port))


if __name__ == "__main__":
    main()
