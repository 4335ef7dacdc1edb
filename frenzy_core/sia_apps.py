"""Sia's measured applications as a job model: step times, goodput and epoch progress from Sia's own profiles.

Read from the Sia SOSP'23 artifact (siasosp23/artifacts, commit aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70,
`sia-simulator/applications.py`, `job.py`, `goodput.py`) and Pollux (petuum/adaptdl `adaptdl/goodput.py`, Apache-2.0);
re-written here, not copied. The profiles ship in `frenzy_core/data/sia_profiles/` (see its README).

* Step time of a placement (replicas per node, e.g. (4, 2)) at a per-GPU ("atomic") batch: linear in the local batch
  between the measured rows when that placement was profiled (`Application.get_throughput`, first branch), else
  linear over (nodes, replicas, local batch) on the Delaunay triangulation of all measured rows
  (its `LinearNDInterpolator` branch, nodes capped at 16).
* Statistical efficiency of a total batch B (Pollux, `GoodputFunction.efficiency`): with the gradient's squared norm
  `grad_sqr` and variance `grad_var` measured at that epoch (linearly interpolated between validated batch sizes),
  scale = B / B0, gain = (var + sqr) / (var / scale + sqr); efficiency = gain / scale.
* Progress is counted in the application's own unit (`validation-*.csv` column `progress`: iterations at the initial
  batch B0); one iteration at B advances it by `gain`, so goodput = gain / iteration time. Epoch e ends when progress
  reaches the smallest measured progress after e epochs (`get_progress`); the job completes after `max_epochs`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.interpolate import LinearNDInterpolator
from scipy.optimize import Bounds, minimize

from frenzy_core.errors import SpecError

PROFILE_DIR = Path(__file__).parent / "data" / "sia_profiles"

# Sia's GPU-type suffixes (simulator_config.py) and our catalog names (frenzy_core/gpus.py).
SIA_GPU_TYPES: dict[str, str] = {"aws": "T4", "dgx-ext": "A100-40GB", "rtx": "RTX-2080Ti"}
CATALOG_TO_SIA: dict[str, str] = {v: k for k, v in SIA_GPU_TYPES.items()}

# applications.py APPLICATIONS: epochs each application trains for (target_metric None -> all of them).
APP_EPOCHS: dict[str, int] = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "yolov3": 50}
# applications.py Application.__init__ `rescale_time`: seconds a (re)start costs the job before it trains again.
RESTART_S: dict[str, float] = {"cifar10": 50.0, "deepspeech2": 25.0, "bert": 120.0, "yolov3": 80.0,
                               "imagenet": 250.0}
# sia.py get_restart_penalty: the restart cost the Sia *policy* assumes in its age-based restart factor (it differs
# from RESTART_S for cifar10 and yolov3 in the artifact; we keep both as published).
POLICY_RESTART_S: dict[str, float] = {"cifar10": 30.0, "deepspeech2": 25.0, "bert": 120.0, "yolov3": 45.0,
                                      "imagenet": 250.0}
# simulator_config.py SLOWDOWNS: real runs were this much slower than the profiles; goodput is divided by it.
SLOWDOWN: dict[str, float] = {"cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2, "deepspeech2": 1.2}
# applications.py: the profiles of deepspeech2 on rtx are capped at this local batch (GPU memory).
MAX_LOCAL_BSZ_OVERRIDE: dict[tuple[str, str], int] = {("deepspeech2", "rtx"): 57}
MAX_INTERP_NODES = 16  # get_throughput caps num_nodes at 16 before the N-d interpolation
EPS = 1e-8  # tolerance of the ceil() calls (goodput.py, job.py)


def placement_id(placement: Iterable[int]) -> int:
    """Sia's key for a placement: zeros dropped, rotated to its lexicographically smallest form, digits joined.

    >>> placement_id((0, 2, 1)), placement_id((4, 4))
    (12, 44)
    """
    p = tuple(int(x) for x in placement if x)
    p = min(p[i:] + p[:i] for i in range(len(p)))
    return int("".join(map(str, p)))


@dataclass(frozen=True)
class StepProfile:
    """One application's measured step times on one GPU type."""

    by_placement: Mapping[int, tuple[np.ndarray, np.ndarray, np.ndarray]]  # id -> (local_bsz, step_s, sync_s)
    points: np.ndarray  # (n, 3): num_nodes, num_replicas, local_bsz of every measured row (N-d interpolation)
    values: np.ndarray  # (n, 2): step_s, sync_s at those points
    min_local_bsz: int
    max_local_bsz: int  # the application's per-GPU batch limit on this type
    max_local_bsz_by_replicas: Mapping[int, int]  # largest profiled local batch per replica count (memory fix)
    one_gpu_samples_per_s: float  # max local batch / max step time over 1-GPU rows (Cluster.compute_throughputs)
    scal_nodes_replicas_bsz: np.ndarray  # (m, 3) scalability rows, for get_max_local_bsz

    @functools.cached_property
    def _interp(self) -> LinearNDInterpolator:
        return LinearNDInterpolator(self.points, self.values)

    def step_time(self, placement: Iterable[int], atomic_bsz: float) -> tuple[float, float] | None:
        """(step_s, sync_s) of one iteration at this per-GPU batch, or None outside the measured range."""
        p = tuple(int(x) for x in placement if x)
        pid = placement_id(p)
        if pid in self.by_placement:
            bsz, step, sync = self.by_placement[pid]
            if not bsz[0] <= atomic_bsz <= bsz[-1]:
                return None
            return float(np.interp(atomic_bsz, bsz, step)), float(np.interp(atomic_bsz, bsz, sync))
        q = np.array([[min(len(p), MAX_INTERP_NODES), sum(p), atomic_bsz]], dtype=float)
        out = self._interp(q)[0]
        if not np.isfinite(out).all():
            return None
        return float(out[0]), float(out[1])

    def max_local_bsz_for(self, placement: Iterable[int]) -> int:
        """Largest per-GPU batch measured for this placement (Application.get_max_local_bsz)."""
        p = tuple(int(x) for x in placement if x)
        pid = placement_id(p)
        if pid in self.by_placement:
            return int(self.by_placement[pid][0][-1])
        s = self.scal_nodes_replicas_bsz
        sel = (s[:, 0] >= len(p)) & (s[:, 1] >= sum(p))
        return int(s[sel, 2].max()) if sel.any() else self.max_local_bsz


@dataclass(frozen=True)
class Validation:
    """Per-epoch measurements at each validated total batch size (sorted ascending)."""

    batch_sizes: tuple[int, ...]
    progress: np.ndarray  # (batch sizes, epochs)
    iteration: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray


@dataclass(frozen=True)
class SiaApp:
    """One of Sia's applications: its profiles per GPU type and its validation curves."""

    name: str
    max_epochs: int
    restart_s: float  # RESTART_S
    policy_restart_s: float  # POLICY_RESTART_S
    slowdown: float  # SLOWDOWN
    profiles: Mapping[str, StepProfile]  # Sia suffix -> profile
    validation: Validation

    @property
    def init_batch_size(self) -> int:
        return self.validation.batch_sizes[0]

    @property
    def max_batch_size(self) -> int:
        return self.validation.batch_sizes[-1]

    def _bounds(self, batch_size: float) -> tuple[int, int, float]:
        """Rows of the validated batch sizes around batch_size and the weight of the upper one."""
        bs = self.validation.batch_sizes
        if not bs[0] <= batch_size <= bs[-1]:
            raise SpecError("batch_size", f"{self.name}: {batch_size} is outside the validated range {bs[0]}-{bs[-1]}")
        hi = int(np.searchsorted(bs, batch_size, side="left"))
        if bs[hi] == batch_size:
            return hi, hi, 0.0
        lo = hi - 1
        return lo, hi, (batch_size - bs[lo]) / (bs[hi] - bs[lo])

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) during `epoch` (0-based), linear between validated batch sizes (get_grad_stats)."""
        lo, hi, w = self._bounds(batch_size)
        v = self.validation
        sqr = (1 - w) * v.grad_sqr[lo, epoch] + w * v.grad_sqr[hi, epoch]
        var = (1 - w) * v.grad_var[lo, epoch] + w * v.grad_var[hi, epoch]
        return float(sqr), float(var)

    def gain(self, batch_size: float, epoch: int) -> float:
        """Progress per iteration at this total batch during this epoch: (var + sqr) / (var / scale + sqr)."""
        sqr, var = self.grad_stats(batch_size, epoch)
        scale = batch_size / self.init_batch_size
        return statistical_gain(sqr, var, scale)

    def progress_at(self, epoch: int) -> float:
        """Progress needed to have finished `epoch` epochs: the smallest measured over batch sizes (get_progress)."""
        if epoch <= 0:
            return 0.0
        return float(self.validation.progress[:, epoch - 1].min())

    def iterations(self, batch_size: float, epoch: int) -> float:
        """Iterations after completing epoch `epoch` (0-based) at this batch, linear between batch sizes."""
        lo, hi, w = self._bounds(batch_size)
        it = self.validation.iteration
        return float((1 - w) * it[lo, epoch] + w * it[hi, epoch])

    def one_gpu_samples_per_s(self) -> dict[str, float]:
        return {k: p.one_gpu_samples_per_s for k, p in self.profiles.items()}


def statistical_gain(grad_sqr: float, grad_var: float, scale: float) -> float:
    """Pollux's gain of a batch `scale` times the initial one (goodput.py GoodputFunction.efficiency x scale).

    >>> statistical_gain(1.0, 3.0, 2.0)  # (3 + 1) / (3 / 2 + 1)
    1.6
    """
    denom = grad_var / scale + grad_sqr
    return (grad_var + grad_sqr) / denom if denom > 0 else 1.0


def split_batch(local_bsz: float, max_atomic_bsz: int, num_replicas: int, init_batch_size: int) -> tuple[int, int]:
    """(atomic_bsz, accum_steps) for a per-replica batch: gradient accumulation past the per-GPU limit; one replica
    above the initial batch accumulates at least once (job.py update_local_bsz, goodput.py optimize).

    >>> split_batch(300, 128, 2, 128)
    (100, 2)
    """
    accum = math.ceil(local_bsz / max_atomic_bsz - EPS) - 1
    if num_replicas == 1 and local_bsz > init_batch_size + EPS:
        accum = max(1, accum)
    atomic = math.ceil(local_bsz / (accum + 1) - EPS)
    return int(atomic), int(accum)


# --- loading --------------------------------------------------------------------------------------------------------
def _load_profile(app: str, suffix: str, directory: Path) -> StepProfile:
    pl = pd.read_csv(directory / app / f"placements-{suffix}.csv")
    sc = pd.read_csv(directory / app / f"scalability-{suffix}.csv")
    pl["num_nodes"] = pl.placement.astype(str).str.len()
    pl["num_replicas"] = pl.placement.astype(str).map(lambda s: sum(int(c) for c in s))
    by = {}
    for pid, g in pl.groupby("placement", sort=True):
        g = g.sort_values("local_bsz", kind="mergesort")
        by[int(pid)] = (g.local_bsz.to_numpy(float), g.step_time.to_numpy(float), g.sync_time.to_numpy(float))
    xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
    mean = pl.groupby(xs)[ys].mean().reset_index()
    both = pd.concat([mean[xs + ys], sc[xs + ys]], ignore_index=True)
    one = pl[pl.num_replicas == 1]
    max_local = int(MAX_LOCAL_BSZ_OVERRIDE.get((app, suffix), pl.local_bsz.max()))
    return StepProfile(by_placement=by, points=both[xs].to_numpy(float), values=both[ys].to_numpy(float),
                       min_local_bsz=int(pl.local_bsz.min()), max_local_bsz=max_local,
                       max_local_bsz_by_replicas={int(r): int(g.local_bsz.max())
                                                  for r, g in pl.groupby("num_replicas")},
                       one_gpu_samples_per_s=float(one.local_bsz.max() / one.step_time.max()),
                       scal_nodes_replicas_bsz=sc[xs].to_numpy(float))


@functools.cache
def load_app(name: str, directory: Path = PROFILE_DIR) -> SiaApp:
    """Load one application's shipped profiles (cached: the files never change while the program runs)."""
    if name not in APP_EPOCHS:
        raise SpecError("application", f"unknown Sia application {name!r}; known: {', '.join(sorted(APP_EPOCHS))}")
    files = sorted((directory / name).glob("validation-*.csv"), key=lambda p: int(p.stem.split("-")[-1]))
    frames = [pd.read_csv(f) for f in files]
    n_ep = min(len(f) for f in frames)
    val = Validation(batch_sizes=tuple(int(f.stem.split("-")[-1]) for f in files),
                     progress=np.array([f.progress.to_numpy(float)[:n_ep] for f in frames]),
                     iteration=np.array([f.iteration.to_numpy(float)[:n_ep] for f in frames]),
                     grad_sqr=np.array([f.grad_sqr.to_numpy(float)[:n_ep] for f in frames]),
                     grad_var=np.array([f.grad_var.to_numpy(float)[:n_ep] for f in frames]))
    return SiaApp(name=name, max_epochs=min(APP_EPOCHS[name], n_ep), restart_s=RESTART_S[name],
                  policy_restart_s=POLICY_RESTART_S[name], slowdown=SLOWDOWN[name],
                  profiles={s: _load_profile(name, s, directory) for s in SIA_GPU_TYPES}, validation=val)


# --- Pollux's throughput model (what the Sia policy knows of a job: fitted to the steps it has observed) ------------
@dataclass(frozen=True)
class PerfParams:
    """Pollux's step-time model (adaptdl goodput.py PerfParams): compute linear in the atomic batch, network a
    constant plus a retrogression per replica beyond 2 (inter-node or intra-node), overlapped by a gamma-norm."""

    alpha_c: float  # constant compute time per accumulation step (s)
    beta_c: float  # compute time per sample (s)
    alpha_n: float  # inter-node network constant (s)
    beta_n: float  # inter-node retrogression per extra replica (s)
    alpha_r: float  # intra-node network constant (s)
    beta_r: float  # intra-node retrogression per extra replica (s)
    gamma: float  # overlap: 1 = none, 10 ~ max(compute, network)

    def accum_time(self, atomic_bsz):
        return self.alpha_c + self.beta_c * np.asarray(atomic_bsz, dtype=float)

    def network_time(self, num_nodes, num_replicas):
        nn, nr = np.asarray(num_nodes, dtype=float), np.asarray(num_replicas, dtype=float)
        conds = [nn > 1, nr > 1]
        bottleneck = np.select(conds, [self.alpha_n, self.alpha_r], 1e-8)
        retrogress = np.select(conds, [self.beta_n, self.beta_r], 1e-8) * np.maximum(nr - 2, 1e-8)
        return bottleneck + retrogress

    def step_time(self, num_nodes, num_replicas, atomic_bsz):
        """Time of the optimizer step (the last accumulation step plus the overlapped all-reduce)."""
        a, n, g = self.accum_time(atomic_bsz), self.network_time(num_nodes, num_replicas), self.gamma
        return (a ** g + n ** g) ** (1.0 / g)

    def throughput(self, num_nodes, num_replicas, atomic_bsz, accum_steps):
        """Samples per second (goodput.py GoodputFunction.throughput)."""
        total = np.asarray(accum_steps) * self.accum_time(atomic_bsz) + self.step_time(num_nodes, num_replicas,
                                                                                          atomic_bsz)
        return np.asarray(num_replicas) * np.asarray(atomic_bsz) * (np.asarray(accum_steps) + 1) / total


def _fit_objective(theta, nodes, replicas, bsz, log_accum, log_step, inter, intra, extra):
    """adaptdl goodput.py _obj_fn (RMSLE of accumulation and optimizer-step times + two regularisers), with its
    gradient written out by hand (the original differentiates with autograd)."""
    ac, bc, an, bn, ar, br, g = theta
    pa = ac + bc * bsz
    net = np.where(inter, an + bn * extra, np.where(intra, ar + br * extra, 1e-8 + 1e-8 * extra))
    s = pa ** g + net ** g
    lo = np.log(s) / g
    e1, e2 = np.log(pa) - log_accum, lo - log_step
    m = len(bsz)
    err1, err2 = math.sqrt(max((e1 ** 2).mean(), 1e-300)), math.sqrt(max((e2 ** 2).mean(), 1e-300))
    f = err1 + err2 + 1e-3 * (g - 1) ** 2 + 1e-2 * ((bn / an) ** 2 + (br / ar) ** 2)
    d1 = e1 / (m * err1)  # d err1 / d log(pa)
    d2 = e2 / (m * err2)  # d err2 / d lo
    dlo_dpa, dlo_dnet = pa ** (g - 1) / s, net ** (g - 1) / s
    dlo_dg = (pa ** g * np.log(pa) + net ** g * np.log(net)) / (s * g) - np.log(s) / g ** 2
    dpa = d1 / pa + d2 * dlo_dpa
    dnet = d2 * dlo_dnet
    grad = np.array([
        dpa.sum(), (dpa * bsz).sum(),
        (dnet * inter).sum() - 2e-2 * bn ** 2 / an ** 3, (dnet * inter * extra).sum() + 2e-2 * bn / an ** 2,
        (dnet * intra).sum() - 2e-2 * br ** 2 / ar ** 3, (dnet * intra * extra).sum() + 2e-2 * br / ar ** 2,
        (d2 * dlo_dg).sum() + 2e-3 * (g - 1)])
    return f, grad


def fit_perf_params(num_nodes, num_replicas, atomic_bsz, accum_time_s, step_time_s) -> PerfParams:
    """Fit PerfParams to observed (nodes, replicas, atomic batch) -> (accumulation time, step time), as adaptdl's
    fit_perf_params does: same start, bounds, parameters pinned when no observation can inform them, L-BFGS-B."""
    nodes, replicas = np.asarray(num_nodes, float), np.asarray(num_replicas, float)
    bsz = np.asarray(atomic_bsz, float)
    params = [1e-1, 1e-2] * 3 + [1.0 + 1e-3]
    lower = [1e-8, 1e-8] * 3 + [1.0]
    upper = [np.inf, np.inf] * 3 + [10.0]
    if len(np.unique(bsz)) == 1:  # one atomic batch seen: split its time equally between constant and slope
        params[0] = upper[0] = lower[0] = float(np.mean(accum_time_s)) / 2
    if not np.any(nodes > 1):
        params[2] = upper[2] = lower[2]
        params[3] = upper[3] = lower[3]
    if not np.any((nodes == 1) & (replicas > 1)):
        params[4] = upper[4] = lower[4]
        params[5] = upper[5] = lower[5]
    if not np.any(replicas > 2):
        params[3] = upper[3] = lower[3]
        params[5] = upper[5] = lower[5]
    inter = (nodes > 1).astype(float)
    intra = ((nodes <= 1) & (replicas > 1)).astype(float)
    extra = np.maximum(replicas - 2, 1e-8)
    args = (nodes, replicas, bsz, np.log(np.asarray(accum_time_s, float)), np.log(np.asarray(step_time_s, float)),
            inter, intra, extra)
    res = minimize(_fit_objective, np.array(params), args=args, jac=True, method="L-BFGS-B",
                   bounds=Bounds(lower, upper), tol=1e-5)
    p = list(res.x)
    if not np.any(nodes > 1):  # prior: inter-node is at least 10% slower than intra-node
        p[2] = max(p[2], p[4] * 1.1)
        p[3] = max(p[3], p[5] * 1.1)
    return PerfParams(*p)


@dataclass(frozen=True)
class GoodputModel:
    """Pollux's goodput of a job on one GPU type: fitted throughput x statistical efficiency at its current
    gradient statistics (goodput.py GoodputFunction)."""

    perf: PerfParams
    grad_sqr: float
    grad_var: float
    init_batch_size: int

    def efficiency(self, batch_size):
        scale = np.asarray(batch_size, dtype=float) / self.init_batch_size
        denom = self.grad_var / scale + self.grad_sqr
        gain = np.where(denom > 0, (self.grad_var + self.grad_sqr) / np.where(denom > 0, denom, 1.0), 1.0)
        return gain / scale

    def optimize(self, num_nodes, num_replicas, max_batch_size: float, atomic_bsz_range: tuple[int, int],
                 tune_bsz: bool = True):
        """Best goodput over 50 geometric total batch sizes per (nodes, replicas) config, with accumulation
        (GoodputFunction.optimize, accumulation=True). Returns (goodput, atomic_bsz, accum_steps) arrays."""
        nn = np.atleast_1d(np.asarray(num_nodes, dtype=float))
        nr = np.atleast_1d(np.asarray(num_replicas, dtype=float))
        lo_atomic, hi_atomic = atomic_bsz_range
        if tune_bsz:
            min_b = np.maximum(self.init_batch_size, lo_atomic * nr)
        else:
            min_b = np.full_like(nr, float(max_batch_size))
        b = np.geomspace(min_b, np.full_like(min_b, float(max_batch_size)))  # (50, configs)
        local = b / nr
        accum = np.ceil(local / hi_atomic - EPS) - 1
        accum = np.where((nr == 1) & (local > self.init_batch_size + EPS), np.maximum(accum, 1), accum)
        atomic = np.ceil(local / (accum + 1) - EPS)
        batch = nr * atomic * (accum + 1)
        gp = self.perf.throughput(nn, nr, atomic, accum) * self.efficiency(batch)
        gp = np.where((atomic >= lo_atomic) & (atomic <= hi_atomic), gp, 0.0)
        i = np.argmax(gp, axis=0)
        cols = np.arange(gp.shape[1])
        return gp[i, cols], atomic[i, cols].astype(int), accum[i, cols].astype(int)
