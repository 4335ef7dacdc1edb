"""Systems: the nodes vendors sell, so that a cluster file or `frenzy estimate` can name one instead of its links.

A system is a GPU type, how many of them share one NVLink domain (a node to the planner: tensor parallelism stays
inside it) and the node's compute-fabric network (every NIC of the node together, Gbit/s). The per-GPU link inside
the node is the GPU type's own figure (frenzy_core.gpus), since a system of that type is what that figure describes.

Sources (the compute fabric only; storage and management NICs are not counted):

* DGX A100: 8 single-port ConnectX-6 VPI HDR InfiniBand adapters, 200 Gb/s each (NVIDIA DGX A100 datasheet and user
  guide, "Network Connections");
* DGX H100 / DGX H200: "Four OSFP ports serving eight single-port NVIDIA ConnectX-7 VPI ... up to 400 Gb/s", and DGX
  B200: "4x OSFP ports serving 8x single-port NVIDIA ConnectX-7 VPI, up to 400Gb/s" (NVIDIA DGX BasePOD reference
  architecture, "Core Components", docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-foundation-
  enterprise-ai/latest/core-components.html);
* GB200 NVL72: 18 compute trays of 4 GPUs in one NVLink domain of 72 (NVIDIA multi-node NVLink tuning guide,
  docs.nvidia.com/multi-node-nvlink-systems/multi-node-tuning-guide/system.html, "The 72x1 Configuration"), each tray
  with ConnectX-7 for the compute fabric; one 400 Gb/s ConnectX-7 per GPU is assumed (the guide does not give the
  count): 72 x 400 Gb/s per rack.

>>> SYSTEMS["dgx-h100"].gpu_type, SYSTEMS["dgx-h100"].gpus_per_node, SYSTEMS["dgx-h100"].network_gbit_s
('H100-80GB', 8, 3200.0)
>>> SYSTEMS["gb200-nvl72"].gpus_per_node, SYSTEMS["gb200-nvl72"].network_gbit_s
(72, 28800.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from frenzy_core.errors import SpecError


@dataclass(frozen=True)
class System:
    """One vendor node (or rack: the NVLink domain) as the planner sees it."""

    name: str
    gpu_type: str  # a catalog type (frenzy_core.gpus.CATALOG)
    gpus_per_node: int  # GPUs in one NVLink domain
    network_gbit_s: float  # the node's compute-fabric NICs together
    describes: str  # the system in words, with its source
    assumed: bool = False  # a figure not stated by the source (said in `describes`)

    def node_fields(self) -> dict:
        """The cluster-file node fields this system stands for (frenzy_core.cluster.Node)."""
        return {"gpu_type": self.gpu_type, "num_gpus": self.gpus_per_node, "network_gbit_s": self.network_gbit_s}


def _dgx(name: str, gpu_type: str, nics: int, nic_gbit_s: float, describes: str) -> System:
    return System(name=name, gpu_type=gpu_type, gpus_per_node=8, network_gbit_s=float(nics * nic_gbit_s),
                  describes=describes)


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        _dgx("dgx-a100", "A100-80GB", 8, 200, "NVIDIA DGX A100: 8 x A100 80GB, 8 x 200 Gb/s HDR (ConnectX-6)"),
        _dgx("dgx-h100", "H100-80GB", 8, 400, "NVIDIA DGX H100: 8 x H100 80GB, 8 x 400 Gb/s (ConnectX-7)"),
        _dgx("dgx-h200", "H200-141GB", 8, 400, "NVIDIA DGX H200: 8 x H200 141GB, 8 x 400 Gb/s (ConnectX-7)"),
        _dgx("dgx-b200", "B200", 8, 400, "NVIDIA DGX B200: 8 x B200, 8 x 400 Gb/s (ConnectX-7)"),
        System(name="gb200-nvl72", gpu_type="GB200", gpus_per_node=72, network_gbit_s=72 * 400.0,
               describes="NVIDIA GB200 NVL72: 72 GPUs in one NVLink domain; 400 Gb/s per GPU to the compute fabric "
                         "(assumed: one ConnectX-7 per GPU)", assumed=True),
    )
}


def get_system(name: str) -> System:
    """The catalog system called `name`; a SpecError naming `system` and the choices otherwise."""
    try:
        return SYSTEMS[name]
    except (KeyError, TypeError):
        raise SpecError("system", f"unknown system {name!r}; choose one of: {', '.join(SYSTEMS)} (or give "
                                  f"gpu_type, num_gpus and network_gbit_s yourself)") from None
