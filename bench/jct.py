"""JCT of frenzy (and its variants) vs sia vs fcfs; writes docs/results.md.

Main settings (10 seeds each): Sia's 64-GPU cluster with the Philly and Helios-Saturn workloads, the modern mixed
cluster with Saturn. Held-out settings (5 seeds each, never used to choose anything): sia-64 with Sia's "newtrace"
workloads and modern-mixed with Philly. Seed s uses workload file workload-(s mod n + 1) of the set and seed s for
the model mapping. Runs are independent (pure functions of their inputs), so they go to a 2-process pool.

Policies: `frenzy` as in the paper with the default objective (SimOptions.frenzy_objective), `frenzy-time` (the same
policy, objective "time"), `frenzy-share` (beyond the paper: time ranking capped at a fair share), `frenzy-eft`
(beyond the paper: frenzy-share's candidates chosen by earliest predicted finish, waiting for busy GPUs when that
finishes earlier), `sia`, `fcfs`.
JCT columns are over completed jobs only; given-up jobs (FCFS after 4 out-of-memory retries) have their own column.
Restart-cost sensitivity (the 3 main settings, 10 seeds): `sia` again with a flat 120 s restart and with
`restart_model="checkpoint"` (start-up + save + load of the model states, SimOptions); the flat 30 s rows are the main
table's sia runs, and frenzy-eft / fcfs (which never restart) are reused from it.
Last line: JSON with the average JCT per policy and setting, per Frenzy variant the relative change of its
average JCT against the better of sia and fcfs (< 0 = better), and the sensitivity's sia average JCT and restarts
per run by restart cost.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core.cluster import load_cluster  # noqa: E402
from frenzy_core.metrics import mean_ci  # noqa: E402
from frenzy_core.simulate import RestartModel, SimOptions, simulate  # noqa: E402
from frenzy_core.traces import load_trace  # noqa: E402

WORKLOADS = REPO.parent / "shared" / "traces" / "sia-sosp23" / "workloads"
SETTINGS = (("sia-64", "philly", 10), ("sia-64", "saturn", 10), ("modern-mixed", "saturn", 10),
            ("sia-64", "newtrace", 5), ("modern-mixed", "philly", 5))  # the last two: held out
HELD_OUT = {("sia-64", "newtrace"), ("modern-mixed", "philly")}
# label -> (registered policy, frenzy_objective override or None for the SimOptions default)
POLICIES = {"frenzy": ("frenzy", None), "frenzy-time": ("frenzy", "time"), "frenzy-share": ("frenzy-share", None),
            "frenzy-eft": ("frenzy-eft", None), "sia": ("sia", None), "fcfs": ("fcfs", None)}
FRENZY_LABELS = ("frenzy", "frenzy-time", "frenzy-share", "frenzy-eft")
MAIN = [(c, w) for c, w, _n in SETTINGS if (c, w) not in HELD_OUT]
# restart-cost variants for sia: label -> SimOptions overrides (None = the main table's run, the default flat 30 s)
RESTARTS = {"flat 30 s": None, "flat 120 s": {"restart": RestartModel(kind="flat", flat_s=120.0)},
            "checkpoint": {"restart": RestartModel()}}
SENSITIVITY_NOTES = """\
**What this shows.** {what}
Why so little: Sia moves a job about 0.6-1 times over its life (restarts per run over 160 jobs), and a move costs
122-302 s for the models the mapping draws (70B jobs are rare), against JCTs of tens of minutes to hours. Sia's ILP
does not see the cost it is charged: its only brake on moves is the 10% utility penalty, so it moves about as often
under every variant (slightly more: jobs run longer and see more rounds); a real Sia weighs a restart by its cost.
The "checkpoint" cost assumes 2 GB/s per job to shared storage and saves + loads weights and optimizer states (14
bytes per parameter: 94 GB for llama-2-7b, 214 s per move; 966 GB for llama-2-70b, 1,086 s); see docs/simulation.md.
"""
NOTES = """\
- **Sia wins everywhere, by 1.6x (frenzy-eft, modern-mixed/saturn) to 7x on average JCT.** Our Sia-like policy is
  elastic: every 60 s the ILP may give a job up to 64 GPUs of any type (micro-batch tuned per option) and move it (30
  s restore, 10% utility penalty), so a job starts large on an idle cluster and shrinks when others arrive. Frenzy and
  FCFS are not elastic: a job keeps the allocation it started with. The paper's 12-18% JCT gain over the best baseline
  is not reproduced: our Sia is a stronger baseline than the paper's, and our workloads are mapped LLM jobs. Numbers
  are this simulator's.
- **`frenzy` (the paper, default objective "gpu-hours")** takes the plan with the fewest GPU-hours: the smallest GPU
  count that fits on the fastest type. Lowest GPU-hours of all policies, almost no queueing, but slow jobs on a
  lightly loaded cluster: its JCT is 0.85-1.6 h, no better than FCFS. **Objective "time"** (`frenzy-time`, the
  fastest plan free now = the largest) is better on sia-64 (philly 0.41 h, newtrace 0.23 h) but queues badly on
  modern-mixed (2.7 h on saturn, 1.4 h on philly): the performance model scales LLM jobs almost linearly, so the
  first job takes a whole fast type and later arrivals wait for it. Neither objective wins on 2 of the 3 main
  settings, so the default stays "gpu-hours" (the paper's intent of not wasting GPUs; 3-4x fewer GPU-hours).
- **`frenzy-share` (beyond the paper)** ranks by time but caps a job at its equal share of the GPUs it can use among
  the running and waiting jobs (never below its smallest plan). Before `frenzy-eft` it had the lowest JCT of the
  Frenzy variants on 2 of the 3 main settings (sia-64/saturn 0.93 h, modern-mixed/saturn 1.19 h) and on the held-out
  modern-mixed/philly (0.79 h); `frenzy-time` beats it on sia-64/philly (0.41 vs 0.51 h) and held-out sia-64/newtrace
  (0.23 vs 0.37 h). It beats `frenzy` on all 5 settings and FCFS on 4 of 5 (tied on modern-mixed/philly, 0.79 vs 0.80
  h), with wide intervals (10 or 5 seeds). `frenzy` stays the paper's policy. The share rule was chosen before the
  held-out runs; variants tried and dropped (documented in docs/simulation.md): an efficiency bound (fastest plan
  within X% of the minimum GPU-hours; barely binds because scaling is near linear, and its fallback to small plans on
  slow types made it worse).
- **`frenzy-eft` (beyond the paper) fixes what HAS's "first plan that fits now" gets wrong.** frenzy-share's HAS makes
  a job that arrives while the fast GPUs are busy take a small plan on a slow type and keep it for hours even if the
  fast GPUs free up minutes later (golden trace g03: 2 x T4 for 13.9 h instead of waiting 12 min for the A100s).
  frenzy-eft takes the same capped candidates but picks the one with the earliest predicted finish: start now if HAS
  places it, else at the predicted end of the running jobs that free enough GPUs of its type (the performance model
  knows it); if the winner does not fit now, the job waits (g03: 4 x A100 after 21 min, JCT 1.4 h). It has the lowest
  average JCT of the Frenzy variants on 3 of 5 settings and beats `frenzy-share` on all 5, the held-out ones included:
  sia-64/philly 0.46 vs 0.51 h, sia-64/saturn 0.66 vs 0.93 h, modern-mixed/saturn 0.65 vs 1.19 h, newtrace 0.24 vs
  0.37 h, modern-mixed/philly 0.55 vs 0.79 h; and FCFS on all 5. `frenzy-time` stays ahead on sia-64/philly (0.41 h)
  and on newtrace (0.23 vs 0.24 h, within the interval). It is the variant we recommend when JCT matters. Chosen on
  the main settings only (10 seeds): without the share cap greedy EFT is as good as 0.23 h / 0.32 h on sia-64 but
  1.41 h on modern-mixed (the first jobs take whole fast types, as with "time"); caps of 2-8x the share were better on
  sia-64 and worse on modern-mixed, not monotone in the factor, so the untuned 1x cap was kept; an EASY reservation
  for the first job waiting on each type helped on sia-64/saturn (0.59 vs 0.66 h), not on the other two
  (0.46, 0.66 h), and is off by default.
- **What remains:** Frenzy is still not elastic: Sia is 1.6-3.6x better than `frenzy-eft` (avg JCT) because it resizes
  running jobs every 60 s, while a Frenzy job keeps the allocation it started with. frenzy-eft only waits for
  predicted releases of running jobs; it does not plan ahead for the queue (no look-ahead beyond the share cap).
- **FCFS pays for out-of-memory**: jobs placed on GPUs too small for their model fail after 120 s and come back with
  twice the GPUs (OOM column); jobs that fail 5 times are given up (*given up* column: 13.1 per run on sia-64/philly,
  5.1 on sia-64/saturn, 21.8 on newtrace) and are **not** in its JCT, which flatters FCFS. Frenzy and Sia never plan
  out of memory and give up on nothing.
"""


def run(args):
    cluster_name, wl, label, seed, restart = args
    policy, objective = POLICIES[label]
    files = sorted((WORKLOADS / wl).glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
    trace = load_trace(files[seed % len(files)], "sia")
    cluster = load_cluster(REPO / "sample_clusters" / f"{cluster_name}.yaml")
    opts = SimOptions(frenzy_objective=objective) if objective else SimOptions()
    if restart is not None:
        opts = replace(opts, **RESTARTS[restart])
    r = simulate(trace, cluster, policy, seed=seed, options=opts)
    m = r.metrics()
    keys = ("avg_jct_s", "p99_jct_s", "makespan_s", "gpu_hours", "completed", "jobs", "oom_failures", "avg_queue_s",
            "gave_up", "rejected", "restarts")
    return (cluster_name, wl, label, seed, restart, {k: m[k] for k in keys})


def main() -> None:
    default = SimOptions().frenzy_objective
    tasks = [(c, w, label, s, None) for c, w, n in SETTINGS for label in POLICIES for s in range(n)]
    tasks += [(c, w, "sia", s, v) for c, w, n in SETTINGS if (c, w) in MAIN for v, o in RESTARTS.items() if o
              for s in range(n)]
    tasks.sort(key=lambda t: POLICIES[t[2]][0] != "sia")  # the slow runs first, so the pool ends evenly
    with ProcessPoolExecutor(2) as pool:
        results = list(pool.map(run, tasks))
    table: dict = {}
    sens: dict = {}
    for c, w, label, _seed, restart, m in results:
        if restart is None:
            table.setdefault((c, w, label), []).append(m)
        else:
            sens.setdefault((c, w, restart), []).append(m)
    for c, w in MAIN:
        sens[(c, w, "flat 30 s")] = table[(c, w, "sia")]
    lines = ["# Scheduler simulation results", "",
             "Written by `bench/jct.py` (mean and 95% Student-t interval over seeds, lower bound clipped at 0 "
             "since no column can be negative: 10 seeds per main setting, 5 per "
             "held-out one). Sia workloads (160 jobs per philly/saturn workload, 960 per newtrace one) mapped to LLM jobs by "
             "`workload.map_trace`; memory and speed from `memory.py` / `perf.py`. See docs/simulation.md for the "
             f"model. `frenzy` is the paper's policy with the default objective ({default!r}); `frenzy-time` the "
             "same with objective \"time\"; `frenzy-share` our fair-share variant and `frenzy-eft` our earliest-finish "
             "variant (both beyond the paper).", "",
             "**JCT, p99 and queueing are over completed jobs only.** Jobs given up after 4 out-of-memory retries "
             "(only FCFS has any) have no completion time and are counted in the *given up* column, per run on "
             "average; *completed* sums all seeds.", "",
             "| cluster | workload | policy | avg JCT (h) | p99 JCT (h) | makespan (h) | GPU-hours | avg queue (min) "
             "| completed | given up | OOM failures |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    summary: dict = {}
    vs_best: dict = {}
    for c, w, _n in SETTINGS:
        key = f"{c}/{w}" + (" (held out)" if (c, w) in HELD_OUT else "")
        summary[key] = {}
        for label in POLICIES:
            ms = table[(c, w, label)]

            def ci(k, scale, ms=ms):
                m, lo, hi = mean_ci([x[k] for x in ms], nonnegative=True)  # every column is >= 0
                return f"{m / scale:.2f} [{lo / scale:.2f}, {hi / scale:.2f}]", m

            avg, avg_v = ci("avg_jct_s", 3600)
            p99, _ = ci("p99_jct_s", 3600)
            mk, _ = ci("makespan_s", 3600)
            gh, _ = ci("gpu_hours", 1)
            q, _ = ci("avg_queue_s", 60)
            done = sum(x["completed"] for x in ms)
            total = sum(x["jobs"] for x in ms)
            oom = sum(x["oom_failures"] for x in ms) / len(ms)
            gave = sum(x["gave_up"] for x in ms) / len(ms)
            lines.append(f"| {c} | {w}{' (held out)' if (c, w) in HELD_OUT else ''} | {label} | {avg} | {p99} | {mk} "
                         f"| {gh} | {q} | {done}/{total} | {gave:.1f} | {oom:.1f} |")
            summary[key][label] = round(avg_v, 1)
        best = min(summary[key]["sia"], summary[key]["fcfs"])
        vs_best[key] = {label: round(summary[key][label] / best - 1.0, 3) for label in FRENZY_LABELS}
    lines += ["", "## What drives these numbers", "", NOTES]
    sens_lines, sens_json = sensitivity(table, sens)
    lines += sens_lines
    (REPO / "docs" / "results.md").write_text("\n".join(lines) + "\n")
    print(json.dumps({"avg_jct_s": summary, "vs_best_baseline": vs_best,
                      "frenzy_vs_best_baseline": {k: v["frenzy"] for k, v in vs_best.items()},
                      "sia_restart_sensitivity": sens_json}))


def sensitivity(table: dict, sens: dict) -> tuple[list[str], dict]:
    """The restart-cost section of docs/results.md and its JSON: sia per restart cost next to frenzy-eft and fcfs."""
    def ci_h(ms):
        m, lo, hi = mean_ci([x["avg_jct_s"] for x in ms], nonnegative=True)
        return f"{m / 3600:.2f} [{lo / 3600:.2f}, {hi / 3600:.2f}]", m

    lines = ["", "## Sensitivity: what a restart costs Sia", "",
             "Sia is the only policy that preempts and moves running jobs; each move costs a restart. The main table "
             "charges a flat 30 s, while the same simulator assumes 120 s of start-up before FCFS sees an "
             "out-of-memory crash. Here `sia` runs again on the main settings (10 seeds) with a flat 120 s and with "
             "the model-aware \"checkpoint\" cost (`SimOptions.restart_model`: 120 s start-up + saving and loading "
             "weights and optimizer states at 2 GB/s). frenzy-eft and fcfs never restart; their numbers are the "
             "main table's.", "",
             "| cluster | workload | sia restart cost | sia avg JCT (h) | sia restarts per run | sia GPU-hours "
             "| frenzy-eft avg JCT (h) | fcfs avg JCT (h) | frenzy-eft / sia |",
             "|---|---|---|---|---|---|---|---|---|"]
    out: dict = {}
    ratios: dict = {}
    for c, w in MAIN:
        eft, eft_v = ci_h(table[(c, w, "frenzy-eft")])
        fcfs, _ = ci_h(table[(c, w, "fcfs")])
        out[f"{c}/{w}"] = {}
        for v in RESTARTS:
            ms = sens[(c, w, v)]
            avg, avg_v = ci_h(ms)
            restarts = sum(x["restarts"] for x in ms) / len(ms)
            gh = sum(x["gpu_hours"] for x in ms) / len(ms)
            ratios[(c, w, v)] = eft_v / avg_v
            lines.append(f"| {c} | {w} | {v} | {avg} | {restarts:.1f} | {gh:.1f} | {eft} | {fcfs} "
                         f"| {eft_v / avg_v:.2f}x |")
            out[f"{c}/{w}"][v] = {"avg_jct_s": round(avg_v, 1), "restarts_per_run": round(restarts, 1)}
    lo30 = min(ratios[(c, w, "flat 30 s")] for c, w in MAIN)
    hi30 = max(ratios[(c, w, "flat 30 s")] for c, w in MAIN)
    lock = min(ratios[(c, w, "checkpoint")] for c, w in MAIN)
    hick = max(ratios[(c, w, "checkpoint")] for c, w in MAIN)
    grow = [ratios[(c, w, "flat 30 s")] / ratios[(c, w, "checkpoint")] for c, w in MAIN]  # sia ckpt / flat 30
    what = (f"Charging the model-aware restart makes Sia's average JCT {min(grow):.2f}-{max(grow):.2f}x what it is "
            f"with a flat 30 s; frenzy-eft's JCT over Sia's goes from {lo30:.2f}-{hi30:.2f}x (flat 30 s) to "
            f"{lock:.2f}-{hick:.2f}x (checkpoint). "
            + ("Sia still has the lowest average JCT on every main setting: its lead comes from elasticity, "
               "not from cheap moves."
               if lock > 1.0 else "frenzy-eft catches up with Sia on at least one main setting."))
    lines += ["", SENSITIVITY_NOTES.format(what=what)]
    return lines, out


if __name__ == "__main__":
    main()
