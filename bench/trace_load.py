"""Trace loading at the row limit: a synthetic Philly-format CSV of `MAX_TRACE_ROWS` (5,000,000) rows, loaded by
`traces.load_trace`, and the real 82,247-row Philly trace when ../shared/traces has it.

Targets (issue 20): the 5M rows load in under 60 s and under 1 GiB peak RSS on a 2-core machine. Each load runs in
a fresh Python subprocess, so neither the writer's memory nor an earlier load counts: `peak_rss_mib` is that
process's `ru_maxrss` (imports included; `import_rss_mib` is the same process before the load), `load_s` the wall
time of the `load_trace` call alone. (Linux keeps a process's `ru_maxrss` across exec, so the file is written by
another subprocess and this parent imports neither numpy nor pandas: a child inherits only the parent's ~10 MiB.) The synthetic file has Philly's columns (`traces.PHILLY_COLUMNS`) and value
shapes: "2017-10-09 07:01:55,66.0,1,66.0,11cb48", submit times over 90 days, GPU counts from Philly's mix,
log-normal durations. Prints a line per load, then one JSON object on the last line.
Run: .venv/bin/python bench/trace_load.py [--rows N] [--skip-real] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MAX_TRACE_ROWS = 5_000_000  # frenzy_core.limits.MAX_TRACE_ROWS (checked in write_philly; not imported here, see above)
PHILLY = REPO.parent / "shared" / "traces" / "sia-sosp23" / "traces" / "philly.csv"
WRITE_CHUNK = 500_000  # rows formatted at a time, so the writer stays small too

# Runs in the fresh subprocess: import, note the RSS, load, note the time and the peak RSS.
CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from frenzy_core.traces import load_trace
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
trace = load_trace(sys.argv[1], sys.argv[2])
load_s = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
try:  # the kernel's own high-water mark of this process's memory, to cross-check ru_maxrss
    hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
except (OSError, StopIteration):
    hwm = peak
print(json.dumps({"kept": trace.kept, "skipped": len(trace.skipped), "load_s": round(load_s, 2),
                  "peak_rss_mib": round(peak / 1024), "import_rss_mib": round(before / 1024), "vm_hwm_mib": round(hwm / 1024)}))
"""


def write_philly(path: Path, rows: int, seed: int = 0) -> int:
    """Write `rows` Philly-format rows (plus the header) to `path`; returns the file's size in bytes."""
    import numpy as np

    from frenzy_core import limits
    from frenzy_core.traces import PHILLY_COLUMNS, PHILLY_GPU_COUNT_DIST

    assert limits.MAX_TRACE_ROWS == MAX_TRACE_ROWS, "update MAX_TRACE_ROWS here"
    rng = np.random.default_rng(seed)
    counts = np.array(sorted(PHILLY_GPU_COUNT_DIST))
    probs = np.array([PHILLY_GPU_COUNT_DIST[g] for g in counts], dtype=float)
    probs /= probs.sum()
    vcs = np.array([f"{v:06x}" for v in rng.integers(0, 1 << 24, size=14)])  # Philly has 14 virtual clusters
    start = np.datetime64("2017-08-07T00:00:00", "s")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(",".join(PHILLY_COLUMNS) + "\n")
        for lo in range(0, rows, WRITE_CHUNK):
            n = min(WRITE_CHUNK, rows - lo)
            stamps = np.datetime_as_string(start + rng.integers(0, 90 * 86400, size=n).astype("timedelta64[s]"))
            stamps = np.char.replace(stamps, "T", " ")
            gpus = rng.choice(counts, size=n, p=probs)
            duration = np.round(rng.lognormal(np.log(1144.0), 1.5, size=n))
            lines = [f"{s},{d:.1f},{g},{d * g:.1f},{v}" for s, d, g, v in
                     zip(stamps.tolist(), duration.tolist(), gpus.tolist(), rng.choice(vcs, size=n).tolist(),
                         strict=True)]
            f.write("\n".join(lines) + "\n")
    return path.stat().st_size


def measure(path: Path, fmt: str, timeout_s: float) -> dict:
    """Load `path` in a fresh interpreter; its JSON line, or an `error` saying why there is none."""
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(path), fmt, str(REPO)], capture_output=True,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"still loading after {timeout_s:g} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=MAX_TRACE_ROWS)
    ap.add_argument("--skip-real", action="store_true", help="do not time the real 82k-row Philly trace")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one load may take")
    ap.add_argument("--write", metavar="PATH", help=argparse.SUPPRESS)  # the writer subprocess
    args = ap.parse_args()
    if args.write:
        write_philly(Path(args.write), args.rows)
        return
    out: dict = {"rows": args.rows}
    with tempfile.TemporaryDirectory(prefix="trace_load_") as tmp:
        path = Path(tmp) / "philly-synthetic.csv"
        subprocess.run([sys.executable, __file__, "--write", str(path), "--rows", str(args.rows)], check=True)
        size = path.stat().st_size
        out["file_mib"] = round(size / 1024**2, 1)
        got = measure(path, "philly", args.timeout)
    out.update(got)
    print(f"synthetic philly: {args.rows:,} rows, {out['file_mib']} MiB: {got}", file=sys.stderr)
    if not args.skip_real and PHILLY.is_file():
        real = measure(PHILLY, "philly", args.timeout)
        print(f"real philly ({PHILLY.name}): {real}", file=sys.stderr)
        out["philly_82k"] = {k: real[k] for k in ("kept", "load_s", "peak_rss_mib", "error") if k in real}
    elif not args.skip_real:
        print(f"real philly: not found at {PHILLY} (see ../shared/traces/README.md); not timed", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
