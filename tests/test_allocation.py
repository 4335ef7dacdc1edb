"""The interactive allocation: HAS placements pinned to GPU slots, never over-committed, released exactly."""

from __future__ import annotations

import pytest

from frenzy_core.allocation import empty_allocation, free_by_type, release, submit
from frenzy_core.errors import SpecError
from frenzy_core.models import ZOO
from frenzy_core.plans import Plan, rank_plans
from frenzy_core.training import TrainingSpec


@pytest.fixture
def gpt2_plans(tiny_cluster):
    return rank_plans(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=1), tiny_cluster,
                      objective="gpus").plans


def test_submit_takes_exactly_the_plans_gpus_on_its_type(tiny_cluster, gpt2_plans):
    alloc, job = submit(tiny_cluster, empty_allocation(tiny_cluster), "j1", "gpt2", gpt2_plans)
    assert job is not None
    held = [(i, k) for i, node in enumerate(alloc.owner) for k, o in enumerate(node) if o == "j1"]
    assert len(held) == job.plan.num_gpus == len(job.slots)
    assert all(tiny_cluster.nodes[i].gpu_type == job.plan.gpu_type for i, _ in held)


def test_no_gpu_is_ever_held_by_two_jobs_and_a_full_cluster_refuses(tiny_cluster, gpt2_plans):
    alloc = empty_allocation(tiny_cluster)
    placed = 0
    for n in range(tiny_cluster.total_gpus + 2):
        alloc, job = submit(tiny_cluster, alloc, f"j{n}", "gpt2", gpt2_plans)
        placed += job is not None
    assert int(alloc.free_per_node().sum()) >= 0
    assert sum(o is not None for node in alloc.owner for o in node) == sum(j.plan.num_gpus for j in alloc.jobs)
    assert placed == len(alloc.jobs) < tiny_cluster.total_gpus + 2


def test_release_frees_only_that_jobs_gpus(tiny_cluster, gpt2_plans):
    alloc = empty_allocation(tiny_cluster)
    alloc, a = submit(tiny_cluster, alloc, "a", "gpt2", gpt2_plans)
    alloc, b = submit(tiny_cluster, alloc, "b", "gpt2", gpt2_plans)
    after = release(alloc, "a")
    assert [j.job_id for j in after.jobs] == ["b"]
    assert all(o != "a" for node in after.owner for o in node)
    assert sum(o == "b" for node in after.owner for o in node) == b.plan.num_gpus


def test_free_by_type_counts_free_and_total(tiny_cluster, gpt2_plans):
    alloc, job = submit(tiny_cluster, empty_allocation(tiny_cluster), "j", "gpt2", gpt2_plans)
    caps = free_by_type(tiny_cluster, alloc)
    assert caps["A100-80GB"][1] == 8 and caps["T4"] == (2, 2) or job.plan.gpu_type == "T4"
    assert sum(t - f for f, t in caps.values()) == job.plan.num_gpus


def test_duplicate_job_id_and_unknown_release_name_the_field(tiny_cluster, gpt2_plans):
    alloc, _ = submit(tiny_cluster, empty_allocation(tiny_cluster), "j", "gpt2", gpt2_plans)
    with pytest.raises(SpecError) as err:
        submit(tiny_cluster, alloc, "j", "gpt2", gpt2_plans)
    assert err.value.field == "job_id"
    with pytest.raises(SpecError):
        release(alloc, "nope")


def _timed_plan(n: int, hours: float) -> Plan:
    gib = 2**30
    return Plan(gpu_type="A100-80GB", dp=n, tp=1, pp=1, num_gpus=n, micro_batch=1, grad_accum=1,
                memory_bytes=10 * gib, headroom_bytes=0, gpu_memory_bytes=80 * gib, step_time_s=1.0,
                tokens_per_s=1.0, time_to_train_s=hours * 3600, gpu_hours=hours * n, cost_usd=1.0)


def test_submit_skips_plans_below_the_scaling_floor(tiny_cluster):
    """8 GPUs in 10 h against 2 GPUs in 25 h: 4x the GPUs for 2.5x the speed. At floor 0.5 the added GPUs must buy
    at least 1 + 0.5 x (4 - 1) = 2.5x: 2.5x passes; at 0.6 (needs 2.8x) HAS takes the 2-GPU plan; at 0 the 8."""
    plans = (_timed_plan(8, 10.0), _timed_plan(2, 25.0))
    for floor, want in ((0.0, 8), (0.5, 8), (0.6, 2)):
        _, job = submit(tiny_cluster, empty_allocation(tiny_cluster), "j", "m", plans, scaling_floor=floor)
        assert job is not None and job.plan.num_gpus == want, floor


@pytest.mark.parametrize("floor", [-0.1, 1.5, float("nan")])
def test_submit_refuses_a_floor_outside_zero_to_one(tiny_cluster, gpt2_plans, floor):
    with pytest.raises(SpecError) as err:
        submit(tiny_cluster, empty_allocation(tiny_cluster), "j", "gpt2", gpt2_plans, scaling_floor=floor)
    assert err.value.field == "scaling_floor"
