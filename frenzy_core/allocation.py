"""An interactive cluster's allocation: which job holds which GPU of which node, with submit and release.

The simulator keeps its own free-GPU arrays; this is the same bookkeeping for a person placing jobs by hand (the
Cluster & packing page): `submit` asks HAS (`packing.has_place`) for the first ranked plan that fits the free GPUs
now and pins it to concrete GPU slots (the lowest free slot indices of each chosen node); `release` frees them.
Values are immutable: every call returns a new Allocation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError
from frenzy_core.packing import ClusterIndex, Placement, has_place
from frenzy_core.plans import DEFAULT_SCALING_FLOOR, Plan


@dataclass(frozen=True)
class PlacedJob:
    """One job on the cluster: its plan, HAS's placement and the GPU slots it holds."""

    job_id: str
    model: str  # what the user submitted (a zoo name)
    plan: Plan
    placement: Placement
    slots: tuple[tuple[int, int], ...]  # (node index, GPU slot within the node), ascending


@dataclass(frozen=True)
class Allocation:
    """Per node, per GPU slot: the job id holding it or None; plus the placed jobs in submission order.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> a = empty_allocation(parse_cluster_yaml("nodes: [{name: n, gpu_type: T4, num_gpus: 2}]"))
    >>> a.owner, a.free_per_node().tolist()
    (((None, None),), [2])
    """

    owner: tuple[tuple[str | None, ...], ...]
    jobs: tuple[PlacedJob, ...] = ()

    def free_per_node(self) -> np.ndarray:
        return np.array([sum(o is None for o in node) for node in self.owner], dtype=np.int64)

    def job(self, job_id: str) -> PlacedJob:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        raise SpecError("job_id", f"no placed job {job_id!r}; placed: {', '.join(j.job_id for j in self.jobs) or 'none'}")


def empty_allocation(cluster: Cluster) -> Allocation:
    return Allocation(owner=tuple((None,) * n.num_gpus for n in cluster.nodes))


def free_by_type(cluster: Cluster, allocation: Allocation) -> dict[str, tuple[int, int]]:
    """GPU type -> (free GPUs, all GPUs), in the cluster's first-seen type order."""
    free = allocation.free_per_node()
    out: dict[str, tuple[int, int]] = {}
    for i, node in enumerate(cluster.nodes):
        f, total = out.get(node.gpu_type, (0, 0))
        out[node.gpu_type] = (f + int(free[i]), total + node.num_gpus)
    return out


def submit(cluster: Cluster, allocation: Allocation, job_id: str, model: str,
           plans: Sequence[Plan], scaling_floor: float = DEFAULT_SCALING_FLOOR) -> tuple[Allocation, PlacedJob | None]:
    """Place a job with HAS: the first ranked plan the free GPUs can satisfy now, or (allocation, None) if none.
    Only plans that pass `scaling_floor` (`plans.within_scaling_floor`; 0 = off) are walked, so a small model does
    not take many GPUs for a few per cent of speed-up.

    The allocation must belong to `cluster` (same nodes, same GPU counts).
    """
    if len(allocation.owner) != len(cluster.nodes) or any(
            len(o) != n.num_gpus for o, n in zip(allocation.owner, cluster.nodes, strict=True)):
        raise SpecError("allocation", "does not match the cluster's nodes; start a fresh allocation for this cluster")
    if not (isinstance(scaling_floor, int | float) and 0.0 <= scaling_floor <= 1.0):
        raise SpecError("scaling_floor", f"must be in [0, 1] (0 = off, 0.5 = half of linear), got {scaling_floor!r}")
    if any(j.job_id == job_id for j in allocation.jobs):
        raise SpecError("job_id", f"{job_id!r} is already placed; pick another name")
    index = ClusterIndex.from_cluster(cluster)
    free = allocation.free_per_node()
    got = has_place(plans, index, free, free_by_type=index.free_by_type(free), scaling_floor=scaling_floor)
    if got is None:
        return allocation, None
    plan, placement = got
    owner = [list(node) for node in allocation.owner]
    slots: list[tuple[int, int]] = []
    for node, count in placement.nodes:
        empty = [k for k, o in enumerate(owner[node]) if o is None][:count]
        for k in empty:
            owner[node][k] = job_id
            slots.append((node, k))
    job = PlacedJob(job_id=job_id, model=model, plan=plan, placement=placement, slots=tuple(sorted(slots)))
    return Allocation(owner=tuple(tuple(n) for n in owner), jobs=allocation.jobs + (job,)), job


def release(allocation: Allocation, job_id: str) -> Allocation:
    """Free every GPU the job holds; the other jobs keep theirs."""
    allocation.job(job_id)  # raises SpecError naming the job when it is not placed
    owner = tuple(tuple(None if o == job_id else o for o in node) for node in allocation.owner)
    return Allocation(owner=owner, jobs=tuple(j for j in allocation.jobs if j.job_id != job_id))
