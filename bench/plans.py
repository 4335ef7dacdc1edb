"""Benchmark: enumerate and rank every plan for one model across every catalog GPU type, up to 1,024 GPUs each.

Target (issue 3): under 20 ms. Prints the timing per model and, on the last line, a JSON object with `plans_ms`
(the median over repeats for the headline model, llama-3.1-8b, global batch 1,024) and the number of plans. The MoE
models (mixtral-8x7b, deepseek-v3) also enumerate every expert-parallel size (8 and 256 experts: 4 and 9 values of
ep), reported as `moe_plans_ms`; llama-3.1-8b at 131,072 tokens also tries every context-parallel size (cp 1 to 32),
reported as `long_context_plans_ms`; llama-2-70b under framework megatron also tries every interleaving vp and the
uneven first / last stages, reported as `megatron_interleaved_plans_ms`; DeepSeek-V3 (61 layers) and Llama-3.1-405B
(126 layers, built from its config.json: not in the zoo) under megatron, whose layers split evenly over few p, get
uneven stages for many more, reported as `megatron_uneven_plans_ms`.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from frenzy_core.cluster import Cluster, Node  # noqa: E402
from frenzy_core.gpus import CATALOG  # noqa: E402
from frenzy_core.models import ZOO, ModelSpec, model_from_hf_config  # noqa: E402
from frenzy_core.plans import rank_plans  # noqa: E402
from frenzy_core.training import TrainingSpec  # noqa: E402

GPUS_PER_TYPE = 1024
NODE_SIZE = 8
REPEATS = 30


def catalog_cluster() -> Cluster:
    nodes = [Node(name=f"{g}-{i}", gpu_type=g, num_gpus=NODE_SIZE) for g in CATALOG
             for i in range(GPUS_PER_TYPE // NODE_SIZE)]
    return Cluster(name="every-catalog-type-1024", nodes=tuple(nodes))


# meta-llama/Llama-3.1-405B config.json (Hugging Face Hub)
LLAMA_405B = model_from_hf_config({
    "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248, "num_attention_heads": 128,
    "num_hidden_layers": 126, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "hidden_act": "silu"}, name="llama-3.1-405b")


def time_model(name: str | ModelSpec, training: TrainingSpec, cluster: Cluster) -> tuple[float, int, int]:
    model = ZOO[name] if isinstance(name, str) else name
    if model.position_kind == "learned":  # GPT-2's position table bounds its sequence
        training = training.model_copy(update={"seq_len": min(training.seq_len, model.max_positions)})
    rank_plans(model, training, cluster)  # warm-up
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = rank_plans(model, training, cluster)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3, len(result), len(result.grid)


def main() -> None:
    cluster = catalog_cluster()
    training = TrainingSpec(seq_len=4096, global_batch=1024, micro_batch=1, precision="bf16-master")
    print(f"cluster: {len(CATALOG)} GPU types x {GPUS_PER_TYPE} GPUs ({cluster.total_gpus} GPUs)")
    print(f"{'model':16} {'median ms':>10} {'feasible':>9} {'enumerated':>11}")
    results = {}
    for name in ("gpt2", "llama-3.1-8b", "llama-2-70b", "qwen2.5-72b", "mixtral-8x7b", "deepseek-v3"):
        ms, feasible, grid = time_model(name, training, cluster)
        results[name] = (ms, feasible, grid)
        print(f"{name:16} {ms:>10.2f} {feasible:>9} {grid:>11}")
    long = training.model_copy(update={"seq_len": 131072, "global_batch": 64, "recompute": "full"})
    long_ms, long_feasible, long_grid = time_model("llama-3.1-8b", long, cluster)
    print(f"{'llama-3.1-8b 128k':16} {long_ms:>10.2f} {long_feasible:>9} {long_grid:>11}")
    megatron = training.model_copy(update={"framework": "megatron", "distributed_optimizer": True})
    mega_ms, mega_feasible, mega_grid = time_model("llama-2-70b", megatron, cluster)
    print(f"{'llama-2-70b mcore':16} {mega_ms:>10.2f} {mega_feasible:>9} {mega_grid:>11}")
    uneven = {}
    for label, model in (("deepseek-v3 mcore", ZOO["deepseek-v3"]), ("llama-405b mcore", LLAMA_405B)):
        uneven[label] = time_model(model, megatron, cluster)
        print(f"{label:16} {uneven[label][0]:>10.2f} {uneven[label][1]:>9} {uneven[label][2]:>11}")
    ms, feasible, grid = results["llama-3.1-8b"]
    print(json.dumps({"plans_ms": round(ms, 3), "plans_feasible": feasible, "plans_enumerated": grid,
                      "max_plans_ms_over_models": round(max(r[0] for r in results.values()), 3),
                      "moe_plans_ms": {n: round(results[n][0], 3) for n in ("mixtral-8x7b", "deepseek-v3")},
                      "long_context_plans_ms": round(long_ms, 3), "long_context_plans_feasible": long_feasible,
                      "megatron_interleaved_plans_ms": round(mega_ms, 3),
                      "megatron_uneven_plans_ms": {k: round(v[0], 3) for k, v in uneven.items()},
                      "gpu_types": len(CATALOG), "gpus_per_type": GPUS_PER_TYPE}))


if __name__ == "__main__":
    main()
