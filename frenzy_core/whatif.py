"""Procurement what-ifs: today's cluster plus N GPUs of a type, the candidate purchases offered by default and their
validation, a search over mixes under a budget, a workload from the user's own jobs, what a cluster costs per hour
(rental or owned, `tco`), and the verdict: every candidate simulated on the same jobs over several seeds (through
`sweep`), its mean JCT with a 95% interval, the cost / JCT frontier, the best candidate within the budget and whether
its lead is significant.

Pure functions on Cluster values (the runs go through `sweep.run_sweep`); the GPU-mix page and `frenzy whatif` both
call `run_whatif` and only display what it returns.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import stats

from frenzy_core.cluster import DEFAULT_NETWORK_GBIT_S, Cluster, Node
from frenzy_core.errors import SpecError
from frenzy_core.limits import (
    MAX_ADDED_GPUS,
    MAX_CANDIDATES,
    MAX_GPUS_PER_ADDITION,
    MAX_GPUS_PER_NODE,
    MAX_NAME_CHARS,
    MAX_NODES,
    MAX_SEARCH_MIXES,
    MAX_TOTAL_GPUS,
    short_repr,
)
from frenzy_core.metrics import MIN_CI_SEEDS
from frenzy_core.models import ZOO
from frenzy_core.simulate import SimOptions
from frenzy_core.sweep import Grid, Progress, SweepTable, run_sweep
from frenzy_core.systems import SYSTEMS
from frenzy_core.tco import PRICING, TCO, CostModel, tco
from frenzy_core.traces import Trace, TraceJob

DEFAULT_GPUS_PER_NODE = 8  # the standard 8-GPU HGX / OVX server shape
TODAY = "today"  # the label of the current cluster in a candidate set (reserved: no candidate may take it)
DEFAULT_SEEDS = 5  # seeds per candidate: with 2 the 95% t-interval is mean +- 12.7 standard errors (t_0.975,1)
DEFAULT_POLICY = "frenzy-eft"
DEFAULT_BUDGET_PER_HOUR = 100.0  # US$ per hour for the additions
SIGNIFICANCE_LEVEL = 0.05  # Welch t-test threshold for "a lower average JCT that is not chance"
WEEK_S = 7 * 86400.0


@dataclass(frozen=True)
class Candidate:
    """One purchase option: `count` more GPUs of `gpu_type`. Field names are the GPU-mix table's columns."""

    candidate: str  # label on the frontier plot; rows with the same label add up into one option
    gpu_type: str  # catalog (or cluster-defined) GPU type name
    count: int  # GPUs to add
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE  # shape of the new nodes (the last one takes the remainder)
    # the new nodes' network, Gbit/s per node; None: that of the cluster's nodes of the type (else 100 Gbit/s).
    # `--add dgx-h100:2` sets it from the system (frenzy_core.systems)
    network_gbit_s: float | None = None


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
    if isinstance(value, int):
        return value  # exact: float() would round 10**20 + 1
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(field, f"{what} must be a whole number, got {short_repr(value)}") from None
    if not math.isfinite(number) or number != int(number):
        raise SpecError(field, f"{what} must be a whole number, got {short_repr(value)}")
    return int(number)


def _check_addition(cluster: Cluster, gpu_type: str, count: int, gpus_per_node: int) -> None:
    """The checks of one addition (fields `count`, `gpus_per_node`, `gpu_type`), before any node is made."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise SpecError("count", f"GPUs to add must be a whole number >= 0, got {short_repr(count)}")
    if count > MAX_GPUS_PER_ADDITION:
        raise SpecError("count", f"{count:,} GPUs is over the limit of {MAX_GPUS_PER_ADDITION:,} in one addition (the "
                        "largest clusters have ~10^5 GPUs); add fewer")
    if not isinstance(gpus_per_node, int) or isinstance(gpus_per_node, bool) or not \
            0 < gpus_per_node <= MAX_GPUS_PER_NODE:
        raise SpecError("gpus_per_node", f"must be a whole number from 1 to {MAX_GPUS_PER_NODE:,}, got "
                        f"{short_repr(gpus_per_node)}; use a server's GPUs, e.g. 8")
    if gpu_type not in cluster.type_table:
        raise SpecError("gpu_type", f"unknown GPU type {short_repr(gpu_type)}; choose one of: "
                        f"{', '.join(cluster.type_table)}")


def _new_nodes(gpu_type: str, count: int, gpus_per_node: int, network_gbit_s: float, taken: set[str],
               next_index: dict[str, int]) -> list[Node]:
    """`count` GPUs in nodes of `gpus_per_node` (the last takes the remainder), named `<type>-new-<i>` with the
    lowest free i. `taken` (the names in use) and `next_index` (per name stem, every index below it is taken) are
    updated, so a series of additions to one cluster costs its new nodes, not the cluster's size each time."""
    stem = f"{_slug(gpu_type)[:MAX_NAME_CHARS - len('-new-') - 7]}-new-"  # 7 digits: any index a cluster can have
    i = next_index.get(stem, 0)
    new: list[Node] = []
    for k in range(math.ceil(count / gpus_per_node)):
        while f"{stem}{i}" in taken:
            i += 1
        taken.add(f"{stem}{i}")
        new.append(Node(name=f"{stem}{i}", gpu_type=gpu_type, num_gpus=min(gpus_per_node, count - k * gpus_per_node),
                        network_gbit_s=network_gbit_s))
    next_index[stem] = i
    return new


def _check_node_count(nodes: int) -> None:
    if nodes > MAX_NODES:
        raise SpecError("count", f"the cluster would have {nodes:,} nodes, over the limit of {MAX_NODES:,}; add fewer "
                        "GPUs or put more in each node (gpus_per_node)")


def _grown(cluster: Cluster, new: Sequence[Node]) -> Cluster:
    """`cluster` with `new` nodes appended, its node and GPU limits checked first (SpecError, field `count`)."""
    _check_node_count(len(cluster.nodes) + len(new))
    gpus = cluster.total_gpus + sum(n.num_gpus for n in new)
    if gpus > MAX_TOTAL_GPUS:
        raise SpecError("count", f"the cluster would have {gpus:,} GPUs, over the limit of {MAX_TOTAL_GPUS:,}; add "
                        "fewer")
    # A new Cluster, not `cluster.model_copy(update=...)`: model_copy copies __dict__, and with it the input's cached
    # `type_summary` (per-type GPU totals), so the copy would report today's GPU counts to the mapping and the
    # policies. That made the GPU-mix page (which reads today's totals first) disagree with a direct simulation
    # (issue 11: +24 A100-80GB 1.23 h on the page vs 1.87 h).
    return Cluster(name=cluster.name, description=cluster.description, gpu_types=cluster.gpu_types,
                   nodes=cluster.nodes + tuple(new))


def _first_networks(cluster: Cluster) -> dict[str, float]:
    """GPU type -> the network link of its first node: what new nodes of that type copy."""
    out: dict[str, float] = {}
    for n in cluster.nodes:
        out.setdefault(n.gpu_type, n.network_gbit_s)
    return out


def build_candidates(base: Cluster, rows: Iterable[Mapping[str, Any]]) -> dict[str, Cluster]:
    """label -> cluster: `TODAY` (the base cluster) first, then one cluster per candidate label.

    `rows` are `Candidate`-shaped mappings (the page's table records). Rows with the same label add up (as
    `add_gpus` applied row after row; each label's cluster is built once); a row whose label and GPU type are both
    empty is skipped (the table keeps one while the user types). A bad row raises SpecError naming the row or the
    candidate and the column, e.g. ``+16 H100.count``; so do more than MAX_CANDIDATES labels, more than
    MAX_GPUS_PER_ADDITION GPUs in one row and more than MAX_ADDED_GPUS over all rows.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> base = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8}]")
    >>> rows = [{"candidate": "+8 L40S", "gpu_type": "L40S", "count": 8.0, "gpus_per_node": None}]
    >>> {label: c.total_gpus for label, c in build_candidates(base, rows).items()}
    {'today': 8, '+8 L40S': 16}
    """
    network = _first_networks(base)
    base_names = frozenset(n.name for n in base.nodes)
    additions: dict[str, tuple[set[str], dict[str, int], list[Node]]] = {}  # label -> (taken, next index, new)
    total = 0
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
            _check_addition(base, str(gpu_type), count, per_node)
        except SpecError as err:
            raise SpecError(f"{label}.{err.field}", err.reason) from None
        if label not in additions and 1 + len(additions) >= MAX_CANDIDATES:  # today is one of them
            raise SpecError(f"{label}.candidate", f"over the limit of {MAX_CANDIDATES:,} candidates, today "
                            "included (each is simulated over every seed); compare fewer (--add)")
        total += count
        if total > MAX_ADDED_GPUS:
            raise SpecError(f"{label}.count", f"the candidates add {total:,} GPUs in all, over the limit of "
                            f"{MAX_ADDED_GPUS:,}; add fewer GPUs or compare fewer candidates (--add)")
        if label not in additions:
            additions[label] = (set(base_names), {}, [])
        taken, next_index, new = additions[label]
        try:  # refused before the nodes are made
            _check_node_count(len(base.nodes) + len(new) + math.ceil(count / per_node))
        except SpecError as err:
            raise SpecError(f"{label}.{err.field}", err.reason) from None
        link = row.get("network_gbit_s")
        if _missing(link):
            link = network.get(str(gpu_type), DEFAULT_NETWORK_GBIT_S)
        elif isinstance(link, bool) or not isinstance(link, (int, float)) or not 0 < link < math.inf:
            raise SpecError(f"{label}.network_gbit_s", f"must be a positive number of Gbit/s per node, got "
                            f"{short_repr(link)} (or leave it empty: the type's nodes' network)")
        new += _new_nodes(str(gpu_type), count, per_node, float(link), taken, next_index)
    out: dict[str, Cluster] = {TODAY: base}
    for label, (_, _, new) in additions.items():
        try:
            out[label] = _grown(base, new) if new else base
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
    _check_addition(cluster, gpu_type, count, gpus_per_node)
    if count == 0:
        return cluster
    network = _first_networks(cluster).get(gpu_type, DEFAULT_NETWORK_GBIT_S)
    return _grown(cluster, _new_nodes(gpu_type, count, gpus_per_node, network, {n.name for n in cluster.nodes}, {}))


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


# --- a workload from the user's own jobs -----------------------------------------------------------------------------
@dataclass(frozen=True)
class WeeklyJob:
    """One kind of training run the user repeats: `runs_per_week` runs of `model`, each `hours` long on `gpus` GPUs
    of `gpu_type` (that calibrates its tokens, as a trace's duration does)."""

    model: str  # zoo name
    runs_per_week: float  # mean arrivals per week (Poisson)
    gpus: int  # GPUs one run asks for (what fcfs and sia start from; frenzy picks its own)
    hours: float  # one run's length on `gpus` x `gpu_type`
    gpu_type: str | None = None  # None: the reference type of today's cluster (most GPUs)


@dataclass(frozen=True)
class WeeklyJobs:
    """The user's jobs as a workload: each kind arrives as a Poisson process over `weeks` weeks, drawn per seed, so
    seeds vary the arrival pattern (and the CI says how much that matters)."""

    jobs: tuple[WeeklyJob, ...]
    weeks: float = 4.0

    def __post_init__(self) -> None:
        if not self.jobs:
            raise SpecError("jobs", "add at least one job, e.g. llama-2-7b:3:16:12 (model:runs per week:GPUs:hours)")
        if not (isinstance(self.weeks, int | float) and math.isfinite(self.weeks) and 0 < self.weeks <= 520):
            raise SpecError("weeks", f"must be a number of weeks in (0, 520], got {self.weeks!r}")
        for i, j in enumerate(self.jobs, start=1):
            where = f"job {i}"
            if j.model not in ZOO:
                raise SpecError(f"{where}.model", f"unknown model {j.model!r}; choose one of: {', '.join(ZOO)}")
            if not (isinstance(j.runs_per_week, int | float) and math.isfinite(j.runs_per_week)
                    and 0 < j.runs_per_week <= 10_000):
                raise SpecError(f"{where}.runs_per_week", f"must be in (0, 10000], got {j.runs_per_week!r}")
            if isinstance(j.gpus, bool) or not isinstance(j.gpus, int) or not 1 <= j.gpus <= 100_000:
                raise SpecError(f"{where}.gpus", f"must be a whole number in [1, 100000], got {j.gpus!r}")
            if not (isinstance(j.hours, int | float) and math.isfinite(j.hours) and 0 < j.hours <= 24 * 365):
                raise SpecError(f"{where}.hours", f"must be in (0, 8760] hours, got {j.hours!r}")

    def trace_for(self, seed: int) -> Trace:
        """The jobs that arrive in `weeks` weeks with this seed (deterministic per seed).

        >>> w = WeeklyJobs((WeeklyJob("gpt2", 7.0, 1, 2.0),), weeks=1.0)
        >>> t = w.trace_for(0); t == w.trace_for(0), all(j.model == "gpt2" for j in t.jobs)
        (True, True)
        """
        rng = np.random.default_rng(seed)
        horizon = self.weeks * WEEK_S
        out: list[TraceJob] = []
        for k, j in enumerate(self.jobs):
            mean_gap = WEEK_S / j.runs_per_week
            t = float(rng.exponential(mean_gap))
            n = 0
            while t < horizon:
                out.append(TraceJob(job_id=f"{j.model}-{k}-{n}", arrival_s=t, num_gpus=j.gpus,
                                    duration_s=j.hours * 3600.0, gpu_type=j.gpu_type, model=j.model))
                n += 1
                t += float(rng.exponential(mean_gap))
        out.sort(key=lambda tj: (tj.arrival_s, tj.job_id))
        if not out:
            raise SpecError("weeks", f"no job arrives in {self.weeks:g} weeks with seed {seed}; raise weeks or runs "
                            "per week")
        return Trace(jobs=tuple(out), source=self.describe(), format="weekly")

    def describe(self) -> str:
        kinds = ", ".join(f"{j.runs_per_week:g}/week {j.model} on {j.gpus} GPUs for {j.hours:g} h" for j in self.jobs)
        return f"my jobs ({kinds}; {self.weeks:g} weeks)"


def parse_weekly_job(text: str) -> WeeklyJob:
    """`MODEL:RUNS_PER_WEEK:GPUS:HOURS[:GPU_TYPE]` (the CLI's --job), e.g. ``llama-2-7b:3:16:12:A100-80GB``."""
    parts = [p.strip() for p in text.split(":")]
    if len(parts) not in (4, 5):
        raise SpecError("job", f"expected MODEL:RUNS_PER_WEEK:GPUS:HOURS[:GPU_TYPE], got {text!r}")
    try:
        runs, gpus, hours = float(parts[1]), int(parts[2]), float(parts[3])
    except ValueError:
        raise SpecError("job", f"runs per week and hours must be numbers and GPUs a whole number, got {text!r}") \
            from None
    return WeeklyJob(parts[0], runs, gpus, hours, parts[4] if len(parts) == 5 else None)


# --- candidates from the command line and from a budget -------------------------------------------------------------
def parse_addition(text: str) -> list[dict[str, Any]]:
    """`--add` value -> candidate rows: ``TYPE:N`` (label ``+N TYPE``), or ``LABEL=TYPE:N,TYPE:N`` for a mix; a
    catalog system (frenzy_core.systems) instead of a type counts whole systems: ``dgx-h100:2`` is 2 nodes of 8
    H100-80GB with the system's network (label ``+2 dgx-h100``).

    >>> [(r["candidate"], r["gpu_type"], r["count"]) for r in parse_addition("mix=L40S:8,H100-80GB:8")]
    [('mix', 'L40S', 8), ('mix', 'H100-80GB', 8)]
    >>> parse_addition("A100-80GB:24")[0]["candidate"]
    '+24 A100-80GB'
    >>> [(r["candidate"], r["gpu_type"], r["count"], r["gpus_per_node"], r["network_gbit_s"])
    ...  for r in parse_addition("dgx-h100:2")]
    [('+2 dgx-h100', 'H100-80GB', 16, 8, 3200.0)]
    """
    label, _, spec = text.rpartition("=")
    rows, names = [], []
    for part in spec.split(","):
        gpu_type, sep, count = part.strip().rpartition(":")
        if not sep or not gpu_type:
            raise SpecError("add", f"expected TYPE:N or LABEL=TYPE:N,TYPE:N, got {short_repr(text)}")
        n = _addition_count(count.strip(), gpu_type, text)
        names.append(f"+{n} {gpu_type}")
        system = SYSTEMS.get(gpu_type)
        if system is None:
            rows.append({"gpu_type": gpu_type, "count": n, "gpus_per_node": DEFAULT_GPUS_PER_NODE,
                         "network_gbit_s": None})
            continue
        gpus = n * system.gpus_per_node
        if gpus > MAX_GPUS_PER_ADDITION:
            raise SpecError("add", f"{n:,} x {system.name} is {gpus:,} GPUs, over the limit of "
                            f"{MAX_GPUS_PER_ADDITION:,} per --add entry; add fewer systems")
        rows.append({"gpu_type": system.gpu_type, "count": gpus, "gpus_per_node": system.gpus_per_node,
                     "network_gbit_s": system.network_gbit_s})
    name = label.strip() or " ".join(names)
    return [{"candidate": name, **r} for r in rows]


def _addition_count(count: str, gpu_type: str, text: str) -> int:
    """The N of an --add TYPE:N: a whole number (``24``, ``1e3``) of at most MAX_GPUS_PER_ADDITION."""
    if count.isdigit() and len(count) > len(str(MAX_GPUS_PER_ADDITION)):  # int() refuses past 4,300 digits
        n = MAX_GPUS_PER_ADDITION + 1
    else:
        try:
            n = int(count)
        except ValueError:
            try:
                x = float(count)
            except ValueError:
                x = math.nan
            if math.isnan(x) or (math.isfinite(x) and x != int(x)):
                raise SpecError("add", f"the GPU count must be a whole number, got {short_repr(count)} in "
                                f"{short_repr(text)}") from None
            n = MAX_GPUS_PER_ADDITION + 1 if math.isinf(x) or x > MAX_GPUS_PER_ADDITION else int(x)
    if n > MAX_GPUS_PER_ADDITION:
        raise SpecError("add", f"{short_repr(count, 24)} GPUs of {short_repr(gpu_type)} is over the limit of "
                        f"{MAX_GPUS_PER_ADDITION:,} per --add entry (the largest clusters have ~10^5 GPUs); add "
                        f"fewer, e.g. {gpu_type if len(gpu_type) <= 40 else 'TYPE'}:1024")
    return n


def search_mixes(base: Cluster, gpu_types: Sequence[str], budget_per_hour: float, costs: CostModel | None = None,
                 pricing: str = "rental", step: int = DEFAULT_GPUS_PER_NODE,
                 max_candidates: int = 8) -> list[dict[str, Any]]:
    """Candidate rows for the mixes of `gpu_types` (in whole `step`s, e.g. 8-GPU servers) that fit the budget and
    leave no room for one more step of any type (every other mix within budget has fewer GPUs of every type than one
    of these). Most expensive first (they use the most of the budget), at most `max_candidates`. A greedy policy can
    get slower with more GPUs, so a smaller purchase is worth typing in by hand too.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> c = parse_cluster_yaml("nodes: [{name: a, gpu_type: L40S, num_gpus: 8}]")
    >>> [r["candidate"] for r in search_mixes(c, ["L40S"], 20.0)]  # L40S at $1/h: two 8-GPU servers fit
    ['+16 L40S']
    """
    m = costs or CostModel()
    if not gpu_types:
        raise SpecError("search", "name at least one GPU type to search over")
    if not (math.isfinite(budget_per_hour) and budget_per_hour > 0):
        raise SpecError("budget", f"a search needs a budget > 0 $/h, got {budget_per_hour!r}")
    if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= MAX_GPUS_PER_NODE:
        raise SpecError("step", f"must be a whole number from 1 to {MAX_GPUS_PER_NODE:,} (GPUs in one server, the "
                        f"shape of the new nodes), got {short_repr(step)}; use a server's GPUs, e.g. 8")
    if isinstance(max_candidates, bool) or not isinstance(max_candidates, int) or \
            not 1 <= max_candidates <= MAX_CANDIDATES:
        raise SpecError("max_candidates", f"must be a whole number from 1 to {MAX_CANDIDATES:,} (mixes the search "
                        f"keeps), got {short_repr(max_candidates)}; keep fewer, e.g. 8")
    if len(set(gpu_types)) != len(gpu_types):
        raise SpecError("search", f"GPU types must be distinct, got {list(gpu_types)}")
    unit = []
    for t in gpu_types:
        if t not in base.type_table:
            raise SpecError("search", f"unknown GPU type {t!r}; choose from: {', '.join(base.type_table)}")
        unit.append(tco({t: step}, base, m).per_hour(pricing))
    if any(u <= 0 for u in unit):
        raise SpecError("search", "every searched GPU type needs a price > 0 (a free GPU makes the search unbounded)")
    limits = [int(budget_per_hour // u) for u in unit]
    mixes = math.prod(k + 1 for k in limits)
    if mixes > MAX_SEARCH_MIXES:
        size = f"{mixes:,}" if mixes < 10**15 else f"about 10^{len(str(mixes)) - 1}"
        raise SpecError("search", f"{size} mixes to try is over the limit of {MAX_SEARCH_MIXES:,}; lower the budget "
                        "(--budget), raise the step (--step) or search fewer GPU types")
    found = []
    for steps in itertools.product(*(range(k + 1) for k in limits)):
        cost = sum(s * u for s, u in zip(steps, unit, strict=True))
        if not any(steps) or cost > budget_per_hour + 1e-9:
            continue
        if all(cost + u > budget_per_hour + 1e-9 for u in unit):  # maximal: no room for one more step
            found.append((cost, steps))
    found.sort(key=lambda cs: (-cs[0], cs[1]))
    rows = []
    for _, steps in found[:max_candidates]:
        parts = [(t, s * step) for t, s in zip(gpu_types, steps, strict=True) if s]
        label = " ".join(f"+{n} {t}" for t, n in parts)
        rows += [{"candidate": label, "gpu_type": t, "count": n, "gpus_per_node": step} for t, n in parts]
    return rows


# --- the verdict ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CandidateResult:
    """One candidate of a what-if: its JCT over seeds, what it costs, and how it compares."""

    candidate: str
    gpus: int  # GPUs in the candidate cluster
    added_gpus: dict[str, int]  # type -> GPUs added to today's cluster
    avg_jct_s: float  # mean over seeds of the run's average JCT (completed jobs)
    ci_low_s: float  # 95% t-interval over seeds (NaN with one seed)
    ci_high_s: float
    samples_s: tuple[float, ...]  # the per-seed average JCTs
    p99_jct_s: float  # means over seeds
    avg_queue_s: float
    avg_utilisation: float
    completed: float
    jobs: float
    oom_failures: float
    workload_fallbacks: float  # jobs whose model did not fit its GPUs and took a smaller one (user jobs: say so)
    cost_per_hour: float  # the whole candidate cluster at the chosen pricing
    added_cost_per_hour: float  # the additions at the chosen pricing: what the budget limits
    tco: TCO  # of the additions
    within_budget: bool
    on_frontier: bool
    why: str = ""  # where its JCT differs from buying nothing: queueing or running (`explain`)

    @property
    def avg_run_s(self) -> float:
        """Mean time from start to finish of the completed jobs (startup, restarts and running): average JCT less
        the average queueing delay, both over the same completed jobs (simulate.job_columns)."""
        return self.avg_jct_s - self.avg_queue_s

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "tco"}
        out["avg_run_s"] = self.avg_run_s
        out["samples_s"] = list(self.samples_s)
        out["tco"] = self.tco.as_dict()
        return out


@dataclass(frozen=True)
class Comparison:
    """Is `best` really faster than `other`? Welch's t-test on the per-seed average JCTs, and CI overlap."""

    best: str
    other: str
    p_value: float  # two-sided Welch t-test (NaN with fewer than 2 seeds each)
    ci_overlap: bool
    significant: bool  # p < SIGNIFICANCE_LEVEL

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class WhatIf:
    """A what-if's answer: one row per candidate (today first), the best within budget and how sure that is."""

    candidates: tuple[CandidateResult, ...]
    best_within_budget: str | None
    comparisons: tuple[Comparison, ...]  # best vs each other candidate within budget
    message: str  # the verdict in one sentence, including "not significant" when it is not
    significant: bool  # the best's lead over every other candidate within budget is significant
    policy: str
    workload: str
    seeds: tuple[int, ...]
    budget_per_hour: float
    pricing: str
    wall_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def row(self, label: str) -> CandidateResult:
        return next(c for c in self.candidates if c.candidate == label)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of `frenzy whatif --json` (NaN becomes null there)."""
        return {"candidates": [c.as_dict() for c in self.candidates], "best_within_budget": self.best_within_budget,
                "significant": self.significant, "message": self.message,
                "comparisons": [c.as_dict() for c in self.comparisons], "policy": self.policy,
                "workload": self.workload, "seeds": list(self.seeds), "budget_per_hour": self.budget_per_hour,
                "pricing": self.pricing, "wall_s": self.wall_s, "notes": list(self.notes)}


def added_gpus(base: Cluster, cluster: Cluster) -> dict[str, int]:
    """GPUs per type that `cluster` has beyond `base` (types it has fewer of are left out)."""
    now = base.gpus_by_type()
    return {t: n - now.get(t, 0) for t, n in cluster.gpus_by_type().items() if n > now.get(t, 0)}


def _constant(x: np.ndarray) -> bool:
    """All seeds agree up to float rounding (a t-test on such samples only measures rounding noise)."""
    return bool(np.ptp(x) <= 1e-9 * max(abs(float(x.mean())), 1.0))


def compare(best: str, best_samples: Sequence[float], other: str, other_samples: Sequence[float],
            best_ci: tuple[float, float], other_ci: tuple[float, float]) -> Comparison:
    """Welch's t-test (unequal variances, `scipy.stats.ttest_ind(equal_var=False)`) and whether the CIs overlap.

    >>> compare("a", [1.0, 1.1, 0.9], "b", [5.0, 5.2, 4.8], (0.75, 1.25), (4.5, 5.5)).significant
    True
    >>> compare("a", [1.0, 3.0, 2.0], "b", [2.0, 2.5, 1.5], (0.0, 4.5), (0.9, 3.1)).significant
    False
    """
    a, b = np.asarray(best_samples, dtype=float), np.asarray(other_samples, dtype=float)
    if a.size < 2 or b.size < 2:
        p = math.nan
    elif _constant(a) and _constant(b):  # deterministic runs (equal up to rounding): any difference is real
        p = 0.0 if not math.isclose(a.mean(), b.mean(), rel_tol=1e-9) else 1.0
    else:
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    lo1, hi1 = best_ci
    lo2, hi2 = other_ci
    overlap = bool(not (math.isfinite(lo1) and math.isfinite(lo2)) or (lo1 <= hi2 and lo2 <= hi1))
    return Comparison(best, other, p, overlap, bool(math.isfinite(p) and p < SIGNIFICANCE_LEVEL))


def verdict(table: SweepTable, base: Cluster, candidates: Mapping[str, Cluster], budget_per_hour: float,
            pricing: str = "rental", costs: CostModel | None = None) -> WhatIf:
    """Read a one-policy, one-workload sweep table into the what-if answer (pure; `run_whatif` runs the sweep)."""
    if pricing not in PRICING:
        raise SpecError("pricing", f"unknown pricing {pricing!r}; choose one of: {', '.join(PRICING)}")
    if not (isinstance(budget_per_hour, int | float) and math.isfinite(budget_per_hour) and budget_per_hour >= 0):
        raise SpecError("budget", f"must be a number >= 0 ($ per hour for the additions), got {budget_per_hour!r}")
    m = costs or CostModel()
    groups = {(w, p) for w, _, p in table.samples()}
    if len(groups) != 1:
        raise SpecError("policies", "a what-if compares candidates on one workload and one policy; use a sweep for "
                        "more")
    (workload, policy), = groups
    jct = {c: (row["avg_jct_s"], row["avg_jct_s_ci_low"], row["avg_jct_s_ci_high"])
           for row in table.aggregate("avg_jct_s") for c in [row["candidate"]]}
    samples = {c: v for (_, c, _), v in table.samples("avg_jct_s").items()}
    means = {key: {c: float(np.mean(v)) for (_, c, _), v in table.samples(key).items()}
             for key in ("p99_jct_s", "avg_queue_s", "avg_utilisation", "completed", "jobs", "oom_failures",
                         "workload_fallbacks")}
    rows = []
    for label, cl in candidates.items():
        add = added_gpus(base, cl)
        add_tco = tco(add, base, m)
        mean, lo, hi = jct[label]
        rows.append(dict(candidate=label, gpus=cl.total_gpus, added_gpus=add, avg_jct_s=mean, ci_low_s=lo,
                         ci_high_s=hi, samples_s=samples[label],
                         **{k: means[k][label] for k in means},
                         cost_per_hour=tco(cl.gpus_by_type(), cl, m).per_hour(pricing),
                         added_cost_per_hour=add_tco.per_hour(pricing), tco=add_tco,
                         within_budget=add_tco.per_hour(pricing) <= budget_per_hour + 1e-9))
    front = pareto_front([r["cost_per_hour"] for r in rows],
                         [r["avg_jct_s"] if math.isfinite(r["avg_jct_s"]) else math.inf for r in rows])
    results = tuple(CandidateResult(**r, on_frontier=f) for r, f in zip(rows, front, strict=True))
    today = next((r for r in results if r.candidate == TODAY), None)
    if today is not None:
        results = tuple(replace(r, why=explain(r, today)) for r in results)
    ok = [r for r in results if r.within_budget and math.isfinite(r.avg_jct_s)]
    best = min(ok, key=lambda r: (r.avg_jct_s, r.added_cost_per_hour)) if ok else None
    comps = tuple(compare(best.candidate, best.samples_s, r.candidate, r.samples_s, (best.ci_low_s, best.ci_high_s),
                          (r.ci_low_s, r.ci_high_s)) for r in ok if best is not None and r is not best)
    n_seeds = len(table.samples().get((workload, best.candidate, policy), ())) if best is not None else 0
    # a lead with too few seeds for an interval is not called significant, whatever one t-test says (MIN_CI_SEEDS)
    significant = bool(best is not None and all(c.significant for c in comps) and (not comps or n_seeds >= MIN_CI_SEEDS))
    notes = tuple(f"{r.candidate}: {r.workload_fallbacks:g} job(s) per seed took a smaller model than asked (it "
                  "did not fit its GPUs)" for r in results if r.workload_fallbacks)
    return WhatIf(candidates=results, best_within_budget=best.candidate if best else None, comparisons=comps,
                  message=_message(best, comps, n_seeds, budget_per_hour, pricing)
                  + (f" Why: {best.why}." if best is not None and best.why else ""),
                  significant=significant, policy=policy, workload=workload,
                  seeds=tuple(sorted({r["seed"] for r in table.rows})), budget_per_hour=float(budget_per_hour),
                  pricing=pricing, wall_s=table.wall_s, notes=notes)


BUSY_UTILISATION = 0.5  # below this average share of GPUs in use, extra GPUs rarely shorten a queue
SHORT_QUEUE_S = 360.0  # an average wait under 6 minutes: the queue is not what makes jobs slow


def explain(row: CandidateResult, today: CandidateResult) -> str:
    """Why a candidate's average JCT differs from buying nothing, split into its two parts over the same completed
    jobs: the wait before a job starts (more GPUs shorten the queue) and the time from start to finish (faster GPUs,
    or larger plans the extra GPUs allow, shorten it). Names which part dominates, and says when today's cluster is
    mostly idle, so that a gain can only come from speed."""
    if row.candidate == today.candidate:
        q, u = today.avg_queue_s, today.avg_utilisation
        idle = (f"; {u:.0%} of its GPUs are in use and jobs wait {q / 3600:.3f} h on average, so added GPUs can only "
                "help by running jobs faster" if u < BUSY_UTILISATION and q < SHORT_QUEUE_S else "")
        return f"buy nothing: today's cluster as it is{idle}"
    if not (math.isfinite(row.avg_jct_s) and math.isfinite(today.avg_jct_s)):
        return "no finished job to compare"
    d_jct = row.avg_jct_s - today.avg_jct_s
    d_queue = row.avg_queue_s - today.avg_queue_s
    d_run = row.avg_run_s - today.avg_run_s
    change = "faster" if d_jct < 0 else "slower"
    main = "queueing" if abs(d_queue) >= abs(d_run) else "running"
    return (f"{abs(d_jct) / 3600:.2f} h {change} on average than buying nothing "
            f"({today.avg_jct_s / 3600:.2f} -> {row.avg_jct_s / 3600:.2f} h): queueing {d_queue / 3600:+.2f} h, "
            f"running {d_run / 3600:+.2f} h; mostly {main}")


def _message(best: CandidateResult | None, comps: Sequence[Comparison], seeds: int, budget: float,
             pricing: str) -> str:
    if best is None:
        return f"No candidate fits the budget of ${budget:,.2f}/h ({pricing}) with a finished job."
    head = (f"Within ${budget:,.2f}/h ({pricing}), {best.candidate} gives the lowest average JCT: "
            f"{best.avg_jct_s / 3600:.2f} h at {best.added_cost_per_hour:+,.2f} $/h.")
    if not comps:
        return head + " It is the only candidate within the budget."
    if seeds < MIN_CI_SEEDS:
        return head + (f" Not significant: {seeds} seed{'s' * (seeds != 1)} give{'s' * (seeds == 1)} no interval; run "
                       f"at least {MIN_CI_SEEDS} ({DEFAULT_SEEDS} by default).")
    weak = [c for c in comps if not c.significant]
    if not weak:
        worst = max(comps, key=lambda c: c.p_value)
        return head + f" Its lead is significant (Welch t-test p <= {worst.p_value:.3g} against every other candidate " \
            f"within budget, {seeds} seeds)."
    names = ", ".join(f"{c.other} (p = {c.p_value:.2f}{', CIs overlap' if c.ci_overlap else ''})" for c in weak)
    return head + f" Not significant against {names}: with {seeds} seeds these may be equally fast; add seeds or " \
        "treat them as a tie."


def run_whatif(base: Cluster, candidates: Mapping[str, Cluster], workload: Any, *, workload_label: str = "workload",
               policy: str = DEFAULT_POLICY, seeds: Iterable[int] = range(DEFAULT_SEEDS),
               budget_per_hour: float = DEFAULT_BUDGET_PER_HOUR, pricing: str = "rental",
               costs: CostModel | None = None, options: SimOptions | None = None, backend: str = "local",
               workers: int | None = 1, address: str | None = None, progress: Progress | None = None) -> WhatIf:
    """Simulate every candidate (the output of `build_candidates`, today first) on `workload` (a Trace or
    `WeeklyJobs`) with `policy` over `seeds`, through `sweep.run_sweep`, and return the verdict. The page and
    `frenzy whatif` call this with the same arguments, so they show the same numbers."""
    if pricing not in PRICING:
        raise SpecError("pricing", f"unknown pricing {pricing!r}; choose one of: {', '.join(PRICING)}")
    grid = Grid.make(base, candidates, [policy], seeds, {workload_label: workload}, options)
    table = run_sweep(grid, backend=backend, workers=workers, address=address, progress=progress)
    return verdict(table, base, candidates, budget_per_hour, pricing, costs)
