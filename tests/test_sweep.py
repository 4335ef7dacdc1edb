"""Sweeps: the grid expands into every (workload, candidate, policy, seed) once, in a fixed order; a row is one seed of
a direct simulate_seeds call; the aggregates are MultiSeedResult's CIs; every backend gives the same table; a stop
leaves no worker behind; bad input names the field; `frenzy sweep --json` carries the documented keys."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from frenzy_core.cli import main
from frenzy_core.cluster import load_cluster
from frenzy_core.errors import SpecError
from frenzy_core.limits import MAX_CANDIDATES, MAX_SEEDS, MAX_SWEEP_RUNS, MAX_WORKERS, RAY_CONNECT_TIMEOUT_S
from frenzy_core.simulate import simulate_seeds
from frenzy_core.sweep import (
    GROUP_KEYS,
    TIMING_KEYS,
    Grid,
    check_ray_address,
    json_safe,
    ray_available,
    run_one,
    run_sweep,
)
from frenzy_core.traces import bundled_traces, load_trace
from frenzy_core.whatif import WeeklyJob, WeeklyJobs, add_gpus

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "sample_clusters" / "modern-mixed.yaml"
PHILLY, PHILLY_FMT = bundled_traces()["philly-2000"]


@pytest.fixture(scope="module")
def base():
    return load_cluster(CLUSTER)


@pytest.fixture(scope="module")
def trace():
    return load_trace(str(PHILLY), PHILLY_FMT, limit=20)


@pytest.fixture(scope="module")
def grid(base, trace):
    return Grid.make(base, {"today": base, "+16 L40S": add_gpus(base, "L40S", 16)}, ["fcfs", "frenzy-eft"],
                     [0, 1], {"philly": trace})


@pytest.fixture(scope="module")
def here(grid):
    """The grid run in this process: the reference table the other backends must reproduce."""
    return run_sweep(grid, "local", workers=1)


def test_grid_expands_every_cell_once_in_workload_candidate_policy_seed_order(grid):
    runs = grid.runs()
    cells = [(r.workload, r.candidate, r.policy, r.seed) for r in runs]
    assert len(cells) == len(set(cells)) == 1 * 2 * 2 * 2
    assert cells == sorted(cells, key=lambda c: (["today", "+16 L40S"].index(c[1]), c[2], c[3]))
    assert [r.index for r in runs] == list(range(len(runs)))


def test_a_row_is_one_seed_of_a_direct_simulate_seeds_call(base, trace, grid):
    run = next(r for r in grid.runs() if r.candidate == "+16 L40S" and r.policy == "frenzy-eft" and r.seed == 1)
    row = run_one(grid, run)
    direct = simulate_seeds(trace, dict(grid.candidates)["+16 L40S"], "frenzy-eft", seeds=[0, 1],
                            workload_cluster=base).results[1].metrics()
    for key in ("avg_jct_s", "p99_jct_s", "makespan_s", "gpu_hours", "completed", "jobs"):
        assert row[key] == direct[key], key


def test_aggregates_are_the_multi_seed_confidence_intervals(base, trace, grid, here):
    agg = {(a["candidate"], a["policy"]): a for a in here.aggregate("avg_jct_s")}
    assert set(agg) == {(c, p) for c, _ in grid.candidates for p in grid.policies}
    for (c, p), a in agg.items():
        ms = simulate_seeds(trace, dict(grid.candidates)[c], p, seeds=[0, 1], workload_cluster=base)
        assert (a["avg_jct_s"], a["avg_jct_s_ci_low"], a["avg_jct_s_ci_high"]) == ms.ci("avg_jct_s")
        assert a["seeds"] == 2


def test_rows_come_back_in_grid_order_with_labels(grid, here):
    assert [tuple(r[k] for k in (*GROUP_KEYS, "seed")) for r in here.rows] == \
        [(r.workload, r.candidate, r.policy, r.seed) for r in grid.runs()]


def test_the_process_pool_gives_the_same_table_as_one_process(grid, here):
    pool = run_sweep(grid, "local", workers=2)
    assert pool.workers == 2
    assert pool.deterministic_rows() == here.deterministic_rows()
    assert not multiprocessing.active_children()


def test_deterministic_rows_drop_only_the_wall_clock_columns(here):
    row, kept = here.rows[0], here.deterministic_rows()[0]
    assert set(row) - set(kept) == set(TIMING_KEYS)


def test_an_exception_from_progress_stops_the_pool_and_leaves_no_worker(grid):
    calls = []

    def stop(done, total):
        calls.append(done)
        raise KeyboardInterrupt  # what Ctrl-C (or a Streamlit rerun on Cancel) looks like from inside the loop

    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_sweep(grid, "local", workers=2, progress=stop)
    assert calls == [calls[0]]  # stopped at the first report, did not carry on
    assert time.perf_counter() - t0 < 30
    assert not multiprocessing.active_children()  # run_sweep joined (or killed) every worker before re-raising


def test_the_pool_reports_before_any_run_ends_so_a_cancel_gets_through(grid):
    """progress is a heartbeat (sweep.HEARTBEAT_S): it is called while no run has finished yet (spawned workers take
    well over 0.25 s to import and simulate), so Streamlit's Cancel is not held up until a run ends."""
    calls = []

    def stop(done, total):
        calls.append(done)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(grid, "local", workers=2, progress=stop)
    assert calls == [0]
    assert not multiprocessing.active_children()


def test_an_exception_from_progress_stops_an_in_process_sweep_mid_run(grid):
    seen = []

    def stop(done, total):
        seen.append(done)
        if done > 0:
            raise RuntimeError("cancel")

    with pytest.raises(RuntimeError):
        run_sweep(grid, "local", workers=1, progress=stop)
    assert max(seen) < 1  # stopped inside the first run (the simulator reports every ~1% of jobs)


def test_weekly_jobs_draw_their_arrivals_per_seed_inside_the_sweep(base):
    mine = WeeklyJobs((WeeklyJob("gpt2", 20.0, 1, 1.0),), weeks=1.0)
    g = Grid.make(base, {"today": base}, ["fcfs"], [0, 1], {"mine": mine})
    rows = run_sweep(g, "local", workers=1).rows
    assert [r["jobs"] for r in rows] == [len(mine.trace_for(0).jobs), len(mine.trace_for(1).jobs)]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"backend": "slurm"}, "backend"), ({"workers": 0}, "workers"), ({"workers": 1.5}, "workers"),
    ({"address": "auto"}, "address"), ({"workers": MAX_WORKERS + 1}, "workers"),
])
def test_bad_run_arguments_name_the_field(grid, kwargs, field):
    with pytest.raises(SpecError) as err:
        run_sweep(grid, **kwargs)
    assert err.value.field == field


@pytest.mark.parametrize(("change", "field"), [
    ({"policies": ["no-such-policy"]}, "policies"), ({"seeds": []}, "seeds"), ({"seeds": [1, 1]}, "seeds"),
    ({"candidates": {}}, "candidates"),
])
def test_a_bad_grid_names_the_field(base, trace, change, field):
    args = {"candidates": {"today": base}, "policies": ["fcfs"], "seeds": [0], **change}
    with pytest.raises(SpecError) as err:
        Grid.make(base, args["candidates"], args["policies"], args["seeds"], {"w": trace})
    assert err.value.field == field


def test_json_safe_turns_nan_into_null():
    assert json.dumps(json_safe({"a": [float("nan"), 1.0], "b": float("inf")})) == '{"a": [null, 1.0], "b": null}'


def test_cli_sweep_json_has_a_row_per_run_and_the_wall_time(capsys):
    code = main(["sweep", "--cluster", str(CLUSTER), "--trace", str(PHILLY), "--trace-format", "philly",
                 "--limit-jobs", "20", "--policies", "fcfs,frenzy-eft", "--add", "L40S:16", "--seeds", "2",
                 "--workers", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["runs"] == len(out["results"]) == 2 * 2 * 2 and out["wall_s"] > 0
    assert {"candidate", "policy", "seed", "avg_jct_s"} <= set(out["results"][0])
    assert {r["candidate"] for r in out["results"]} == {"today", "+16 L40S"}


@pytest.mark.parametrize(("extra", "field"), [
    (["--policies", "nope"], "policies"), (["--add", "L40S"], "add"), (["--seeds", "0"], "seeds"),
    (["--workers", "0"], "workers"), (["--address", "auto"], "address"),
    (["--seeds", str(MAX_SEEDS + 1)], "seeds"), (["--seeds", str(10**12)], "seeds"),
    (["--workers", str(MAX_WORKERS + 1)], "workers"), (["--add", "L40S:100000000000000000000"], "add"),
])
def test_cli_sweep_bad_input_exits_2_with_one_line(capsys, extra, field):
    code = main(["sweep", "--cluster", str(CLUSTER), "--trace", str(PHILLY), "--limit-jobs", "5", *extra])
    err = capsys.readouterr().err
    assert code == 2 and field in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# --- Ray: one local cluster of 2 CPUs for the module --------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster():
    why = ray_available()
    if why:
        pytest.skip(f"Ray tests need ray: {why}")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_same_table_as_one_process(ray_cluster, grid, here):
    got = run_sweep(grid, "ray", workers=2)
    assert got.backend == "ray"
    assert got.deterministic_rows() == here.deterministic_rows()
    assert ray_cluster.is_initialized()  # a cluster the caller started is left running for the caller


def test_cli_sweep_on_ray_gives_the_same_results_as_local(ray_cluster, capsys):
    argv = ["sweep", "--cluster", str(CLUSTER), "--trace", str(PHILLY), "--limit-jobs", "20", "--policies",
            "frenzy-eft", "--add", "L40S:16", "--seeds", "2", "--json"]
    assert main([*argv, "--backend", "ray"]) == 0
    ray_rows = json.loads(capsys.readouterr().out)["results"]
    assert main([*argv, "--backend", "local", "--workers", "1"]) == 0
    local_rows = json.loads(capsys.readouterr().out)["results"]
    strip = [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in ray_rows]
    assert strip == [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in local_rows]


def test_ctrl_c_on_frenzy_sweep_exits_130_with_one_line_and_no_process_left(tmp_path):
    """A real SIGINT to the process group, as a terminal's Ctrl-C sends it, while a 2-worker pool runs."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "frenzy_core.cli", "sweep", "--cluster", str(CLUSTER), "--trace", str(PHILLY),
         "--limit-jobs", "100", "--policies", "frenzy-eft,fcfs", "--add", "L40S:16", "--add", "H100-80GB:16",
         "--seeds", "20", "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        # a terminal's process gets Ctrl-C: undo the SIG_IGN a shell's background job (`cmd &`) would pass down
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 90
    while not any("runs" in line for line in lines) and time.monotonic() < deadline:  # a run has finished: the
        time.sleep(0.1)  # pool's workers are up and simulating
    assert proc.poll() is None, "".join(lines)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    err = "".join(lines)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err
    deadline = time.monotonic() + 10  # the workers are stopped; the resource tracker's zombie is reaped by init
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    with pytest.raises(ProcessLookupError):  # no process left in the group
        os.killpg(proc.pid, 0)


# --- bounded work: Ray stopped on Ctrl-C, a bad --address, caps on the grid ---------------------------------------
RAY_PROCESS_MARKS = ("ray::", "raylet", "gcs_server")  # Ray's workers and agents, its node manager, its GCS


def _ray_processes_in_session(sid: int) -> dict[int, str]:
    """pid -> command line of Ray's live processes in session `sid` (psutil when installed, else `ps`); zombies
    (exited, waiting to be reaped) do not count."""
    try:
        import psutil
    except ImportError:
        import subprocess

        out = subprocess.run(["ps", "-eo", "pid=,sid=,stat=,args="], capture_output=True, text=True,
                             check=True).stdout
        rows = [line.split(None, 3) for line in out.splitlines()]
        return {int(r[0]): r[3] for r in rows if len(r) == 4 and r[1] == str(sid) and not r[2].startswith("Z")
                and any(m in r[3] for m in RAY_PROCESS_MARKS)}
    found = {}
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            line = " ".join(p.info["cmdline"] or [])
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(p.info["pid"]) == sid \
                    and any(m in line for m in RAY_PROCESS_MARKS):
                found[p.info["pid"]] = line
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


@pytest.mark.skipif(ray_available() is not None, reason=f"needs ray: {ray_available()}")
def test_ctrl_c_on_a_ray_sweep_shuts_ray_down_and_leaves_no_ray_process():
    """Ctrl-C pressed again and again, as an impatient user does, while a local Ray cluster of our own runs the
    sweep: the CLI exits 130 with one line, and none of Ray's processes (workers, agents, raylet, GCS) outlives it.
    A second SIGINT used to interrupt ray.shutdown() (a traceback, exit -2) and leave the dashboard and runtime-env
    agents running for a minute."""
    import signal
    import subprocess
    import sys
    import threading

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "frenzy_core.cli", "sweep", "--cluster", str(CLUSTER), "--trace", str(PHILLY),
         "--limit-jobs", "100", "--policies", "frenzy-eft,fcfs", "--add", "L40S:16", "--seeds", "20",
         "--workers", "2", "--backend", "ray"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not any("runs" in line for line in lines) and time.monotonic() < deadline:  # Ray is up, runs end
            time.sleep(0.1)
        assert proc.poll() is None, "".join(lines)
        assert _ray_processes_in_session(proc.pid), "the sweep should run on Ray processes of its own"
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:  # Ctrl-C until it has exited
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        proc.wait(timeout=30)
        reader.join(timeout=10)
        err = "".join(lines)
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err, err
        deadline = time.monotonic() + 20  # ray.shutdown() has returned; its processes are being reaped
        while _ray_processes_in_session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _ray_processes_in_session(proc.pid)
        assert not left, "\n".join(left.values())
    finally:  # whatever failed, leave no process of this test to the next one
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for pid in _ray_processes_in_session(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_grid_over_the_run_limit_is_refused_naming_the_flags(base, trace):
    """candidates x policies x seeds past MAX_SWEEP_RUNS: refused before any run, with the product spelled out."""
    n = MAX_SWEEP_RUNS // MAX_SEEDS + 1
    with pytest.raises(SpecError) as err:
        Grid.make(base, {f"c{i}": base for i in range(n)}, ["fcfs"], range(MAX_SEEDS), {"w": trace})
    assert err.value.field == "runs"
    assert f"{n * MAX_SEEDS:,} runs" in err.value.reason and f"{MAX_SWEEP_RUNS:,}" in err.value.reason
    assert all(flag in err.value.reason for flag in ("--seeds", "--policies", "--add"))


def test_a_grid_over_the_seed_or_candidate_limit_is_refused_without_listing_the_seeds(base, trace):
    with pytest.raises(SpecError) as err:
        Grid.make(base, {"today": base}, ["fcfs"], range(MAX_SEEDS + 1), {"w": trace})
    assert err.value.field == "seeds" and f"{MAX_SEEDS:,}" in err.value.reason
    t0 = time.perf_counter()
    with pytest.raises(SpecError):  # a trillion seeds: refused after reading MAX_SEEDS + 1 of them
        Grid.make(base, {"today": base}, ["fcfs"], range(10**12), {"w": trace})
    assert time.perf_counter() - t0 < 5
    with pytest.raises(SpecError) as err:
        Grid.make(base, {f"c{i}": base for i in range(MAX_CANDIDATES + 1)}, ["fcfs"], [0], {"w": trace})
    assert err.value.field == "candidates" and f"{MAX_CANDIDATES:,}" in err.value.reason


def test_cli_sweep_over_the_run_limit_exits_2_naming_the_flags(capsys):
    adds = [f"--add=c{i}=L40S:8" for i in range(MAX_SWEEP_RUNS // MAX_SEEDS)]  # with today: one candidate too many
    code = main(["sweep", "--cluster", str(CLUSTER), "--job", "gpt2:1:1:1", "--policies", "fcfs", "--seeds",
                 str(MAX_SEEDS), "--workers", "1", *adds])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "runs" in err and f"{MAX_SWEEP_RUNS:,}" in err and "--seeds" in err, err


# --- a Ray address that answers nothing, or not as Ray -------------------------------------------------------------
@pytest.mark.skipif(ray_available() is not None, reason=f"needs ray: {ray_available()}")
@pytest.mark.parametrize("address", ["127.0.0.1:1", "not-a-host:6379", "ray://127.0.0.1:1"])
def test_a_bad_ray_address_is_one_line_naming_address_within_seconds(address):
    """ray.init(address=...) retried such an address for many minutes (20 tries of ~40 s) and then raised a
    traceback; now the CLI says what is wrong with --address and how to fix it, after at most
    RAY_CONNECT_TIMEOUT_S of network waiting."""
    import subprocess
    import sys

    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "frenzy_core.cli", "sweep", "--cluster", str(CLUSTER), "--job", "gpt2:1:1:1",
         "--policies", "fcfs", "--seeds", "1", "--backend", "ray", "--address", address],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    wall = time.monotonic() - t0
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "address" in done.stderr and "ray start --head" in done.stderr, done.stderr
    assert wall < 30 + RAY_CONNECT_TIMEOUT_S  # interpreter, numpy and ray imports on a loaded machine, one timeout


def _serve_once(reply: bytes | None):
    """A TCP server on a free loopback port that accepts one connection and writes `reply` (None: says nothing and
    holds the connection). Returns (port, stop)."""
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            if reply is not None:
                conn.sendall(reply)
            stop.wait(30)

    threading.Thread(target=serve, daemon=True).start()

    def close() -> None:
        stop.set()
        srv.close()

    return srv.getsockname()[1], close


@pytest.mark.parametrize(("reply", "says"), [(b"HTTP/1.1 400 Bad Request\r\n\r\n", "not as a Ray cluster"),
                                             (None, "no answer")])
def test_an_address_that_is_not_a_ray_server_is_refused_within_the_timeout(reply, says):
    """The dashboard's HTTP port, or a port that accepts and stays silent: refused after one timeout at most."""
    port, close = _serve_once(reply)
    try:
        t0 = time.monotonic()
        with pytest.raises(SpecError) as err:
            check_ray_address(f"127.0.0.1:{port}", timeout_s=0.5)
        assert time.monotonic() - t0 < 5
    finally:
        close()
    assert err.value.field == "address" and says in err.value.reason


@pytest.mark.parametrize("address", ["head", "head:port", "head:0", "head:70000", ":6379"])
def test_an_address_that_is_not_host_and_port_is_refused(address):
    with pytest.raises(SpecError) as err:
        check_ray_address(address)
    assert err.value.field == "address" and "HOST:PORT" in err.value.reason


def test_a_running_ray_head_passes_the_address_check(ray_cluster):
    """The check speaks just enough HTTP/2 to hear a gRPC server: Ray's own GCS must pass it."""
    check_ray_address(ray_cluster.get_runtime_context().gcs_address)


@pytest.mark.skipif(ray_available() is not None, reason=f"needs ray: {ray_available()}")
def test_cli_sweep_joins_a_running_ray_cluster_by_address(ray_cluster, capsys):
    """--address HOST:PORT of a head started elsewhere (here: this test process's local Ray, which the CLI, a
    separate process, joins) still works after the check: the rows are those of the local backend."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    address = ray_cluster.get_runtime_context().gcs_address
    assert address, "the Ray head did not start"
    argv = ["sweep", "--cluster", str(CLUSTER), "--trace", str(PHILLY), "--limit-jobs", "10", "--policies",
            "fcfs", "--seeds", "2", "--json"]
    joined = subprocess.run([sys.executable, "-m", "frenzy_core.cli", *argv, "--backend", "ray", "--address",
                             address], capture_output=True, text=True, env=env, timeout=300)
    assert joined.returncode == 0, joined.stderr
    assert main([*argv, "--workers", "1"]) == 0
    local = json.loads(capsys.readouterr().out)["results"]
    strip = [[{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]
             for rows in (json.loads(joined.stdout)["results"], local)]
    assert strip[0] == strip[1]
    assert ray_cluster.is_initialized()  # the joined head is still up after the CLI left it
