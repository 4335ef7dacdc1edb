"""frenzy_core.precision: bytes per parameter of each precision, and what a run's Megatron switches change."""

from __future__ import annotations

import pytest

from frenzy_core.precision import PRECISIONS, with_run_switches
from frenzy_core.training import TrainingSpec


def test_megatrons_bf16_master_is_its_18_bytes_per_parameter():
    # Megatron's distributed-optimizer docs: 2 bf16 param + 4 fp32 main grad + 4 master + 4 + 4 Adam = 18
    ps = PRECISIONS["bf16-master"]
    assert (ps.param_bytes, ps.grad_bytes, ps.master_bytes) == (2, 4, 4) and ps.model_state_bytes + 8 == 18


@pytest.mark.parametrize("bf16_grads, remainders, want", [
    (False, False, (2, 4, 4)),  # the switches off: nothing changes
    (True, False, (2, 2, 4)),  # --grad-reduce-in-bf16: bf16 main grads
    (False, True, (2, 4, 2)),  # store_param_remainders: the master's low 16 bits only
    (True, True, (2, 2, 2)),
])
def test_the_switches_change_only_their_own_bytes(bf16_grads, remainders, want):
    training = TrainingSpec(framework="megatron", precision="bf16-master", distributed_optimizer=True,
                            bf16_grad_reduce=bf16_grads, param_remainders=remainders)
    for ps in (with_run_switches(PRECISIONS["bf16-master"], training), training.precision_setup):
        assert (ps.param_bytes, ps.grad_bytes, ps.master_bytes) == want
        assert (ps.activation_bytes, ps.residual_bytes, ps.compute_dtype) == (2, 2, "bf16")


@pytest.mark.parametrize("precision", ["amp", "bf16", "fp32"])
def test_a_setup_without_a_master_copy_has_nothing_to_change(precision):
    class Run:  # duck-typed: only the two switches are read
        bf16_grad_reduce = param_remainders = True

    assert with_run_switches(PRECISIONS[precision], Run()) == PRECISIONS[precision]
    assert with_run_switches(PRECISIONS[precision], None) == PRECISIONS[precision]
    assert with_run_switches(PRECISIONS["bf16-master"], None) == PRECISIONS["bf16-master"]


def test_the_switches_are_idempotent():
    training = TrainingSpec(framework="megatron", precision="bf16-master", distributed_optimizer=True,
                            bf16_grad_reduce=True, param_remainders=True)
    once = with_run_switches(PRECISIONS["bf16-master"], training)
    assert with_run_switches(once, training) == once
