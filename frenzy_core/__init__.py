"""Frenzy Planner's public API: start here (the CLI and the app's pages do).

    >>> import frenzy_core as fp
    >>> model, training = fp.ZOO["gpt2"], fp.TrainingSpec(seq_len=1024, global_batch=32, micro_batch=4)
    >>> fp.predict_memory(model, training, fp.Parallelism(dp=2)).total_bytes > 0
    True

Every name below is loaded on first use (PEP 562), so `import frenzy_core.limits` stays as cheap as that module.
Two functions share their module's name and so are reached through it: one simulation run is
`frenzy_core.simulate.simulate` (over seeds: `simulate_seeds`, here), one fixed split's numbers
`frenzy_core.estimate.estimate`.
"""

from __future__ import annotations

import importlib

# public name -> the module that defines it (one module per concept; see docs/)
_EXPORTS = {
    # inputs: models, GPUs, clusters, training setups, scenarios, traces
    "ModelSpec": "models", "ZOO": "models", "load_model_spec": "models", "load_hf_config": "models",
    "GPUType": "gpus", "CATALOG": "gpus",
    "Cluster": "cluster", "load_cluster": "cluster", "parse_cluster_yaml": "cluster", "bundled_clusters": "cluster",
    "TrainingSpec": "training", "Parallelism": "training", "check_parallelism": "training",
    "Scenario": "scenario", "load_scenario": "scenario", "parse_scenario_yaml": "scenario",
    "encode_share": "scenario", "decode_share": "scenario", "run_scenario": "scenario",
    "load_trace": "traces", "bundled_traces": "traces",
    # MARP: memory, step time, plans; HAS: placement; launch files
    "predict_memory": "memory", "step_time": "perf", "Estimate": "estimate", "rank_plans": "plans", "Plan": "plans",
    "place": "packing", "export_plan": "export",
    # evaluation: simulation, what-if
    "simulate_seeds": "simulate", "SimOptions": "simulate", "SimResult": "simulate",
    "run_whatif": "whatif", "REGISTRY": "policies",
    # bad input
    "SpecError": "errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'frenzy_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"frenzy_core.{module}"), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
