"""FSDP1 (torch FullyShardedDataParallel, frenzy_core/frameworks/fsdp1.py, read at torch 2.1.0): each of its terms
worked by hand from the FlatParameters of a tiny model, the `fsdp` field's validation and the CLI flag."""

from __future__ import annotations

import json

import pytest

from frenzy_core.cli import main
from frenzy_core.errors import SpecError
from frenzy_core.frameworks import FRAMEWORKS, get
from frenzy_core.memory import NO_OVERHEAD, lora_parameters, predict_memory
from frenzy_core.memory.phases import stage_terms
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.recipes import run_recipe
from frenzy_core.training import Parallelism, TrainingSpec, make_training

# A Llama-shaped model small enough to count by hand: h = 64, 4 heads of 16, ffn 128, V = 1,000, 2 layers, untied.
# One lit_gpt Block (one FSDP unit under auto_wrap_policy={Block}):
#   attn (fused q | k | v) 64 x 192 = 12,288, proj 64 x 64 = 4,096, fc_1 and fc_2 64 x 128 = 8,192 each,
#   mlp proj 128 x 64 = 8,192, norm_1 and norm_2 64 each:                  12,288 + 4,096 + 3 x 8,192 + 128 = 41,088
# The root unit (what no Block holds): wte 1,000 x 64 = 64,000, lm_head 64,000, ln_f 64:                    128,064
# Model: 2 x 41,088 + 128,064 = 210,240
TINY = ModelSpec(name="tiny-llama", vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128,
                 mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", max_positions=512,
                 norm_kind="rmsnorm", bias=False)
BLOCK, ROOT, BF16 = 41_088, 128_064, 2
# LoRA r = 4 on q and v (finetune/lora.py's lora_query, lora_value): A (4 x 64) + B (64 x 4) = 512 each: 1,024 a block
ADAPTERS = 1_024
# d = 2 ranks, micro-batch 1, global batch 4: 4 / (1 x 2) = 2 micro-batches a step (gradient accumulation)
D = 2
LORA = dict(seq_len=32, global_batch=4, micro_batch=1, precision="bf16", framework="litgpt", lora_rank=4,
            lora_targets="q,v", lora_dropout=0.05, zero_stage=3, recompute="full")


def _terms(**fields) -> dict[str, float]:
    return stage_terms(TINY, TrainingSpec(**{**LORA, **fields}), Parallelism(dp=D))


def test_the_tiny_model_is_counted_as_the_comments_say():
    assert TINY.layer_parameters() == BLOCK and TINY.parameter_count() == 2 * BLOCK + ROOT == 210_240


# --- gradients: the FlatParameter's, over its frozen base (use_orig_params) ------------------------------------------
def test_no_sync_keeps_each_blocks_unsharded_flat_gradient_over_its_frozen_base():
    # both Blocks hold adapters, so each FlatParameter's gradient spans the whole unit, frozen base included:
    # 2 x (41,088 + 1,024) = 84,224 elements; the root (no adapter on the head) has none. Inside no_sync (the first
    # of the 2 micro-batches) nothing is reduce-scattered: unsharded, bf16: 84,224 x 2 B = 168,448
    assert _terms()["gradients_in_backward"] == 2 * (BLOCK + ADAPTERS) * BF16 == 168_448


def test_the_reduce_scatter_leaves_one_shard_of_each_flat_gradient_for_the_step():
    # the syncing micro-batch reduce-scatters: 84,224 / 2 ranks x 2 B = 84,224 B at the optimizer step
    assert _terms()["gradients_at_step"] == 2 * (BLOCK + ADAPTERS) / D * BF16 == 84_224


def test_without_accumulation_no_flat_gradient_is_alive_when_backward_starts():
    # global batch 2 = 1 micro-batch x 2 ranks: no no_sync, and zero_grad(set_to_none) freed the last step's
    assert _terms(global_batch=2)["gradients_in_backward"] == 0


def test_one_units_backward_holds_its_views_gradients_and_their_concatenation():
    # the largest unit with a gradient is a Block with its adapters, 42,112 elements: its views' gradients wait in
    # SplitWithSizesBackward's input buffer, then torch.cat makes the flat gradient: 2 x 42,112 x 2 B = 168,448
    assert _terms()["fsdp1_unit_gradient"] == 2 * (BLOCK + ADAPTERS) * BF16 == 168_448


def test_full_training_gives_the_root_unit_a_gradient_and_it_is_the_largest_unit():
    full = dict(lora_rank=0, lora_targets="all-linear", lora_dropout=0.0)
    # every unit trains: 210,240 elements, unsharded in bf16 under no_sync: 420,480 B
    assert _terms(**full)["gradients_in_backward"] == (2 * BLOCK + ROOT) * BF16 == 420_480
    # the root unit (128,064) outweighs a Block (41,088): 2 x 128,064 x 2 B at the end of its backward
    assert _terms(**full)["fsdp1_unit_gradient"] == 2 * ROOT * BF16 == 512_256


def test_an_adapter_on_the_head_gives_the_root_unit_a_gradient():
    # lora_head: A (4 x 64) + B (1,000 x 4) = 4,256 more adapters, in the root's FlatParameter: the root's 128,064
    # frozen elements get a gradient too: 2 x 42,112 + 128,064 + 4,256 = 216,544 elements
    got = _terms(lora_targets="q,v,head")["gradients_in_backward"]
    assert got == (2 * (BLOCK + ADAPTERS) + ROOT + 4_256) * BF16 == 433_088


# --- sharded storage and the unsharded units ------------------------------------------------------------------------
def test_the_sharded_flat_parameters_hold_one_dth_of_base_and_adapters_in_bf16():
    # (210,240 + 2 x 1,024) / 2 ranks x 2 B
    assert _terms()["weights"] == (2 * BLOCK + ROOT + 2 * ADAPTERS) / D * BF16 == 212_288


def test_the_root_unit_and_the_last_block_are_unsharded_while_the_loss_backward_runs():
    # _post_forward_reshard keeps the root's flat parameter (wte + lm_head, 2 x 64,000); the root's pre-backward
    # prefetches the last Block (41,088): (128,000 + 41,088) x 2 B
    assert _terms()["weight_copies_at_loss"] == (2 * 64_000 + BLOCK) * BF16 == 338_176
    # inside a Block's backward the BACKWARD_PRE prefetch adds one more Block: 41,088 x 2 B
    assert _terms()["recomputed_layer_copies"] == BLOCK * BF16 == 82_176


def test_the_unit_gradient_phase_is_the_sum_of_its_terms_and_absent_without_fsdp1():
    training = TrainingSpec(**LORA)
    got = predict_memory(TINY, training, Parallelism(dp=D), overhead=NO_OVERHEAD)
    t = _terms()
    unit_moment = (t["weights"] + t["gradients_in_backward"] + t["optimizer_states"] + t["layer_activations"]
                   + t["micro_batch_inputs"] + t["stage_tables"] + t["head_activations"] + t["head_input_gradient"]
                   + t["weight_copies_at_loss"] + t["fp8_weight_caches"] + t["recomputed_layer_copies"]
                   + t["fsdp1_unit_gradient"] + t["gradient_bucket"] + t["moe_run_buffers"])
    assert got.total_bytes >= unit_moment
    # fully_shard (torchtune, FSDP2) forms no FlatParameter gradient: the phase never exists there
    tt = stage_terms(TINY, TrainingSpec(**{**LORA, "framework": "torchtune"}), Parallelism(dp=D))
    assert tt["fsdp1_unit_gradient"] == 0


# --- which runs are FSDP1 -------------------------------------------------------------------------------------------
def test_litgpt_shards_with_fsdp1_at_zero_stage_3_and_not_on_one_gpu():
    assert run_recipe(TrainingSpec(**LORA)).fsdp1_flat_parameters
    assert not run_recipe(TrainingSpec(**{**LORA, "zero_stage": 0})).fsdp1_flat_parameters


def test_hf_keeps_its_zero3_terms_unless_fsdp_1_is_given():
    hf = dict(framework="hf", precision="amp", zero_stage=3, global_batch=4)
    assert not run_recipe(TrainingSpec(**hf)).fsdp1_flat_parameters  # its accelerate export writes DeepSpeed
    assert run_recipe(TrainingSpec(**hf, fsdp=1)).fsdp1_flat_parameters


def test_the_stacks_default_fsdp_is_the_one_they_run():
    defaults = {name: get(name).fsdp_version(TrainingSpec(framework=name, precision=fw.default_precision,
                                                          zero_stage=3))
                for name, fw in FRAMEWORKS.items() if 3 in fw.zero_stages and name != "unknown"}
    assert defaults == {"pytorch": 0, "hf": 0, "megatron": 0, "fsdp2": 2, "deepspeed": 0, "torchtune": 2, "litgpt": 1}


# --- validation: each message names the field, the allowed values and the fix ---------------------------------------
@pytest.mark.parametrize(("fields", "words"), [
    ({"framework": "litgpt", "precision": "bf16", "zero_stage": 3, "fsdp": 3}, ("must be 1", "or 2", "or 0")),
    ({"framework": "litgpt", "precision": "bf16", "zero_stage": 3, "fsdp": 2}, ("FSDP1", "use fsdp 1")),
    ({"framework": "torchtune", "precision": "bf16", "zero_stage": 3, "fsdp": 1}, ("fully_shard", "use fsdp 2")),
    ({"framework": "fsdp2", "fsdp": 1}, ("fully_shard", "use fsdp 2")),
    ({"framework": "hf", "zero_stage": 3, "fsdp": 2}, ("not modelled", "use fsdp 1")),
    ({"framework": "megatron", "precision": "bf16-master", "fsdp": 1}, ("does not shard with FSDP", "leave fsdp 0")),
    ({"framework": "hf", "zero_stage": 2, "fsdp": 1}, ("use zero_stage 3", "got zero_stage 2")),
    ({"framework": "litgpt", "precision": "bf16", "zero_stage": 3, "offload": "optimizer"}, ("CPUOffload",)),
])
def test_an_fsdp_the_stack_does_not_run_is_refused_naming_the_field(fields, words):
    with pytest.raises(SpecError) as err:
        make_training(**fields)
    assert err.value.field == "fsdp"
    for word in words:
        assert word in str(err.value), (word, str(err.value))


# --- the CLI flag ----------------------------------------------------------------------------------------------------
def test_cli_fsdp_flag_reaches_the_memory_model(capsys):
    args = ["memory", "--model", "gpt2", "--seq-len", "128", "--framework", "hf", "--zero", "3", "--dp", "2",
            "--global-batch", "4", "--lora-rank", "8", "--json"]
    assert main(args) == 0
    zero3 = json.loads(capsys.readouterr().out)
    assert main([*args, "--fsdp", "1"]) == 0
    flat = json.loads(capsys.readouterr().out)
    # FSDP1 under accumulation (4 / (1 x 2) = 2 micro-batches): each of GPT-2's 12 decoder layers keeps its unsharded
    # flat gradient over its frozen base and its all-linear r = 8 adapters, in bf16 (amp's compute dtype); the generic
    # ZeRO-3 keeps only the adapters' shards
    gpt2 = ZOO["gpt2"]
    layer = gpt2.layer_parameters() + lora_parameters(gpt2, 8, "all-linear")
    assert flat["breakdown"]["gradients"] == 12 * layer * BF16
    assert zero3["breakdown"]["gradients"] < flat["breakdown"]["gradients"] / 50


def test_cli_refuses_an_fsdp_the_stack_does_not_run(capsys):
    assert main(["memory", "--model", "gpt2", "--framework", "litgpt", "--zero", "3", "--dp", "2", "--fsdp", "2"]) != 0
    assert "fsdp" in capsys.readouterr().err


def test_the_accelerate_export_refuses_fsdp_1_rather_than_write_deepspeed():
    from frenzy_core.cluster import parse_cluster_yaml
    from frenzy_core.export import export_plan
    from frenzy_core.plans import rank_plans

    cluster = parse_cluster_yaml("name: one\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 2}]")
    training = make_training(framework="hf", precision="amp", zero_stage=3, fsdp=1, seq_len=128, global_batch=4)
    plan = next(p for p in rank_plans(ZOO["gpt2"], training, cluster, tokens=1e6).plans if p.tp == p.pp == 1)
    with pytest.raises(SpecError) as err:
        export_plan("accelerate", ZOO["gpt2"], training, plan, cluster, 1e6)
    assert err.value.field == "export" and "fsdp 1" in str(err.value)
    # fsdp 0 exports as before: DeepSpeed ZeRO-3
    plain = training.model_copy(update={"fsdp": 0})
    assert "DEEPSPEED" in export_plan("accelerate", ZOO["gpt2"], plain, plan, cluster, 1e6)
