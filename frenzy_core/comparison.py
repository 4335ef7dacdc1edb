"""Why one policy's average JCT differs from another's on the same jobs: queueing against running, and behind them
the GPUs each job got, the GPU-hours its work took and whether it waited while GPUs stood free.

Every job's completion time is its wait from arrival to first start plus its time from first start to finish
(`simulate.job_columns`: jct = finish - arrival, queue = start - arrival), so over the same jobs

    avg JCT(a) - avg JCT(b) = [avg queue(a) - avg queue(b)] + [avg run(a) - avg run(b)]

exactly. The runs are paired job by job (same seed, same job id: every policy of a seed runs the same mapped trace,
`simulate.simulate_seeds`), over the jobs both completed. Behind the run term: a job given fewer GPUs for the same
work runs longer (its GPU-hours stay put), a slower plan takes more GPU-hours. Behind the queue term: the share of
the waiting time during which the cluster had at least the job's GPU count free (any type) -- waits the cluster's
capacity does not explain: fragmentation (no node or type could hold the plan) or queue order (FCFS's blocked
head, a policy holding GPUs back) -- against waits for a full cluster.

Pure functions over `SimResult` / `MultiSeedResult` values; the simulation page and `bench/demo_why.py` show the
sentences `explain_gap` returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

HOUR_S = 3600.0
# Relative differences below this read as "the same" in the sentences (GPU-hours per job, GPUs per job)
SAME_FRACTION = 0.05
# How many jobs with the largest JCT difference a gap names
LARGEST_JOBS = 3


@dataclass(frozen=True)
class JobGap:
    """One job's completion time under both policies (paired by seed and job id)."""

    seed: int
    job_id: str
    model: str
    jct_s: float  # under the policy explained
    ref_jct_s: float  # under the reference
    num_gpus: int
    ref_num_gpus: int
    gpu_type: str
    ref_gpu_type: str


@dataclass(frozen=True)
class JctGap:
    """Policy against reference, means over the jobs both completed (all seeds pooled). Seconds unless named."""

    policy: str
    reference: str
    jobs: int  # paired (seed, job) rows both completed
    unpaired: int  # jobs completed by only one of the two (left out of every mean)
    avg_jct_s: float
    ref_avg_jct_s: float
    avg_queue_s: float  # arrival -> first start
    ref_avg_queue_s: float
    avg_run_s: float  # first start -> finish (running, plus any later pause: preemption, restart)
    ref_avg_run_s: float
    # GPU-hours held per hour from first start to finish, over all paired jobs (sum GPU-hours / sum run hours):
    # so avg_run = avg_gpu_hours / running_gpus exactly, the long jobs weighing as much as they take
    running_gpus: float
    ref_running_gpus: float
    avg_gpu_hours: float  # GPU-hours per job
    ref_avg_gpu_hours: float
    free_wait_share: float  # of all queueing time, the share with at least the job's GPU count free (NaN: no wait)
    ref_free_wait_share: float
    largest: tuple[JobGap, ...]  # the jobs whose JCT differs most, largest |difference| first
    # (GPU type, jobs finished on it, under the reference) over the paired jobs, most jobs first
    jobs_by_type: tuple[tuple[str, int, int], ...] = ()

    @property
    def jct_diff_s(self) -> float:
        return self.avg_jct_s - self.ref_avg_jct_s

    @property
    def queue_diff_s(self) -> float:
        return self.avg_queue_s - self.ref_avg_queue_s

    @property
    def run_diff_s(self) -> float:
        return self.avg_run_s - self.ref_avg_run_s

    @property
    def cause(self) -> str:
        """"queueing" or "running": the term that moves the average JCT the same way and further."""
        return "queueing" if abs(self.queue_diff_s) >= abs(self.run_diff_s) else "running"


def free_wait_seconds(arrival_s, start_s, num_gpus, util_times_s, busy_total, total_gpus: int) -> np.ndarray:
    """Per job, the seconds of [arrival, start) during which at least `num_gpus` GPUs were free cluster-wide.

    `busy_total[i]` busy GPUs hold from `util_times_s[i]` to the next instant (a step function; before the first
    instant nothing is busy, after the last the last value holds). Integrated exactly: per distinct GPU count n,
    the running integral of [free >= n] is piecewise linear between the instants, so np.interp reads it at any time.

    >>> free_wait_seconds([0.0], [10.0], [4], np.array([0.0, 6.0]), np.array([6, 2]), 8)  # 2 free, then 6 from t=6
    array([4.])
    """
    arrival, start = np.asarray(arrival_s, dtype=float), np.asarray(start_s, dtype=float)
    need = np.asarray(num_gpus, dtype=float)
    t = np.asarray(util_times_s, dtype=float)
    free = total_gpus - np.asarray(busy_total, dtype=float)
    out = np.zeros(arrival.shape)
    if t.size == 0:
        return np.where(need <= total_gpus, np.maximum(0.0, start - arrival), 0.0)
    for n in np.unique(need[np.isfinite(need)]):
        ok = (free >= n).astype(float)
        # integral of [free >= n] from t[0]: steps of ok[i] x (t[i+1] - t[i]); before t[0] all GPUs are free
        cum = np.concatenate(([0.0], np.cumsum(ok[:-1] * np.diff(t))))
        before = float(total_gpus >= n)

        def integral(x, cum=cum, ok=ok, before=before):
            x = np.asarray(x, dtype=float)
            inside = np.interp(np.clip(x, t[0], t[-1]), t, cum) + np.maximum(0.0, x - t[-1]) * ok[-1]
            return inside - np.maximum(0.0, t[0] - x) * before

        rows = need == n
        out[rows] = integral(start[rows]) - integral(arrival[rows])
    return np.where(np.isfinite(out), out, 0.0)


PAIRED_COLUMNS = ("job_id", "model", "arrival_s", "start_s", "finish_s", "jct_s", "queue_s", "num_gpus",
                  "gpu_type", "gpu_hours")


def completed_columns(result) -> dict[int, dict[str, np.ndarray]]:
    """Per seed of a MultiSeedResult, the PAIRED_COLUMNS of the jobs it completed, their seconds of waiting with
    enough GPUs free (`free_s`, `free_wait_seconds`) and `index`: job id -> row. Built once per run and shared by
    every comparison with it (`explain_results` compares the best run with each other)."""
    out = {}
    for r in result.results:
        j = r.jobs
        done = np.isfinite(np.asarray(j["finish_s"], dtype=float))
        busy = np.asarray(r.util_busy, dtype=float).reshape(len(r.util_times_s), -1).sum(axis=1)
        free = free_wait_seconds(j["arrival_s"], j["start_s"], j["num_gpus"], r.util_times_s, busy, r.total_gpus)
        cols = {k: np.asarray(j[k])[done] for k in PAIRED_COLUMNS}
        cols["free_s"] = free[done]
        cols["index"] = {str(jid): i for i, jid in enumerate(cols["job_id"])}
        out[r.seed] = cols
    return out


def _paired_rows(a: dict, b: dict) -> tuple[dict, dict, int]:
    """Two runs' `completed_columns` aligned on the (seed, job) pairs both completed, and how many jobs one
    completed alone."""
    parts_a, parts_b, unpaired = [], [], 0
    for seed in (s for s in a if s in b):
        ca, cb = a[seed], b[seed]
        both = [jid for jid in ca["index"] if jid in cb["index"]]
        unpaired += len(ca["index"]) + len(cb["index"]) - 2 * len(both)
        for cols, parts in ((ca, parts_a), (cb, parts_b)):
            rows = np.fromiter((cols["index"][jid] for jid in both), dtype=np.int64, count=len(both))
            parts.append({**{k: cols[k][rows] for k in (*PAIRED_COLUMNS, "free_s")},
                          "seed": np.full(len(both), seed)})

    def joined(parts: list[dict]) -> dict[str, np.ndarray]:
        keys = (*PAIRED_COLUMNS, "free_s", "seed")
        return {k: np.concatenate([p[k] for p in parts]) if parts else np.array([]) for k in keys}

    return joined(parts_a), joined(parts_b), unpaired


def _share(free_s: np.ndarray, queue_s: np.ndarray) -> float:
    wait = float(np.sum(queue_s))
    return float(np.sum(free_s)) / wait if wait > 0 else math.nan


def _running_gpus(rows: dict) -> float:
    run_h = float(np.sum(np.asarray(rows["finish_s"] - rows["start_s"], dtype=float))) / HOUR_S
    return float(np.sum(np.asarray(rows["gpu_hours"], dtype=float))) / run_h if run_h > 0 else math.nan


def jct_gap(policy: str, result, reference: str, ref_result) -> JctGap:
    """`policy`'s runs against `reference`'s (two MultiSeedResults of the same trace, cluster and seeds; or their
    `completed_columns`, to build a run's once for several comparisons)."""
    columns = [r if isinstance(r, dict) else completed_columns(r) for r in (result, ref_result)]
    a, b, unpaired = _paired_rows(*columns)
    n = int(a["jct_s"].size)

    def mean(x) -> float:
        return float(np.mean(np.asarray(x, dtype=float))) if n else math.nan

    diff = np.asarray(a["jct_s"], dtype=float) - np.asarray(b["jct_s"], dtype=float)
    # the jobs that differ most, each job id once (a job mapped alike on several seeds would fill the list)
    order, seen = [], set()
    for i in np.argsort(-np.abs(diff), kind="stable") if n else []:
        if diff[i] != 0 and a["job_id"][i] not in seen and len(order) < LARGEST_JOBS:
            order.append(i)
            seen.add(a["job_id"][i])
    largest = tuple(JobGap(int(a["seed"][i]), str(a["job_id"][i]), str(a["model"][i]), float(a["jct_s"][i]),
                           float(b["jct_s"][i]), int(a["num_gpus"][i]), int(b["num_gpus"][i]),
                           str(a["gpu_type"][i]), str(b["gpu_type"][i])) for i in order)
    return JctGap(
        policy=policy, reference=reference, jobs=n, unpaired=unpaired,
        avg_jct_s=mean(a["jct_s"]), ref_avg_jct_s=mean(b["jct_s"]),
        avg_queue_s=mean(a["queue_s"]), ref_avg_queue_s=mean(b["queue_s"]),
        avg_run_s=mean(a["finish_s"] - a["start_s"]), ref_avg_run_s=mean(b["finish_s"] - b["start_s"]),
        running_gpus=_running_gpus(a), ref_running_gpus=_running_gpus(b),
        avg_gpu_hours=mean(a["gpu_hours"]), ref_avg_gpu_hours=mean(b["gpu_hours"]),
        free_wait_share=_share(a["free_s"], a["queue_s"]), ref_free_wait_share=_share(b["free_s"], b["queue_s"]),
        largest=largest, jobs_by_type=_jobs_by_type(a["gpu_type"], b["gpu_type"]))


def _jobs_by_type(types, ref_types) -> tuple[tuple[str, int, int], ...]:
    names = sorted(set(map(str, types)) | set(map(str, ref_types)))
    counts = [(t, int(np.sum(types == t)), int(np.sum(ref_types == t))) for t in names]
    return tuple(sorted(counts, key=lambda c: (-c[1], c[0])))


def _relative(x: float, ref: float) -> float:
    return (x - ref) / ref if ref else math.inf if x else 0.0


def _run_reason(g: JctGap) -> str:
    """Why the run term moved. avg run = avg GPU-hours / running GPUs (JctGap.running_gpus), so the run ratio is
    the work ratio over the GPU ratio: the sentence names the factor that moved further (in log terms) first."""
    gpus = g.running_gpus / g.ref_running_gpus if g.ref_running_gpus > 0 else math.nan
    work = g.avg_gpu_hours / g.ref_avg_gpu_hours if g.ref_avg_gpu_hours > 0 else math.nan
    if not (math.isfinite(gpus) and math.isfinite(work) and gpus > 0 and work > 0):
        return f"{g.running_gpus:.1f} against {g.ref_running_gpus:.1f} GPUs while running"
    gpu_text = (f"{g.policy} runs jobs on {g.running_gpus:.1f} GPUs against {g.ref_running_gpus:.1f} "
                f"({gpus:.2f}x; GPU-hours per running hour)")
    efficiency = ("less efficient plans: slower types, or splits that scale worse" if work > 1 else
                  "more efficient plans: fewer GPUs scale better, or faster types and splits")
    work_text = (f"the same work takes {g.avg_gpu_hours:.1f} against {g.ref_avg_gpu_hours:.1f} GPU-hours per job "
                 f"({work:.2f}x: {efficiency})")
    if abs(math.log(work)) < math.log1p(SAME_FRACTION):
        work_text = (f"the work takes about the same GPU-hours ({g.avg_gpu_hours:.1f} against "
                     f"{g.ref_avg_gpu_hours:.1f} per job, {work:.2f}x)")
    if abs(math.log(gpus)) < math.log1p(SAME_FRACTION) and abs(math.log(work)) < math.log1p(SAME_FRACTION):
        return (f"about the same GPUs while running ({g.running_gpus:.1f} against {g.ref_running_gpus:.1f}) and "
                "GPU-hours per job")
    if abs(math.log(gpus)) >= abs(math.log(work)):
        return (f"{gpu_text}, so the same work is spread over {'fewer' if gpus < 1 else 'more'} GPUs and runs "
                f"{'longer' if gpus < 1 else 'shorter'}; {work_text}")
    return f"{work_text}; {gpu_text}"


def _queue_reason(g: JctGap) -> str:
    """Why the queue term moved: waits with GPUs free (fragmentation or queue order) against a full cluster."""
    def part(name: str, share: float) -> str:
        if not math.isfinite(share):
            return f"{name}'s jobs never wait"
        return f"{share:.0%} of {name}'s waiting is with enough GPUs free"

    return (f"{part(g.policy, g.free_wait_share)}, {part(g.reference, g.ref_free_wait_share)} (free GPUs and "
            "still waiting: fragmentation, no node or type could hold the plan, or queue order; the rest is a "
            "full cluster)")


def explain_gap(g: JctGap) -> list[str]:
    """Sentences for the page and the docs: the gap, its two terms, the reason behind each, the largest jobs. Plain
    text: job ids and model names come from the trace, so a page escapes them before it renders markdown."""
    if not g.jobs:
        return [f"{g.policy} and {g.reference} have no completed job in common: nothing to compare."]
    verb = "higher" if g.jct_diff_s > 0 else "lower" if g.jct_diff_s < 0 else "the same as"
    pct = abs(_relative(g.avg_jct_s, g.ref_avg_jct_s))
    lines = [f"{g.policy} averages {g.avg_jct_s / HOUR_S:.2f} h against {g.reference}'s "
             f"{g.ref_avg_jct_s / HOUR_S:.2f} h ({abs(g.jct_diff_s) / HOUR_S:.2f} h, {pct:.0%} {verb}) over the "
             f"{g.jobs} jobs both completed"
             + (f" ({g.unpaired} completed by only one are left out)" if g.unpaired else "") + ": "
             f"queueing {g.queue_diff_s / HOUR_S:+.2f} h, running {g.run_diff_s / HOUR_S:+.2f} h per job; "
             f"mostly {g.cause}."]
    lines.append(f"Running {g.run_diff_s / HOUR_S:+.2f} h: {_run_reason(g)}.")
    lines.append(f"Queueing {g.queue_diff_s / HOUR_S:+.2f} h: {_queue_reason(g)}.")
    if g.jobs_by_type and any(n != m for _, n, m in g.jobs_by_type):
        placed = ", ".join(f"{t} {n} against {m}" for t, n, m in g.jobs_by_type)
        lines.append(f"Jobs finished per GPU type ({g.policy} against {g.reference}): {placed}.")
    if g.largest:
        jobs = "; ".join(f"{j.job_id} ({j.model}, seed {j.seed}) {j.jct_s / HOUR_S:.1f} h on {j.num_gpus} x "
                         f"{j.gpu_type} against {j.ref_jct_s / HOUR_S:.1f} h on {j.ref_num_gpus} x {j.ref_gpu_type}"
                         for j in g.largest)
        lines.append(f"Largest differences: {jobs}.")
    return lines


def explain_results(results: dict) -> dict[str, list[str]]:
    """Each policy of `results` ({name: MultiSeedResult}, one trace, cluster and seed set) against the one with the
    lowest average JCT over the jobs all completed; the best one gets no entry. Empty with fewer than two."""
    if len(results) < 2:
        return {}
    means = {name: r.ci("avg_jct_s")[0] for name, r in results.items()}
    finite = {k: v for k, v in means.items() if math.isfinite(v)}
    if not finite:
        return {}
    best = min(finite, key=finite.get)
    reference = completed_columns(results[best])
    return {name: explain_gap(jct_gap(name, r, best, reference)) for name, r in results.items() if name != best}
