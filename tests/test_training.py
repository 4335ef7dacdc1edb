import numpy as np
import pytest

from frenzy_core.errors import SpecError
from frenzy_core.models import ZOO
from frenzy_core.training import (
    OPTIMIZER_STATE_BYTES,
    OPTIMIZER_TRANSIENT_BYTES,
    PRECISIONS,
    Parallelism,
    PipelineStages,
    TrainingSpec,
    bounding_stages,
    check_parallelism,
    check_pipeline_layout,
    make_training,
    pipeline_layout_problem,
    stage_layer_counts,
    stage_leading_layers,
    stage_of_layer,
    uneven_stage_options,
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


# --- uneven pipeline stages (Megatron-Core TransformerConfig num_layers_in_first/last_pipeline_stage) ---------------
# Layer counts that no even split of a power-of-two p holds: Llama-3.1-405B 126, DeepSeek-V3 61, Qwen3-235B 94.
@pytest.mark.parametrize(
    "layers, pp, vp, first, last, stages",
    [
        (126, 16, 1, 7, 7, (7,) + (8,) * 14 + (7,)),  # 7 + 14 x 8 + 7
        (126, 16, 1, 6, 0, (6,) + (8,) * 15),  # the last stage is a middle one: 6 + 15 x 8
        (126, 16, 1, 0, 6, (8,) * 15 + (6,)),
        (126, 16, 1, 6, 8, (6,) + (8,) * 15),  # Megatron accepts a last stage of the middle count: the layout of 6/0
        (126, 16, 2, 8, 6, (8,) * 15 + (6,)),  # vp 2: 8, 8 and 6 are all multiples of 2
        (126, 16, 2, 6, 0, (6,) + (8,) * 15),
        (126, 2, 1, 63, 63, (63, 63)),  # p = 2 with both set: no middle stage, first + last = 126
        (126, 2, 1, 60, 0, (60, 66)),  # p = 2, last a middle stage: it takes the other 66
        (61, 8, 1, 7, 6, (7,) + (8,) * 6 + (6,)),  # DeepSeek-V3: 7 + 6 x 8 + 6
        (61, 8, 1, 5, 0, (5,) + (8,) * 7),
        (94, 8, 1, 11, 11, (11,) + (12,) * 6 + (11,)),  # Qwen3-235B: 11 + 6 x 12 + 11
        (94, 8, 1, 0, 10, (12,) * 7 + (10,)),
        (12, 4, 1, 0, 0, (3, 3, 3, 3)),  # the even split
    ],
)
def test_megatron_valid_uneven_splits(layers, pp, vp, first, last, stages):
    par = Parallelism(pp=pp, vp=vp, first_stage_layers=first, last_stage_layers=last)
    assert pipeline_layout_problem(layers, pp, vp, first, last) is None
    check_pipeline_layout(layers, par)
    assert par.stage_layers(layers) == stages and sum(stages) == layers


@pytest.mark.parametrize(
    "layers, pp, vp, first, last, field",
    [
        (126, 16, 1, 0, 0, "pp"),  # 126 / 16 = 7.875
        (126, 16, 1, 7, 0, "first_stage_layers"),  # 119 middle layers over 15 stages
        (126, 16, 1, 8, 8, "first_stage_layers"),  # 110 over 14
        (126, 16, 2, 7, 6, "last_stage_layers"),  # 7: the embedding's slot; then the last must be 7, not 6
        (126, 8, 8, 15, 14, "last_stage_layers"),  # the same with Llama-3.1-405B's PP8 x VP8
        (126, 8, 8, 14, 15, "first_stage_layers"),  # 14 is a multiple of 8 minus 2, not the slot layout's 15
        (12, 2, 7, 6, 6, "first_stage_layers"),  # 12 + 2 over 2 x 7: chunks of 1, the lighter one would be empty
        (124, 8, 4, 15, 15, "first_stage_layers"),  # 124 + 2 slots do not split over 8 x 4 chunks
        (126, 16, 2, 6, 6, "first_stage_layers"),  # 114 over 14
        (126, 16, 4, 0, 6, "last_stage_layers"),  # 6 is not a multiple of vp 4
        (126, 2, 1, 60, 60, "first_stage_layers"),  # 6 layers left and no middle stage for them
        (12, 4, 1, 10, 2, "first_stage_layers"),  # no layer left for the 2 middle stages
        (12, 4, 1, 10, 1, "first_stage_layers"),  # 1 layer for 2 middle stages: one would be empty
        (126, 1, 1, 126, 0, "first_stage_layers"),  # uneven stages need p >= 2
        (61, 8, 2, 6, 0, "first_stage_layers"),  # vp 2: 55 middle layers over 7 stages
        (61, 8, 1, 0, 70, "last_stage_layers"),  # more layers than the model has
    ],
)
def test_megatron_invalid_uneven_splits_name_the_rule(layers, pp, vp, first, last, field):
    model = ZOO["gpt2"].model_copy(update={"num_layers": layers})
    par = Parallelism(pp=pp, vp=vp, first_stage_layers=first, last_stage_layers=last)
    assert pipeline_layout_problem(layers, pp, vp, first, last) is not None
    with pytest.raises(SpecError) as err:
        check_parallelism(model, TrainingSpec(seq_len=1024, global_batch=64, micro_batch=1), par)
    assert err.value.field == field
    message = str(err.value)
    assert "\n" not in message
    if field != "pp":
        assert "Megatron" in message and "middle" in message and "multiple of vp" in message


def test_negative_stage_layers_are_refused():
    with pytest.raises(SpecError) as err:
        check_pipeline_layout(126, Parallelism(pp=16, first_stage_layers=-1))
    assert err.value.field == "first_stage_layers"


def test_an_uneven_split_suggests_valid_ones():
    with pytest.raises(SpecError) as err:
        check_pipeline_layout(126, Parallelism(pp=16))
    assert "0/6, 7/7, 6/0" in str(err.value)


def test_uneven_stage_options_by_hand():
    # 126 on 16: middle stages of 8 (126 + 2 = 16 x 8): the last 2 lighter, both 1 lighter, or the first 2 lighter
    assert uneven_stage_options(126, 16) == ((0, 6), (7, 7), (6, 0))
    # vp 2: 7 is no multiple of 2, but 8 - 1: the first and last stages' outer chunks a layer lighter (Megatron's
    # account-for-embedding / loss layout: 126 + 2 = 16 x 2 chunks of 4)
    assert uneven_stage_options(126, 16, vp=2) == ((0, 6), (7, 7), (6, 0))
    assert uneven_stage_options(126, 8, vp=8) == ((15, 15),)  # Llama-3.1-405B, PP8 x VP8: 128 = 64 chunks of 2
    # DeepSeek-V3 on 8: 61 + 3 = 8 x 8, so first and last together 3 lighter
    assert uneven_stage_options(61, 8) == ((7, 6), (6, 7))
    assert uneven_stage_options(61, 8, vp=2) == ()  # 61 is odd: no split into multiples of 2
    assert uneven_stage_options(94, 8) == ((0, 10), (11, 11), (10, 0))  # Qwen3-235B: middle stages of 12
    assert uneven_stage_options(32, 4) == ((0, 0), (7, 7))  # even, or both ends 2 lighter than middles of 9
    assert uneven_stage_options(12, 1) == ((0, 0),)
    assert uneven_stage_options(12, 1, vp=2) == ()


def test_uneven_stage_options_are_all_valid_and_include_the_even_split():
    for layers in (12, 32, 61, 80, 94, 126):
        for pp in range(1, 33):
            for vp in (1, 2, 3):
                options = uneven_stage_options(layers, pp, vp)
                assert len(set(options)) == len(options)
                for first, last in options:
                    assert pipeline_layout_problem(layers, pp, vp, first, last) is None
                even = pipeline_layout_problem(layers, pp, vp) is None
                assert ((0, 0) in options) == even


def test_leading_layers_follow_megatrons_interleaved_order():
    # 8 layers, p 2, vp 2 (megatron/core/transformer/transformer_block.py get_num_layers_to_build's example):
    # stage 0 holds [0 1] [4 5], stage 1 [2 3] [6 7]
    assert stage_leading_layers(8, 3, 2, np.arange(2), vp=2).tolist() == [2.0, 1.0]
    assert stage_leading_layers(8, 5, 2, np.arange(2), vp=2).tolist() == [3.0, 2.0]
    # 12 layers, p 3, vp 2, first = last = 2: rounds of 6 layers, [0] [1 2 3 4] [5] then [6] [7 8 9 10] [11]
    assert stage_leading_layers(12, 7, 3, np.arange(3), 2, 2, 2).tolist() == [2.0, 4.0, 1.0]
    # DeepSeek-V3 7 / 6 on 8 stages: its 3 dense layers all on the first
    assert stage_leading_layers(61, 3, 8, np.arange(8), 7, 6).tolist() == [3.0] + [0.0] * 7


def test_bounding_stages_add_the_first_middle_stage_for_a_lighter_first_stage():
    assert [float(s) for s in bounding_stages(126, 0, 16)] == [0.0, 15.0]
    assert [float(s) for s in bounding_stages(126, 0, 16, 7, 7)] == [0.0, 1.0, 15.0]
    # DeepSeek-V3 7 / 6: layer 3 (the first MoE layer) sits on stage 0, so stages 0 and 1 bound the MoE mix
    assert [float(s) for s in bounding_stages(61, 3, 8, 7, 6)] == [0.0, 1.0, 0.0, 1.0, 7.0]


def test_pipeline_stages_of_many_layouts_at_once_answer_as_each_layout_alone():
    # one PipelineStages over arrays of layouts (what the memory model builds once per grid) gives, stage by stage,
    # what each layout gives on its own: DeepSeek-V3's 61 layers, even, uneven and interleaved
    layouts = [(1, 0, 0, 1), (8, 7, 6, 1), (8, 6, 7, 1), (2, 0, 30, 1), (61, 0, 0, 1), (4, 16, 15, 1)]
    p, first, last, vp = (np.array(col, dtype=np.float64) for col in zip(*layouts, strict=True))
    pipe = PipelineStages(61, p, first, last, vp)
    for stage in (0.0, 1.0, p - 1):
        stage = np.broadcast_to(stage, p.shape)
        for i, (pi, fi, li, vi) in enumerate(layouts):
            s = float(stage[i])
            assert pipe.counts(stage)[i] == float(stage_layer_counts(61, pi, s, fi, li))
            assert pipe.leading(3, stage)[i] == float(stage_leading_layers(61, 3, pi, s, fi, li, vi))
    for i, (pi, fi, li, vi) in enumerate(layouts):
        assert pipe.stage_of(3)[i] == float(stage_of_layer(61, 3, pi, fi, li, vi))
        # over many layouts the bounding stages are each layout's own, plus stage 1 where any has a first stage
        mine = {float(np.broadcast_to(b, p.shape)[i]) for b in pipe.bounding(3)}
        assert {float(b) for b in bounding_stages(61, 3, pi, fi, li, vi)} <= mine <= {0.0, 1.0, pi - 1} | {
            float(b) for b in bounding_stages(61, 3, pi, fi, li, vi)}
    # by hand: 7 / 6 on 8 stages, 8 layers on each middle stage; the 3 dense layers on stage 0
    assert PipelineStages(61, 8, 7, 6).counts(np.arange(8)).tolist() == [7.0] + [8.0] * 6 + [6.0]


def test_label_names_uneven_stages():
    assert Parallelism(pp=16, first_stage_layers=7, last_stage_layers=7).label() == "d=1 t=1 p=16 first=7 last=7"
    assert not Parallelism(pp=4).uneven and Parallelism(pp=4, last_stage_layers=2).uneven
