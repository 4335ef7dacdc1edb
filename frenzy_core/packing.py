"""HAS: heterogeneity-aware placement of a job's ranked plans onto nodes (Frenzy, arXiv 2412.14479, Algorithm 1).

Corrected from the paper:
- a GPU qualifies when its memory is at least (>=, not >) the plan's per-GPU need;
- one walk over the ranked plans, so it always terminates, and `None` when nothing fits;
- deterministic tie-breaks (node index last), and the cluster state is never mutated: it returns a placement.

Order of preference for one plan: a single node first, then the tightest-fitting GPU memory, then the node left
with the fewest free GPUs (best fit), then the lowest node index. When no single node can hold the plan: the
fewest nodes, then the tightest memory, then lowest indices. A plan with t > 1 keeps each group of t tensor-parallel
GPUs inside one node, so a node contributes a multiple of t GPUs.

`has_place` first drops the plans below the scaling-efficiency floor (`plans.within_scaling_floor`, default
`plans.DEFAULT_SCALING_FLOOR`), so one job cannot take a whole GPU type for a few per cent of speed-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from frenzy_core.cluster import Cluster
from frenzy_core.plans import DEFAULT_SCALING_FLOOR, Plan, within_scaling_floor

_NO_ROOM = np.iinfo(np.int64).max  # a free count no node has: marks the nodes too full for a plan


@dataclass(frozen=True)
class ClusterIndex:
    """Array view of a cluster's static shape, indexed by node position in `cluster.nodes`."""

    node_names: tuple[str, ...]
    node_type: np.ndarray  # int, index into type_names, per node
    node_gpus: np.ndarray  # int, GPUs per node (the capacity)
    type_names: tuple[str, ...]  # GPU types present, in first-seen order
    type_memory_bytes: tuple[int, ...]  # capacity of one GPU of each type
    nodes_by_type: tuple[np.ndarray, ...]  # node indices of each type, ascending

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> ClusterIndex:
        types = tuple(g.name for g in cluster.gpu_types_present())
        pos = {t: i for i, t in enumerate(types)}
        node_type = np.array([pos[n.gpu_type] for n in cluster.nodes], dtype=np.int64)
        return cls(
            node_names=tuple(n.name for n in cluster.nodes),
            node_type=node_type,
            node_gpus=np.array([n.num_gpus for n in cluster.nodes], dtype=np.int64),
            type_names=types,
            type_memory_bytes=tuple(cluster.gpu(t).memory_bytes for t in types),
            nodes_by_type=tuple(np.flatnonzero(node_type == i) for i in range(len(types))),
        )

    def type_pos(self, gpu_type: str) -> int:
        return self.type_names.index(gpu_type)

    def capacity_by_type(self) -> np.ndarray:
        return np.array([int(self.node_gpus[ix].sum()) for ix in self.nodes_by_type], dtype=np.int64)

    def free_by_type(self, free: np.ndarray) -> np.ndarray:
        return np.array([int(free[ix].sum()) for ix in self.nodes_by_type], dtype=np.int64)


@dataclass(frozen=True)
class Placement:
    """Where one plan runs: GPUs taken per node. Every node holds the same GPU type and a multiple of tp GPUs."""

    gpu_type: str
    nodes: tuple[tuple[int, int], ...]  # (node index, GPUs taken there), node index ascending

    @property
    def num_gpus(self) -> int:
        return sum(n for _, n in self.nodes)


def _place_on_type(index: ClusterIndex, free: np.ndarray, t: int, num_gpus: int, tp: int):
    """Best placement of num_gpus (in tp-groups) on nodes of type t: (n_nodes, free_after, nodes) or None."""
    ix = index.nodes_by_type[t]
    f = free[ix]
    usable = f - f % tp if tp > 1 else f
    fits = usable >= num_gpus
    if fits.any():
        # single node, best fit: fewest free GPUs left behind; argmin returns the lowest index on ties
        left = np.where(fits, f - num_gpus, np.iinfo(np.int64).max)
        k = int(np.argmin(left))
        return 1, int(left[k]), ((int(ix[k]), num_gpus),)
    if int(usable.sum()) < num_gpus:
        return None
    # fewest nodes: the largest usable nodes first (stable, so lower index wins ties) ...
    order = np.argsort(-usable, kind="stable")
    csum = np.cumsum(usable[order])
    k = int(np.searchsorted(csum, num_gpus))  # nodes needed = k + 1
    taken = [(int(ix[j]), int(usable[j])) for j in order[:k]]
    rem = num_gpus - (int(csum[k - 1]) if k else 0)
    # ... and the last node is the tightest fit for the remainder among the nodes not yet taken
    rest = order[k:]
    rest_usable = usable[rest]
    cand = np.where(rest_usable >= rem, rest_usable, np.iinfo(np.int64).max)
    j = int(rest[int(np.argmin(cand))])
    taken.append((int(ix[j]), rem))
    return k + 1, int(f[order[k:]].sum() - rem), tuple(sorted(taken))


def place(index: ClusterIndex, free: np.ndarray, num_gpus: int, *, tp: int = 1, memory_bytes: int = 0,
          gpu_types: Iterable[str] | None = None) -> Placement | None:
    """Place num_gpus GPUs (groups of tp per node) on GPUs with at least memory_bytes each; None if impossible.

    gpu_types limits the candidate types (None = every type with enough memory). `free` is read, never written.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> c = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8, count: 2}]")
    >>> ix = ClusterIndex.from_cluster(c)
    >>> place(ix, np.array([8, 3]), 2)   # best fit: the node left with 1 free GPU
    Placement(gpu_type='A100-80GB', nodes=((1, 2),))
    """
    if num_gpus <= 0 or num_gpus % tp:
        return None
    allowed = None if gpu_types is None else set(gpu_types)
    best = None
    for t, name in enumerate(index.type_names):
        mem = index.type_memory_bytes[t]
        if mem < memory_bytes or (allowed is not None and name not in allowed):
            continue
        got = _place_on_type(index, free, t, num_gpus, tp)
        if got is None:
            continue
        n_nodes, left, nodes = got
        # single node beats many; then tightest memory; then best fit; type order keeps ties deterministic
        key = (n_nodes, mem, left) if n_nodes == 1 else (n_nodes, mem, 0)
        if best is None or key < best[0]:
            best = (key, Placement(gpu_type=name, nodes=nodes))
    return None if best is None else best[1]


def has_place(plans: Sequence[Plan], index: ClusterIndex, free: np.ndarray, *,
              free_by_type: Sequence[int] | None = None, match_type: bool = True,
              scaling_floor: float = DEFAULT_SCALING_FLOOR) -> tuple[Plan, Placement] | None:
    """HAS: the first ranked plan the cluster can satisfy now, with its placement; None when none fits.

    Only plans that pass the scaling floor among `plans` are walked (0 walks them all).

    match_type=True keeps each plan on its own GPU type (its predicted time is for that type); False lets a plan
    go to any type with at least its per-GPU memory, the tightest first (the paper's memory-only matching).
    free_by_type (optional, in index.type_names order) skips plans whose type lacks enough free GPUs in total.
    """
    pos = {t: i for i, t in enumerate(index.type_names)}
    for plan in within_scaling_floor(plans, scaling_floor):
        t = pos.get(plan.gpu_type)
        if match_type:
            if t is None or (free_by_type is not None and free_by_type[t] < plan.num_gpus):
                continue
            got = place(index, free, plan.num_gpus, tp=plan.tp, memory_bytes=plan.memory_bytes,
                        gpu_types=(plan.gpu_type,))
        else:
            got = place(index, free, plan.num_gpus, tp=plan.tp, memory_bytes=plan.memory_bytes)
        if got is not None:
            return plan, got
    return None


class FreeGPUs:
    """One decision's working copy of the free GPUs: a placement costs a few vector operations over one type's nodes.

    A policy builds one per decision from the view's free array, asks `place_plan` / `first_plan`, and calls `take`
    for each start it decides; the view itself is never written. Same answers as `place` (tested against it):

    - a plan of n GPUs (a multiple of its tp) fits one node iff the node has k >= n free (usable = k - k % tp >= n
      <=> k >= n), and best fit (fewest left, then lowest index) is the first minimum of the free counts among the
      type's nodes with k >= n (`nodes_by_type` is ascending, `argmin` returns the first);
    - `by_type[t]`, the free GPUs of type t, gives the early exit: no plan of more than by_type[t] GPUs can fit; a
      plan no single node holds goes to the numpy walk of `_place_on_type` on `free`.

    Nothing is indexed up front: building per-node buckets cost more than the one or two queries a decision makes
    (75,672 decisions on the 82k-job Philly replay; bench/sim_throughput.py).
    """

    __slots__ = ("index", "free", "by_type")

    def __init__(self, index: ClusterIndex, free: np.ndarray, free_by_type: Sequence[int] | None = None):
        self.index = index
        self.free = np.array(free, dtype=np.int64)  # copy: the view's array is read-only and stays untouched
        self.by_type = [int(x) for x in (index.free_by_type(self.free) if free_by_type is None else free_by_type)]

    def best_node(self, t: int, num_gpus: int) -> int | None:
        """The node of type t that best fits num_gpus on its own (fewest free GPUs left, then lowest index)."""
        ix = self.index.nodes_by_type[t]
        f = self.free[ix]
        left = np.where(f >= num_gpus, f, _NO_ROOM)
        k = int(left.argmin()) if len(ix) else 0
        return int(ix[k]) if len(ix) and left[k] < _NO_ROOM else None

    def place_on(self, t: int, num_gpus: int, tp: int = 1) -> Placement | None:
        """`place` restricted to type position t (no memory check: the caller's plan is for that type)."""
        if num_gpus <= 0 or num_gpus % tp or self.by_type[t] < num_gpus:
            return None
        got = self.first_plan(((t, num_gpus, tp, None),))
        return None if got is None else got[1]

    def first_plan(self, plans: Sequence[tuple[int, int, int, Plan]]) -> tuple[Plan, Placement] | None:
        """HAS over plans pre-compiled as (type position, GPUs, tp, plan): the first one that fits now."""
        by_type = self.by_type
        for t, n, tp, plan in plans:
            if by_type[t] < n:
                continue  # early exit: not enough free GPUs of this type in the whole cluster
            node = self.best_node(t, n)
            if node is not None:  # one node holds it
                return plan, Placement(self.index.type_names[t], ((node, n),))
            got = _place_on_type(self.index, self.free, t, n, tp)
            if got is not None:
                return plan, Placement(self.index.type_names[t], got[2])
        return None

    def take(self, placement: Placement) -> None:
        """Mark a placement's GPUs busy in this working copy."""
        free, node_type = self.free, self.index.node_type
        for node, n in placement.nodes:
            free[node] -= n
            self.by_type[int(node_type[node])] -= n


def compile_plans(index: ClusterIndex, plans: Sequence[Plan]) -> tuple[tuple[int, int, int, Plan], ...]:
    """Ranked plans as (type position, GPUs, tp, plan) for `FreeGPUs.first_plan`; plans of absent types dropped."""
    pos = {t: i for i, t in enumerate(index.type_names)}
    return tuple((pos[p.gpu_type], p.num_gpus, p.tp, p) for p in plans if p.gpu_type in pos)


def check_placement(index: ClusterIndex, free: np.ndarray, plan: Plan, placement: Placement) -> str | None:
    """Why a placement is invalid for this plan and free state, or None when it is valid."""
    if placement.num_gpus != plan.num_gpus:
        return f"placement has {placement.num_gpus} GPUs, plan needs {plan.num_gpus}"
    seen = set()
    for node, n in placement.nodes:
        if node in seen:
            return f"node {node} listed twice"
        seen.add(node)
        if index.type_names[int(index.node_type[node])] != placement.gpu_type or placement.gpu_type != plan.gpu_type:
            return f"node {index.node_names[node]} is not a {plan.gpu_type} node"
        if n <= 0 or n % plan.tp:
            return f"node {index.node_names[node]} gets {n} GPUs, not a positive multiple of tp={plan.tp}"
        if n > free[node]:
            return f"node {index.node_names[node]} has {int(free[node])} free GPUs, placement takes {n}"
    return None
