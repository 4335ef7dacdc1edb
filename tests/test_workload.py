"""Trace -> LLM job mapping: deterministic by seed, calibrated to the trace's duration, fits its allocation."""

from __future__ import annotations

import pytest

from frenzy_core.cluster import load_cluster, parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.traces import TraceJob, bundled_traces, load_trace
from frenzy_core.training import Parallelism, TrainingSpec
from frenzy_core.workload import (
    AnalyticEstimator,
    DefaultEstimator,
    PlanTable,
    default_training,
    map_trace,
    model_candidates,
    reference_gpu,
    scale_plan,
    splits,
)

JOBS = [TraceJob(job_id=f"j{i}", arrival_s=10.0 * i, num_gpus=n, duration_s=600.0 + 60 * i)
        for i, n in enumerate([1, 1, 2, 4, 8, 16, 1, 4, 12, 1])]


def test_same_seed_same_workload_and_another_seed_differs(tiny_cluster):
    est = AnalyticEstimator()
    a = map_trace(JOBS, tiny_cluster, seed=3, estimator=est)
    b = map_trace(JOBS, tiny_cluster, seed=3, estimator=est)
    assert a == b
    others = [map_trace(JOBS, tiny_cluster, seed=s, estimator=est) for s in range(4, 8)]
    assert any([j.model for j in o.jobs] != [j.model for j in a.jobs] for o in others)


def test_tokens_make_the_original_allocation_run_for_the_trace_duration(tiny_cluster):
    est = AnalyticEstimator()
    w = map_trace(JOBS, tiny_cluster, seed=0, estimator=est)
    table = PlanTable(est, tiny_cluster)
    for j in w.jobs:
        plan = table.best(ZOO[j.model], j.training, j.original_gpu_type, j.trace_gpus, placeable=False)
        assert plan is not None, "the mapped model must fit its original allocation"
        assert scale_plan(plan, j.tokens).time_to_train_s == pytest.approx(j.trace_duration_s, rel=1e-9)


def test_models_come_from_the_gpu_count_bucket_or_a_smaller_fallback(tiny_cluster):
    w = map_trace(JOBS, tiny_cluster, seed=1, estimator=AnalyticEstimator())
    for j in w.jobs:
        if j.trace_gpus == 1:
            assert j.model in model_candidates(1)
    assert model_candidates(2) == model_candidates(4) == ("gpt2-large", "gpt2-xl")
    # 8 GPUs of the reference type (A100-80GB here: most GPUs, 8) fit a 7B model, so no fallback happens there
    assert {j.model for j in w.jobs if j.trace_gpus == 8} <= set(model_candidates(8))


T4_CLUSTER = "nodes: [{name: t, gpu_type: T4, num_gpus: 4, count: 2}]"


def test_a_named_model_that_does_not_fit_is_rejected_not_shrunk():
    from frenzy_core.cluster import parse_cluster_yaml

    t4 = parse_cluster_yaml(T4_CLUSTER)
    jobs = [TraceJob("big", 0.0, 4, 100.0, model="llama-2-7b", source_row=7), TraceJob("small", 5.0, 1, 60.0)]
    w = map_trace(jobs, t4, seed=0, estimator=AnalyticEstimator())
    # 7B needs 18 bytes/parameter = 121 GB of states, more than 4 x 16 GB: the job is refused, never made a GPT-2
    assert [j.job_id for j in w.jobs] == ["small"]
    assert w.fallbacks == 0 and w.substitutions == ()
    (r,) = w.rejected_no_fit
    assert (r.job_id, r.source_row, r.model, r.gpu_type, r.num_gpus) == ("big", 7, "llama-2-7b", "T4", 4)
    assert "llama-2-7b" in r.reason and "4 x T4" in r.reason
    assert w.rejected_reasons() == {"model named by the trace does not fit": 1}


def test_a_drawn_model_that_does_not_fit_takes_a_smaller_one_and_says_so():
    from frenzy_core.cluster import parse_cluster_yaml
    from frenzy_core.workload import FALLBACK_ORDER

    t4 = parse_cluster_yaml(T4_CLUSTER)
    w = map_trace([TraceJob("five", 0.0, 5, 100.0)], t4, seed=0, estimator=AnalyticEstimator())
    # a 5-GPU job draws a 7B model (bucket 5-16), which does not fit 5 x 16 GB: the mapping takes the next that does
    (sub,) = w.substitutions
    assert w.fallbacks == 1 and w.rejected_no_fit == ()
    assert sub.job_id == "five" and sub.drawn in model_candidates(5) and sub.used == w.jobs[0].model
    assert FALLBACK_ORDER.index(sub.used) > FALLBACK_ORDER.index(sub.drawn)  # smaller
    assert sub.drawn in sub.reason and "5 x T4" in sub.reason


def test_a_drawn_job_where_no_model_fits_is_rejected_and_the_others_kept():
    from frenzy_core.cluster import parse_cluster_yaml

    class Tight(AnalyticEstimator):  # every model needs more than a T4 has, except on 1 GPU
        def memory_bytes(self, model, training, par):
            return 1 if par.num_gpus == 1 else 10**15

    t4 = parse_cluster_yaml(T4_CLUSTER)
    w = map_trace([TraceJob("one", 0.0, 1, 60.0), TraceJob("two", 1.0, 2, 60.0)], t4, seed=0, estimator=Tight())
    assert [j.job_id for j in w.jobs] == ["one"]
    assert [r.job_id for r in w.rejected_no_fit] == ["two"] and w.rejected_no_fit[0].model is None
    assert w.rejected_reasons() == {"no zoo model fits": 1}


def test_a_trace_where_no_job_fits_is_a_clear_error_naming_the_first_rejections():
    from frenzy_core.cluster import parse_cluster_yaml

    t4 = parse_cluster_yaml(T4_CLUSTER)
    with pytest.raises(SpecError, match="no job of the trace fits") as err:
        map_trace([TraceJob("big", 0.0, 4, 100.0, model="llama-2-70b")], t4, seed=0, estimator=AnalyticEstimator())
    assert "big" in str(err.value) and "llama-2-70b" in str(err.value)


def test_a_named_model_fits_its_trace_allocation_but_not_this_cluster_is_rejected():
    """The trace's 8 GPUs fit the model, but a baseline here gets at most the cluster's 2 GPUs of the type."""
    from frenzy_core.cluster import parse_cluster_yaml

    small = parse_cluster_yaml("nodes: [{name: t, gpu_type: A100-80GB, num_gpus: 2}]")
    # 13B: 18 bytes/parameter = 234 GB of states, 29 GB per GPU on 8, 117 GB on 2 (more than 80 GB)
    jobs = [TraceJob("wide", 0.0, 8, 100.0, model="llama-2-13b"), TraceJob("ok", 1.0, 1, 60.0, model="gpt2")]
    w = map_trace(jobs, small, seed=0, estimator=AnalyticEstimator())
    assert [j.job_id for j in w.jobs] == ["ok"] and w.oversized == 0  # only jobs in the workload are counted
    assert "2 x A100-80GB" in w.rejected_no_fit[0].reason and "8" in w.rejected_no_fit[0].reason


def test_trace_model_and_tokens_are_kept(tiny_cluster):
    j = TraceJob("m", 0.0, 2, 100.0, model="gpt2-medium", tokens=123456)
    w = map_trace([j], tiny_cluster, seed=0, estimator=AnalyticEstimator())
    assert (w.jobs[0].model, w.jobs[0].tokens) == ("gpt2-medium", 123456.0)


def test_reference_gpu_is_the_type_with_most_gpus(tiny_cluster):
    assert reference_gpu(tiny_cluster) == "A100-80GB"


def test_splits_multiply_to_the_count_and_respect_the_model():
    m = ZOO["gpt2-large"]  # 20 heads, 36 layers
    tr = default_training(m, 12)
    got = splits(m, tr, 12, gpus_per_node=8)
    assert got and all(p.num_gpus == 12 and 20 % p.tp == 0 and 36 % p.pp == 0 and p.tp <= 8 for p in got)
    assert all(tr.global_batch % p.dp == 0 for p in got)


def test_mapping_the_bundled_philly_sample_maps_every_job(tiny_cluster):
    path, fmt = bundled_traces()["philly-2000"]
    trace = load_trace(path, fmt)
    w = map_trace(trace, tiny_cluster, seed=0, estimator=AnalyticEstimator())
    assert len(w.jobs) == trace.kept


def test_default_estimator_mapping_on_sia_cluster():
    """Integration with the real memory and performance models: the 7B bucket falls back on 16 GB GPUs as needed."""
    from pathlib import Path

    cluster = load_cluster(Path(__file__).resolve().parents[1] / "sample_clusters" / "sia-64.yaml")
    w = map_trace(JOBS, cluster, seed=0)
    assert len(w.jobs) == len(JOBS) and all(j.tokens > 0 for j in w.jobs)
    table = PlanTable(__import__("frenzy_core.workload").workload.DefaultEstimator(), cluster)
    for j in w.jobs:
        plan = table.best(ZOO[j.model], j.training, j.original_gpu_type, j.trace_gpus, placeable=False)
        assert scale_plan(plan, j.tokens).time_to_train_s == pytest.approx(j.trace_duration_s, rel=1e-9)


# 1.84B parameters, 16 experts, top-2: its plans take ep > 1 (tests/test_plans.py has the same model)
TINY_MOE = ModelSpec(name="tiny-moe", vocab_size=32000, hidden_size=2048, num_layers=8, num_heads=16, num_kv_heads=8,
                     mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", tie_embeddings=False, bias=False,
                     num_experts=16, moe_top_k=2, expert_ffn_size=2048, ffn_size=2048, max_positions=4096)


def test_splits_of_an_moe_model_carry_every_ep_that_divides_d_and_the_experts():
    tr = TrainingSpec(seq_len=2048, global_batch=16, framework="megatron")
    got = {(p.dp, p.tp, p.pp, p.ep) for p in splits(TINY_MOE, tr, 8, gpus_per_node=8)}
    assert (8, 1, 1, 8) in got and (8, 1, 1, 1) in got and (2, 2, 2, 2) in got
    assert all(d % e == 0 and 16 % e == 0 for d, _, _, e in got)
    dense = {(p.dp, p.tp, p.pp, p.ep) for p in splits(TINY_MOE, tr.model_copy(update={"framework": "hf"}), 8, 8)}
    assert {e for *_, e in dense} == {1} and {k[:3] for k in dense} == {k[:3] for k in got}


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_plan_table_and_rank_plans_share_one_enumeration(moe):
    """sia/fcfs (PlanTable.best) and frenzy (plans.rank_plans) must see the same splits, tensor-parallel rule (each
    t-group inside one node, nodes of different sizes) and links (the type's slowest): for every (type, count) the
    fastest fitting split has the same step time in both, and exists in both or in neither. For an MoE model both
    also try every ep."""
    from frenzy_core.cluster import parse_cluster_yaml
    from frenzy_core.plans import rank_plans
    from frenzy_core.workload import DefaultEstimator, PlanTable, default_training

    cluster = parse_cluster_yaml("""
nodes:
  - {name: big, gpu_type: A100-80GB, num_gpus: 8, network_gbit_s: 200}
  - {name: small, gpu_type: A100-80GB, num_gpus: 4, network_gbit_s: 25}
  - {name: t, gpu_type: T4, num_gpus: 2, count: 3, network_gbit_s: 50}
""")
    model = TINY_MOE if moe else ZOO["gpt2-xl"]
    training = (TrainingSpec(seq_len=2048, global_batch=16, framework="megatron", distributed_optimizer=True) if moe
                else default_training(model, 8))
    ranked = rank_plans(model, training, cluster, objective="time", tokens=1e9, micro_batch=training.micro_batch)
    fastest: dict = {}
    for p in ranked.plans:
        key = (p.gpu_type, p.num_gpus)
        fastest[key] = min(fastest.get(key, float("inf")), p.step_time_s)
    table = PlanTable(DefaultEstimator(), cluster)
    seen = 0
    for gpu_type, total in cluster.gpus_by_type().items():
        for count in range(1, total + 1):
            p = table.best(model, training, gpu_type, count, safety_margin=0.10)
            want = fastest.get((gpu_type, count))
            assert (p is None) == (want is None), (gpu_type, count)
            if p is not None:
                seen += 1
                assert p.step_time_s == pytest.approx(want, rel=1e-9), (gpu_type, count)
    assert seen >= (12 if not moe else 5), seen
    if moe:
        assert any(p.ep > 1 for p in ranked.plans)
        return
    # 12 A100s with t = 8 would need a 12-GPU node: neither may offer a t = 8 plan of 12 GPUs
    assert not [p for p in ranked.plans if p.gpu_type == "A100-80GB" and p.num_gpus == 12 and p.tp == 8]
    assert table.best(model, training, "A100-80GB", 12, safety_margin=0.10).tp < 8


def test_splits_of_a_long_sequence_carry_cp_within_the_count():
    tr = TrainingSpec(seq_len=16384, global_batch=8, precision="bf16-master")
    got = splits(ZOO["llama-3.1-8b"], tr, 8, gpus_per_node=8)
    assert {p.cp for p in got} == {1, 2, 4} and all(p.num_gpus == 8 for p in got)
    assert (2, 1, 1, 4) in {(p.dp, p.tp, p.pp, p.cp) for p in got}
    assert (8, 1, 1, 1) in {(p.dp, p.tp, p.pp, p.cp) for p in got}


def test_plan_table_and_rank_plans_break_a_speed_tie_the_same_way_by_memory():
    """gpt2-xl on one A100-80GB: micro-batches 1 to 12 take the same step time; both pick the lightest plan
    (issue 19: rank_plans took micro-batch 12 at 64.9 GiB where PlanTable took 1 at 34.1 GiB)."""
    from frenzy_core.plans import rank_plans

    cluster = parse_cluster_yaml("nodes: [{name: a, gpu_type: A100-80GB, num_gpus: 1}]")
    model = ZOO["gpt2-xl"]
    training = default_training(model, 1)
    table = PlanTable(DefaultEstimator(), cluster)
    mine = table.best(model, training, "A100-80GB", 1, tune_micro_batch=True)
    ranked = rank_plans(model, training, cluster, objective="time", scaling_floor=0.0).top(1)[0]
    assert (mine.micro_batch, mine.memory_bytes) == (ranked.micro_batch, ranked.memory_bytes)


def test_size_noise_is_lognormal_with_median_one_and_leaves_the_true_budget(tiny_cluster):
    import math

    import numpy as np

    from frenzy_core.workload import with_size_noise

    est = AnalyticEstimator()
    w = map_trace(JOBS * 200, tiny_cluster, seed=0, estimator=est)  # 2,000 jobs
    noisy = with_size_noise(w, 0.5, seed=7)
    assert [j.tokens for j in noisy.jobs] == [j.tokens for j in w.jobs]
    assert [j.model for j in noisy.jobs] == [j.model for j in w.jobs]
    logs = np.log([j.known_tokens / j.tokens for j in noisy.jobs])
    # N(0, 0.5) over 2,000 draws: the mean within 4 standard errors (4 x 0.5 / sqrt(2000) = 0.045), sd within 8%
    assert abs(logs.mean()) < 0.045 and logs.std() == pytest.approx(0.5, rel=0.08)
    assert with_size_noise(w, 0.5, seed=7) == noisy and with_size_noise(w, 0.5, seed=8) != noisy
    assert with_size_noise(w, 0.0, seed=7) is w and all(j.known_tokens == j.tokens for j in w.jobs)
    for bad in (-0.1, math.nan, 3.5, "1"):
        with pytest.raises(SpecError, match=r"size_noise.*\[0, 3\]"):
            with_size_noise(w, bad, seed=0)


def test_the_default_estimator_memoises_the_scalar_predictors_and_answers_as_they_do():
    """The process-wide memo (`workload._memory_bytes`, `_step_time_s`) gives predict_memory's and step_time's own
    answers, and a repeated question is a cache hit, not a second evaluation."""
    from frenzy_core import workload as wl
    from frenzy_core.gpus import CATALOG
    from frenzy_core.memory import predict_memory
    from frenzy_core.perf import step_time

    model, training = ZOO["gpt2"], TrainingSpec(seq_len=512, global_batch=8, micro_batch=2)
    par, gpu, shape = Parallelism(dp=2), CATALOG["A100-80GB"], wl.NodeShape(8, 300.0, 200.0)
    est = DefaultEstimator()
    hits = wl._memory_bytes.cache_info().hits
    assert est.memory_bytes(model, training, par) == int(predict_memory(model, training, par).total_bytes)
    assert est.memory_bytes(model, training, par) == int(predict_memory(model, training, par).total_bytes)
    assert wl._memory_bytes.cache_info().hits >= hits + 1
    want = step_time(model, training, par, gpu, intra_link_gbyte_s=300.0, network_gbit_s=200.0,
                     gpus_per_node=8).step_time_s
    assert est.step_time_s(model, training, par, gpu, shape) == want
    assert wl._memory_bytes.cache_info().maxsize == wl.ESTIMATE_MEMO_ENTRIES
