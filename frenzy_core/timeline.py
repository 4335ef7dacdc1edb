"""Curves over time from a simulation's per-job table: the queue length a dashboard plots beside utilisation.

SimResult records busy GPUs over time; the queue is recovered from each job's arrival and first start (a job is
queued from its arrival until it first starts; jobs that never start stay queued to the end). Re-queueing after a
preemption or an out-of-memory failure is not in the per-job table, so this is the queue of jobs not yet started.
"""

from __future__ import annotations

import numpy as np


def queue_length(arrival_s: np.ndarray, start_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times_s, queued): the number of arrived-but-not-started jobs, a step function holding from each time on.

    At equal times, starts are counted before arrivals, so a job that starts the instant it arrives never shows.

    >>> t, q = queue_length(np.array([0.0, 0.0, 5.0]), np.array([0.0, 10.0, np.nan]))
    >>> t.tolist(), q.tolist()
    ([0.0, 5.0, 10.0], [1, 2, 1])
    """
    arrival = np.asarray(arrival_s, dtype=float)
    start = np.asarray(start_s, dtype=float)
    started = np.isfinite(start)
    times = np.concatenate([arrival, start[started]])
    delta = np.concatenate([np.ones(arrival.size, dtype=np.int64), -np.ones(int(started.sum()), dtype=np.int64)])
    # order by time, then departures (-1) before arrivals (+1)
    order = np.lexsort((delta, times))
    times, delta = times[order], delta[order]
    if times.size == 0:
        return np.array([], dtype=float), np.array([], dtype=np.int64)
    level = np.cumsum(delta)
    last = np.ones(times.size, dtype=bool)  # keep the level after the last event of each instant
    last[:-1] = times[1:] != times[:-1]
    return times[last], level[last]
