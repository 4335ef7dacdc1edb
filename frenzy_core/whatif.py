"""Procurement what-ifs: today's cluster plus N GPUs of a type, the candidate purchases offered by default and their
validation, what a cluster costs per hour, and which candidates are on the cost / job-completion-time frontier.

Pure functions on Cluster values; the GPU-mix page edits the candidate rows, simulates each candidate and plots the
frontier.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from frenzy_core.cluster import DEFAULT_NETWORK_GBIT_S, Cluster, Node
from frenzy_core.errors import SpecError

DEFAULT_GPUS_PER_NODE = 8  # the standard 8-GPU HGX / OVX server shape
TODAY = "today"  # the label of the current cluster in a candidate set (reserved: no candidate may take it)


@dataclass(frozen=True)
class Candidate:
    """One purchase option: `count` more GPUs of `gpu_type`. Field names are the GPU-mix table's columns."""

    candidate: str  # label on the frontier plot; rows with the same label add up into one option
    gpu_type: str  # catalog (or cluster-defined) GPU type name
    count: int  # GPUs to add
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE  # shape of the new nodes (the last one takes the remainder)


# Offered when the page opens: one option per current-generation training GPU, of similar cost per hour.
DEFAULT_CANDIDATES: tuple[Candidate, ...] = (
    Candidate("+16 H100", "H100-80GB", 16),
    Candidate("+32 L40S", "L40S", 32),
    Candidate("+24 A100-80GB", "A100-80GB", 24),
)


def _missing(value: Any) -> bool:
    """None, NaN or blank: what an edited table holds in a cell the user has not filled."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or \
        (isinstance(value, str) and not value.strip())


def _whole(value: Any, field: str, what: str) -> int:
    """A whole number from a table cell (an int, an integral float such as 16.0, or digits), else SpecError."""
    if isinstance(value, bool):
        raise SpecError(field, f"{what} must be a whole number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SpecError(field, f"{what} must be a whole number, got {value!r}") from None
    if not math.isfinite(number) or number != int(number):
        raise SpecError(field, f"{what} must be a whole number, got {value!r}")
    return int(number)


def build_candidates(base: Cluster, rows: Iterable[Mapping[str, Any]]) -> dict[str, Cluster]:
    """label -> cluster: `TODAY` (the base cluster) first, then one cluster per candidate label.

    `rows` are `Candidate`-shaped mappings (the page's table records). Rows with the same label add up; a row whose
    label and GPU type are both empty is skipped (the table keeps one while the user types). A bad row raises
    SpecError naming the row or the candidate and the column, e.g. ``+16 H100.count``.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> base = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8}]")
    >>> rows = [{"candidate": "+8 L40S", "gpu_type": "L40S", "count": 8.0, "gpus_per_node": None}]
    >>> {label: c.total_gpus for label, c in build_candidates(base, rows).items()}
    {'today': 8, '+8 L40S': 16}
    """
    out: dict[str, Cluster] = {TODAY: base}
    for i, row in enumerate(rows, start=1):
        raw_label = row.get("candidate")
        label = "" if _missing(raw_label) else str(raw_label).strip()
        gpu_type = row.get("gpu_type")
        if not label and _missing(gpu_type):
            continue  # an empty row the editor keeps while the user types
        if not label:
            raise SpecError(f"row {i}.candidate", "give the candidate a name, e.g. '+16 H100'")
        if label == TODAY:
            raise SpecError(f"row {i}.candidate", f"'{TODAY}' is the current cluster; use another name")
        if _missing(gpu_type):
            raise SpecError(f"{label}.gpu_type", "choose a GPU type from the list")
        if _missing(row.get("count")):
            raise SpecError(f"{label}.count", "enter how many GPUs to add (a whole number)")
        count = _whole(row.get("count"), f"{label}.count", "GPUs to add")
        per_node = row.get("gpus_per_node")
        per_node = DEFAULT_GPUS_PER_NODE if _missing(per_node) else \
            _whole(per_node, f"{label}.gpus_per_node", "GPUs per node")
        try:
            out[label] = add_gpus(out.get(label, base), str(gpu_type), count, gpus_per_node=per_node)
        except SpecError as err:
            raise SpecError(f"{label}.{err.field}", err.reason) from None
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "gpu"


def add_gpus(cluster: Cluster, gpu_type: str, count: int, gpus_per_node: int = DEFAULT_GPUS_PER_NODE) -> Cluster:
    """`cluster` plus `count` GPUs of `gpu_type` in new nodes of `gpus_per_node` (the last node takes the remainder).

    New nodes copy the network link of the cluster's existing nodes of that type (else the 100 Gbit/s default) and
    are named `<type>-new-<i>`, skipping names already taken. The input cluster is not changed.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> c = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8}]")
    >>> bigger = add_gpus(c, "L40S", 12)
    >>> [(n.name, n.gpu_type, n.num_gpus) for n in bigger.nodes]
    [('a', 'A100-80GB', 8), ('l40s-new-0', 'L40S', 8), ('l40s-new-1', 'L40S', 4)]
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise SpecError("count", f"GPUs to add must be a whole number >= 0, got {count!r}")
    if not isinstance(gpus_per_node, int) or gpus_per_node <= 0:
        raise SpecError("gpus_per_node", f"must be a positive integer, got {gpus_per_node!r}")
    if gpu_type not in cluster.type_table:
        raise SpecError("gpu_type", f"unknown GPU type {gpu_type!r}; choose one of: {', '.join(cluster.type_table)}")
    if count == 0:
        return cluster
    same = [n for n in cluster.nodes if n.gpu_type == gpu_type]
    network = same[0].network_gbit_s if same else DEFAULT_NETWORK_GBIT_S
    taken = {n.name for n in cluster.nodes}
    new: list[Node] = []
    i = 0
    for k in range(math.ceil(count / gpus_per_node)):
        while f"{_slug(gpu_type)}-new-{i}" in taken:
            i += 1
        name = f"{_slug(gpu_type)}-new-{i}"
        taken.add(name)
        new.append(Node(name=name, gpu_type=gpu_type, num_gpus=min(gpus_per_node, count - k * gpus_per_node),
                        network_gbit_s=network))
    # A new Cluster, not `cluster.model_copy(update=...)`: model_copy copies __dict__, and with it the input's cached
    # `type_summary` (per-type GPU totals), so the copy would report today's GPU counts to the mapping and the
    # policies. That made the GPU-mix page (which reads today's totals first) disagree with a direct simulation
    # (issue 11: +24 A100-80GB 1.23 h on the page vs 1.87 h).
    return Cluster(name=cluster.name, description=cluster.description, gpu_types=cluster.gpu_types,
                   nodes=cluster.nodes + tuple(new))


def cluster_cost_per_hour(cluster: Cluster) -> float:
    """US$ per hour to run every GPU of the cluster at its type's catalog (or user-defined) price.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> round(cluster_cost_per_hour(parse_cluster_yaml("nodes: [{name: a, gpu_type: L40S, num_gpus: 8}]")), 2)
    8.0
    """
    return float(sum(n.num_gpus * cluster.gpu(n.gpu_type).price_per_hour_usd for n in cluster.nodes))


def added_cost_per_hour(cluster: Cluster, gpu_type: str, count: int) -> float:
    """US$ per hour of `count` more GPUs of `gpu_type` at the cluster's price for that type."""
    if gpu_type not in cluster.type_table:
        raise SpecError("gpu_type", f"unknown GPU type {gpu_type!r}; choose one of: {', '.join(cluster.type_table)}")
    return float(count * cluster.gpu(gpu_type).price_per_hour_usd)


def pareto_front(costs: Sequence[float], times: Sequence[float]) -> list[bool]:
    """Which candidates no other candidate beats on both cost and time (lower is better on both).

    A candidate is dominated when another costs no more and is no slower, and is strictly better on one of the two.

    >>> pareto_front([10, 20, 30, 25], [5.0, 3.0, 1.0, 4.0])
    [True, True, True, False]
    """
    if len(costs) != len(times):
        raise SpecError("times", f"need one time per cost, got {len(times)} times for {len(costs)} costs")
    points = list(zip(costs, times, strict=True))
    front = []
    for i, (c, t) in enumerate(points):
        dominated = any(c2 <= c and t2 <= t and (c2 < c or t2 < t) for j, (c2, t2) in enumerate(points) if j != i)
        front.append(not dominated)
    return front
