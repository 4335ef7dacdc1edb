"""MARP plans: fit, completeness against brute force, documented ordering, infeasibility explained."""

import itertools

import pytest

from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.memory import predict_memory
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.plans import OBJECTIVES, rank_plans
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
        assert abs(p.memory_bytes - predict_memory(MODEL, tr, Parallelism(p.dp, p.tp, p.pp)).total_bytes) <= 1


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
