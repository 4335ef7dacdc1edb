"""One fixed configuration in, its numbers out: what `frenzy estimate` prints.

A model, a training setup, a split (uneven pipeline stages included) and one GPU type with its links go through the
same two functions `frenzy plans` ranks with (`perf.step_time` over `perf._components`, `memory.predict_memory` over
`memory._evaluate`), so a plan's step time and memory equal this estimate of its split (tests/test_estimate.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from frenzy_core.cluster import DEFAULT_NETWORK_GBIT_S, Cluster
from frenzy_core.errors import SpecError
from frenzy_core.gpus import GPUType
from frenzy_core.limits import MAX_GPUS_PER_NODE, finite_float
from frenzy_core.memory import DEFAULT_OVERHEAD, MemoryBreakdown, OverheadSpec, predict_memory
from frenzy_core.models import ModelSpec
from frenzy_core.perf import StepTime, TimePart, step_time
from frenzy_core.plans import DEFAULT_SAFETY_MARGIN
from frenzy_core.training import Parallelism, TrainingSpec

DEFAULT_GPUS_PER_NODE = 8  # an HGX / DGX server: what perf.step_time assumes when nothing else is known


@dataclass(frozen=True)
class Estimate:
    """Step time, throughput and per-GPU memory of one split on one GPU type.

    `as_dict()` is the JSON of `frenzy estimate --json`, e.g. (gpt2, s 1024, B = b = 8, amp, one A100-40GB)
    {"step_time_s": 0.156, "tokens_per_s_per_gpu": 52518.2, "model_tflops_per_gpu": 41.94, "mfu": 0.134,
    "parts": [{"name": "compute", "exposed_s": 0.0327, "overlapped_s": 0.0}, ...], "allocated_bytes": 9510226432,
    "reserved_bytes": 9982382310, "per_stage_allocated_bytes": [9510226432], "fits": true}.
    """

    step_time_s: float  # seconds per optimizer step
    tokens_per_s_per_gpu: float  # global_batch x seq_len / step_time_s / N
    model_tflops_per_gpu: float  # model FLOPs (no recomputation) per second per GPU, in TFLOP/s
    mfu: float  # model_tflops_per_gpu / the GPU's peak TFLOP/s in the compute dtype (PaLM App. B)
    parts: tuple[TimePart, ...]  # every compute and communication term; exposed seconds sum to step_time_s
    allocated_bytes: int  # max_memory_allocated() on the most loaded GPU
    reserved_bytes: int  # max_memory_reserved(): allocated + the allocator's fragmentation
    per_stage_allocated_bytes: tuple[int, ...]  # allocated peak of each pipeline stage, first to last
    fits: bool  # total_bytes <= usable_bytes: the planner's feasibility test
    total_bytes: int  # what nvidia-smi shows (reserved + CUDA context + NCCL buffers): what `fits` compares
    usable_bytes: float  # GPU memory x (1 - safety margin)
    step: StepTime  # the whole step-time breakdown
    memory: MemoryBreakdown  # the whole memory breakdown

    def as_dict(self) -> dict:
        """The JSON keys of `frenzy estimate --json`, exactly these."""
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "parts": [part.as_dict() for part in self.parts],
            "allocated_bytes": self.allocated_bytes,
            "reserved_bytes": self.reserved_bytes,
            "per_stage_allocated_bytes": list(self.per_stage_allocated_bytes),
            "fits": self.fits,
        }


def estimate(
    model: ModelSpec,
    training: TrainingSpec,
    par: Parallelism,
    gpu: GPUType,
    *,
    num_gpus: int | None = None,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    intra_link_gbyte_s: float | None = None,
    network_gbit_s: float = DEFAULT_NETWORK_GBIT_S,
    method: str = "detailed",
    overhead: OverheadSpec = DEFAULT_OVERHEAD,
    safety_margin: float = DEFAULT_SAFETY_MARGIN,
) -> Estimate:
    """Estimate `par` (micro-batch: `training.micro_batch`) on GPUs of type `gpu`.

    `num_gpus`, when given, must equal d x t x p x cp. `intra_link_gbyte_s` is each GPU's link inside a node in GB/s
    (None: the type's, as a cluster node without `intra_link_gbyte_s`), `network_gbit_s` one node's NIC in Gbit/s
    (the cluster YAML's `network_gbit_s`). Raises SpecError naming the rule a bad split breaks.

    >>> from frenzy_core.gpus import CATALOG
    >>> from frenzy_core.models import ZOO
    >>> tr = TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8, precision="amp")
    >>> e = estimate(ZOO["gpt2"], tr, Parallelism(), CATALOG["A100-40GB"])
    >>> round(e.step_time_s, 4), e.fits, [p.name for p in e.parts][:3]
    (0.1642, True, ['compute', 'tp_comm', 'ep_comm'])
    """
    if num_gpus is not None and num_gpus != par.num_gpus:
        raise SpecError("gpus", f"d x t x p x cp = {par.dp} x {par.tp} x {par.pp} x {par.cp} = {par.num_gpus} GPUs, "
                                f"but {num_gpus} were given: make them equal (or leave --gpus out)")
    if not 0 < gpus_per_node <= MAX_GPUS_PER_NODE:
        raise SpecError("gpus_per_node", f"must be an integer from 1 to {MAX_GPUS_PER_NODE:,}, got {gpus_per_node}")
    if intra_link_gbyte_s is not None:
        intra_link_gbyte_s = finite_float(intra_link_gbyte_s, "intra_node_gbps", positive=True)
    network_gbit_s = finite_float(network_gbit_s, "inter_node_gbps", positive=True)
    if not 0.0 <= safety_margin < 1.0:
        raise SpecError("safety_margin", f"must be in [0, 1), got {safety_margin}")
    step = step_time(model, training, par, gpu, intra_link_gbyte_s=intra_link_gbyte_s, network_gbit_s=network_gbit_s,
                     gpus_per_node=gpus_per_node)
    memory = predict_memory(model, training, par, method=method, overhead=overhead)
    usable = gpu.memory_bytes * (1.0 - safety_margin)
    peak = gpu.peak_tflops(training.precision_setup.compute_dtype)
    return Estimate(
        step_time_s=step.step_time_s,
        tokens_per_s_per_gpu=step.tokens_per_s / step.num_gpus,
        model_tflops_per_gpu=step.model_tflops_per_gpu,
        mfu=step.model_tflops_per_gpu / peak,
        parts=step.parts(),
        allocated_bytes=memory.allocated_bytes,
        reserved_bytes=memory.reserved_bytes,
        per_stage_allocated_bytes=memory.per_stage_allocated_bytes,
        fits=bool(memory.total_bytes <= usable),
        total_bytes=memory.total_bytes,
        usable_bytes=usable,
        step=step,
        memory=memory,
    )


def cluster_links(cluster: Cluster, gpu_type: str) -> dict[str, float | int]:
    """The link keywords of `estimate` that `plans.rank_plans` uses for `gpu_type` on `cluster`: its largest node,
    its slowest intra-node link and its slowest NIC (`Cluster.type_summary`).

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> c = parse_cluster_yaml("nodes: [{name: n, gpu_type: A100-80GB, num_gpus: 4, network_gbit_s: 50}]")
    >>> cluster_links(c, "A100-80GB")
    {'gpus_per_node': 4, 'intra_link_gbyte_s': 300.0, 'network_gbit_s': 50.0}
    """
    summary = cluster.type_summary.get(gpu_type)
    if summary is None:
        raise SpecError("gpu_type", f"{gpu_type!r} is not in cluster {cluster.name!r}; it has "
                                    f"{', '.join(cluster.type_summary)}")
    return {"gpus_per_node": summary.max_gpus_per_node, "intra_link_gbyte_s": float(summary.min_intra_link_gbyte_s),
            "network_gbit_s": float(summary.min_network_gbit_s)}

