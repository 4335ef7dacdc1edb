"""How close is the step-time model (frenzy_core/perf.py) to published throughput of real LLM training runs?

    python bench/step_time_accuracy.py

Truth: bench/data/published_throughput.jsonl (its README: bench/data/published_throughput.md), one row per published
measured run with its exact configuration, from NVIDIA/NeMo, NVIDIA-NeMo/Megatron-Bridge, NVIDIA/Megatron-LM,
pytorch/torchtitan and mosaicml/llm-foundry, each with repo, path, commit and the verbatim table row.

Each row becomes a ModelSpec (the row's own hyperparameters, not the zoo), a TrainingSpec and a Parallelism, a GPU type
from frenzy_core.gpus.CATALOG and a node shape from a one-node Cluster through workload.node_shape (the rule `frenzy
plans` uses: GPUs per node, the node's intra-node link, its NIC); then perf.step_time, the function behind
DefaultEstimator.step_time_s and (vectorised, same _components) plans.rank_plans. Predicted tokens/s/GPU =
global_batch x seq_len / step_time_s / GPUs, against the published tokens/s/GPU (or the one derived from a published
TFLOP/s with the publisher's own FLOPs formula; the row says how).

Split, fixed in the data before anything was fitted: held_out = sha256(id) % 3 != 0, except rows whose source the
catalog constants were taken from (`calibration_source`: llm-foundry), which are never held out. Rows held neither
way ("fit" rows) are the pool a later calibration may use. Errors are signed, predicted / measured - 1.

Rows the planner cannot express are listed with the reason (flagged in the data: uneven pipeline stages, hybrid
Mamba, unpublished micro-batch/vp; or found here: GPU type not in the catalog, a split check_parallelism rejects).
Mappings that are assumptions (not in the publication) are counted per row and listed in the data's `notes`.
The LAST LINE printed is one JSON object with the headline figures; units are in the key names.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pydantic import ValidationError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core.cluster import Cluster, Node  # noqa: E402
from frenzy_core.errors import SpecError  # noqa: E402
from frenzy_core.gpus import CATALOG  # noqa: E402
from frenzy_core.models import ModelSpec  # noqa: E402
from frenzy_core.perf import step_time  # noqa: E402
from frenzy_core.training import RECOMPUTE_MODULES, Parallelism, TrainingSpec  # noqa: E402
from frenzy_core.workload import node_shape  # noqa: E402

DATA = REPO / "bench" / "data" / "published_throughput.jsonl"
DEFAULT_NETWORK_GBIT_S = 3200.0  # rows that state none: 8 x 400 Gb/s per DGX-class node (the data's network_source)
# The data's framework names -> TrainingSpec.framework (Composer's FSDP1 FULL_SHARD runs as plain PyTorch + ZeRO-3).
FRAMEWORKS = {"megatron": "megatron", "fsdp2": "fsdp2", "composer": "pytorch", "deepspeed": "deepspeed", "hf": "hf"}
# Megatron recompute_modules: core_attn is the planner's "selective"; layernorm and moe_act are
# TrainingSpec.recompute_modules (training.RECOMPUTE_MODULES); any other (mlp, moe, mla_up_proj, shared_experts) is
# not modelled and is listed as an assumption of the row.
ATTENTION_CORE_MODULES = {"core_attn"}
GPU_NOT_IN_CATALOG = "gpu not in catalog"
# Ablations (diagnostic, never the headline): each row again with one mechanism of perf.py switched off, as
# (TrainingSpec update, GPUType update). Reported on every split; decisions were taken on the non-held-out rows only.
ABLATIONS = {
    "fp8 GEMMs at the bf16 peak": ({}, {"fp8_tflops": None}),
    "no comm overlap": ({"overlap_dp_comm": False, "tp_comm_overlap": False, "overlap_pp_comm": False}, {}),
    "pipeline sends in series": ({"overlap_pp_comm": False}, {}),
    "one GEMM efficiency for every shape": ({}, {"gemm_arch": None}),
    "all s keys (no causal skip)": ({"attention": "eager"}, {}),
    "efficiency = published MFU": ({}, {"hw_efficiency": None}),
}
PARTS = ("compute_s", "tp_comm_s", "ep_comm_s", "cp_comm_s", "pp_bubble_s", "pp_p2p_s", "dp_comm_s", "optimizer_s",
         "overhead_s")


# --- building the planner's inputs from one row -----------------------------------------------------------------
def build_model(row: dict) -> ModelSpec:
    """The row's own hyperparameters as a ModelSpec (no zoo lookup)."""
    moe = bool(row["num_experts"])
    head_dim = row["head_dim"]
    fields = dict(
        name=row["model_name"], vocab_size=row["vocab_size"], hidden_size=row["hidden_size"],
        num_layers=row["num_layers"], num_heads=row["num_heads"], num_kv_heads=row["num_kv_heads"],
        ffn_size=row["ffn_size"], mlp_kind=row["mlp_kind"], tie_embeddings=row["tie_embeddings"],
        position_kind=row["position_kind"], max_positions=row["seq_len"], norm_kind=row["norm_kind"],
        bias=row["bias"], hidden_act=row["hidden_act"], qk_norm=row["qk_norm"] or "none",
        sliding_window=row["sliding_window"], full_attention_every=row["full_attention_every"] or 0,
        num_experts=row["num_experts"] or 0, num_shared_experts=row["num_shared_experts"] or 0,
        first_k_dense=row["first_k_dense"] or 0,
    )
    if row["qkv_bias"] is not None:
        fields["qkv_bias"] = row["qkv_bias"]
    if moe:
        fields.update(moe_top_k=row["moe_top_k"], expert_ffn_size=row["expert_ffn_size"])
    if head_dim is not None and head_dim * row["num_heads"] != row["hidden_size"]:
        fields["head_size"] = head_dim
    return ModelSpec(**fields)


def planner_recompute(row: dict) -> tuple[str, tuple[str, ...], list[str]]:
    """(TrainingSpec.recompute, TrainingSpec.recompute_modules, assumptions made)."""
    rc, assumed = row["recompute"], []
    if rc is None:
        return "none", (), ["recompute not published: none"]
    modules = row.get("recompute_modules") or []
    if rc != "selective" or not modules:
        return rc, (), assumed
    extra = tuple(m for m in modules if m in RECOMPUTE_MODULES)
    other = [m for m in modules if m not in RECOMPUTE_MODULES and m not in ATTENTION_CORE_MODULES]
    if other:
        assumed.append(f"recompute_modules {other} not modelled (scored as not recomputed)")
    return ("selective" if set(modules) & ATTENTION_CORE_MODULES else "none"), extra, assumed


def build_training(row: dict, model: ModelSpec) -> tuple[TrainingSpec, list[str]]:
    recompute, recompute_modules, assumed = planner_recompute(row)
    micro_batch = row["micro_batch"]
    if micro_batch is None:
        micro_batch = 1
        assumed.append("micro_batch not published: 1 (pp = 1, the prediction does not depend on it)")
    sp = row["sequence_parallel"]
    if sp is None:
        sp = row["tp"] > 1
        assumed.append("sequence_parallel not published: tp > 1")
    recompute_every = 1
    if recompute == "full" and row["recompute_layers"]:
        recompute_every = max(1, round(model.num_layers / row["recompute_layers"]))
    training = TrainingSpec(
        seq_len=row["seq_len"], global_batch=row["global_batch"], micro_batch=micro_batch,
        precision=row["planner_precision"], zero_stage=row["zero_stage"] or 0,
        distributed_optimizer=bool(row["distributed_optimizer"]), recompute=recompute, recompute_every=recompute_every,
        recompute_modules=recompute_modules,
        sequence_parallel=bool(sp), attention="flash", framework=FRAMEWORKS[row["framework"]],
        # torchtitan builds torch.optim.AdamW with its config's `implementation`, default "fused"
        # (torchtitan/config/job_config.py, Optimizer); the other stacks' rows keep "adamw" (Megatron and DeepSpeed
        # step with their own FusedAdam whatever it is called: Framework.optimizer_kernel)
        optimizer="adamw-fused" if row["framework"] == "fsdp2" else "adamw",
        fp8_linears=row["precision"] == "fp8", compile=bool(row["compile"]),
        # Megatron's fp8 weights and bf16 main grads, where the row's recipe sets them (`precision_source`)
        fp8_params=bool(row.get("fp8_params")), bf16_grad_reduce=bool(row.get("bf16_grad_reduce")),
        param_remainders=bool(row.get("param_remainders")),
        tp_comm_overlap=tp_comm_overlap(row),
        # LoRA rows: the adapters' rank and target linears (the row's notes cite the framework defaults they ran with)
        lora_rank=row["lora_rank"] or 0, lora_targets=row.get("lora_targets") or "all-linear",
        # packed rows (NeMo's packed SFT / LoRA): attention within each document of the mean length given
        packed=bool(row.get("packed")), packed_doc_tokens=row.get("packed_doc_tokens") or 0,
    )
    return training, assumed


def tp_comm_overlap(row: dict) -> bool | None:
    """The row's published tensor-parallel overlap (Megatron tp_comm_overlap, torchtitan AsyncTP); None = the
    framework's default (perf.comm_overlaps). Data-parallel overlap is every row's framework default (recipes'
    overlap_grad_reduce / overlap_param_gather, FSDP prefetch)."""
    if row["async_tp"]:
        return True
    published = (row["overlap"] or {}).get("tp_comm_overlap")
    return published if isinstance(published, bool) else None


def build_parallelism(row: dict) -> Parallelism:
    """The row's split, with its uneven first / last stages where it has them (Megatron's decoder-first/last counts,
    or the account-for-embedding / loss layout: `training.lighter_chunk_layout`)."""
    return Parallelism(dp=row["dp"], tp=row["tp"], pp=row["pp"], cp=row["cp"] or 1, vp=row["vp"] or 1,
                       ep=row["ep"] or 1, etp=row["etp"] or 0, first_stage_layers=row.get("first_stage_layers") or 0,
                       last_stage_layers=row.get("last_stage_layers") or 0)


def shape_of(row: dict):
    """workload.node_shape of a one-node cluster shaped like the row's nodes (plans uses only the node's shape)."""
    net = row["network_gbit_s_per_node"] or DEFAULT_NETWORK_GBIT_S
    cluster = Cluster(name="published", nodes=(Node(name="node", gpu_type=row["gpu_type"],
                                                    num_gpus=row["gpus_per_node"], network_gbit_s=net),))
    return node_shape(cluster, row["gpu_type"])


def predict(row: dict, mfu: float | None = None, training_update: dict | None = None, gpu_update: dict | None = None):
    """(StepTime, assumptions) or raises SpecError / ValidationError / KeyError for rows that cannot be expressed;
    the updates switch a mechanism off for the ablations."""
    gpu = CATALOG[row["gpu_type"]].model_copy(update=gpu_update or {})
    model = build_model(row)
    training, assumed = build_training(row, model)
    training = training.model_copy(update=training_update or {})
    par = build_parallelism(row)
    if par.num_gpus != row["num_gpus"]:
        raise SpecError("num_gpus", f"dp x tp x pp x cp = {par.num_gpus} != {row['num_gpus']} GPUs")
    shape = shape_of(row)
    st = step_time(model, training, par, gpu, intra_link_gbyte_s=shape.intra_link_gbyte_s,
                   network_gbit_s=shape.network_gbit_s, gpus_per_node=shape.gpus_per_node, mfu=mfu)
    return st, assumed


def evaluate(row: dict) -> dict:
    """One row's outcome: scored (predicted, measured, error, breakdown) or not expressible (reason)."""
    out = {"id": row["id"], "row": row}
    # "gpu not in catalog" is the data's note of the catalog of its day: rows whose type the catalog now has are scored
    if not row["expressible"] and not (row["not_expressible_reason"] == GPU_NOT_IN_CATALOG
                                       and row["gpu_type"] in CATALOG):
        return {**out, "reason": row["not_expressible_reason"]}
    if row["gpu_type"] not in CATALOG:
        return {**out, "reason": GPU_NOT_IN_CATALOG}
    try:
        st, assumed = predict(row)
    except SpecError as err:
        return {**out, "reason": f"invalid split under check_parallelism: {err}"}
    except (ValidationError, ValueError) as err:
        return {**out, "reason": f"spec not expressible: {str(err).splitlines()[0]}"}
    predicted = st.tokens_per_s / st.num_gpus
    measured = row["tokens_per_s_per_gpu"]
    out.update(predicted=predicted, measured=measured, err=predicted / measured - 1.0, assumed=assumed,
               shares={p: getattr(st, p, 0.0) / st.step_time_s for p in PARTS}, step_s=st.step_time_s)
    for name, (training_update, gpu_update) in ABLATIONS.items():  # diagnostic only
        off, _ = predict(row, training_update=training_update, gpu_update=gpu_update)
        out[f"ablation:{name}"] = off.tokens_per_s / off.num_gpus / measured - 1.0
    return out


PACKED_DOC_SENSITIVITY = (128, 512, 1024)  # mean document lengths the packed rows are also scored at


def remapped_rows(scored: list[dict]) -> dict[str, dict]:
    """Rows with a `first_mapping`: the error now, as first mapped, and (packed rows) at other document lengths."""
    out = {}
    for r in scored:
        row = r["row"]
        if not row.get("first_mapping"):
            continue
        first, _ = predict({**row, **row["first_mapping"]})
        sens = {}
        if row.get("packed"):
            for doc in PACKED_DOC_SENSITIVITY:
                st, _ = predict({**row, "packed_doc_tokens": doc})
                sens[doc] = round(100 * (st.tokens_per_s / st.num_gpus / r["measured"] - 1), 1)
        out[r["id"]] = {"err_pct": round(100 * r["err"], 1),
                        "first_mapping_err_pct": round(100 * (first.tokens_per_s / first.num_gpus / r["measured"] - 1), 1),
                        "doc_tokens_err_pct": sens}
    return out


# --- statistics -------------------------------------------------------------------------------------------------
def p90(values: list[float]) -> float:
    """Nearest-rank 90th percentile (no interpolation: with few rows it is an observed error)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def stats(results: list[dict], key: str = "err") -> dict:
    errs = [r[key] * 100 for r in results if key in r]
    if not errs:
        return {"n": 0, "median_abs_pct": None, "p90_abs_pct": None, "median_signed_pct": None}
    abs_errs = [abs(e) for e in errs]
    return {"n": len(errs), "median_abs_pct": round(statistics.median(abs_errs), 1),
            "p90_abs_pct": round(p90(abs_errs), 1), "median_signed_pct": round(statistics.median(errs), 1)}


def split_of(row: dict) -> str:
    if row["calibration_source"]:
        return "calibration"
    return "held_out" if row["held_out"] else "fit"


def fmt(s: dict) -> str:
    if not s["n"]:
        return "n=0"
    return (f"n={s['n']:>2}  median |err| {s['median_abs_pct']:6.1f}%  p90 |err| {s['p90_abs_pct']:6.1f}%  "
            f"median signed {s['median_signed_pct']:+6.1f}%")


def grouped(results: list[dict], key) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        for k in key(r["row"]):
            groups[k].append(r)
    return dict(sorted(groups.items()))


def main() -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    results = [evaluate(r) for r in rows]
    scored = [r for r in results if "err" in r]
    skipped = [r for r in results if "err" not in r]
    by_split = {s: [r for r in scored if split_of(r["row"]) == s] for s in ("held_out", "fit", "calibration")}

    print(f"Published throughput vs frenzy_core.perf.step_time: {len(rows)} rows, {len(scored)} scored, "
          f"{len(skipped)} not expressible ({DATA.relative_to(REPO)})\n")
    print(f"{'row':<46} {'split':<11} {'gpu':<10} {'predicted':>10} {'measured':>10} {'err':>8}  largest terms")
    for r in sorted(scored, key=lambda r: (split_of(r["row"]), r["err"])):
        top = sorted(r["shares"].items(), key=lambda kv: -kv[1])[:3]
        terms = " ".join(f"{k.removesuffix('_s')} {v:.0%}" for k, v in top if v >= 0.005)
        flag = f" [{len(r['assumed'])} assumed]" if r["assumed"] else ""
        print(f"{r['id']:<46} {split_of(r['row']):<11} {r['row']['gpu_type']:<10} {r['predicted']:>10.0f} "
              f"{r['measured']:>10.0f} {r['err'] * 100:>+7.1f}%  {terms}{flag}")

    print("\nSummary (tokens/s/GPU, signed error = predicted / measured - 1):")
    for name, part in by_split.items():
        print(f"  {name:<12} {fmt(stats(part))}")
    print(f"  {'all scored':<12} {fmt(stats(scored))}")

    for title, key in (("source", lambda row: [row["source"]]), ("GPU type", lambda row: [row["gpu_type"]]),
                       ("feature tag", lambda row: row["features"] or ["(none)"])):
        print(f"\nBy {title} (held-out rows | all scored rows):")
        all_groups = grouped(scored, key)
        held_groups = grouped(by_split["held_out"], key)
        for k, part in all_groups.items():
            print(f"  {k:<28} held-out {fmt(stats(held_groups.get(k, [])))}\n  {'':<28} all      {fmt(stats(part))}")

    print("\nMean share of the predicted step per term (held-out rows):")
    held = by_split["held_out"]
    if held:
        print("  " + "  ".join(f"{p.removesuffix('_s')} {statistics.mean(r['shares'][p] for r in held):.1%}"
                               for p in PARTS))

    fp8 = [r for r in scored if r["row"]["precision"] == "fp8"]
    fp8_held = [r for r in fp8 if split_of(r["row"]) == "held_out"]
    non_fp8 = [r for r in scored if r["row"]["precision"] != "fp8"]
    print("\nAblations (diagnostic, not the headline): the model with one mechanism switched off, by split")
    for name in ("(the model)", *ABLATIONS):
        key = "err" if name == "(the model)" else f"ablation:{name}"
        print(f"  {name:<30}" + "".join(f"  {s}: {fmt(stats(by_split[s], key))}\n{'':<32}"
                                       for s in ("held_out", "fit", "calibration")).rstrip())
    print(f"  fp8 rows, all splits: {fmt(stats(fp8))}; bf16 rows: {fmt(stats(non_fp8))}")

    remapped = remapped_rows(scored)
    if remapped:
        print("\nRows whose mapping was corrected after their error was seen (each row's mapping_note), both ways;"
              f" packed rows also at other mean document lengths ({', '.join(map(str, PACKED_DOC_SENSITIVITY))}"
              " tokens):")
        for rid, m in remapped.items():
            sens = " ".join(f"{k}: {v:+.1f}%" for k, v in m["doc_tokens_err_pct"].items())
            print(f"  {rid:<44} {m['err_pct']:+6.1f}% (as first mapped {m['first_mapping_err_pct']:+6.1f}%)"
                  f"{'  ' + sens if sens else ''}")

    print(f"\nNot expressible ({len(skipped)}):")
    reasons: dict[str, list[str]] = defaultdict(list)
    for r in skipped:
        reasons[r["reason"]].append(r["id"])
    for reason, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(ids):>2} x {reason}")
        for i in ids:
            print(f"       {i}")

    h, c, f = (stats(by_split[s]) for s in ("held_out", "calibration", "fit"))
    headline = {
        "rows": len(rows), "scored_rows": len(scored), "not_expressible_rows": len(skipped),
        "held_out_rows": h["n"], "held_out_median_abs_error_pct": h["median_abs_pct"],
        "held_out_p90_abs_error_pct": h["p90_abs_pct"], "held_out_median_signed_error_pct": h["median_signed_pct"],
        "calibration_rows": c["n"], "calibration_median_abs_error_pct": c["median_abs_pct"],
        "calibration_p90_abs_error_pct": c["p90_abs_pct"],
        "calibration_median_signed_error_pct": c["median_signed_pct"],
        "fit_rows": f["n"], "fit_median_abs_error_pct": f["median_abs_pct"],
        "fp8_rows": len(fp8), "fp8_median_signed_error_pct": stats(fp8)["median_signed_pct"],
        "fp8_held_out_median_signed_error_pct": stats(fp8_held)["median_signed_pct"],
        "bf16_median_signed_error_pct": stats(non_fp8)["median_signed_pct"],
        "scored_rows_with_mapping_assumptions": sum(bool(r["assumed"]) for r in scored),
        "remapped_rows": len(remapped),
        "held_out_median_abs_error_pct_as_first_mapped": stats(
            [{**r, "err": remapped[r["id"]]["first_mapping_err_pct"] / 100} if r["id"] in remapped else r
             for r in by_split["held_out"]])["median_abs_pct"],
    }
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
