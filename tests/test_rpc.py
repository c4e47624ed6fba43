"""Collection through a real TVM RPC tracker and server, both on loopback."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tlp.dataset import CollectPlan, Dataset, collect
from tlp.dataset.measure import MeasureConfig, MeasureError, RPCSettings, check_tracker
from tlp.platform import Platform


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def rpc_device():
    with _tracker_and_server() as (settings, _):
        yield settings


@contextlib.contextmanager
def _tracker_and_server():
    """A tracker and a server registered with it under key ``tlp-test``: (settings, the tracker's process)."""
    port = _free_port()
    tracker = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port",
                                str(port), "--port-end", str(port + 1), "--silent"], start_new_session=True)
    server = None
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            assert tracker.poll() is None, "the RPC tracker exited at start"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        server = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                   "--port", str(_free_port()), "--port-end", "65000",
                                   "--tracker", f"127.0.0.1:{port}", "--key", "tlp-test", "--silent"],
                                  start_new_session=True)
        settings = RPCSettings("127.0.0.1", port, "tlp-test")
        while time.time() < deadline:
            assert server.poll() is None, "the RPC server exited at start"
            try:
                check_tracker(settings)
                break
            except MeasureError:
                time.sleep(0.5)
        yield settings, tracker
    finally:
        # The tracker and the server each run their loop in a TVM popen worker of their own, which outlives a
        # terminated parent: stop each one's whole process group.
        for process in (server, tracker):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)


def test_collect_through_rpc_tracker(rpc_device, tiny_tasks, host_platform, tmp_path):
    platform = Platform.remote(host_platform.target, rpc_device.key, "this machine over loopback RPC")
    config = MeasureConfig(min_repeat_ms=2, rpc=rpc_device)
    summary = collect(Dataset(tmp_path), tiny_tasks[:1], platform, CollectPlan(trials_per_task=4, batch_size=4),
                      config, progress=False)
    assert summary.measured == 4 and summary.valid >= 3
    store = Dataset(tmp_path).store(platform.id)
    assert store.platform.hardware["rpc_key"] == "tlp-test"
    assert all(p.latency is None or len(p.run_secs) == 3 for p in store.iter_programs())
    assert all(p.meta["foreign_load"] is None for p in store.iter_programs())  # our CPU is not the device's


def test_tracker_down_is_a_clear_error():
    with pytest.raises(MeasureError, match="not reachable"):
        check_tracker(RPCSettings("127.0.0.1", _free_port(), "nobody"))


def test_unknown_key_is_a_clear_error(rpc_device):
    with pytest.raises(MeasureError, match="no device with key 'other'.*tlp-test"):
        check_tracker(RPCSettings(rpc_device.tracker_host, rpc_device.tracker_port, "other"))


def test_a_tracker_that_dies_mid_collection_stops_it_with_one_line_and_stores_no_failure(tiny_tasks, host_platform,
                                                                                        tmp_path):
    """Each run of the batch after the tracker died waited a minute for it and was stored as a failed program."""
    with _tracker_and_server() as (settings, tracker):
        platform = Platform.remote(host_platform.target, settings.key, "this machine over loopback RPC")
        config = MeasureConfig(min_repeat_ms=2, rpc=settings)

        def kill_tracker(summary):
            if tracker.poll() is None:
                os.killpg(tracker.pid, signal.SIGTERM)
                tracker.wait(timeout=30)

        with pytest.raises(MeasureError, match="not reachable.*batch in flight is not stored"):
            collect(Dataset(tmp_path), tiny_tasks[:1], platform, CollectPlan(trials_per_task=12, batch_size=4),
                    config, progress=False, on_batch=kill_tracker)
    store = Dataset(tmp_path).store(platform.id)
    programs = list(store.iter_programs())
    assert len(programs) == 4 and all(p.latency is not None for p in programs)  # the first batch, nothing failed
    assert all(not t.tail.exists() or t.tail.stat().st_size == 0 for t in store.tables())  # sealed
