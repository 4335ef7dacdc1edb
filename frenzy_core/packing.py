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

from bisect import insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from frenzy_core.cluster import Cluster
from frenzy_core.plans import DEFAULT_SCALING_FLOOR, Plan, within_scaling_floor


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
    """One decision's working copy of the free GPUs, indexed so that a placement costs O(GPUs per node), not O(nodes).

    A policy builds one per decision from the view's free array, asks `place_plan` / `first_plan`, and calls `take`
    for each start it decides; the view itself is never written. Same answers as `place` (tested against it):

    - `buckets[t][k]` holds, ascending, the nodes of type t with exactly k free GPUs. A plan of n GPUs (a multiple
      of its tp) fits one node iff the node has k >= n free (usable = k - k % tp >= n <=> k >= n), and best fit
      (fewest left, then lowest index) is the first node of the first non-empty bucket from k = n up;
    - `by_type[t]`, the free GPUs of type t, and `max_free[t]`, the largest k with a node of type t, give
      the early exits: no plan of more than by_type[t] GPUs can fit, and one of more than max_free[t] needs many
      nodes, handled by the numpy walk of `_place_on_type` on `free` (kept in sync).
    """

    __slots__ = ("index", "free", "by_type", "_buckets", "_max_free")

    def __init__(self, index: ClusterIndex, free: np.ndarray, free_by_type: Sequence[int] | None = None):
        self.index = index
        self.free = np.array(free, dtype=np.int64)  # copy: the view's array is read-only and stays untouched
        self.by_type = [int(x) for x in (index.free_by_type(self.free) if free_by_type is None else free_by_type)]
        # built per type on first use: a decision that only ever looks at one GPU type indexes only that type
        self._buckets: list[list[list[int]] | None] = [None] * len(index.type_names)
        self._max_free: list[int] = [0] * len(index.type_names)

    def _index_type(self, t: int) -> list[list[int]]:
        ix = self.index.nodes_by_type[t]
        f = self.free[ix]
        size = int(self.index.node_gpus[ix].max()) if len(ix) else 0
        b: list[list[int]] = [[] for _ in range(size + 1)]
        for node, k in zip(ix.tolist(), f.tolist(), strict=True):  # ascending node index: buckets stay sorted
            b[k].append(node)
        self._buckets[t] = b
        self._max_free[t] = int(f.max()) if len(ix) else 0
        return b

    @property
    def buckets(self) -> list[list[list[int]]]:
        """buckets[t][k]: the nodes of type t with exactly k free GPUs, ascending (indexes every type)."""
        return [b if b is not None else self._index_type(t) for t, b in enumerate(self._buckets)]

    @property
    def max_free(self) -> list[int]:
        """The largest free count of any node, per type (indexes every type)."""
        for t, b in enumerate(self._buckets):
            if b is None:
                self._index_type(t)
        return list(self._max_free)

    def place_on(self, t: int, num_gpus: int, tp: int = 1) -> Placement | None:
        """`place` restricted to type position t (no memory check: the caller's plan is for that type)."""
        if num_gpus <= 0 or num_gpus % tp or self.by_type[t] < num_gpus:
            return None
        got = self.first_plan(((t, num_gpus, tp, None),))
        return None if got is None else got[1]

    def first_plan(self, plans: Sequence[tuple[int, int, int, Plan]]) -> tuple[Plan, Placement] | None:
        """HAS over plans pre-compiled as (type position, GPUs, tp, plan): the first one that fits now."""
        by_type, buckets, max_free = self.by_type, self._buckets, self._max_free
        for t, n, tp, plan in plans:
            if by_type[t] < n:
                continue  # early exit: not enough free GPUs of this type in the whole cluster
            b = buckets[t]
            if b is None:
                b = self._index_type(t)
            if n <= max_free[t]:  # one node holds it: best fit is the first node of the first non-empty bucket
                k = n
                while not b[k]:
                    k += 1
                return plan, Placement(self.index.type_names[t], ((b[k][0], n),))
            got = _place_on_type(self.index, self.free, t, n, tp)
            if got is not None:
                return plan, Placement(self.index.type_names[t], got[2])
        return None

    def take(self, placement: Placement) -> None:
        """Mark a placement's GPUs busy in this working copy."""
        free, node_type = self.free, self.index.node_type
        for node, n in placement.nodes:
            k = int(free[node])
            t = int(node_type[node])
            free[node] = k - n
            self.by_type[t] -= n
            b = self._buckets[t]
            if b is None:
                continue  # not indexed yet: it will be built from `free` when first needed
            b[k].remove(node)
            insort(b[k - n], node)
            if k == self._max_free[t] and not b[k]:
                m = k
                while m > 0 and not b[m]:
                    m -= 1
                self._max_free[t] = m


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
