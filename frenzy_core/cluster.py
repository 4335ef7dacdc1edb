"""Clusters: nodes of GPUs with their links, loaded from and saved to YAML.

A YAML cluster file looks like::

    name: sia-64
    description: what it models and where it comes from
    gpu_types: []            # optional user-defined GPU types (same fields as the catalog)
    nodes:
      - name: aws            # with count > 1, nodes are named aws-0, aws-1, ...
        gpu_type: T4
        num_gpus: 4
        count: 6
        network_gbit_s: 50   # optional; intra_link / intra_link_gbyte_s default to the GPU type's
      - name: dgx
        system: dgx-h100     # a catalog system (frenzy_core.systems): gpu_type, num_gpus, network_gbit_s from it
        count: 4

Validation errors name the file, the node and the field.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError, model_validator

from frenzy_core.errors import SpecError, from_validation_error
from frenzy_core.gpus import CATALOG, GPUType, LinkKind
from frenzy_core.limits import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_TOTAL_GPUS,
    Name,
    load_yaml,
    read_user_file,
    short_repr,
    slug_name,
)
from frenzy_core.systems import get_system

DEFAULT_NETWORK_GBIT_S = 100.0  # a 100 Gbit/s InfiniBand/RoCE NIC per node, the common datacenter default


class Node(BaseModel):
    """One server: `num_gpus` GPUs of one type, an intra-node link and a network link to the other nodes."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name  # unique within the cluster; it reaches host lists and launch scripts (limits.check_name)
    gpu_type: Name  # key into the catalog or the cluster's own gpu_types
    num_gpus: StrictInt  # GPUs in this node (tensor parallelism stays inside one node); `true` is not 1
    intra_link: LinkKind | None = None  # None = the GPU type's usual link
    intra_link_gbyte_s: float | None = None  # per-GPU GB/s inside the node; None = the GPU type's figure
    network_gbit_s: float = DEFAULT_NETWORK_GBIT_S  # node-to-node bandwidth, Gbit/s

    @model_validator(mode="after")
    def _check(self) -> Node:
        if not 0 < self.num_gpus <= MAX_GPUS_PER_NODE:
            raise ValueError(f"num_gpus must be an integer from 1 to {MAX_GPUS_PER_NODE:,} (GPUs in one server), "
                             f"got {short_repr(self.num_gpus)}")
        if self.network_gbit_s <= 0:
            raise ValueError(f"network_gbit_s must be positive, got {self.network_gbit_s}")
        if self.intra_link_gbyte_s is not None and self.intra_link_gbyte_s <= 0:
            raise ValueError(f"intra_link_gbyte_s must be positive, got {self.intra_link_gbyte_s}")
        return self


@dataclass(frozen=True)
class TypeSummary:
    """What the planner needs to know about one GPU type in a cluster, gathered in one pass over the nodes."""

    total_gpus: int  # GPUs of this type over all nodes
    max_gpus_per_node: int  # the largest node: bounds tensor parallelism
    min_intra_link_gbyte_s: float  # the slowest intra-node link among its nodes
    min_network_gbit_s: float  # the slowest network link among its nodes
    node_sizes: tuple[tuple[int, int], ...] = ()  # (GPUs per node, number of such nodes), ascending size

    def capacity_for_tp(self, tp: int) -> int:
        """GPUs usable by a plan whose tensor-parallel groups of `tp` must each sit inside one node."""
        return sum(count * (size // tp) * tp for size, count in self.node_sizes)


class Cluster(BaseModel):
    """A list of nodes plus any user-defined GPU types they use."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name = "cluster"  # limits.check_name: it reaches job names and launch scripts
    description: str = ""  # free text, shown escaped
    gpu_types: tuple[GPUType, ...] = ()  # user-defined types; override catalog entries of the same name
    nodes: tuple[Node, ...]

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if not self.nodes:
            raise ValueError("a cluster needs at least one node")
        if len(self.nodes) > MAX_NODES:
            raise ValueError(f"nodes: {len(self.nodes):,} nodes is over the limit of {MAX_NODES:,}; model groups of "
                             "identical nodes with fewer, larger entries")
        total = sum(n.num_gpus for n in self.nodes)
        if total > MAX_TOTAL_GPUS:
            raise ValueError(f"nodes: {total:,} GPUs is over the limit of {MAX_TOTAL_GPUS:,} per cluster")
        known = {**CATALOG, **{g.name: g for g in self.gpu_types}}
        seen: set[str] = set()
        for i, node in enumerate(self.nodes):
            if node.name in seen:
                raise ValueError(f"nodes[{i}] ({short_repr(node.name)}): duplicate node name; names must be unique")
            seen.add(node.name)
            if node.gpu_type not in known:
                raise ValueError(
                    f"nodes[{i}] ({short_repr(node.name)}): gpu_type {short_repr(node.gpu_type)} is not in the catalog; "
                    f"use one of {', '.join(known)} or define it under gpu_types"
                )
        return self

    # --- lookups -----------------------------------------------------------------------------------------------
    @property
    def type_table(self) -> dict[str, GPUType]:
        return {**CATALOG, **{g.name: g for g in self.gpu_types}}

    def gpu(self, name: str) -> GPUType:
        return self.type_table[name]

    def gpu_types_present(self) -> list[GPUType]:
        """The GPU types that nodes use, in first-seen order."""
        table = self.type_table
        return [table[n] for n in dict.fromkeys(node.gpu_type for node in self.nodes)]

    @cached_property
    def type_summary(self) -> dict[str, TypeSummary]:
        """Per GPU type present (first-seen order): totals and slowest links. Computed once per (immutable) cluster."""
        table = self.type_table
        acc: dict[str, list] = {}
        sizes: dict[str, Counter[int]] = {}
        for node in self.nodes:
            sizes.setdefault(node.gpu_type, Counter())[node.num_gpus] += 1
            intra = node.intra_link_gbyte_s or table[node.gpu_type].intra_link_gbyte_s
            row = acc.get(node.gpu_type)
            if row is None:
                acc[node.gpu_type] = [node.num_gpus, node.num_gpus, intra, node.network_gbit_s]
            else:
                row[0] += node.num_gpus
                row[1] = max(row[1], node.num_gpus)
                row[2] = min(row[2], intra)
                row[3] = min(row[3], node.network_gbit_s)
        return {k: TypeSummary(*v, node_sizes=tuple(sorted(sizes[k].items()))) for k, v in acc.items()}

    def gpus_by_type(self) -> dict[str, int]:
        return {name: t.total_gpus for name, t in self.type_summary.items()}

    def max_gpus_per_node(self, gpu_type: str) -> int:
        summary = self.type_summary.get(gpu_type)
        return summary.max_gpus_per_node if summary else 0

    def intra_link_gbyte_s(self, node: Node) -> float:
        return node.intra_link_gbyte_s or self.gpu(node.gpu_type).intra_link_gbyte_s

    @property
    def total_gpus(self) -> int:
        return sum(n.num_gpus for n in self.nodes)


def _expand(raw_nodes: list, source: str) -> list[dict]:
    """Expand `count: N` entries into N named nodes; check each entry is a mapping, and the limits before expanding."""
    if len(raw_nodes) > MAX_NODES:
        raise SpecError("nodes", f"{len(raw_nodes):,} entries is over the limit of {MAX_NODES:,} nodes", source)
    counts = []
    for i, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict):
            raise SpecError(f"nodes[{i}]", "each node must be a mapping with gpu_type and num_gpus", source)
        count = raw.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise SpecError(f"nodes[{i}].count", f"must be a positive integer, got {short_repr(count)}", source)
        counts.append(count)
    if sum(counts) > MAX_NODES:
        raise SpecError("nodes", f"the counts add up to {sum(counts):,} nodes, over the limit of {MAX_NODES:,}; "
                        "model the cluster with fewer, larger nodes", source)
    out: list[dict] = []
    for i, (raw, count) in enumerate(zip(raw_nodes, counts, strict=True)):
        entry = _with_system(dict(raw), f"nodes[{i}]", source)
        entry.pop("count", None)
        base = entry.get("name") or f"node{i}"
        for k in range(count):
            out.append({**entry, "name": f"{base}-{k}" if count > 1 else base})
    return out


def _with_system(entry: dict, where: str, source: str) -> dict:
    """A node entry naming a catalog `system` (frenzy_core.systems): its gpu_type, num_gpus and network_gbit_s filled
    in; the entry's own num_gpus / network_gbit_s / intra link win (a partly populated node, a slower fabric), a
    gpu_type other than the system's is refused."""
    if "system" not in entry:
        return entry
    name = entry.pop("system")
    try:
        fields = get_system(name).node_fields()
    except SpecError as err:
        raise SpecError(f"{where}.system", err.reason, source) from None
    if "gpu_type" in entry and entry["gpu_type"] != fields["gpu_type"]:
        raise SpecError(f"{where}.gpu_type", f"{short_repr(entry['gpu_type'])} is not system {name}'s GPU "
                        f"({fields['gpu_type']}); drop gpu_type or the system", source)
    return {**fields, **entry}


def cluster_from_dict(data: dict, source: str = "cluster") -> Cluster:
    """Build a Cluster from parsed YAML/JSON; errors name the source, the node and the field."""
    if not isinstance(data, dict):
        raise SpecError("(top level)", "a cluster file must be a mapping with a `nodes` list", source)
    if "nodes" not in data or not isinstance(data["nodes"], list):
        raise SpecError("nodes", "missing or not a list; add `nodes:` with one entry per node", source)
    extra = set(data) - {"name", "description", "gpu_types", "nodes"}
    if extra:
        raise SpecError(sorted(extra)[0], "unknown key; allowed: name, description, gpu_types, nodes", source)
    gpu_types = []
    for i, g in enumerate(data.get("gpu_types") or []):
        try:
            gpu_types.append(GPUType(**g) if isinstance(g, dict) else GPUType.model_validate(g))
        except ValidationError as err:
            e = from_validation_error(err, fields=GPUType.model_fields)
            raise SpecError(f"gpu_types[{i}].{e.field}", e.reason, source) from None
    nodes = _expand(data["nodes"], source)
    for i, n in enumerate(nodes):
        try:
            Node(**n)
        except ValidationError as err:
            e = from_validation_error(err, fields=Node.model_fields)
            raise SpecError(f"node {short_repr(n.get('name'))}.{e.field}", e.reason, source) from None
        except TypeError:
            raise SpecError(f"nodes[{i}]", "node fields must be key: value pairs", source) from None
    try:
        return Cluster(name=data.get("name", slug_name(Path(source).stem, "cluster")), description=data.get("description", ""),
                       gpu_types=tuple(gpu_types), nodes=tuple(Node(**n) for n in nodes))
    except ValidationError as err:
        raise from_validation_error(err, source, fields=("nodes",)) from None


def system_cluster(system: str, nodes: int) -> Cluster:
    """`nodes` nodes of one catalog system (frenzy_core.systems), built as a cluster file naming it would be.

    >>> c = system_cluster("dgx-h100", 4)
    >>> c.name, len(c.nodes), c.nodes[0].num_gpus, c.nodes[0].network_gbit_s
    ('4x-dgx-h100', 4, 8, 3200.0)
    """
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes <= 0:
        raise SpecError("nodes", f"must be a positive number of {system} nodes, got {short_repr(nodes)}")
    return cluster_from_dict({"name": f"{nodes}x-{system}", "nodes": [{"name": system, "system": system,
                                                                        "count": nodes}]}, source=f"--system {system}")


def parse_cluster_yaml(text: str, source: str = "cluster.yaml") -> Cluster:
    """Parse YAML text (size-limited, no aliases: `limits.load_yaml`) into a Cluster."""
    return cluster_from_dict(load_yaml(text, "cluster", source), source)


def load_cluster(path: str | Path) -> Cluster:
    p = Path(path)
    return parse_cluster_yaml(read_user_file(p, "cluster", "a cluster YAML file"), source=p.name)


# The clusters that ship with the planner (the repository's sample_clusters/): the only ones a share link, a pasted
# or an uploaded scenario may name; anything else travels inline.
BUNDLED_CLUSTER_DIR = Path(__file__).resolve().parent.parent / "sample_clusters"


def bundled_clusters() -> dict[str, Path]:
    """{name: path} of the bundled sample clusters, sorted by name.

    >>> list(bundled_clusters())[:2]
    ['alibaba-1k', 'modern-mixed']
    """
    return {p.stem: p for p in sorted(BUNDLED_CLUSTER_DIR.glob("*.yaml"))}


def cluster_to_yaml(cluster: Cluster) -> str:
    """Serialise a cluster (one entry per node, defaults left out) so that parse_cluster_yaml round-trips it."""
    data: dict = {"name": cluster.name}
    if cluster.description:
        data["description"] = cluster.description
    if cluster.gpu_types:
        data["gpu_types"] = [g.model_dump() for g in cluster.gpu_types]
    data["nodes"] = [n.model_dump(exclude_defaults=True) | {"name": n.name, "gpu_type": n.gpu_type,
                                                            "num_gpus": n.num_gpus} for n in cluster.nodes]
    return yaml.safe_dump(data, sort_keys=False)
