"""Total cost of ownership of GPUs: purchase price amortised over a life, power at TDP x PUE x electricity price,
and the rental price to compare with; every figure editable, every default with its source.

Per GPU and per hour (straight-line amortisation, every hour of the life at full power, the pessimistic case):

    amortised_usd_per_hour = purchase_usd / (life_years x HOURS_PER_YEAR)
    power_usd_per_hour     = tdp_w / 1000 x pue x usd_per_kwh
    owned_usd_per_hour     = amortised_usd_per_hour + power_usd_per_hour

The purchase price is the GPU's alone (board or SXM/OAM module); the server around it (CPUs, memory, NICs,
chassis), the network, staff and the building are left out, so owned cost is a floor: put a per-GPU share of a
server quote in `purchase_usd` to include them. Power counts the GPU's TDP only, scaled by PUE for cooling and
distribution. Rental defaults to the cluster's own price per GPU-hour (`gpus.CATALOG` or the cluster file).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from frenzy_core.cluster import Cluster
from frenzy_core.errors import SpecError

HOURS_PER_YEAR = 8760.0  # 365 x 24
PRICING = ("rental", "owned")  # what "cost per hour" means in a what-if

# Defaults of the cost model, each with its source.
DEFAULT_LIFE_YEARS = 5.0
LIFE_SOURCE = ("between the 4 years servers were long depreciated over and the 6 years Microsoft moved its server "
               "and network equipment to (FY2022 10-K)")
DEFAULT_PUE = 1.58
PUE_SOURCE = "Uptime Institute Global Data Center Survey 2023: industry average PUE 1.58"
DEFAULT_USD_PER_KWH = 0.127
KWH_SOURCE = "US EIA Electric Power Monthly, Table 5.3: 2023 average retail price to the commercial sector, ~12.7 c/kWh"


@dataclass(frozen=True)
class GPUCost:
    """What one GPU of a type costs to buy and to power, and where each figure comes from."""

    gpu_type: str  # catalog (or cluster-defined) GPU type name
    purchase_usd: float  # price of one GPU (module or card), not the server around it
    tdp_w: float  # board power / TDP, W
    purchase_source: str
    tdp_source: str
    rental_usd_per_hour: float | None = None  # None: the cluster's price for the type (gpus.CATALOG or its file)
    rental_source: str = "gpus.CATALOG price_per_hour_usd (its source field), or the cluster file's gpu_types"


_DS = "vendor datasheet"
# Per-GPU list/street prices and TDPs. Prices of data-centre parts are not published by the vendors; the figures are
# press-reported estimates (the range is in the source) and are meant to be overridden with a quote.
DEFAULT_GPU_COSTS: tuple[GPUCost, ...] = (
    GPUCost("H100-80GB", 27_500, 700,
            "midpoint of $25,000-30,000 per H100, Raymond James estimate reported by Barron's / TechSpot (Aug 2023)",
            f"NVIDIA H100 {_DS}: SXM5 up to 700 W"),
    GPUCost("H200-141GB", 35_000, 700,
            "midpoint of $30,000-40,000 per H200 in 2024 press reports of distributor pricing (estimate)",
            f"NVIDIA H200 {_DS}: SXM up to 700 W"),
    GPUCost("H100-96GB", 27_500, 500,
            "the H100-80GB's estimate: this 96 GB HBM2e part is not on public price lists (estimate, override it)",
            "torchtitan benchmarks/llama3_h100_202412_torchtitan.md: 'H100 96GB HBM2e, 500W' (the runs' own label)"),
    GPUCost("B200", 35_000, 1000,
            "midpoint of $30,000-40,000 per B200, NVIDIA CEO's range in a CNBC interview (Mar 2024) (estimate)",
            f"NVIDIA DGX B200 {_DS}: 14.3 kW for 8 GPUs, up to 1,000 W per B200 (estimate of the GPU's share)"),
    GPUCost("GB200", 40_000, 1200,
            "about $40,000 per Blackwell GPU of a GB200 NVL72 rack (press reports of ~$3M per 72-GPU rack, Grace "
            "CPUs included) (estimate)",
            f"NVIDIA GB200 NVL72 {_DS}: up to 1,200 W per Blackwell GPU (estimate of the GPU's share)"),
    GPUCost("A100-80GB", 15_000, 400,
            "about $15,000 per A100 80GB SXM module, 2023-2024 reseller listings (estimate)",
            f"NVIDIA A100 {_DS}: SXM4 400 W"),
    GPUCost("A100-40GB", 10_000, 400,
            "about $10,000 per A100, CNBC 'Meet the $10,000 Nvidia chip powering the race for A.I.' (Feb 2023)",
            f"NVIDIA A100 {_DS}: SXM4 400 W"),
    GPUCost("MI300X", 12_500, 750,
            "midpoint of $10,000-15,000 per MI300X, analyst estimates reported in the press (2024)",
            f"AMD Instinct MI300X {_DS}: 750 W peak board power (OAM)"),
    GPUCost("L40S", 8_000, 350,
            "about $7,500-9,000 per L40S card, 2024 reseller listings (estimate)",
            f"NVIDIA L40S {_DS}: 350 W max board power"),
    GPUCost("A10", 3_200, 150,
            "about $3,000-3,500 per A10 card, 2023-2024 reseller listings (estimate)",
            f"NVIDIA A10 {_DS}: 150 W"),
    GPUCost("RTX-4090", 1_599, 450,
            "NVIDIA launch MSRP $1,599 (Sep 2022)", "NVIDIA GeForce RTX 4090 specifications: 450 W total graphics power"),
    GPUCost("RTX-3090", 1_499, 350,
            "NVIDIA launch MSRP $1,499 (Sep 2020)", "NVIDIA GeForce RTX 3090 specifications: 350 W total graphics power"),
    GPUCost("RTX-2080Ti", 999, 250,
            "NVIDIA launch MSRP $999 (Founders Edition $1,199, Aug 2018)",
            "NVIDIA GeForce RTX 2080 Ti specifications: 250 W (260 W Founders Edition)"),
    GPUCost("V100-32GB", 10_000, 300,
            "about $10,000 per V100 32GB at its 2018-2019 list price (estimate; rarely bought new today)",
            f"NVIDIA V100 {_DS}: SXM2 300 W"),
    GPUCost("V100-16GB", 8_000, 300,
            "about $8,000 per V100 16GB at its 2017-2018 list price (estimate; rarely bought new today)",
            f"NVIDIA V100 {_DS}: SXM2 300 W"),
    GPUCost("P100-16GB", 5_700, 250,
            "about $5,700 per P100 PCIe 16GB at its 2016-2017 list price (estimate; rarely bought new today)",
            f"NVIDIA Tesla P100 {_DS}: PCIe 250 W"),
    GPUCost("T4", 2_300, 70,
            "about $2,000-2,500 per T4 card, reseller listings (estimate)", f"NVIDIA T4 {_DS}: 70 W"),
)


@dataclass(frozen=True)
class CostModel:
    """The editable inputs of TCO: life, PUE, electricity price and one `GPUCost` per type."""

    life_years: float = DEFAULT_LIFE_YEARS  # straight-line amortisation period
    pue: float = DEFAULT_PUE  # facility power / IT power
    usd_per_kwh: float = DEFAULT_USD_PER_KWH  # electricity price
    gpus: tuple[GPUCost, ...] = DEFAULT_GPU_COSTS
    _by_type: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, value, low in (("life_years", self.life_years, 0.0), ("pue", self.pue, 1.0),
                                 ("usd_per_kwh", self.usd_per_kwh, 0.0)):
            if not isinstance(value, int | float) or not math.isfinite(value) or value < low or \
                    (name == "life_years" and value == 0):
                bound = "> 0" if name == "life_years" else f">= {low:g}"
                raise SpecError(name, f"must be a finite number {bound}, got {value!r}")
        for g in self.gpus:
            for name in ("purchase_usd", "tdp_w") + (("rental_usd_per_hour",) if g.rental_usd_per_hour is not None
                                                     else ()):
                v = getattr(g, name)
                if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                    raise SpecError(f"{g.gpu_type}.{name}", f"must be a finite number >= 0, got {v!r}")
            self._by_type[g.gpu_type] = g

    def has(self, gpu_type: str) -> bool:
        return gpu_type in self._by_type

    def cost(self, gpu_type: str) -> GPUCost:
        got = self._by_type.get(gpu_type)
        if got is None:
            raise SpecError(f"{gpu_type}.purchase_usd", f"no purchase price or TDP for GPU type {gpu_type!r}; add "
                            "it to the cost table (purchase $ and TDP W)")
        return got

    def with_overrides(self, purchase_usd: Mapping[str, float] | None = None, tdp_w: Mapping[str, float] | None = None,
                       rental_usd_per_hour: Mapping[str, float] | None = None, **fields) -> CostModel:
        """A copy with some GPU figures (by type) and model fields replaced; new types need purchase and TDP.

        >>> m = CostModel().with_overrides(purchase_usd={"T4": 1000.0}, pue=1.2)
        >>> m.cost("T4").purchase_usd, m.pue, m.cost("T4").purchase_source
        (1000.0, 1.2, 'user')
        """
        table = {g.gpu_type: g for g in self.gpus}
        for what, values in (("purchase_usd", purchase_usd), ("tdp_w", tdp_w),
                             ("rental_usd_per_hour", rental_usd_per_hour)):
            for t, v in (values or {}).items():
                old = table.get(t)
                if old is None:
                    old = GPUCost(t, math.nan, math.nan, "", "")
                src = {"purchase_usd": "purchase_source", "tdp_w": "tdp_source",
                       "rental_usd_per_hour": "rental_source"}[what]
                table[t] = replace(old, **{what: float(v), src: "user"})
        for g in table.values():
            if math.isnan(g.purchase_usd) or math.isnan(g.tdp_w):
                raise SpecError(f"{g.gpu_type}.purchase_usd", "a GPU type not in the default table needs both a "
                                "purchase price and a TDP")
        return replace(self, gpus=tuple(table.values()), **fields)

    # --- per GPU, per hour -------------------------------------------------------------------------------------
    def amortised_usd_per_hour(self, gpu_type: str) -> float:
        return self.cost(gpu_type).purchase_usd / (self.life_years * HOURS_PER_YEAR)

    def power_usd_per_hour(self, gpu_type: str) -> float:
        return self.cost(gpu_type).tdp_w / 1000.0 * self.pue * self.usd_per_kwh

    def owned_usd_per_hour(self, gpu_type: str) -> float:
        """e.g. H100 with the defaults: 27,500 / (5 x 8760) + 0.7 kW x 1.58 x 0.127 $/kWh = 0.628 + 0.140 $/h."""
        return self.amortised_usd_per_hour(gpu_type) + self.power_usd_per_hour(gpu_type)

    def rental_usd_per_hour(self, gpu_type: str, cluster: Cluster) -> float:
        known = self._by_type.get(gpu_type)
        if known is not None and known.rental_usd_per_hour is not None:
            return float(known.rental_usd_per_hour)
        return float(cluster.gpu(gpu_type).price_per_hour_usd)


@dataclass(frozen=True)
class TCO:
    """What a set of GPUs (by type) costs: one-off, per hour owned (amortised + power) and per hour rented."""

    gpus: dict[str, int]  # GPU type -> count
    purchase_usd: float  # one-off
    amortised_usd_per_hour: float
    power_usd_per_hour: float
    owned_usd_per_hour: float  # amortised + power
    rental_usd_per_hour: float  # the same GPUs rented
    life_years: float
    tco_usd: float  # purchase + power over the life (= owned per hour x hours of the life)

    def per_hour(self, pricing: str) -> float:
        if pricing not in PRICING:
            raise SpecError("pricing", f"unknown pricing {pricing!r}; choose one of: {', '.join(PRICING)}")
        return self.owned_usd_per_hour if pricing == "owned" else self.rental_usd_per_hour

    def as_dict(self) -> dict:
        return {"gpus": dict(self.gpus), "purchase_usd": self.purchase_usd,
                "amortised_usd_per_hour": self.amortised_usd_per_hour, "power_usd_per_hour": self.power_usd_per_hour,
                "owned_usd_per_hour": self.owned_usd_per_hour, "rental_usd_per_hour": self.rental_usd_per_hour,
                "life_years": self.life_years, "tco_usd": self.tco_usd}


def tco(gpus: Mapping[str, int], cluster: Cluster, model: CostModel | None = None) -> TCO:
    """TCO of `gpus` (type -> count) with `model`'s figures; rental at `cluster`'s prices where not overridden.

    >>> from frenzy_core.cluster import parse_cluster_yaml
    >>> c = parse_cluster_yaml("nodes: [{name: a, gpu_type: T4, num_gpus: 2}]")
    >>> t = tco({"T4": 2}, c, CostModel(life_years=1.0, pue=1.0, usd_per_kwh=0.1))
    >>> round(t.purchase_usd), round(t.amortised_usd_per_hour, 4), round(t.power_usd_per_hour, 4)
    (4600, 0.5251, 0.014)
    """
    m = model or CostModel()
    purchase = amortised = power = rental = 0.0
    for t, n in gpus.items():
        if n == 0:
            continue
        rental += n * m.rental_usd_per_hour(t, cluster)
        if not m.has(t):  # a cluster-defined type with no purchase price: owned cost unknown, rental still known
            purchase = amortised = power = math.nan
            continue
        purchase += n * m.cost(t).purchase_usd
        amortised += n * m.amortised_usd_per_hour(t)
        power += n * m.power_usd_per_hour(t)
    owned = amortised + power
    return TCO(gpus={t: int(n) for t, n in gpus.items() if n}, purchase_usd=purchase,
               amortised_usd_per_hour=amortised, power_usd_per_hour=power, owned_usd_per_hour=owned,
               rental_usd_per_hour=rental, life_years=m.life_years,
               tco_usd=purchase + power * m.life_years * HOURS_PER_YEAR)
