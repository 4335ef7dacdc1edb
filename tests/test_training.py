import pytest

from frenzy_core.errors import SpecError
from frenzy_core.models import ZOO
from frenzy_core.training import (
    OPTIMIZER_STATE_BYTES,
    OPTIMIZER_TRANSIENT_BYTES,
    PRECISIONS,
    Parallelism,
    TrainingSpec,
    check_parallelism,
    make_training,
)


def test_amp_step_is_twenty_bytes_per_parameter():
    # docs/memory.md ("The peak moves"): 4 param + 4 grad + 8 Adam + 4 foreach temporary = 20 inside optimizer.step()
    amp = PRECISIONS["amp"]
    assert amp.model_state_bytes + OPTIMIZER_STATE_BYTES["adamw"] + OPTIMIZER_TRANSIENT_BYTES["adamw"] == 20


def test_megatron_bf16_master_is_eighteen_bytes():
    assert PRECISIONS["bf16-master"].model_state_bytes + OPTIMIZER_STATE_BYTES["adamw"] == 18


def test_grad_accum_derived():
    t = TrainingSpec(seq_len=1024, global_batch=64, micro_batch=2)
    assert check_parallelism(ZOO["gpt2"], t, Parallelism(dp=4)) == 8


@pytest.mark.parametrize(
    "par, field",
    [(Parallelism(tp=5), "tp"), (Parallelism(pp=5), "pp"), (Parallelism(dp=3), "global_batch"),
     (Parallelism(dp=0), "dp")],
)
def test_bad_split_names_field(par, field):
    with pytest.raises(SpecError) as err:
        check_parallelism(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=64, micro_batch=2), par)
    assert err.value.field == field


@pytest.mark.parametrize("fields, field", [(dict(global_batch=-1), "global_batch"), (dict(zero_stage=4), "zero_stage"),
                                           (dict(precision="fp8"), "precision"), (dict(micro_batch=128), "micro_batch")])
def test_bad_training_names_field(fields, field):
    with pytest.raises(SpecError) as err:
        make_training(**fields)
    assert err.value.field == field


def test_learned_positions_bound_the_sequence():
    with pytest.raises(SpecError) as err:
        check_parallelism(ZOO["gpt2"], TrainingSpec(seq_len=2048, global_batch=8), Parallelism())
    assert err.value.field == "seq_len"
    # rotary models are not bounded by a position table
    assert check_parallelism(ZOO["llama-2-7b"], TrainingSpec(seq_len=8192, global_batch=8), Parallelism()) == 8
