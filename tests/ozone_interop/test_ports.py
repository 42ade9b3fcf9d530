"""The interop harness's ports (tests/ozone_interop/ozone_procs.py, no JVM): blocks of a range outside the kernel's
ephemeral range, reserved machine-wide by lock files, so harnesses running at once never hand out the same port."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.ozone_interop.ozone_procs import (
    DEFAULT_PORT_RANGE,
    PORT_BLOCK,
    REPO,
    OzoneInteropError,
    PortAllocator,
    PortPool,
    ephemeral_range,
    port_bindable,
    port_range_from_env,
    wait_for,
)

EPHEMERAL = (32768, 60999)


def free_range(size: int) -> tuple[int, int]:
    """A stretch of the default range with every port bindable now (the test's own pools use it)."""
    lo, hi = DEFAULT_PORT_RANGE
    for start in range(hi - size + 1, lo, -size):
        if all(port_bindable(p) for p in range(start, start + size)):
            return start, start + size - 1
    raise AssertionError("no free stretch of the default range for the test")


def test_the_default_range_lies_outside_this_machines_ephemeral_range() -> None:
    lo, hi = port_range_from_env(None, ephemeral_range())
    eph_lo, eph_hi = ephemeral_range()
    assert hi < eph_lo or lo > eph_hi
    assert (lo, hi) == DEFAULT_PORT_RANGE


@pytest.mark.parametrize("value, fragment", [
    ("20000", "is not LO-HI"),
    ("abc-def", "is not LO-HI"),
    ("40000-41000", "overlaps the kernel's ephemeral range 32768-60999"),
    ("20000-20010", f"hold at least {PORT_BLOCK} ports"),
    ("500-2000", "within 1024-65535"),
])
def test_a_bad_range_is_refused_with_what_to_set(value: str, fragment: str) -> None:
    with pytest.raises(OzoneInteropError, match="OZONE_INTEROP_PORT_RANGE") as err:
        port_range_from_env(value, EPHEMERAL)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_a_range_of_ones_own_is_taken() -> None:
    assert port_range_from_env(" 21000 - 21999 ", EPHEMERAL) == (21000, 21999)
    assert port_range_from_env("61000-62000", EPHEMERAL) == (61000, 62000)


def test_two_pools_lock_disjoint_blocks_and_never_give_the_same_port(tmp_path: Path) -> None:
    lo, hi = free_range(16)
    first, second = PortPool((lo, hi), tmp_path, block=8), PortPool((lo, hi), tmp_path, block=8)
    a = [first.take() for _ in range(5)]
    b = [second.take() for _ in range(5)]
    assert first.blocks() != second.blocks()
    assert not set(a) & set(b)
    assert all(lo <= p <= hi for p in a + b)
    assert all(first.blocks()[0] <= p < first.blocks()[0] + 8 for p in a)
    # a third pool finds both blocks held: a clear error naming the lock files and what to do
    with pytest.raises(OzoneInteropError, match=f"held by another running harness .*{tmp_path}"):
        PortPool((lo, hi), tmp_path, block=8).take()
    freed = first.blocks()[0]
    first.release()  # its block is free for the next harness
    third = PortPool((lo, hi), tmp_path, block=8)
    assert third.take() == freed
    second.release()
    third.release()


def test_a_pool_moves_to_a_new_block_when_its_own_runs_out(tmp_path: Path) -> None:
    lo, hi = free_range(16)
    pool = PortPool((lo, hi), tmp_path, block=8)
    ports = [pool.take() for _ in range(12)]
    assert len(set(ports)) == 12
    assert pool.blocks() == [lo, lo + 8]
    pool.release()


def test_a_port_held_by_a_stranger_is_skipped(tmp_path: Path) -> None:
    lo, hi = free_range(8)
    with socket.socket() as stranger:  # something outside the harness listening inside the block
        stranger.bind(("127.0.0.1", lo + 1))
        stranger.listen()
        pool = PortPool((lo, hi), tmp_path, block=8)
        assert [pool.take() for _ in range(3)] == [lo, lo + 2, lo + 3]
        pool.release()


def test_a_block_is_held_by_another_process_until_it_dies(tmp_path: Path) -> None:
    """Another harness (a process of its own, as another engineer's test run is) holds its block as long as it
    lives; killed, its lock goes with it and the block is free again, with no file to clean up."""
    lo, hi = free_range(8)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from pathlib import Path
            from tests.ozone_interop.ozone_procs import PortPool
            pool = PortPool(({lo}, {hi}), Path({str(tmp_path)!r}), block=8)
            print(pool.take(), flush=True)
            sys.stdin.read()  # holds the block until killed
        """)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None
        assert int(holder.stdout.readline()) == lo
        with pytest.raises(OzoneInteropError, match="held by another running harness"):
            PortPool((lo, hi), tmp_path, block=8).take()
    finally:
        holder.kill()
        holder.wait(timeout=30)

    def taken_after_the_holder_died() -> int | None:
        pool = PortPool((lo, hi), tmp_path, block=8)
        try:
            return pool.take()
        except OzoneInteropError:
            return None
        finally:
            pool.release()

    assert wait_for("the dead holder's block free again", taken_after_the_holder_died, 10, interval=0.1) == lo


def test_allocators_of_one_process_share_its_pool(tmp_path: Path) -> None:
    """A cluster, its Recon and the secure tier's extra listeners each make a PortAllocator: never the same port."""
    lo, hi = free_range(16)
    pool = PortPool((lo, hi), tmp_path, block=8)
    cluster, recon = PortAllocator(pool), PortAllocator(pool)
    ports = [cluster.take(), recon.take(), cluster.take(), recon.take()]
    assert len(set(ports)) == 4
    pool.release()
