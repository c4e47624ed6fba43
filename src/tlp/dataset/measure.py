"""Build and run scheduled programs with MetaSchedule's builder and runner, locally or through an RPC tracker.

Builds run in parallel on all cores; runs happen afterwards, alone, so compilation never perturbs a timing. While
programs run we also measure how busy the machine is with *other* processes (``foreign_load``), because on a shared
2-core machine a timing taken next to a test run or a training job is wrong, and such records must be re-measured.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params
from tvm.s_tir.meta_schedule.builder.local_builder import _worker_func as _builder_worker
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind, kill_child_processes

from tlp import TLPError, interrupt
from tlp._tvm import (alloc_arguments_local, alloc_arguments_rpc, build_for_measurement, ms,
                      register_tensor_intrinsics, tvm)
from tlp.dataset.store import mean_latency


def limit_runtime_threads(threads: int) -> None:
    """In a runner worker, before any kernel runs: use ``threads`` threads (0 = TVM's default, all cores)."""
    if threads > 0:
        os.environ["TVM_NUM_THREADS"] = str(threads)


class MeasureError(TLPError, RuntimeError):
    """The measurement infrastructure itself (not one program) is unusable."""


@dataclass(frozen=True)
class RPCSettings:
    """Where to send runs: a TVM RPC tracker and the key its devices registered with."""

    tracker_host: str
    tracker_port: int
    key: str
    session_timeout_s: int = 60

    @staticmethod
    def parse(tracker: str, key: str) -> "RPCSettings":
        host, _, port = tracker.rpartition(":")
        if not host or not port.isdigit():
            raise MeasureError(f"RPC tracker {tracker!r} must be HOST:PORT")
        return RPCSettings(host, int(port), key)


@dataclass
class MeasureConfig:
    """How each program is timed. ``repeat`` timings are kept per record so their spread (noise) is known."""

    repeat: int = 3
    number: int = 1
    min_repeat_ms: int = 20
    cache_flush: bool = True
    build_timeout_s: float = 30.0
    run_timeout_s: float = 10.0  # a program slower than ~2.5 s per run (4 runs) is recorded as a timeout failure
    build_workers: int | None = None
    rpc: RPCSettings | None = None

    def __post_init__(self) -> None:
        from tlp.settings import check_ranges  # pylint: disable=import-outside-toplevel

        check_ranges(self, "measure settings", {"repeat": (1, None), "number": (1, None), "min_repeat_ms": (0, None),
                                                "build_timeout_s": (1e-3, None), "run_timeout_s": (1e-3, None),
                                                "build_workers": (1, None)})

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "rpc"}
        data["rpc"] = None if self.rpc is None else self.rpc.__dict__
        return data


@dataclass
class MeasureResult:
    run_secs: list[float] | None
    error: str | None


@dataclass
class BatchStats:
    build_s: float = 0.0
    run_s: float = 0.0
    foreign_load: float | None = 0.0  # None when runs happen elsewhere (RPC): our CPU load says nothing there
    extra: dict[str, Any] = field(default_factory=dict)


class LoadMonitor:
    """CPU use of processes outside our own process tree, as a fraction of the machine, over a time window.

    Foreign load = system busy time - our tree's busy time. Our tree's time is counted per process *within the
    window* (processes that were alive at the start and are gone at the end, such as builder workers being shut
    down, contribute nothing rather than a negative amount), plus children reaped during the window.
    """

    def __enter__(self) -> "LoadMonitor":
        self._start_wall = time.monotonic()
        self._start_busy = _busy_seconds()
        self._start_own = _own_tree_times()
        self._start_reaped = _reaped_children_seconds()
        self.load = 0.0
        return self

    def __exit__(self, *exc: Any) -> None:
        wall = max(time.monotonic() - self._start_wall, 1e-6)
        busy = _busy_seconds() - self._start_busy
        own = sum(t - self._start_own.get(pid, 0.0) for pid, t in _own_tree_times().items())
        own += _reaped_children_seconds() - self._start_reaped
        cores = psutil.cpu_count(logical=True) or 1
        self.load = min(1.0, max(0.0, (busy - own) / (wall * cores)))


def _busy_seconds() -> float:
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def _own_tree_times() -> dict[int, float]:
    times = {}
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            cpu = process.cpu_times()
            # children_*: processes our workers started and reaped (the runner links each artifact with `cc`).
            times[process.pid] = cpu.user + cpu.system + cpu.children_user + cpu.children_system
        except psutil.Error:
            pass
    return times


def _reaped_children_seconds() -> float:
    import resource  # pylint: disable=import-outside-toplevel

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check_tracker(rpc: RPCSettings) -> None:
    """Fail fast, and clearly, when the tracker is down or has no device under the key."""
    try:
        with socket.create_connection((rpc.tracker_host, rpc.tracker_port), timeout=5):
            pass
    except OSError as error:
        raise MeasureError(
            f"RPC tracker {rpc.tracker_host}:{rpc.tracker_port} is not reachable ({error}); "
            "start it with `python -m tvm.exec.rpc_tracker` or fix --rpc-tracker"
        ) from None
    summary = tvm.rpc.connect_tracker(rpc.tracker_host, rpc.tracker_port).summary()
    servers = [s for s in summary.get("server_info", []) if str(s.get("key", "")).split(":")[-1] == rpc.key]
    if not servers:
        keys = sorted({str(s.get("key", "")).split(":")[-1] for s in summary.get("server_info", [])})
        raise MeasureError(f"RPC tracker has no device with key {rpc.key!r} (keys registered: {keys or 'none'})")


@derived_object
class PersistentBuilder(ms.builder.PyBuilder):
    """MetaSchedule's ``LocalBuilder`` with worker processes that outlive a batch.

    ``LocalBuilder`` starts a fresh process pool for every batch (to contain a memory leak of long-lived workers),
    so every batch pays each worker's start-up: importing TVM, ~3 s on 2 cores, i.e. a third of the build time of
    a 32-program batch. Here each worker is replaced after ``max_uses`` builds instead, which bounds the leak and
    pays the start-up once per ``max_uses`` programs. Builds use the same worker function as ``LocalBuilder``.
    """

    def __init__(self, max_workers: int, timeout_sec: float, max_uses: int = 128) -> None:
        super().__init__()
        self.timeout_sec = timeout_sec
        self.pool = PopenPoolExecutor(max_workers=max_workers, timeout=timeout_sec, maximum_process_uses=max_uses)
        self.seconds = 0.0  # wall time spent building, for a run's time breakdown

    def build(self, build_inputs: list[Any]) -> list[Any]:
        started = time.perf_counter()
        try:
            return self._build(build_inputs)
        finally:
            self.seconds += time.perf_counter() - started

    def _build(self, build_inputs: list[Any]) -> list[Any]:
        jobs = [
            (build_for_measurement, None, item.mod, item.target, _serialize_params(item.params))
            for item in build_inputs
        ]
        # As the pool's map_with_error_catching, but waited for in short steps: a requested stop is taken within a
        # fraction of a second, not after the whole batch is built (interrupt.check raises; close() kills workers).
        pool = self.pool
        build = lambda job: _builder_worker(*job)  # noqa: E731  (pickled by value, as LocalBuilder's)
        futures = [pool._threadpool.submit(pool._worker_run_with_error_catching, build, (job,), None)
                   for job in jobs]
        try:
            pending = set(futures)
            while pending:
                _, pending = concurrent.futures.wait(pending, timeout=0.2)
                interrupt.check(interrupt.NOW)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        results = []
        for outcome in (future.result() for future in futures):
            if outcome.status == StatusKind.COMPLETE:
                results.append(ms.builder.BuilderResult(outcome.value, None))
            elif outcome.status == StatusKind.TIMEOUT:
                results.append(ms.builder.BuilderResult(None, f"build timeout after {self.timeout_sec} s"))
            else:
                results.append(ms.builder.BuilderResult(None, f"build failed:\n{outcome.value}"))
        if any(r.error_msg is not None for r in results):
            interrupt.check()  # after a stop, a failed build may be a worker the same signal killed: drop the batch
        return results


@derived_object
class StoppableRunner(ms.runner.PyRunner):
    """A runner that runs one program at a time through ``inner`` (MetaSchedule's ``LocalRunner``, which measures
    before it returns), so that a requested stop is taken between programs; after a stop, a batch with a failed
    run is dropped (the worker may have died of the same signal), never stored as the programs' failures."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.pool = inner.pool
        self.seconds = 0.0  # wall time spent running (LocalRunner measures before it returns)

    def run(self, runner_inputs: list[Any]) -> list[Any]:
        started = time.perf_counter()
        try:
            return self._run(runner_inputs)
        finally:
            self.seconds += time.perf_counter() - started

    def _run(self, runner_inputs: list[Any]) -> list[Any]:
        futures = []
        for runner_input in runner_inputs:
            interrupt.check(interrupt.NOW)
            futures.extend(self.inner.run([runner_input]))
        interrupt.check(interrupt.NOW)
        if interrupt.requested() and any(f.result().error_msg is not None for f in futures):
            interrupt.check()
        return futures


class Measurer:
    """Builds scheduled IRModules for a target and times them; one instance per collection run."""

    def __init__(self, target: dict[str, Any], config: MeasureConfig | None = None) -> None:
        self.config = config or MeasureConfig()
        self.target = tvm.target.Target(target)
        self.device_type = "cpu" if self.target.kind.name == "llvm" else self.target.kind.name
        gpu = self.device_type == "cuda"
        if gpu:
            from tlp.gpu import use_cuda_compiler  # pylint: disable=import-outside-toplevel

            # Before the build workers start (they inherit the choice): nvcc, else NVRTC, else a GPUError.
            use_cuda_compiler()
            register_tensor_intrinsics("cuda")  # stored CUDA traces (remeasure) replay their tensorize steps
        evaluator = ms.runner.EvaluatorConfig(
            number=self.config.number,
            repeat=self.config.repeat,
            min_repeat_ms=self.config.min_repeat_ms,
            # flushing the CPU's caches says nothing about a GPU kernel's time
            enable_cpu_cache_flush=self.config.cache_flush and not gpu,
        )
        workers = self.config.build_workers or psutil.cpu_count(logical=True) or 1
        self.builder = PersistentBuilder(max_workers=workers, timeout_sec=self.config.build_timeout_s)
        self.runner: Any = None
        try:
            self.runner = self._runner(evaluator)
        except BaseException:
            # A stop (or an unreachable tracker) while the runner starts: the builder's workers must not outlive
            # us and be shut down later from one of the pool's own threads ("cannot join current thread").
            self.close()
            raise
        # The workers start now, in the background (each imports TVM: ~3 s on 2 cores), not inside the first batch:
        # the caller loads its model and data meanwhile. A worker that fails to start is started again by its job.
        local_runner_pool = [self.runner.pool] if isinstance(self.runner, StoppableRunner) else []
        self._warm_up = [pool.submit(os.getpid) for pool in [self.builder.pool] * workers + local_runner_pool]

    def _runner(self, evaluator: Any) -> Any:
        if self.config.rpc is not None:
            check_tracker(self.config.rpc)
            rpc_config = ms.runner.RPCConfig(
                tracker_host=self.config.rpc.tracker_host,
                tracker_port=self.config.rpc.tracker_port,
                tracker_key=self.config.rpc.key,
                session_timeout_sec=self.config.rpc.session_timeout_s,
            )
            return ms.runner.RPCRunner(rpc_config=rpc_config, evaluator_config=evaluator, max_workers=1,
                                       f_alloc_argument=alloc_arguments_rpc)
        # The target's core count is part of the platform: programs run on that many threads, not on all of
        # the machine's (TVM's thread pool otherwise takes every physical core whatever the target says).
        threads = int(self.target.attrs.get("num-cores", 0) or 0)
        local = ms.runner.LocalRunner(timeout_sec=self.config.run_timeout_s, evaluator_config=evaluator,
                                      f_alloc_argument=alloc_arguments_local,
                                      initializer=functools.partial(limit_runtime_threads, threads))
        try:
            return StoppableRunner(local)
        except BaseException:
            shutdown_pool(local.pool)
            raise

    @property
    def seconds(self) -> dict[str, float]:
        """Wall seconds spent building and running so far (running: local runs only; an RPC runner's time is
        not counted)."""
        return {"build": self.builder.seconds, "run": getattr(self.runner, "seconds", 0.0)}

    def _check_tracker(self) -> None:
        """With runs over RPC: the tracker still answers, or a one-line error (the batch in flight not stored).
        Without this, every run of a batch waited a minute for a dead tracker and was stored as a failure."""
        if self.config.rpc is None:
            return
        try:
            check_tracker(self.config.rpc)
        except MeasureError as error:
            raise MeasureError(f"{error}; the batch in flight is not stored, every batch before it is: re-run the "
                               "same command once the tracker is back") from None

    def close(self) -> None:
        """Stop the builder's and runner's worker processes now.

        Left to the garbage collector (TVM's pools shut themselves down in ``__del__``), the shutdown can run on one
        of the pool's own threads after a Ctrl-C and print "cannot join current thread" tracebacks on exit.
        """
        for started in getattr(self, "_warm_up", []):
            started.cancel()  # one still queued would start a worker after the shutdown
        for pool in (self.builder.pool, getattr(self.runner, "pool", None) if self.runner is not None else None):
            if pool is not None:
                shutdown_pool(pool)

    def measure(self, mods: list["tvm.IRModule"], args_infos: list[Any]) -> tuple[list[MeasureResult], BatchStats]:
        """Build all programs (in parallel), then run the ones that built (sequentially, machine otherwise idle)."""
        stats = BatchStats()
        self._check_tracker()
        started = time.monotonic()
        built = self.builder.build([ms.builder.BuilderInput(mod, self.target) for mod in mods])
        try:
            stats.build_s = time.monotonic() - started
            results: list[MeasureResult] = [MeasureResult(None, r.error_msg) for r in built]
            to_run = [i for i, r in enumerate(built) if r.error_msg is None]
            started = time.monotonic()
            with LoadMonitor() as monitor:
                futures = self.runner.run(
                    [ms.runner.RunnerInput(built[i].artifact_path, self.device_type, args_infos[i]) for i in to_run]
                )
                for i, future in zip(to_run, futures):
                    outcome = future.result()
                    if outcome.error_msg is not None:
                        self._check_tracker()  # a run that failed because the tracker went away is not a result
                        results[i] = MeasureResult(None, outcome.error_msg)
                    else:
                        results[i] = MeasureResult([float(x) for x in outcome.run_secs], None)
            stats.run_s = time.monotonic() - started
            stats.foreign_load = None if self.config.rpc is not None else monitor.load
        finally:
            _remove_artifacts(built)
        if any(r.error is not None for r in results):
            interrupt.check()  # failures after a stop may be the stop's doing: the batch is not stored
        return results, stats


def time_once(target: dict[str, Any], candidates: list[Any], config: MeasureConfig | None = None) -> list[float | None]:
    """Each candidate's latency (seconds, ``None``: failed) from one timing in a fresh :class:`Measurer`.

    ``candidates``: MetaSchedule measure candidates (``.sch.mod``, ``.args_info``), e.g. stored records replayed.
    A fresh Measurer (new builder and runner processes) per call is the point: re-timing a program in the process
    that timed it before would repeat that moment's state; callers that want several time-spread timings call this
    once per pass.
    """
    measurer = Measurer(target, config)
    try:
        results, _ = measurer.measure([c.sch.mod for c in candidates], [c.args_info for c in candidates])
    finally:
        measurer.close()
    return [mean_latency(r.run_secs, r.error) for r in results]


def shutdown_pool(pool: PopenPoolExecutor) -> None:
    """Kill every worker process of a TVM pool, one by one, and stop its threads without waiting.

    TVM's own ``PopenPoolExecutor.shutdown`` stops at the first worker whose ``kill`` raises (after a SIGTERM during
    start-up a worker thread can clear ``_proc`` between kill's check and its ``_proc.pid``: AttributeError) and then
    never releases the pool's lock, so the later workers live on and the pool's ``__del__`` deadlocks on that lock:
    ``tlp collect`` hung after SIGTERM until SIGKILL. Here one failing worker does not stop the others.
    """
    with pool._lock:
        workers = list(pool._worker_map.values())
    # The processes first: TVM's kill closes the worker's pipes before killing it, and closing a pipe that a pool
    # thread is reading from waits for that read, i.e. for the build in flight to finish (4 s after a stop).
    for worker in workers:
        process = getattr(worker, "_proc", None)
        try:
            kill_child_processes(process.pid)
            process.kill()
        except (AttributeError, TypeError, OSError):
            pass  # never started, or already gone
    for worker in workers:
        try:
            worker.kill()
        except (AttributeError, ImportError, OSError):
            pass  # that worker's process is already gone or never started
    pool._threadpool.shutdown(wait=False)
    pool._shutdown = True  # so that __del__ does not shut it down again


def _remove_artifacts(built: list[Any]) -> None:
    """MetaSchedule's builder leaves one temp folder per program; thousands of them fill /tmp over hours."""
    import shutil  # pylint: disable=import-outside-toplevel
    import os  # pylint: disable=import-outside-toplevel

    for result in built:
        if result.artifact_path:
            shutil.rmtree(os.path.dirname(result.artifact_path), ignore_errors=True)
