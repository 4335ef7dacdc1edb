"""MARP plans: fit, completeness against brute force, documented ordering, infeasibility explained."""

import itertools

import numpy as np
import pytest

from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.memory import predict_memory
from frenzy_core.models import ZOO, ModelSpec, model_from_hf_config
from frenzy_core.plans import OBJECTIVES, Plan, PlanSet, rank_plans
from frenzy_core.training import Parallelism, TrainingSpec

SMALL = parse_cluster_yaml(
    """
name: small
nodes:
  - {name: a, gpu_type: A100-40GB, num_gpus: 4, count: 2}
  - {name: t, gpu_type: T4, num_gpus: 2, count: 2}
""",
    source="small.yaml",
)
MODEL = ZOO["gpt2-large"]  # 774M: fits some splits on T4 and A100-40GB, not all
TRAIN = TrainingSpec(seq_len=1024, global_batch=16, micro_batch=1, precision="amp", attention="flash")


def _brute_force(model, training, cluster, margin=0.10):
    """Every (gpu_type, d, t, p) for which some micro-batch fits: loops, scalar memory calls, no numpy."""
    feasible = set()
    for gpu_name, total in cluster.gpus_by_type().items():
        cap = cluster.gpu(gpu_name).memory_bytes * (1 - margin)
        per_node = cluster.max_gpus_per_node(gpu_name)
        sizes = [n.num_gpus for n in cluster.nodes if n.gpu_type == gpu_name]
        for d, t, p in itertools.product(range(1, total + 1), repeat=3):
            if d * t * p > total or t > per_node:
                continue
            if d * t * p > sum(size // t * t for size in sizes):  # each t-group sits inside one node
                continue
            if model.num_heads % t or model.kv_heads % t or model.num_layers % p:
                continue
            if training.global_batch % d:
                continue
            for b in range(1, training.global_batch // d + 1):
                if (training.global_batch // d) % b:
                    continue
                tr = training.model_copy(update={"micro_batch": b})
                if predict_memory(model, tr, Parallelism(d, t, p)).total_bytes <= cap:
                    feasible.add((gpu_name, d, t, p))
                    break
    return feasible


def test_no_feasible_plan_missed_or_invented():
    got = {(p.gpu_type, p.dp, p.tp, p.pp) for p in rank_plans(MODEL, TRAIN, SMALL).plans}
    assert got == _brute_force(MODEL, TRAIN, SMALL)
    assert got, "the example must have plans"


def test_every_plan_fits_memory_and_cluster():
    result = rank_plans(MODEL, TRAIN, SMALL)
    by_type = SMALL.gpus_by_type()
    for p in result.plans:
        gpu = SMALL.gpu(p.gpu_type)
        assert p.memory_bytes <= gpu.memory_bytes * 0.9 and p.headroom_bytes >= 0
        assert p.num_gpus == p.dp * p.tp * p.pp <= by_type[p.gpu_type]
        assert p.tp <= SMALL.max_gpus_per_node(p.gpu_type)
        assert p.dp * p.micro_batch * p.grad_accum == TRAIN.global_batch
        # the memory recorded is what the scalar predictor says for that split
        tr = TRAIN.model_copy(update={"micro_batch": p.micro_batch})
        assert abs(p.memory_bytes - predict_memory(MODEL, tr, p.parallelism).total_bytes) <= 1


def test_derived_columns_consistent():
    p = rank_plans(MODEL, TRAIN, SMALL, tokens=1e9).plans[0]
    assert p.tokens_per_s == pytest.approx(16 * 1024 / p.step_time_s)
    assert p.time_to_train_s == pytest.approx(1e9 / p.tokens_per_s)
    assert p.gpu_hours == pytest.approx(p.num_gpus * p.time_to_train_s / 3600)
    assert p.cost_usd == pytest.approx(p.gpu_hours * SMALL.gpu(p.gpu_type).price_per_hour_usd)


_KEYS = {
    "time": lambda p: (p.time_to_train_s, p.num_gpus, p.cost_usd),
    "gpu-hours": lambda p: (p.gpu_hours, p.time_to_train_s, p.num_gpus),
    "cost": lambda p: (p.cost_usd, p.time_to_train_s, p.num_gpus),
    "gpus": lambda p: (p.num_gpus, p.time_to_train_s, p.cost_usd),
}


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_objective_orders_as_documented(objective):
    plans = rank_plans(MODEL, TRAIN, SMALL, objective=objective).plans
    keys = [_KEYS[objective](p) + (p.gpu_type, p.tp, p.pp, p.dp) for p in plans]
    assert keys == sorted(keys)


def test_objectives_disagree_on_the_winner():
    # fastest uses many GPUs; fewest-GPUs uses one: the objective really changes the answer
    fastest = rank_plans(MODEL, TRAIN, SMALL, objective="time").plans[0]
    fewest = rank_plans(MODEL, TRAIN, SMALL, objective="gpus").plans[0]
    assert fewest.num_gpus == 1 < fastest.num_gpus


def test_ranking_is_deterministic():
    a = rank_plans(MODEL, TRAIN, SMALL).plans
    b = rank_plans(MODEL, TRAIN, SMALL).plans
    assert a == b


def test_why_top_names_the_winner():
    result = rank_plans(MODEL, TRAIN, SMALL, objective="cost")
    assert result.plans[0].gpu_type in result.why_top and "lowest cost" in result.why_top


def test_infeasible_job_is_explained():
    huge = ModelSpec(name="huge", vocab_size=50000, hidden_size=12288, num_layers=96, num_heads=96, max_positions=2048)  # ~175B
    result = rank_plans(huge, TrainingSpec(seq_len=2048, global_batch=8), SMALL)
    assert result.plans == ()
    assert "A100-40GB" in result.explanation and "GiB" in result.explanation
    # the smallest memory reported is really the smallest over the grid, and it exceeds the largest GPU
    assert result.min_memory_bytes == pytest.approx(result.grid["memory_bytes"].min(), rel=1e-9)
    assert result.min_memory_bytes > SMALL.gpu("A100-40GB").memory_bytes * 0.9


def test_paper_method_available():
    paper = rank_plans(MODEL, TRAIN, SMALL, method="paper")
    assert len(paper.plans) > 0


def test_bad_objective_named():
    with pytest.raises(SpecError, match="objective"):
        rank_plans(MODEL, TRAIN, SMALL, objective="speed")


def test_tensor_parallel_stays_in_node():
    plans = rank_plans(ZOO["gpt2-7b-paper"], TrainingSpec(seq_len=2048, global_batch=32), SMALL).plans
    assert all(p.tp <= (4 if p.gpu_type == "A100-40GB" else 2) for p in plans)


def test_why_top_names_the_deciding_key_on_a_tie():
    # on `gpus`, several 1-GPU plans tie on the primary key: the sentence must say the time decided
    result = rank_plans(ZOO["gpt2"], TRAIN, SMALL, objective="gpus")
    first, second = result.plans[:2]
    assert first.num_gpus == second.num_gpus == 1
    assert "ties with the runner-up on GPU count" in result.why_top and "time to train" in result.why_top


ODD_NODES = parse_cluster_yaml(
    """
name: odd
nodes:
  - {name: t, gpu_type: T4, num_gpus: 4, count: 6}
  - {name: a, gpu_type: A100-40GB, num_gpus: 8, count: 2}
""",
    source="odd.yaml",
)


def test_every_plan_can_be_placed_on_the_empty_cluster():
    # gpt2 has 12 heads, so t=3 and t=6 exist: 4-GPU nodes hold one 3-group each (18 of 24 T4s usable at t=3)
    from frenzy_core.packing import ClusterIndex, place

    index = ClusterIndex.from_cluster(ODD_NODES)
    plans = rank_plans(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=48), ODD_NODES).plans
    assert any(p.tp == 3 and p.gpu_type == "T4" for p in plans)
    for p in plans:
        got = place(index, index.node_gpus.copy(), p.num_gpus, tp=p.tp, memory_bytes=p.memory_bytes,
                    gpu_types=(p.gpu_type,))
        assert got is not None, p.label()
    assert max(p.num_gpus for p in plans if p.tp == 3 and p.gpu_type == "T4") <= 18


def test_brute_force_agrees_on_a_cluster_with_small_nodes():
    training = TrainingSpec(seq_len=1024, global_batch=48, precision="amp")
    got = {(p.gpu_type, p.dp, p.tp, p.pp) for p in rank_plans(ZOO["gpt2"], training, ODD_NODES).plans}
    assert got == _brute_force(ZOO["gpt2"], training, ODD_NODES)


def test_fixed_micro_batch_is_respected():
    plans = rank_plans(MODEL, TRAIN, SMALL, micro_batch=2).plans
    assert plans and all(p.micro_batch == 2 for p in plans)
    with pytest.raises(SpecError, match="micro_batch"):
        rank_plans(MODEL, TRAIN, SMALL, micro_batch=3)


@pytest.mark.parametrize("tokens", [0, -1, float("inf"), float("nan")])
def test_token_budget_must_be_positive_and_finite(tokens):
    with pytest.raises(SpecError, match="tokens"):
        rank_plans(MODEL, TRAIN, SMALL, tokens=tokens)


def test_sequence_longer_than_learned_positions_is_refused():
    with pytest.raises(SpecError) as err:
        rank_plans(ZOO["gpt2"], TrainingSpec(seq_len=2048, global_batch=8), SMALL)
    assert err.value.field == "seq_len" and "1024" in str(err.value)


# --- constraints and the scaling floor (issue 11, item 3) ----------------------------------------------------------
HUGE = parse_cluster_yaml("name: huge\nnodes: [{name: n, gpu_type: H100-80GB, num_gpus: 8, count: 10000}]")
LLAMA = ZOO["llama-2-7b"]
BATCH64 = TrainingSpec(seq_len=2048, global_batch=64, micro_batch=1)


def _efficiency_violations(plans, floor):
    """Loops, no numpy: (plan, smaller count) pairs whose marginal efficiency (T_m / T - 1) / (n / m - 1) < floor."""
    best: dict[tuple[str, int], float] = {}
    for p in plans:
        key = (p.gpu_type, p.num_gpus)
        best[key] = min(best.get(key, float("inf")), p.time_to_train_s)
    bad = []
    for p in plans:
        for (g, m), t_m in best.items():
            if g == p.gpu_type and m < p.num_gpus:
                if (t_m / p.time_to_train_s - 1) / (p.num_gpus / m - 1) < floor - 1e-9:
                    bad.append((p.label(), m))
    return bad


def test_absurd_case_10000_nodes_without_floor_takes_16384_gpus():
    # the report, reproduced: d=64 t=8 p=32 on 16,384 GPUs wins on time without a floor
    best = rank_plans(LLAMA, BATCH64, HUGE).plans[0]
    assert (best.dp, best.tp, best.pp, best.num_gpus) == (64, 8, 32, 16384)


def test_scaling_floor_on_10000_nodes_keeps_only_plans_whose_added_gpus_pay():
    everything = rank_plans(LLAMA, BATCH64, HUGE).plans
    kept = rank_plans(LLAMA, BATCH64, HUGE, scaling_floor=0.5)
    assert kept.plans[0].num_gpus <= 64
    assert not _efficiency_violations(kept.plans, 0.5)
    # every dropped plan violates the floor against the full set (brute force over all feasible plans)
    kept_keys = {p.label() for p in kept.plans}
    dropped = [p for p in everything if p.label() not in kept_keys]
    assert len(dropped) == kept.dropped["scaling_floor"] > 0
    bad = {label for label, _ in _efficiency_violations(everything, 0.5)}
    assert {p.label() for p in dropped} == bad


def test_scaling_floor_is_idempotent():
    from frenzy_core.plans import within_scaling_floor

    kept = rank_plans(LLAMA, BATCH64, HUGE, scaling_floor=0.5).plans
    assert within_scaling_floor(kept, 0.5) == kept


def test_max_gpus_deadline_and_budget_drop_plans_over_the_limits():
    base = rank_plans(MODEL, TRAIN, SMALL, tokens=1e9).plans
    times = sorted(p.time_to_train_s for p in base)
    deadline = times[len(times) // 2]
    costs = sorted(p.cost_usd for p in base)
    budget = costs[len(costs) // 2]
    got = rank_plans(MODEL, TRAIN, SMALL, tokens=1e9, max_gpus=4, deadline_s=deadline, budget_usd=budget)
    want = {p.label() for p in base if p.num_gpus <= 4 and p.time_to_train_s <= deadline and p.cost_usd <= budget}
    assert {p.label() for p in got.plans} == want and want
    assert sum(got.dropped.values()) == len(base) - len(want)


def test_cost_objective_with_a_deadline_never_picks_a_run_past_it():
    # the issue: objective cost with 2e11 tokens picks a 66-day 4-GPU run; a 20-day deadline must rule that out
    c = parse_cluster_yaml("name: m\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 8}]")
    tr = TrainingSpec(seq_len=2048, global_batch=512, micro_batch=1)
    free = rank_plans(LLAMA, tr, c, objective="cost", tokens=2e11).plans[0]
    bound = rank_plans(LLAMA, tr, c, objective="cost", tokens=2e11, deadline_s=20 * 86400).plans[0]
    assert free.time_to_train_s > 20 * 86400 >= bound.time_to_train_s


def test_no_plan_within_constraints_is_explained_by_the_constraint():
    r = rank_plans(MODEL, TRAIN, SMALL, tokens=1e12, deadline_s=60.0)
    assert not r.plans and "deadline" in r.explanation and r.dropped["deadline_s"] > 0


@pytest.mark.parametrize(("kw", "field"), [({"max_gpus": 0}, "max_gpus"), ({"deadline_s": -1.0}, "deadline_s"),
                                           ({"budget_usd": float("nan")}, "budget_usd"),
                                           ({"scaling_floor": 1.5}, "scaling_floor")])
def test_bad_constraints_name_the_field(kw, field):
    with pytest.raises(SpecError) as err:
        rank_plans(MODEL, TRAIN, SMALL, **kw)
    assert err.value.field == field


def test_best_per_type_is_the_first_ranked_plan_of_each_type():
    r = rank_plans(MODEL, TRAIN, SMALL)
    best = r.best_per_type()
    assert [p.gpu_type for p in best] == list(dict.fromkeys(p.gpu_type for p in r.plans))
    for p in best:
        assert p == next(q for q in r.plans if q.gpu_type == p.gpu_type)


def test_ranking_text_names_the_objective_keys_and_the_constraints():
    r = rank_plans(LLAMA, BATCH64, HUGE, scaling_floor=0.5, objective="cost")
    text = r.ranking_text
    assert "cost, then time to train" in text and "scaling floor" in text and str(r.dropped["scaling_floor"]) in text


# --- mutation gaps (issue 13): each test pins one behaviour that a one-line change of plans.py would break ---------
QUAD_T4 = parse_cluster_yaml("name: quad\nnodes: [{name: t, gpu_type: T4, num_gpus: 4}]")
ONE_T4 = parse_cluster_yaml("name: one\nnodes: [{name: t, gpu_type: T4, num_gpus: 1}]")
GPT2_B8 = TrainingSpec(seq_len=1024, global_batch=8, micro_batch=1)
# two GPU types identical but for name and price: every plan on one has a twin on the other with the same time and
# GPU count; only cost (GZ is cheaper) and then the GPU type name (GA sorts first) can order a twin pair
TWINS = parse_cluster_yaml("""
name: twins
gpu_types:
  - {name: GZ, memory_gib: 24, bf16_tflops: 100, fp32_tflops: 50, memory_bandwidth_gbyte_s: 1000, price_per_hour_usd: 1.0}
  - {name: GA, memory_gib: 24, bf16_tflops: 100, fp32_tflops: 50, memory_bandwidth_gbyte_s: 1000, price_per_hour_usd: 2.0}
nodes:
  - {name: z, gpu_type: GZ, num_gpus: 2}
  - {name: a, gpu_type: GA, num_gpus: 2}
""")


@pytest.mark.parametrize(("objective", "first_of_twins"), [("time", "GZ"), ("gpus", "GZ"), ("gpu-hours", "GA")])
def test_twin_plans_are_ordered_by_the_secondary_key_then_the_type_name(objective, first_of_twins):
    # time: (time, GPUs, cost) -> the cheaper GZ twin first; gpus: (GPUs, time, cost) -> GZ; gpu-hours:
    # (GPU-hours, time, GPUs) ties on every key -> the deterministic tie-break, GPU type name: GA first
    plans = rank_plans(ZOO["gpt2"], GPT2_B8, TWINS, objective=objective).plans
    assert len(plans) % 2 == 0 and plans
    for a, b in zip(plans[::2], plans[1::2], strict=True):
        assert (a.dp, a.tp, a.pp, a.micro_batch) == (b.dp, b.tp, b.pp, b.micro_batch)
        assert a.gpu_type == first_of_twins != b.gpu_type


def test_cost_objective_puts_every_cheaper_twin_first():
    # GZ costs half as much per GPU-hour as GA: each GA plan costs exactly twice its GZ twin and ranks after it
    plans = rank_plans(ZOO["gpt2"], GPT2_B8, TWINS, objective="cost").plans
    twin = {(p.gpu_type, p.dp, p.tp, p.pp): p for p in plans}
    for (g, d, t, p), plan in twin.items():
        if g == "GZ":
            other = twin[("GA", d, t, p)]
            assert other.cost_usd == pytest.approx(2 * plan.cost_usd)
            assert plans.index(plan) < plans.index(other)


@pytest.mark.parametrize("margin", [0.0, 0.5])
def test_safety_margin_sets_the_usable_memory_against_brute_force(margin):
    # 4 T4s on one node: d, t and p can each reach the whole node (4), so the bounds d, t, p <= GPUs are exercised
    training = TrainingSpec(seq_len=1024, global_batch=16, micro_batch=1, precision="amp", attention="flash")
    got = {(p.gpu_type, p.dp, p.tp, p.pp) for p in rank_plans(MODEL, training, QUAD_T4, safety_margin=margin).plans}
    assert got == _brute_force(MODEL, training, QUAD_T4, margin=margin)


def test_brute_force_agrees_when_d_t_and_p_each_reach_the_cluster_size():
    # gpt2: 12 layers, 12 heads, batch 16, 4 GPUs: (4, 1, 1), (1, 4, 1) and (1, 1, 4) are all valid splits
    training = TrainingSpec(seq_len=1024, global_batch=16, micro_batch=1)
    got = {(p.gpu_type, p.dp, p.tp, p.pp) for p in rank_plans(ZOO["gpt2"], training, QUAD_T4).plans}
    assert {("T4", 4, 1, 1), ("T4", 1, 4, 1), ("T4", 1, 1, 4)} <= got
    assert got == _brute_force(ZOO["gpt2"], training, QUAD_T4)


def test_headroom_is_the_capacity_after_the_margin_less_the_memory():
    result = rank_plans(MODEL, TRAIN, SMALL)
    for p in result.plans:
        usable = SMALL.gpu(p.gpu_type).memory_bytes * 0.9  # catalog capacity, default 10% margin
        assert abs(p.headroom_bytes - (usable - p.memory_bytes)) <= 2  # memory is ceiled, headroom floored
    grid = result.grid
    for gpu_type, rows in grid.groupby("gpu_type"):
        usable = SMALL.gpu(gpu_type).memory_bytes * 0.9
        assert rows["usable_bytes"].tolist() == pytest.approx([usable] * len(rows))
        assert (rows["headroom_bytes"] - (usable - rows["memory_bytes"])).abs().max() < 1.0


def test_safety_margin_must_be_below_one():
    with pytest.raises(SpecError) as err:
        rank_plans(MODEL, TRAIN, SMALL, safety_margin=1.0)
    assert err.value.field == "safety_margin"


def test_micro_batch_of_zero_is_refused_and_one_is_accepted():
    with pytest.raises(SpecError) as err:
        rank_plans(MODEL, TRAIN, SMALL, micro_batch=0)
    assert err.value.field == "micro_batch"
    plans = rank_plans(MODEL, TRAIN, SMALL, micro_batch=1).plans
    assert plans and all(p.micro_batch == 1 for p in plans)


def test_a_token_budget_of_one_token_is_valid():
    p = rank_plans(ZOO["gpt2"], GPT2_B8, ONE_T4, tokens=1.0).plans[0]
    assert p.time_to_train_s == pytest.approx(1.0 / p.tokens_per_s)


@pytest.mark.parametrize("field", ["deadline_s", "budget_usd"])
def test_deadline_and_budget_refuse_zero_but_accept_a_small_positive_value(field):
    with pytest.raises(SpecError) as err:
        rank_plans(ZOO["gpt2"], GPT2_B8, ONE_T4, **{field: 0.0})
    assert err.value.field == field
    r = rank_plans(ZOO["gpt2"], GPT2_B8, ONE_T4, tokens=1e12, **{field: 0.5})
    assert not r.plans and r.dropped[field] == 1


def test_a_limit_of_one_gpu_keeps_the_one_gpu_plans_and_says_so():
    r = rank_plans(MODEL, TRAIN, SMALL, max_gpus=1)
    assert r.plans and all(p.num_gpus == 1 for p in r.plans)
    assert "the GPU limit (1 GPUs)" in r.ranking_text


def test_no_constraint_drops_a_plan_when_none_is_set():
    assert rank_plans(MODEL, TRAIN, SMALL).dropped == {"scaling_floor": 0, "max_gpus": 0, "deadline_s": 0,
                                                       "budget_usd": 0}


def test_one_plan_dropped_by_a_constraint_is_counted_in_the_singular():
    # one T4, micro-batch fixed: d = t = p = 1 is the only plan, and a 60 s deadline drops it
    r = rank_plans(ZOO["gpt2"], GPT2_B8, ONE_T4, micro_batch=1, tokens=1e12, deadline_s=60.0)
    assert r.explanation.startswith("No plan meets the constraints: 1 plan fit in memory, dropped 1 by the deadline")


def test_why_top_of_the_only_plan_says_it_is_the_only_one():
    r = rank_plans(ZOO["gpt2"], GPT2_B8, ONE_T4, micro_batch=1)
    assert len(r.plans) == 1 and "is the only feasible plan" in r.why_top


def test_why_top_compares_the_winner_with_the_second_plan():
    r = rank_plans(MODEL, TRAIN, SMALL, objective="time")
    first, second = r.plans[:2]
    assert r.why_top.startswith(first.label()) and f"over {second.label()};" in r.why_top


def test_top_returns_the_first_k_plans_and_at_most_all():
    r = rank_plans(MODEL, TRAIN, SMALL)
    assert r.top(2) == list(r.plans[:2])
    assert r.top(10_000) == list(r.plans)


def test_plan_label_counts_gpus_in_singular_and_plural():
    one = rank_plans(ZOO["gpt2"], GPT2_B8, ONE_T4, micro_batch=1).plans[0]
    assert one.label() == "T4 d=1 t=1 p=1 (1 GPU)"
    two = Plan(**{**one.as_dict(), "dp": 2, "num_gpus": 2})
    assert two.label() == "T4 d=2 t=1 p=1 (2 GPUs)"


def test_an_empty_plan_table_keeps_gpu_type_a_text_column():
    huge = ModelSpec(name="huge", vocab_size=50000, hidden_size=12288, num_layers=96, num_heads=96, max_positions=2048)
    no_fit = rank_plans(huge, TrainingSpec(seq_len=2048, global_batch=8), SMALL)
    no_time = rank_plans(ZOO["gpt2"], GPT2_B8, ONE_T4, tokens=1e12, deadline_s=60.0)
    for r in (no_fit, no_time):
        assert len(r) == 0 and r.to_frame()["gpu_type"].dtype == object


def test_infeasible_explanation_states_the_largest_gpu_and_its_usable_memory():
    huge = ModelSpec(name="huge", vocab_size=50000, hidden_size=12288, num_layers=96, num_heads=96, max_positions=2048)
    r = rank_plans(huge, TrainingSpec(seq_len=2048, global_batch=8), SMALL)
    # A100-40GB: 40 GiB, 36.0 GiB after the 10% margin; the smallest split's memory, in GiB
    assert "offers 40 GiB (36.0 GiB after the 10% safety margin)" in r.explanation
    assert f"reaches on this cluster is {r.min_memory_bytes / 2**30:.1f} GiB" in r.explanation


def test_scaling_floor_keeps_a_plan_exactly_at_the_floor():
    # 1 GPU in 8 s, 3 GPUs in 4 s: e = (8 / 4 - 1) / (3 / 1 - 1) = 0.5, exactly the floor: kept (e >= floor), also at
    # the 1e-12 relative tolerance for float rounding; 4 s x (1 + 1e-9) is past it and dropped
    from frenzy_core.plans import scaling_keep

    types, n = np.array(["H100", "H100"], dtype=object), np.array([1, 3])
    assert scaling_keep(types, n, np.array([8.0, 4.0]), 0.5).tolist() == [True, True]
    assert scaling_keep(types, n, np.array([8.0, 4.0 * (1 + 1e-12)]), 0.5).tolist() == [True, True]
    assert scaling_keep(types, n, np.array([8.0, 4.0 * (1 + 1e-9)]), 0.5).tolist() == [True, False]


def _planset(objective: str, *rows: dict, **extra) -> PlanSet:
    """A ranked plan set written by hand (rows best first), to check the sentences built from given numbers."""
    base = {"gpu_type": "H100-80GB", "dp": 1, "tp": 1, "pp": 1, "num_gpus": 1, "micro_batch": 1, "grad_accum": 1,
            "memory_bytes": 15 * 2**29, "headroom_bytes": 0, "gpu_memory_bytes": 80 * 2**30, "step_time_s": 1.0,
            "tokens_per_s": 1.0, "time_to_train_s": 72000.0, "gpu_hours": 20.0, "cost_usd": 40.0}
    plans = [{**base, **r} for r in rows]
    cols = {k: np.array([p[k] for p in plans], dtype=object if k == "gpu_type" else None) for k in base}
    return PlanSet(objective, cols, {}, extra=extra)


def test_why_top_states_memory_time_gpu_hours_and_cost_of_the_winner():
    # 15 x 2^29 B = 7.5 GiB of 80 GiB; 72,000 s = 20.0 h
    s = _planset("time", {}).why_top
    assert s.endswith("is the only feasible plan: 7.5 GiB per GPU of 80 GiB, 20.0 h to train, 20.0 GPU-hours, $40.00.")


def test_why_top_shows_times_to_one_decimal_when_they_read_apart():
    s = _planset("time", {}, {"dp": 2, "num_gpus": 2, "time_to_train_s": 108000.0}).why_top  # 20 h vs 30 h
    assert "wins on the shortest time to train (20.0 h vs 30.0 h) over H100-80GB d=2" in s


def test_why_top_shows_two_decimals_of_hours_when_one_decimal_reads_the_same():
    # 72,000 s = 20.000 h and 72,021.6 s = 20.006 h: both "20.0 h", so the sentence shows 20.00 h vs 20.01 h
    s = _planset("time", {}, {"dp": 2, "num_gpus": 2, "time_to_train_s": 72021.6}).why_top
    assert "(20.00 h vs 20.01 h)" in s


def test_why_top_separates_one_gpu_from_two_on_the_gpus_objective():
    s = _planset("gpus", {}, {"dp": 2, "num_gpus": 2, "time_to_train_s": 36000.0}).why_top
    assert "wins on fewer GPUs (1 vs 2)" in s


def test_why_top_of_plans_tied_on_every_key_names_the_tie_break():
    s = _planset("time", {"gpu_type": "A100-80GB"}, {}).why_top
    assert "A100-80GB d=1 t=1 p=1 (1 GPU) ties with H100-80GB d=1 t=1 p=1 (1 GPU) on every objective key" in s


@pytest.mark.parametrize(("deadline_s", "words"), [
    (600.0, "10.0 min"), (3600.0, "1.0 h"), (3780.72, "1.1 h"), (7200.0, "2.0 h"),  # 3780.72 s = 1.0502 h
    (172800.0, "2.0 days"), (177121.728, "2.1 days"), (216000.0, "2.5 days"),  # 177121.728 s = 2.05002 days
])
def test_durations_read_in_minutes_below_an_hour_hours_below_two_days_then_days(deadline_s, words):
    r = _planset("time", {}, dropped={"deadline_s": 0}, constraints={"deadline_s": deadline_s})
    assert f"0 dropped by the deadline ({words})" in r.ranking_text


def test_a_plan_needing_exactly_the_usable_memory_fits():
    # fits <=> memory <= capacity x (1 - margin); with margin 0, a GPU of exactly ceil(memory) bytes holds the
    # split and one byte less does not (the same >= rule as packing)
    import math

    one_big = parse_cluster_yaml("name: big\nnodes: [{name: n, gpu_type: A100-80GB, num_gpus: 1}]")
    need = math.ceil(float(rank_plans(ZOO["gpt2"], GPT2_B8, one_big, micro_batch=1).grid["memory_bytes"].iloc[0]))

    def plans_on(capacity_bytes: int):
        yaml = ("name: x\ngpu_types:\n  - {name: GX, memory_gib: " + repr(capacity_bytes / 2**30) + ", bf16_tflops: 100,"
                " fp32_tflops: 50, memory_bandwidth_gbyte_s: 1000}\nnodes: [{name: x, gpu_type: GX, num_gpus: 1}]")
        cluster = parse_cluster_yaml(yaml)
        assert cluster.gpu("GX").memory_bytes == capacity_bytes
        return rank_plans(ZOO["gpt2"], GPT2_B8, cluster, micro_batch=1, safety_margin=0.0).plans

    assert len(plans_on(need)) == 1
    assert plans_on(need - 1) == ()


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_sort_keys_rank_by_the_documented_keys_at_every_level_of_ties(objective):
    # every combination of two values per key, so each key (primary, secondary, third, then memory, type, t, p, d,
    # cp) is the one that decides for some pair: the order must be Python's sort by the documented tuple
    # (docs/ranking.md)
    from frenzy_core.plans import _sort_keys

    names = ("time_to_train_s", "num_gpus", "cost_usd", "gpu_hours", "memory_bytes", "type_rank", "tp", "pp", "dp",
             "cp")
    rows = list(itertools.product((1.0, 2.0), repeat=len(names)))
    cols = {k: np.array([r[i] for r in rows]) for i, k in enumerate(names)}
    documented = {"time": ("time_to_train_s", "num_gpus", "cost_usd"),
                  "gpu-hours": ("gpu_hours", "time_to_train_s", "num_gpus"),
                  "cost": ("cost_usd", "time_to_train_s", "num_gpus"),
                  "gpus": ("num_gpus", "time_to_train_s", "cost_usd")}[objective] + ("memory_bytes", "type_rank",
                                                                                     "tp", "pp", "dp", "cp")
    want = sorted(range(len(rows)), key=lambda i: tuple(rows[i][names.index(k)] for k in documented))
    assert np.lexsort(_sort_keys(objective, cols)).tolist() == want


def test_within_scaling_floor_drops_exactly_the_plans_that_violate_it():
    from frenzy_core.plans import within_scaling_floor

    everything = rank_plans(LLAMA, BATCH64, HUGE).plans
    bad = {label for label, _ in _efficiency_violations(everything, 0.5)}
    kept = within_scaling_floor(everything, 0.5)
    assert bad and [p.label() for p in kept] == [p.label() for p in everything if p.label() not in bad]


# --- expert parallelism ----------------------------------------------------------------------------------------------
MOE_CLUSTER = parse_cluster_yaml("name: moe\nnodes: [{name: a, gpu_type: A100-40GB, num_gpus: 8, count: 2}, "
                                 "{name: t, gpu_type: T4, num_gpus: 4, count: 2}]", source="moe.yaml")
# 1.84B parameters, 16 experts of which each token uses 2: on a T4, d = 8 only fits with the experts split
TINY_MOE = ModelSpec(name="tiny-moe", vocab_size=32000, hidden_size=2048, num_layers=8, num_heads=16, num_kv_heads=8,
                     mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", tie_embeddings=False, bias=False,
                     num_experts=16, moe_top_k=2, expert_ffn_size=2048, ffn_size=2048, max_positions=4096)
MOE_TRAIN = TrainingSpec(seq_len=2048, global_batch=16, framework="megatron", distributed_optimizer=True)


def with_layouts(model, training, splits) -> list:
    """Each split once per pipeline layout the planner may try: vp 1, and under an interleaving stack (megatron,
    fsdp2, unknown) every vp > 1 with p > 1; the even stages where p x vp divides the layers, and under Megatron
    (megatron, unknown) every uneven (first, last) that `uneven_stage_options` lists."""
    from dataclasses import replace

    from frenzy_core.training import uneven_stage_options

    interleaves = training.framework in ("megatron", "fsdp2", "unknown")
    uneven = training.framework in ("megatron", "unknown")
    out = []
    for q in splits:
        for v in range(1, model.num_layers + 1):
            if v > 1 and not (interleaves and q.pp > 1):
                continue
            if uneven:
                layouts = uneven_stage_options(model.num_layers, q.pp, v)
            else:
                layouts = [(0, 0)] if model.num_layers % (q.pp * v) == 0 else []
            out += [replace(q, vp=v, first_stage_layers=f, last_stage_layers=la) for f, la in layouts]
    return out


def _fastest_fitting(model, training, cluster, splits, key) -> dict[tuple, float]:
    """Brute force with the scalar predictors: for each `key(gpu type, par)` the shortest step of any split in
    `splits` (Parallelism values; `with_vp` adds every interleaving they allow) and micro-batch dividing the
    replica's batch that fits capacity x 0.9, with the node shape rank_plans prices links by. A split needs whole
    t-groups per node and at most the type's GPUs."""
    from frenzy_core.perf import step_time
    from frenzy_core.workload import node_shape

    best: dict[tuple, float] = {}
    for gpu_name, total in cluster.gpus_by_type().items():
        gpu, shape = cluster.gpu(gpu_name), node_shape(cluster, gpu_name)
        for par in splits:
            if par.num_gpus > total or par.tp > shape.gpus_per_node or par.num_gpus > total // par.tp * par.tp:
                continue
            per_replica = training.global_batch // par.dp
            for b in (x for x in range(1, per_replica + 1) if per_replica % x == 0):
                if par.vp > 1 and (per_replica // b) % par.pp:  # Megatron's interleaving: m a multiple of p
                    continue
                tr = training.model_copy(update={"micro_batch": b})
                if predict_memory(model, tr, par).total_bytes > gpu.memory_bytes * 0.9:
                    continue
                step = step_time(model, tr, par, gpu, intra_link_gbyte_s=shape.intra_link_gbyte_s,
                                 network_gbit_s=shape.network_gbit_s, gpus_per_node=shape.gpus_per_node).step_time_s
                k = key(gpu_name, par)
                best[k] = min(best.get(k, np.inf), step)
    return best


def test_moe_plans_are_the_brute_force_best_over_micro_batch_and_ep():
    """Scalar loops over (type, d, t, p, ep, micro-batch): the same (type, d, t, p) fit, and each plan carries the
    fastest fitting (micro-batch, ep), its memory and step the scalar predictors' for that split."""
    result = rank_plans(TINY_MOE, MOE_TRAIN, MOE_CLUSTER, objective="time")
    splits = [Parallelism(dp=d, tp=t, pp=p, ep=ep) for d, t, p, ep in
              itertools.product((1, 2, 4, 8, 16), (1, 2, 4, 8), range(1, 9), (1, 2, 4, 8, 16)) if d % ep == 0]
    want = _fastest_fitting(TINY_MOE, MOE_TRAIN, MOE_CLUSTER, with_layouts(TINY_MOE, MOE_TRAIN, splits),
                            lambda g, q: (g, q.dp, q.tp, q.pp))
    got = {(q.gpu_type, q.dp, q.tp, q.pp): q for q in result.plans}
    assert set(got) == set(want)
    for key, plan in got.items():
        # the fastest, or (VP_TOLERANCE) a plan with fewer interleaved chunks within 1% of it
        assert want[key] * (1 - 1e-9) <= plan.step_time_s <= want[key] * 1.01, plan.label()
        tr = MOE_TRAIN.model_copy(update={"micro_batch": plan.micro_batch})
        assert abs(plan.memory_bytes - predict_memory(TINY_MOE, tr, plan.parallelism).total_bytes) <= 1
    # the experts' split is what lets the T4s hold d = 8: none fits there without it
    t4 = [q for q in result.plans if q.gpu_type == "T4" and q.dp == 8]
    assert t4 and all(q.ep > 1 for q in t4)
    assert predict_memory(TINY_MOE, MOE_TRAIN, Parallelism(dp=8)).total_bytes > MOE_CLUSTER.gpu("T4").memory_bytes


def test_dense_models_and_hugging_face_keep_ep_1():
    assert {q.ep for q in rank_plans(MODEL, TRAIN, SMALL).plans} == {1}
    hf = MOE_TRAIN.model_copy(update={"framework": "hf", "distributed_optimizer": False})
    assert {q.ep for q in rank_plans(TINY_MOE, hf, MOE_CLUSTER).plans} == {1}
    plans = rank_plans(TINY_MOE, MOE_TRAIN, MOE_CLUSTER).plans
    split = next(q for q in plans if q.ep > 1)
    assert f" ep={split.ep} (" in split.label()
    assert "ep=" not in next(q for q in plans if q.ep == 1).label()


# --- context parallelism ---------------------------------------------------------------------------------------------
LONG = TrainingSpec(seq_len=16384, global_batch=8, precision="bf16-master")  # cp 1, 2 or 4 (>= 4,096 tokens per rank)


def test_long_sequence_plans_are_the_brute_force_best_over_cp():
    """Scalar loops over (type, d, t, p, cp, micro-batch) for Qwen3-0.6B at 16k tokens: the same (type, d, t, p, cp)
    fit and each plan has the fastest fitting micro-batch's step; the 40 GB A100s hold one replica only with cp."""
    model = ZOO["qwen3-0.6b"]  # 16 query / 8 KV heads, 28 layers
    result = rank_plans(model, LONG, MOE_CLUSTER, objective="time")
    splits = [Parallelism(dp=d, tp=t, pp=p, cp=cp) for d, t, p, cp in
              itertools.product((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 7, 14, 28), (1, 2, 4))]
    want = _fastest_fitting(model, LONG, MOE_CLUSTER, with_layouts(model, LONG, splits), lambda g, q: (g, q.dp, q.tp, q.pp, q.cp))
    got = {(q.gpu_type, q.dp, q.tp, q.pp, q.cp): q for q in result.plans}
    assert set(got) == set(want)
    for key, plan in got.items():
        assert plan.step_time_s == pytest.approx(want[key], rel=1e-9), plan.label()
        assert plan.num_gpus == plan.dp * plan.tp * plan.pp * plan.cp
    one_replica = {q.cp for q in result.plans if q.gpu_type == "A100-40GB" and q.dp == q.tp == q.pp == 1}
    assert one_replica and 1 not in one_replica  # 63 GiB at cp 1 > 36 GiB usable
    assert {q.cp for q in result.plans} == {1, 2, 4}
    split = next(q for q in result.plans if q.cp > 1)
    assert f" cp={split.cp} (" in split.label()


def test_cp_is_tried_only_where_ring_attention_runs_and_chunks_stay_long():
    from frenzy_core.plans import context_parallel_sizes

    assert context_parallel_sizes(LONG, 1024).tolist() == [1, 2, 4]
    assert context_parallel_sizes(LONG.model_copy(update={"seq_len": 4096}), 1024).tolist() == [1]
    assert context_parallel_sizes(LONG.model_copy(update={"seq_len": 131072}), 16).tolist() == [1, 2, 4, 8, 16]
    for fw in ("hf", "deepspeed"):
        assert context_parallel_sizes(LONG.model_copy(update={"framework": fw}), 1024).tolist() == [1]
    assert {q.cp for q in rank_plans(MODEL, TRAIN, SMALL).plans} == {1}  # 1,024 tokens: never split


def test_interleaving_keeps_the_fewest_chunks_within_one_percent():
    """For a plan with vp > 1, every smaller vp of the same split (scalar step_time) is more than 1% slower than the
    split's fastest interleaving, or does not fit; without the rule one-layer chunks win by fractions of a
    percent where nothing else separates them."""
    from frenzy_core.perf import step_time
    from frenzy_core.workload import node_shape

    model = ZOO["llama-3.1-8b"]
    tr = TrainingSpec(seq_len=32768, global_batch=16, framework="megatron", distributed_optimizer=True,
                      recompute="full")
    plans = [q for q in rank_plans(model, tr, MOE_CLUSTER).plans if q.vp > 1]
    assert plans
    for q in plans:
        gpu, shape = MOE_CLUSTER.gpu(q.gpu_type), node_shape(MOE_CLUSTER, q.gpu_type)
        tq = tr.model_copy(update={"micro_batch": q.micro_batch})
        steps = {}
        for v in range(1, model.num_layers // q.pp + 1):
            par = Parallelism(dp=q.dp, tp=q.tp, pp=q.pp, cp=q.cp, vp=v)
            if model.num_layers % (q.pp * v) or predict_memory(model, tq, par).total_bytes > gpu.memory_bytes * 0.9:
                continue
            steps[v] = step_time(model, tq, par, gpu, intra_link_gbyte_s=shape.intra_link_gbyte_s,
                                 network_gbit_s=shape.network_gbit_s, gpus_per_node=shape.gpus_per_node).step_time_s
        fastest = min(steps.values())
        assert steps[q.vp] == pytest.approx(q.step_time_s, rel=1e-9) and steps[q.vp] <= fastest * 1.01
        assert all(steps[v] > fastest * 1.01 for v in steps if v < q.vp), (q.label(), steps)


# --- uneven pipeline stages (Megatron --decoder-first/last-pipeline-num-layers) --------------------------------------
# Llama-3.1-405B is not in the zoo: its config.json (meta-llama/Llama-3.1-405B on the Hugging Face Hub) gives 126
# layers of width 16,384, 128 query / 8 KV heads, an MLP of 53,248, 128,256 tokens, untied embeddings
LLAMA_405B = model_from_hf_config({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248,
    "num_attention_heads": 128, "num_hidden_layers": 126, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}, name="llama-3.1-405b")
H100_1024 = parse_cluster_yaml("name: h100s\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 128}]")
MCORE = TrainingSpec(seq_len=4096, global_batch=1024, framework="megatron", distributed_optimizer=True,
                     recompute="full")


def _check_uneven_plans(model, training, plans):
    from frenzy_core.training import check_pipeline_layout

    uneven = [q for q in plans if q.uneven]
    assert uneven, "the model's layers must give some uneven plan"
    for q in uneven:
        check_pipeline_layout(model.num_layers, q.parallelism)  # Megatron's rule holds
        assert sum(q.parallelism.stage_layers(model.num_layers)) == model.num_layers
        assert f" first={q.first_stage_layers}" in q.label() or f" last={q.last_stage_layers}" in q.label()
        tr = training.model_copy(update={"micro_batch": q.micro_batch})
        assert abs(q.memory_bytes - predict_memory(model, tr, q.parallelism).total_bytes) <= 1
    return uneven


def test_llama_405b_on_1024_h100s_under_megatron_gets_uneven_plans():
    # 126 layers: p = 16 has no even split, (7, 7) / (0, 6) / (6, 0) make 8-layer middle stages
    result = rank_plans(LLAMA_405B, MCORE, H100_1024)
    uneven = _check_uneven_plans(LLAMA_405B, MCORE, result.plans)
    assert any(q.pp % 2 == 0 and LLAMA_405B.num_layers % q.pp for q in uneven)  # a p that divides no even split
    assert {(q.first_stage_layers, q.last_stage_layers) for q in uneven if q.pp == 16} <= {(7, 7), (0, 6), (6, 0)}


def test_deepseek_v3_under_megatron_gets_uneven_plans_but_not_under_torchtitan():
    # 61 layers (a prime): evenly only p = 1 or 61; uneven stages open p = 2, 4, 8, 16, ...
    model = ZOO["deepseek-v3"]
    big = parse_cluster_yaml("name: b\nnodes: [{name: h, gpu_type: H200-141GB, num_gpus: 8, count: 128}]")
    tr = MCORE.model_copy(update={"global_batch": 256})
    uneven = _check_uneven_plans(model, tr, rank_plans(model, tr, big).plans)
    assert {q.pp for q in uneven} - {1, 61}
    titan = tr.model_copy(update={"framework": "fsdp2", "distributed_optimizer": False, "zero_stage": 3})
    assert not any(q.uneven for q in rank_plans(model, titan, big).plans)


def test_uneven_layouts_only_under_megatron_and_never_twice():
    from frenzy_core.plans import pipeline_layouts

    for fw in ("pytorch", "fsdp2", "deepspeed", "hf"):
        rows = pipeline_layouts(LLAMA_405B, TrainingSpec(framework=fw), 1024)
        assert not rows[:, 2:4].any() and all(LLAMA_405B.num_layers % p == 0 for p in rows[:, 0])
    rows = pipeline_layouts(ZOO["deepseek-v3"], TrainingSpec(framework="megatron"), 1024)
    ends = {}
    for p, v, f, last, _ in rows.tolist():  # (0, 30) and (31, 30) of 61 layers on 2 stages are one split
        counts = Parallelism(pp=p, vp=v, first_stage_layers=f, last_stage_layers=last).stage_layers(61)
        assert (p, v, counts[0], counts[-1]) not in ends
        ends[(p, v, counts[0], counts[-1])] = (f, last)


def test_equal_step_times_go_to_the_smaller_memory():
    # issue 19 item 6: gpt2-xl on one A100-80GB, 48 samples: micro-batches 1 to 12 all take the same step (p = 1);
    # the plan takes micro-batch 1 (the least memory), as workload.PlanTable.best does
    from frenzy_core.perf import step_time

    one = parse_cluster_yaml("name: one\nnodes: [{name: n, gpu_type: A100-80GB, num_gpus: 1}]")
    tr = TrainingSpec(seq_len=1024, global_batch=48, micro_batch=1)
    best = rank_plans(ZOO["gpt2-xl"], tr, one).plans[0]
    gpu = one.gpu("A100-80GB")
    steps = {b: step_time(ZOO["gpt2-xl"], tr.model_copy(update={"micro_batch": b}), Parallelism(), gpu,
                          gpus_per_node=1).step_time_s for b in (1, 2, 4, 12)}
    assert len({round(s, 12) for s in steps.values()}) == 1  # the model prices them the same
    assert best.micro_batch == 1
    assert best.memory_bytes == min(rank_plans(ZOO["gpt2-xl"], tr, one, micro_batch=b).plans[0].memory_bytes
                                    for b in (1, 2, 4, 12))


def test_ranking_breaks_a_time_tie_by_memory_before_the_type_name():
    from frenzy_core.plans import _sort_keys

    cols = {"time_to_train_s": np.array([10.0, 10.0 * (1 + 1e-12)]), "num_gpus": np.array([8, 8]),
            "cost_usd": np.array([5.0, 5.0]), "gpu_hours": np.array([1.0, 1.0]), "memory_bytes": np.array([9.0, 3.0]),
            "type_rank": np.array([0, 1]), "tp": np.array([1, 1]), "pp": np.array([1, 1]), "dp": np.array([8, 8]),
            "cp": np.array([1, 1])}
    assert np.lexsort(_sort_keys("time", cols)).tolist() == [1, 0]  # 1e-12 apart is a tie: less memory first


@pytest.mark.parametrize(("name", "framework"), [("llama-3.1-8b", "megatron"), ("mixtral-8x7b", "megatron"),
                                                 ("gpt2-large", "hf"), ("deepseek-v2-lite", "deepspeed"),
                                                 ("qwen3-8b", "fsdp2"), ("llama-2-13b", "pytorch")])
def test_memory_never_falls_as_the_micro_batch_grows(name, framework):
    # rank_plans skips a split's larger micro-batches once its smaller ones fit no GPU: exact only while memory
    # grows with the micro-batch, uneven and interleaved stages included (framework unknown's band, a max over the
    # recipes, can dip by a few hundred MiB at one micro-batch per step: rank_plans evaluates it whole)
    from frenzy_core.memory import predict_memory_totals
    from frenzy_core.training import uneven_stage_options

    model = ZOO[name]
    extra = {"zero_stage": 3} if framework == "fsdp2" else {"distributed_optimizer": framework == "megatron"}
    tr = TrainingSpec(seq_len=2048, global_batch=64, framework=framework, **extra)
    bs = np.array([1, 2, 4, 8, 16, 32, 64])
    for d, t, p, v in itertools.product((1, 2), (1, 2), (1, 2, 3, 4), (1, 2)):
        for f, last in uneven_stage_options(model.num_layers, p, v):
            if framework != "megatron" and (f or last):
                continue
            keep = bs[(bs * d <= 64) & ((v == 1) | ((64 // (d * bs)) % p == 0))]
            mem = predict_memory_totals(model, tr, d, t, p, keep, vp=v, first_stage_layers=f, last_stage_layers=last)
            assert np.all(np.diff(mem) >= 0), (d, t, p, v, f, last, mem.tolist())


# --- per GPU type: which constraint dropped how many (issue 23: "3 pass" and only H100 listed, A100 green) ----------
def test_each_constraint_counts_its_drops_per_gpu_type_by_hand():
    from frenzy_core.plans import _apply_constraints

    # A: 1, 2, 4 GPUs at 100, 50, 40 s; B: 1, 8 GPUs at 200, 20 s. Floor 0.5: A's 4 GPUs buy (50/40 - 1) / (4/2 - 1)
    # = 0.25 of linear over its 2 GPUs -> dropped; B's 8 buy (200/20 - 1) / (8 - 1) = 1.29 -> kept. Then the 4-GPU
    # limit drops B's 8-GPU plan and the 150 s deadline B's 200 s plan: B has 2 plans that fit and none left.
    cols = {"gpu_type": np.array(["A", "A", "A", "B", "B"], dtype=object), "type_rank": np.array([0, 0, 0, 1, 1]),
            "num_gpus": np.array([1, 2, 4, 1, 8]), "time_to_train_s": np.array([100.0, 50.0, 40.0, 200.0, 20.0]),
            "cost_usd": np.array([1.0, 1.0, 1.0, 1.0, 100.0])}
    kept, dropped, by_type = _apply_constraints(cols, 0.5, 4, 150.0, None)
    assert kept["gpu_type"].tolist() == ["A", "A"] and kept["num_gpus"].tolist() == [1, 2]
    assert dropped == {"scaling_floor": 1, "max_gpus": 1, "deadline_s": 1, "budget_usd": 0}  # unchanged totals
    assert by_type == {"A": {"scaling_floor": 1, "max_gpus": 0, "deadline_s": 0, "budget_usd": 0},
                       "B": {"scaling_floor": 0, "max_gpus": 1, "deadline_s": 1, "budget_usd": 0}}


def test_a_gpu_type_whose_plans_all_fall_to_the_constraints_is_named_with_the_counts():
    # SMALL: 2 x 4 A100-40GB and 2 x 2 T4. A 2-GPU limit and a deadline just under the fastest T4 plan's time leave
    # only A100 plans: every T4 plan that fits falls to one or the other
    free = rank_plans(MODEL, TRAIN, SMALL, tokens=1e9)
    fit = {g: sum(p.gpu_type == g for p in free.plans) for g in ("A100-40GB", "T4")}
    fastest_t4 = min(p.time_to_train_s for p in free.plans if p.gpu_type == "T4")
    r = rank_plans(MODEL, TRAIN, SMALL, tokens=1e9, max_gpus=2, deadline_s=fastest_t4 * 0.999)
    assert r.plans and {p.gpu_type for p in r.plans} == {"A100-40GB"}
    assert r.fit_by_type == fit
    for name in r.dropped:  # the per-type counts add up to the totals
        assert sum(c[name] for c in r.dropped_by_type.values()) == r.dropped[name]
    t4 = r.dropped_by_type["T4"]
    assert sum(t4.values()) == fit["T4"] and t4["deadline_s"] > 0
    words = {"max_gpus": "the GPU limit (2 GPUs)", "deadline_s": "the deadline ("}
    sentence = r.dropped_types["T4"]
    assert list(r.dropped_types) == ["T4"] and sentence.startswith(f"T4: {fit['T4']} fit in memory; ")
    for name, n in t4.items():
        if n:
            assert f"{n} {'dropped ' if name == next(k for k, v in t4.items() if v) else ''}by {words[name]}" \
                in sentence


def test_no_gpu_type_is_named_when_every_type_keeps_a_plan():
    r = rank_plans(MODEL, TRAIN, SMALL, tokens=1e9)
    assert r.dropped_types == {} and set(r.dropped_by_type) == {"A100-40GB", "T4"}


# --- the ranking's sort and grouping helpers: what numpy's own calls answer, with fewer sorts (issue 19) ----------
def test_sort_and_group_helpers_answer_as_numpy_does():
    from frenzy_core.plans import _combined_key, _dense_ids, _first_of_each, _lexsort, _runs

    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 30))
        keys = [rng.integers(0, int(rng.integers(1, 5)), n) for _ in range(int(rng.integers(1, 4)))]
        keys.append(rng.integers(0, 3, n) * 0.5)  # a float primary key with ties
        assert _lexsort(keys).tolist() == np.lexsort(keys).tolist()
        ints = keys[:-1]
        assert np.lexsort(_combined_key(ints)).tolist() == np.lexsort(ints).tolist()
        ids = rng.integers(0, 40, n)
        dense = _dense_ids(ids)
        assert dense.tolist() == np.unique(ids, return_inverse=True)[1].tolist()
        assert _first_of_each(dense, int(dense.max()) + 1).tolist() == np.unique(dense, return_index=True)[1].tolist()
        starts, group = _runs(np.sort(ids))
        assert starts.tolist() == np.unique(np.sort(ids), return_index=True)[1].tolist()
        assert group.tolist() == np.unique(np.sort(ids), return_inverse=True)[1].tolist()
    # keys whose ranges multiply past int64 stay as they are
    big = [np.array([2**40, 0]), np.array([0, 2**40])]
    assert len(_combined_key(big)) == 2


def test_a_plan_is_uneven_when_either_end_stage_holds_its_own_layer_count():
    # Megatron's --decoder-first-pipeline-num-layers alone (or --decoder-last-... alone) is an uneven pipeline: the
    # export then names the virtual stages per rank instead of layers per virtual stage (export.megatron_args)
    even = rank_plans(ZOO["gpt2"], GPT2_B8, ONE_T4, micro_batch=1).plans[0]
    assert not even.uneven
    for first, last in ((3, 0), (0, 3), (3, 3)):
        assert Plan(**{**even.as_dict(), "pp": 3, "first_stage_layers": first, "last_stage_layers": last}).uneven


def test_the_small_id_sort_is_numpys_stable_argsort_on_both_sides_of_the_16_bit_bound():
    from frenzy_core.plans import UINT16_MAX, _stable_argsort_ids

    rng = np.random.default_rng(0)
    for top in (10, UINT16_MAX, UINT16_MAX + 1, 200_000):
        ids = rng.integers(0, top + 1, size=5000)
        ids[:2] = top  # the largest id present, twice: ties keep their order
        assert _stable_argsort_ids(ids).tolist() == np.argsort(ids, kind="stable").tolist(), top
    assert _stable_argsort_ids(np.zeros(0, dtype=np.int64)).tolist() == []


def test_mixed_radix_ids_number_the_rows_in_lexicographic_order():
    """The grid's cell, split and chain ids: every digit tuple its own id, ascending as itertools.product counts."""
    from frenzy_core.plans import _mixed_radix

    radices = (3, 1, 4, 2)
    rows = np.array(list(itertools.product(*(range(r) for r in radices))), dtype=np.int64)
    ids = _mixed_radix(*((rows[:, i], r) for i, r in enumerate(radices)))
    assert ids.dtype == np.int64
    assert ids.tolist() == list(range(3 * 1 * 4 * 2))


def test_why_top_on_a_full_tie_names_memory_headroom_only_when_the_memory_differs():
    # gpu-hours on the twins: the first two plans tie on GPU-hours, time and GPUs (test above), and on memory too,
    # since the two types differ only in name and price: only the tie-break by type name separates them
    from dataclasses import replace

    result = rank_plans(ZOO["gpt2"], GPT2_B8, TWINS, objective="gpu-hours")
    first, second = result.plan(0), result.plan(1)
    assert first.memory_bytes == second.memory_bytes
    assert "on every objective key and on memory" in result.why_top and "memory headroom" not in result.why_top
    # the same pair with the runner-up needing 2 GiB more per GPU: memory headroom is what decides, with both values
    memory = result.columns["memory_bytes"].copy()
    memory[1] += 2 * 2**30
    roomier = replace(result, columns={**result.columns, "memory_bytes": memory})
    expected = f"({first.memory_bytes / 2**30:.2f} vs {first.memory_bytes / 2**30 + 2:.2f} GiB per GPU)"
    assert "wins on memory headroom " + expected in roomier.why_top
