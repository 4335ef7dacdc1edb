"""Sweeps: a grid of candidate clusters x policies x workloads x seeds, expanded into independent simulation runs,
run on a backend, and gathered into one table with the per-group means and 95% intervals the what-if reports.

Each run is a pure function of its inputs (`run_one`): the trace (or a workload that draws one per seed) is mapped to
LLM jobs on the grid's *base* cluster with the run's seed, then simulated on the candidate cluster; that is
`simulate_seeds(..., seeds=[seed], workload_cluster=base)`, so one sweep row equals one seed of a direct
`simulate_seeds` call. The table is ordered by the grid (never by completion order), so every backend gives the
same table; only the wall-clock columns (`TIMING_KEYS`) differ between runs.

Backends (`run_sweep`):
- ``local``: a `concurrent.futures.ProcessPoolExecutor` of `workers` processes (spawned, so it is safe inside a
  threaded server such as Streamlit); one worker runs in this process, with no pool to start.
- ``ray``: Ray core tasks. ``ray.init()`` starts a local cluster of `workers` CPUs, ``address`` joins an existing
  one (the frenzy_core package is shipped to it as a runtime_env py_module); the grid is sent once with
  ``ray.put`` and every task gets its reference. No Ray Tune: its per-trial overhead dwarfs sub-second runs.

Stopping: an exception out of the `progress` callback (a Streamlit rerun on Cancel) or KeyboardInterrupt (Ctrl-C)
cancels the runs not started, stops the running ones (pool workers are terminated, Ray tasks force-cancelled, a
Ray cluster this call started is shut down) and propagates; nothing is left running.

Bounds (`limits`): at most MAX_CANDIDATES candidates, MAX_SEEDS seeds and MAX_SWEEP_RUNS runs in a grid, MAX_WORKERS
workers; a Ray `address` must resolve and answer as a gRPC server within RAY_CONNECT_TIMEOUT_S, before `ray.init`
(which retries a dead address for many minutes) is called.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from frenzy_core import metrics
from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.limits import MAX_CANDIDATES, MAX_SEEDS, MAX_SWEEP_RUNS, MAX_WORKERS, RAY_CONNECT_TIMEOUT_S, short_repr
from frenzy_core.policies import REGISTRY
from frenzy_core.simulate import SimOptions, simulate_seeds

BACKENDS = ("local", "ray")
# Per-run metrics kept in the table (scalars of SimResult.metrics()).
ROW_KEYS = ("jobs", "completed", "gave_up", "rejected", "avg_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s",
            "avg_queue_s", "makespan_s", "gpu_hours", "avg_utilisation", "oom_failures", "restarts",
            "sched_overhead_ms_per_decision", "wall_s")
TIMING_KEYS = ("sched_overhead_ms_per_decision", "wall_s")  # wall-clock measurements: differ run to run
GROUP_KEYS = ("workload", "candidate", "policy")  # one aggregate per group, over its seeds

Progress = Callable[[float, int], None]  # (runs done, possibly fractional; runs in all); may repeat a value
HEARTBEAT_S = 0.25  # the longest a pool sweep goes without calling progress (how fast a Cancel gets through)


def workload_trace(workload: Any, seed: int):
    """The trace one run simulates: `workload.trace_for(seed)` for a workload that draws its jobs per seed (e.g.
    `whatif.WeeklyJobs`), else the workload itself (a `traces.Trace`, mapped anew per seed by the simulator)."""
    draw = getattr(workload, "trace_for", None)
    return draw(seed) if callable(draw) else workload


@dataclass(frozen=True)
class Run:
    """One cell of the grid: which workload, candidate, policy and seed."""

    index: int  # position in `Grid.runs()`: the table's row order
    workload: str
    candidate: str
    policy: str
    seed: int


@dataclass(frozen=True)
class Grid:
    """What to sweep. Labels are the table's keys; every value is picklable (shipped to workers as is)."""

    base: Cluster  # today's cluster: every candidate runs the jobs mapped on it (the same LLM jobs everywhere)
    candidates: tuple[tuple[str, Cluster], ...]  # (label, cluster), in table order
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    workloads: tuple[tuple[str, Any], ...]  # (label, Trace or an object with trace_for(seed))
    options: SimOptions = field(default_factory=SimOptions)

    def __post_init__(self) -> None:
        for name, seq in (("candidates", self.candidates), ("policies", self.policies), ("seeds", self.seeds),
                          ("workloads", self.workloads)):
            if not seq:
                raise SpecError(name, f"the sweep needs at least one of {name}")
        if len(self.candidates) > MAX_CANDIDATES:
            raise SpecError("candidates", f"{len(self.candidates):,} candidates is over the limit of "
                            f"{MAX_CANDIDATES:,}; compare fewer (--add) or split them over several sweeps")
        if len(self.seeds) > MAX_SEEDS:
            raise SpecError("seeds", f"{len(self.seeds):,} seeds is over the limit of {MAX_SEEDS:,}; use fewer "
                            "(--seeds; 10 already give tight 95% intervals)")
        runs = len(self.workloads) * len(self.candidates) * len(self.policies) * len(self.seeds)
        if runs > MAX_SWEEP_RUNS:
            shape = f"{len(self.candidates):,} candidates x {len(self.policies):,} policies x {len(self.seeds):,} seeds"
            if len(self.workloads) > 1:
                shape += f" x {len(self.workloads):,} workloads"
            raise SpecError("runs", f"the sweep is {runs:,} runs ({shape}), over the limit of {MAX_SWEEP_RUNS:,}; use "
                            "fewer seeds (--seeds), policies (--policies) or candidates (--add)")
        for p in self.policies:
            if p not in REGISTRY:
                raise SpecError("policies", f"unknown policy {p!r}; choose from: {', '.join(REGISTRY)}")
        for name, labels in (("candidates", [c for c, _ in self.candidates]),
                             ("workloads", [w for w, _ in self.workloads])):
            if len(set(labels)) != len(labels):
                raise SpecError(name, f"labels must be unique, got {labels}")
        if len(set(self.seeds)) != len(self.seeds):
            raise SpecError("seeds", f"seeds must be distinct, got {list(self.seeds)}")

    @classmethod
    def make(cls, base: Cluster, candidates: Mapping[str, Cluster], policies: Iterable[str], seeds: Iterable[int],
             workloads: Mapping[str, Any], options: SimOptions | None = None) -> Grid:
        # one seed past the limit is enough to refuse: a range(10**12) is never materialised
        seeds = tuple(int(s) for s in itertools.islice(seeds, MAX_SEEDS + 1))
        return cls(base=base, candidates=tuple(candidates.items()), policies=tuple(policies), seeds=seeds,
                   workloads=tuple(workloads.items()), options=options or SimOptions())

    def runs(self) -> tuple[Run, ...]:
        """Every run, workload-major then candidate, policy, seed (the table's order).

        >>> from frenzy_core.cluster import parse_cluster_yaml
        >>> c = parse_cluster_yaml("nodes: [{name: a, gpu_type: T4, num_gpus: 2}]")
        >>> g = Grid.make(c, {"today": c}, ["fcfs", "frenzy"], [0, 1], {"w": None})
        >>> [(r.policy, r.seed) for r in g.runs()]
        [('fcfs', 0), ('fcfs', 1), ('frenzy', 0), ('frenzy', 1)]
        """
        out = []
        for w, _ in self.workloads:
            for c, _ in self.candidates:
                for p in self.policies:
                    for s in self.seeds:
                        out.append(Run(len(out), w, c, p, s))
        return tuple(out)

    def part(self, run: Run) -> Grid:
        """The grid cut down to what `run` needs (its candidate and workload): what a pool task carries."""
        return Grid(base=self.base, candidates=((run.candidate, dict(self.candidates)[run.candidate]),),
                    policies=(run.policy,), seeds=(run.seed,),
                    workloads=((run.workload, dict(self.workloads)[run.workload]),), options=self.options)


def run_one(grid: Grid, run: Run, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Simulate one run; its table row: the run's labels, `ROW_KEYS` (floats; NaN where undefined) and
    `workload_fallbacks`."""
    trace = workload_trace(dict(grid.workloads)[run.workload], run.seed)
    cluster = dict(grid.candidates)[run.candidate]
    res = simulate_seeds(trace, cluster, run.policy, seeds=[run.seed], options=grid.options, progress=progress,
                         workload_cluster=grid.base).results[0]
    m = res.metrics()
    row: dict[str, Any] = {"workload": run.workload, "candidate": run.candidate, "policy": run.policy,
                           "seed": run.seed}
    for k in ROW_KEYS:
        v = m[k]
        row[k] = int(v) if k in metrics.COUNT_KEYS or k == "restarts" else float(v)
    row["workload_fallbacks"] = int(res.workload_fallbacks)  # jobs whose model did not fit and took a smaller one
    return row


@dataclass(frozen=True)
class SweepTable:
    """The gathered rows (grid order) and how long the sweep took."""

    rows: tuple[dict[str, Any], ...]
    wall_s: float
    backend: str
    workers: int

    def frame(self):
        import pandas as pd

        return pd.DataFrame(list(self.rows))

    def samples(self, key: str = "avg_jct_s") -> dict[tuple[str, str, str], tuple[float, ...]]:
        """(workload, candidate, policy) -> the metric over its seeds, in seed order of the grid."""
        out: dict[tuple[str, str, str], list[float]] = {}
        for r in self.rows:
            out.setdefault(tuple(r[k] for k in GROUP_KEYS), []).append(r[key])
        return {g: tuple(v) for g, v in out.items()}

    def aggregate(self, key: str = "avg_jct_s", confidence: float = 0.95) -> list[dict[str, Any]]:
        """One row per group: seeds, mean and the Student-t interval over seeds (`metrics.mean_ci`, the same as
        `MultiSeedResult.ci`; NaN bounds with one seed, clipped at 0 for non-negative metrics)."""
        out = []
        for g, vals in self.samples(key).items():
            mean, lo, hi = metrics.mean_ci(vals, confidence, nonnegative=key in metrics.NONNEGATIVE_KEYS)
            out.append({**dict(zip(GROUP_KEYS, g, strict=True)), "seeds": len(vals), key: mean,
                        f"{key}_ci_low": lo, f"{key}_ci_high": hi})
        return out

    def deterministic_rows(self) -> list[dict[str, Any]]:
        """The rows without the wall-clock columns: what must be equal on every backend."""
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in self.rows]


def default_workers() -> int:
    """All cores but one (the caller's), at least 1."""
    return max(1, (os.cpu_count() or 1) - 1)


def run_sweep(grid: Grid, backend: str = "local", workers: int | None = None, address: str | None = None,
              progress: Progress | None = None) -> SweepTable:
    """Run every cell of `grid` on `backend` and gather the table (see the module docstring).

    `progress(done, total)` is called as runs finish (and, with one local worker, during a run); an exception it
    raises stops the sweep cleanly and propagates.
    """
    if backend not in BACKENDS:
        raise SpecError("backend", f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise SpecError("workers", f"must be a whole number >= 1, got {short_repr(workers)}")
    if workers is not None and workers > MAX_WORKERS:
        raise SpecError("workers", f"{workers:,} is over the limit of {MAX_WORKERS:,} worker processes; use at most "
                        "the cores you have (--workers)")
    if address is not None and backend != "ray":
        raise SpecError("address", "only the ray backend connects to a cluster; add --backend ray")
    runs = grid.runs()
    # A local pool leaves a core to the caller; a Ray cluster of our own gets every core (the driver only waits).
    n_workers = workers or (os.cpu_count() or 1 if backend == "ray" else default_workers())
    t0 = time.perf_counter()
    if backend == "ray":
        rows = _run_ray(grid, runs, n_workers, address, progress)
    elif n_workers == 1 or len(runs) == 1:
        rows = _run_here(grid, runs, progress)
        n_workers = 1
    else:
        rows = _run_pool(grid, runs, min(n_workers, len(runs)), progress)
    return SweepTable(rows=tuple(rows), wall_s=time.perf_counter() - t0, backend=backend, workers=n_workers)


def _run_here(grid: Grid, runs: Sequence[Run], progress: Progress | None) -> list[dict[str, Any]]:
    rows = []
    total = len(runs)
    for i, r in enumerate(runs):
        sub = None if progress is None else (lambda f, i=i: progress(i + f, total))
        rows.append(run_one(grid, r, sub))
    return rows


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which cancels and stops them (no traceback from every worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _reaped(procs: Sequence[multiprocessing.process.BaseProcess], timeout_s: float) -> bool:
    """Whether every process has exited (and been reaped) within `timeout_s`. Polls `is_alive()`, a non-blocking
    waitpid, instead of `join(timeout)`: the executor's manager thread also watches the workers' sentinels, and
    join() can return at once with the worker still running."""
    deadline = time.monotonic() + timeout_s
    while any(proc.is_alive() for proc in procs):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _stop_workers(procs: Sequence[multiprocessing.process.BaseProcess], timeout_s: float = 10.0) -> None:
    """SIGTERM each worker, SIGKILL any still alive after `timeout_s` (a worker still starting up), then reap."""
    for proc in procs:
        proc.terminate()
    if not _reaped(procs, timeout_s):
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        _reaped(procs, timeout_s)


def _run_pool(grid: Grid, runs: Sequence[Run], workers: int, progress: Progress | None) -> list[dict[str, Any]]:
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_ignore_sigint)
    rows: list[dict[str, Any] | None] = [None] * len(runs)
    try:
        pending = {pool.submit(run_one, grid.part(r), r): r.index for r in runs}
        done_count = 0
        while pending:
            # a heartbeat: progress is called every HEARTBEAT_S even when no run finished, so a caller that stops
            # by raising from it (Streamlit's Cancel reaches the script only when it calls into Streamlit) stops
            # within HEARTBEAT_S, not when the next run ends (a 2,000-job run can take a minute)
            done, _ = wait(pending, timeout=HEARTBEAT_S, return_when=FIRST_COMPLETED)
            for fut in done:
                rows[pending.pop(fut)] = fut.result()
                done_count += 1
            if progress is not None:
                progress(done_count, len(runs))
    except BaseException:
        # shutdown() lets running tasks finish (a sia run can take a minute); stop them now. The executor keeps
        # its worker processes in `_processes` (cleared by shutdown, so read first); Python 3.14 has
        # terminate_workers() for this.
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        _stop_workers(procs)
        raise
    pool.shutdown(wait=True)
    return rows  # type: ignore[return-value]


def ray_available() -> str | None:
    """None when Ray can be imported, else why not (for a clear error or a test skip)."""
    try:
        import ray  # noqa: F401
    except ImportError as err:
        return f"ray is not installed ({err}); pip install 'frenzy-planner[ray]'"
    return None


# The HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113 section 3.4): a gRPC server (Ray's GCS, its
# client server) answers with a SETTINGS frame of its own, frame type 0x4 in the 4th byte of a 9-byte frame header.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_FRAME_HEADER_BYTES = 9
_H2_SETTINGS = 0x4
_ADDRESS_FIX = ("give the HOST:PORT of a running Ray head (`ray start --head` prints it, port 6379 by default), "
                "ray://HOST:10001, or auto")


def _resolve(host: str, port: int, timeout_s: float) -> list:
    """getaddrinfo with a deadline (it has no timeout of its own; a dead resolver can take 20 s or more). The lookup
    thread is a daemon: left behind, it ends when the resolver gives up and holds nothing."""
    box: dict[str, Any] = {}

    def look_up() -> None:
        try:
            box["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as err:
            box["error"] = err

    t = threading.Thread(target=look_up, daemon=True, name="frenzy-ray-address")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise SpecError("address", f"could not resolve {short_repr(host)} within {timeout_s:g} s; {_ADDRESS_FIX}")
    if "error" in box:
        raise SpecError("address", f"unknown host {short_repr(host)} ({box['error'].strerror or box['error']}); "
                        f"{_ADDRESS_FIX}")
    return box["infos"]


def check_ray_address(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse a Ray `address` (HOST:PORT or ray://HOST:PORT) that nothing answers on as a gRPC server: an unknown
    host, a closed port, a silent host, or a server that is not gRPC (e.g. the dashboard's port 8265). It takes at
    most `timeout_s` to resolve the host and `timeout_s` to hear the answer; ray.init(address=...) itself retries a
    dead address 20 times, each try waiting ~40 s for the GCS. ``local`` (start one) is left alone; TLS clusters
    (RAY_USE_TLS) are only checked for an open port.

    >>> check_ray_address("head-node")
    Traceback (most recent call last):
    ...
    frenzy_core.errors.SpecError: address: expected HOST:PORT, got 'head-node'; give the HOST:PORT of a running Ray head (`ray start --head` prints it, port 6379 by default), ray://HOST:10001, or auto
    """
    if address == "local":
        return
    hostport = address.removeprefix("ray://")
    host, sep, port_text = hostport.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not (port_text.isdigit() and len(port_text) <= 5 and 0 < int(port_text) < 65536):
        raise SpecError("address", f"expected HOST:PORT, got {short_repr(address)}; {_ADDRESS_FIX}")
    port = int(port_text)
    infos = _resolve(host, port, timeout_s)
    deadline = time.monotonic() + timeout_s  # for all of the host's addresses together
    last = f"no answer within {timeout_s:g} s"
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(max(deadline - time.monotonic(), 1e-3))
                sock.connect(sockaddr)
                if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                    return
                sock.sendall(_H2_PREFACE)
                head = b""
                while len(head) < _H2_FRAME_HEADER_BYTES:
                    sock.settimeout(max(deadline - time.monotonic(), 1e-3))  # a server that drips bytes too
                    chunk = sock.recv(_H2_FRAME_HEADER_BYTES - len(head))
                    if not chunk:
                        break
                    head += chunk
        except TimeoutError:
            last = f"no answer within {timeout_s:g} s"
            continue
        except OSError as err:
            last = err.strerror or type(err).__name__
            continue
        if len(head) == _H2_FRAME_HEADER_BYTES and head[3] == _H2_SETTINGS:
            return
        raise SpecError("address", f"{short_repr(hostport)} answers, but not as a Ray cluster (no gRPC); "
                        f"{_ADDRESS_FIX}")
    raise SpecError("address", f"cannot reach {short_repr(hostport)} ({last}); {_ADDRESS_FIX}")


def _ray_init(ray, address: str | None, workers: int) -> None:
    """Start a local Ray cluster of `workers` CPUs, or join the one at `address` (else RAY_ADDRESS, which ray.init
    would follow anyway), checked first, so a wrong address is a one-line SpecError within seconds, not a traceback
    after minutes."""
    import frenzy_core

    address = address or os.environ.get("RAY_ADDRESS") or None
    if not address:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        return
    if address == "auto":  # the address Ray would pick (RAY_ADDRESS, the last `ray start`), checked like any other
        try:
            from ray._private.services import canonicalize_bootstrap_address_or_die
        except ImportError:  # a private helper: without it, auto is left to ray.init
            canonicalize_bootstrap_address_or_die = None
        if canonicalize_bootstrap_address_or_die is not None:
            try:
                check_ray_address(canonicalize_bootstrap_address_or_die("auto"))
            except ConnectionError as err:
                raise SpecError("address", f"auto: {str(err).splitlines()[0][:160]}; {_ADDRESS_FIX}") from None
    else:
        check_ray_address(address)
    try:
        # The cluster's workers run the same frenzy_core as this driver (same answers on every backend).
        ray.init(address=address, runtime_env={"py_modules": [frenzy_core]}, log_to_driver=False)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as err:
        lines = str(err).strip().splitlines() or [type(err).__name__]
        raise SpecError("address", f"could not join the Ray cluster at {short_repr(address)}: "
                        f"{lines[0][:160]}; {_ADDRESS_FIX}") from None


def _run_ray(grid: Grid, runs: Sequence[Run], workers: int, address: str | None,
             progress: Progress | None) -> list[dict[str, Any]]:
    why = ray_available()
    if why:
        raise SpecError("backend", why)
    import ray

    ours = not ray.is_initialized()  # a cluster (or connection) the caller made is left to the caller
    pending: list = []
    try:
        if ours:
            _ray_init(ray, address, workers)  # inside the try: a Ctrl-C while Ray starts still shuts it down
        grid_ref = ray.put(grid)  # shipped once; every task gets the reference
        task = ray.remote(num_cpus=1)(run_one)
        refs = [task.remote(grid_ref, r) for r in runs]
        where = {ref: i for i, ref in enumerate(refs)}
        rows: list[dict[str, Any] | None] = [None] * len(runs)
        pending = list(refs)
        done_count = 0
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.2)
            for ref, row in zip(done, ray.get(done), strict=True):
                rows[where[ref]] = row
            done_count += len(done)
            if progress is not None:  # every 0.2 s: the heartbeat that lets a Cancel through (see _run_pool)
                progress(done_count, len(runs))
        return rows  # type: ignore[return-value]
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if ours:
            ray.shutdown()  # stops the raylet, the GCS, the agents and the workers a local init started


def json_safe(value: Any) -> Any:
    """NaN and infinities as None, recursively (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
