"""frenzy_core.recipes: each framework term worked by hand from the framework's code, and the recipes' contract."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from frenzy_core.errors import SpecError
from frenzy_core.memory import NO_OVERHEAD, layer_activations, predict_memory, predict_memory_band
from frenzy_core.models import ZOO, ModelSpec
from frenzy_core.recipes import FRAMEWORKS, RECIPES, get_recipe
from frenzy_core.training import Parallelism, TrainingSpec, make_training

GPT2, LLAMA8 = ZOO["gpt2"], ZOO["llama-3.1-8b"]
# Megatron-LM's CI GPT (tests/functional_tests/test_cases/gpt/*/model_config.yaml): 12 x 512, 8 heads, vocab 50304
MLM_GPT = ModelSpec(name="mlm-ci", vocab_size=50304, hidden_size=512, num_layers=12, num_heads=8, max_positions=1024)


def _spec(framework, **kw):
    base = dict(seq_len=1024, global_batch=4, micro_batch=4, precision="bf16-master", framework=framework)
    return TrainingSpec(**{**base, **kw})


def test_every_framework_has_a_recipe_named_after_it():
    assert set(FRAMEWORKS) == {"pytorch", "hf", "megatron", "fsdp2", "deepspeed", "torchtune", "litgpt"}
    assert all(RECIPES[name].name == name for name in FRAMEWORKS)


def test_unknown_framework_name_is_a_spec_error_naming_framework():
    with pytest.raises(SpecError) as err:
        get_recipe("jax")
    assert err.value.field == "framework"
    with pytest.raises(SpecError) as err:
        make_training(framework="jax")
    assert err.value.field == "framework"


def test_megatron_vocab_parallel_loss_keeps_six_bytes_per_logit():
    # cross_entropy.py: one fp32 softmax made in place (4 B) + autograd's cast of its in-place gradient to bf16 (2 B).
    # b=4, s=1024: 4,096 tokens x 50,304 logits x 6 B = 1,236,271,104; the head's gradient (50,304 x 512 x 2 +
    # 4,096 x 512 x 2 = 55,705,600) is smaller, so the logits term is the loss.
    got = predict_memory(MLM_GPT, _spec("megatron"), overhead=NO_OVERHEAD)
    assert got.logits_bytes == 4096 * 50304 * 6 == 1_236_271_104
    # the plain PyTorch loss: fp32 log-softmax + nll gradient + its own gradient = 12 B per logit
    assert predict_memory(MLM_GPT, _spec("pytorch"), overhead=NO_OVERHEAD).logits_bytes == 4096 * 50304 * 12


def test_megatron_fused_softmax_saves_five_bytes_per_score_with_dropout():
    # fused_softmax.py: bf16 probs (2) + dropout mask (1) + dropout output kept by the PV matmul (2) = 5 per score;
    # the PyTorch/autocast path keeps fp32 probs (4) + mask (1) + bf16 dropout output (2) = 7.
    a = MLM_GPT.num_heads
    eager = dict(attention="eager", dropout=0.1)
    assert layer_activations(MLM_GPT, _spec("megatron", **eager)).scores == 5 * a == 40
    assert layer_activations(MLM_GPT, _spec("pytorch", **eager)).scores == 7 * a
    assert layer_activations(MLM_GPT, _spec("megatron", attention="eager")).scores == 2 * a  # no dropout: probs only


def test_hf_gelu_new_saves_its_unfused_formula():
    # NewGELUActivation under CUDA autocast (fp32 params): pow saves its fp32 input cast (4), tanh its output (4),
    # the last mul saves 0.5*x (2) and 1 + tanh (4), c_proj keeps its bf16 input (2): 16 B per inner element,
    # against 2 + 2 for a fused GELU. GPT-2's inner width is 3,072: 12 x 3,072 = 36,864 more bytes per token.
    amp = dict(precision="amp")
    hf, pt = layer_activations(GPT2, _spec("hf", **amp)), layer_activations(GPT2, _spec("pytorch", **amp))
    assert hf.split - pt.split == 12 * 3072 == 36_864
    assert hf.replicated == pt.replicated  # GPT-2 keeps a fused c_attn and LayerNorm: nothing else differs


def test_hf_llama_separate_projections_and_unfused_rmsnorm_under_autocast():
    # h = 4,096, kv = 1,024. Replicated: each LlamaRMSNorm saves an fp32 normalised copy (2 x 4h); q/k/v cast the
    # fp32 norm output three times, gate/up twice (2 + 1 extra bf16 copies: 3 x 2h). Split, flash: q_proj/k_proj
    # outputs die after RoPE (only v and the rotated copies survive): 2 x (4,096 + 1,024) fewer bytes.
    h, kv = 4096, 1024
    hf, pt = (layer_activations(LLAMA8, _spec(f, precision="amp", attention="flash")) for f in ("hf", "pytorch"))
    assert hf.replicated - pt.replicated == 2 * 4 * h + 3 * 2 * h == 57_344
    assert pt.split - hf.split == 2 * (h + kv)


def test_hf_trainer_drops_the_model_output_before_backward():
    # Trainer.compute_loss returns outputs["loss"] only: the bf16 logits die with the output object, and
    # ForCausalLMLoss's logits.float() is not saved by log_softmax: the plain 12 B per logit remain
    got = predict_memory(MLM_GPT, _spec("hf", precision="amp"), overhead=NO_OVERHEAD)
    assert got.logits_bytes == 4096 * 50304 * 12


def test_fsdp2_zero3_by_hand():
    # gpt2 (124,439,808 params), amp -> MixedPrecisionPolicy(bf16, fp32), d=8, b=1, s=1024, B=8 (one micro-batch):
    # fp32 params and Adam's 8 B, / 8; no gradient while the loss' backward runs (torchtitan zero_grad(set_to_none)
    # before the forward); gathered bf16: the last block (not resharded after forward: 7,087,872) plus the head's
    # unit (the tied 38,597,376-parameter embedding): 91,370,496 bytes.
    P = 124_439_808
    training = TrainingSpec(seq_len=1024, global_batch=8, micro_batch=1, precision="amp", framework="fsdp2")
    got = predict_memory(GPT2, training, Parallelism(dp=8), overhead=NO_OVERHEAD)
    assert got.weights_bytes == P * 4 // 8
    assert got.gradients_bytes == 0
    assert got.optimizer_bytes == P * 8 // 8
    assert got.transient_bytes == (7_087_872 + 38_597_376) * 2 == 91_370_496
    assert got.peak_phase == "backward-start"
    # reserved, not allocated: the fp32 gradient shards' blocks in the reduce-scatter stream's pool (P x 4 / 8) and
    # the all-gather copy-in pool's peak: the root unit (head 38,597,376 + ln_f 1,536 + wpe 786,432) beside the first
    # block's output (7,087,872) and its bf16 input shard (7,087,872 / 8), all bf16
    all_gather = (38_597_376 + 1_536 + 786_432 + 7_087_872 + 7_087_872 // 8) * 2
    assert got.reserved_bytes - got.allocated_bytes == P * 4 // 8 + all_gather == 62_219_904 + 94_718_400


def test_fsdp2_rejects_zero_1_and_2():
    with pytest.raises(SpecError) as err:
        make_training(framework="fsdp2", zero_stage=2)
    assert err.value.field == "framework" or "zero_stage" in str(err.value)


def test_megatron_has_no_autocast_mode():
    with pytest.raises(SpecError):
        make_training(framework="megatron", precision="amp")


def test_deepspeed_allocates_its_reduce_bucket_in_backward():
    # stage_1_and_2.py backward(): ipg_buffer = torch.empty(reduce_bucket_size = 5e8, dtype=bf16): 1e9 bytes
    z0 = predict_memory(GPT2, _spec("deepspeed"), Parallelism(dp=1), overhead=NO_OVERHEAD)
    z2 = predict_memory(GPT2, _spec("deepspeed", zero_stage=2), Parallelism(dp=1), overhead=NO_OVERHEAD)
    assert z2.peak_phase == "backward-start"
    assert z2.transient_bytes - z0.transient_bytes == 500_000_000 * 2


def test_deepspeed_bf16_keeps_bf16_gradients():
    # DeepSpeedZeroOptimizer: bf16 params and gradients, fp32 master + Adam states: 2 + 2 + 4 + 8 bytes per param
    got = predict_memory(GPT2, _spec("deepspeed", global_batch=8), Parallelism(dp=1), overhead=NO_OVERHEAD)
    P = GPT2.parameter_count()
    assert (got.weights_bytes, got.gradients_bytes, got.optimizer_bytes) == (2 * P, 2 * P, 12 * P)


def test_unknown_framework_gives_the_band_of_all_recipes():
    training = _spec("unknown", precision="bf16-master", global_batch=8)
    low, high = predict_memory_band(GPT2, training, Parallelism(dp=2), overhead=NO_OVERHEAD)
    each = [
        predict_memory(GPT2, training.model_copy(update={"framework": f}), Parallelism(dp=2), overhead=NO_OVERHEAD)
        for f in FRAMEWORKS
    ]
    assert low.total_bytes == min(r.total_bytes for r in each) < high.total_bytes == max(r.total_bytes for r in each)
    assert predict_memory(GPT2, training, Parallelism(dp=2), overhead=NO_OVERHEAD).total_bytes == high.total_bytes


def test_expert_parallelism_splits_experts_and_shards_their_states_over_dp_over_ep():
    # 8 experts of 2 x 512 x 2,048 + 2,048 + 512 = 2,099,712 params each, 12 layers, GELU, bf16-master, no ZeRO:
    # with ep = 2 (dp = 4) each GPU holds 4 experts per layer: 12 x 4 x 2,099,712 = 100,786,176 expert params,
    # 18 B each (2 bf16 + 4 main grad + 12 master/Adam, unsharded) = 1,814,151,168 bytes less than ep = 1 holds.
    moe = MLM_GPT.model_copy(update={"num_experts": 8, "moe_top_k": 1})
    training = _spec("megatron", global_batch=16, attention="flash")
    one = predict_memory(moe, training, Parallelism(dp=4), overhead=NO_OVERHEAD)
    two = predict_memory(moe, training, Parallelism(dp=4, ep=2), overhead=NO_OVERHEAD)
    states = lambda r: r.weights_bytes + r.gradients_bytes + r.optimizer_bytes  # noqa: E731
    assert states(one) - states(two) == 12 * 4 * 2_099_712 * 18 == 1_814_151_168
    # the distributed optimizer shards expert states over dp / ep = 2 ranks, dense ones over dp = 4
    dist = training.model_copy(update={"distributed_optimizer": True})
    got = predict_memory(moe, dist, Parallelism(dp=4, ep=2), overhead=NO_OVERHEAD)
    dense = moe.parameter_count() - 12 * 8 * 2_099_712
    assert got.optimizer_bytes == round(dense * 12 / 4 + 12 * 4 * 2_099_712 * 12 / 2)


def test_expert_parallelism_needs_an_moe_model():
    with pytest.raises(SpecError) as err:
        predict_memory(GPT2, _spec("megatron", global_batch=8), Parallelism(dp=2, ep=2))
    assert err.value.field == "ep"


def test_hf_gpt2_eager_softmax_follows_the_input_dtype():
    # modeling_gpt2.py eager_attention_forward: softmax(dim=-1) with no dtype, then .type(value.dtype). With bf16
    # params (no autocast): bf16 probs (2) + mask (1) + dropout output (2) = 5 per score; under autocast CUDA runs
    # softmax in fp32: 4 + 1 + 2 = 7, as the plain-PyTorch path.
    a = GPT2.num_heads
    eager = dict(attention="eager", dropout=0.1)
    assert layer_activations(GPT2, _spec("hf", precision="bf16-master", **eager)).scores == 5 * a
    assert layer_activations(GPT2, _spec("hf", precision="amp", **eager)).scores == 7 * a


def test_fsdp2_root_unit_keeps_embedding_and_head_unsharded():
    # torchtitan apply_fsdp: tok_embeddings + norm + output are the root unit, not resharded after forward.
    # Llama-3.1-8B (untied), d = 8: gathered bf16 while the loss' backward runs = the last block (218,112,000) + head +
    # embedding (2 x 128,256 x 4,096) = 1,268,785,152 params x 2 B.
    block = LLAMA8.layer_parameters()
    assert block == 218_112_000
    training = TrainingSpec(seq_len=1024, global_batch=8, micro_batch=1, precision="amp", framework="fsdp2")
    got = predict_memory(LLAMA8, training, Parallelism(dp=8), overhead=NO_OVERHEAD)
    assert got.transient_bytes == (block + 2 * 128_256 * 4096) * 2 == 2_537_570_304


def test_fsdp2_side_stream_pools_for_llama_8b():
    # Llama-3.1-8B (8,030,261,248 params), d = 8: the reduce-scatter pool holds every fp32 gradient shard
    # (8,030,261,248 x 4 / 8 = 4,015,130,624); the all-gather copy-in pool the root unit's bf16 output (embedding +
    # head 2 x 525,336,576 + final norm 4,096) beside block 0's output (218,112,000) and input shard (27,264,000):
    # 1,296,053,248 x 2 = 2,592,106,496. Both are reserved, never allocated, at the default stream's peak.
    training = TrainingSpec(seq_len=8192, global_batch=16, micro_batch=2, precision="amp", framework="fsdp2",
                            recompute="op-sac")
    got = predict_memory(LLAMA8, training, Parallelism(dp=8), overhead=NO_OVERHEAD)
    assert got.reserved_bytes - got.allocated_bytes == 4_015_130_624 + 2_592_106_496
    assert got.total_bytes == got.reserved_bytes  # no overhead: total = reserved, the components still sum to it
    assert sum(got.components().values()) == got.total_bytes
    # other recipes keep no side-stream pools: reserved = allocated without overhead
    pt = predict_memory(LLAMA8, training.model_copy(update={"framework": "pytorch", "zero_stage": 3}),
                        Parallelism(dp=8), overhead=NO_OVERHEAD)
    assert pt.reserved_bytes == pt.allocated_bytes


def test_fsdp2_recomputed_block_has_its_next_block_prefetched():
    # 12 x 512 GPT (vocab 512, tied), full recomputation, d = 4: the loss is small, so the peak is a block's
    # recomputation; FSDP2 has that block and the one _backward_prefetch gathered: 2 x 3,152,384 + the tied head
    # 262,144, bf16 = 13,133,824 bytes; while the loss' backward runs only one block: 6,829,056.
    small = MLM_GPT.model_copy(update={"vocab_size": 512})
    training = TrainingSpec(seq_len=1024, global_batch=16, micro_batch=4, precision="amp", framework="fsdp2",
                            recompute="full")
    got = predict_memory(small, training, Parallelism(dp=4), overhead=NO_OVERHEAD)
    assert got.peak_phase == "backward-recompute"
    assert got.transient_bytes == (2 * 3_152_384 + 512 * 512) * 2 == 13_133_824
    big_vocab = predict_memory(MLM_GPT, training, Parallelism(dp=4), overhead=NO_OVERHEAD)
    assert big_vocab.peak_phase == "backward-start"
    assert big_vocab.transient_bytes == (3_152_384 + 50_304 * 512) * 2


def test_fsdp2_final_norm_is_torchtitans_eager_rmsnorm():
    # Llama-3.1-8B, full recomputation, s = 1,024, b = 1: per token 32 block inputs (32 x 2h), the final RMSNorm
    # (norms.py: x.float() kept 4h, the normalised bf16 tensor 2h, fp32 rstd 4), the head's input 2h, token and
    # target ids (8 + 8); plus RoPE's cos/sin tables (2 x 1,024 x 128 x 2). h = 4,096.
    h = 4096
    per_token = 32 * 2 * h + (4 * h + 2 * h + 4) + 2 * h + 16
    training = TrainingSpec(seq_len=1024, global_batch=8, micro_batch=1, precision="amp", framework="fsdp2",
                            recompute="full")
    got = predict_memory(LLAMA8, training, Parallelism(dp=8), overhead=NO_OVERHEAD)
    assert got.activations_bytes == 1024 * per_token + 2 * 1024 * 128 * 2 == 302_534_656
    # compile fuses the blocks' norms, not the final one (apply_compile wraps TransformerBlocks only)
    compiled = predict_memory(LLAMA8, training.model_copy(update={"compile": True}), Parallelism(dp=8),
                              overhead=NO_OVERHEAD)
    assert compiled.activations_bytes == got.activations_bytes


def test_fsdp2_eager_block_norms_keep_an_fp32_copy_compile_fuses_them():
    # no recomputation: each of the block's two eager RMSNorms keeps x.float() (4h) beyond a fused kernel
    eager = _spec("fsdp2", precision="amp", attention="flash")
    fused = layer_activations(LLAMA8, eager.model_copy(update={"compile": True}))
    assert layer_activations(LLAMA8, eager).replicated - fused.replicated == 2 * 4 * 4096


def test_compiled_op_sac_saves_only_what_backward_needs():
    # Under torch.compile the partitioner saves a MUST_SAVE mm only if backward reads it: w2's output feeds only the
    # residual add. Llama-3.1-8B: 63,616 - 2 x 4,096 = 55,424 bytes per token per layer; over 32 layers and
    # 16,384 tokens (b = 2, s = 8,192) that is 32 x 16,384 x 8,192 = 4,294,967,296 bytes less.
    from frenzy_core.memory import op_sac_layer_activations

    training = TrainingSpec(seq_len=8192, global_batch=16, micro_batch=2, precision="amp", framework="fsdp2",
                            recompute="op-sac")
    compiled = training.model_copy(update={"compile": True})
    sac = op_sac_layer_activations(LLAMA8, compiled, get_recipe("fsdp2"))
    assert sac.replicated + sac.split == 2 * 4096 + 2 * 4096 + 2 * 1024 + 2 * 14336 + 2 * 4096 + 4 * 32 == 55_424
    eager = predict_memory(LLAMA8, training, Parallelism(dp=8), overhead=NO_OVERHEAD)
    comp = predict_memory(LLAMA8, compiled, Parallelism(dp=8), overhead=NO_OVERHEAD)
    assert eager.activations_bytes - comp.activations_bytes == 32 * 16_384 * 8_192 == 4_294_967_296


def test_compile_is_modelled_for_fsdp2_and_torchtune_only():
    with pytest.raises(SpecError) as err:
        make_training(framework="megatron", precision="bf16-master", compile=True)
    assert err.value.field == "compile" and "fsdp2 or torchtune" in str(err.value)
    assert make_training(framework="torchtune", precision="bf16", compile=True).compile  # compile_model per layer
    assert make_training(framework="unknown", compile=True).compile  # amp: the band then holds fsdp2 alone
    with pytest.raises(SpecError) as err:  # two stacks' options: no recipe could run both
        make_training(framework="unknown", precision="bf16-master", compile=True, moe_grouped_gemm=True)
    assert "compile" in str(err.value)


def test_fp8_linears_keep_one_byte_inputs_and_a_cached_fp8_weight_with_its_transpose():
    # megatron, bf16, flash, GPT-style 12 x 512 (ffn 2,048): per token per layer the QKV and fc1 inputs drop from 2 h
    # to 1 h (replicated: -2 x 512), the fc2 input from 2 x 2,048 to 1 x 2,048 and the output projection adds a
    # 1 x 512 fp8 copy (split: -2,048 + 512); the step caches 2 B (fp8 weight + transpose) per linear parameter.
    base, fp8 = (layer_activations(MLM_GPT, _spec("megatron", attention="flash", fp8_linears=f)) for f in (False, True))
    assert base.replicated - fp8.replicated == 2 * 512
    assert base.split - fp8.split == 2048 - 512
    b0 = predict_memory(MLM_GPT, _spec("megatron", attention="flash"), overhead=NO_OVERHEAD)
    b8 = predict_memory(MLM_GPT, _spec("megatron", attention="flash", fp8_linears=True), overhead=NO_OVERHEAD)
    linears = 12 * (MLM_GPT.attention_parameters() + MLM_GPT.mlp_parameters())
    assert b8.transient_bytes - b0.transient_bytes == 2 * linears


def test_megatron_fused_swiglu_keeps_fc1s_output_and_the_product_only():
    # Megatron's MLP with bias_activation_fusion runs SwiGLU as SwiGLUFunction (fusions/fused_bias_swiglu.py), which
    # saves only its input, fc1's 2 x inner output; fc2 keeps the product. bf16: 2 x 2 B + 2 B = 6 B per inner unit
    # per token. Plain PyTorch's silu(gate) * up keeps the SiLU output too: 8 B. Widening ffn by 1,024 adds exactly
    # that much to the split term (nothing else in the layer depends on ffn).
    def llama(ffn):
        return ModelSpec(name=f"l{ffn}", vocab_size=1024, hidden_size=512, num_layers=2, num_heads=8, ffn_size=ffn,
                         mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", bias=False)

    def split(framework, ffn):
        return layer_activations(llama(ffn), _spec(framework, attention="flash")).split

    assert split("megatron", 2048) - split("megatron", 1024) == 6 * 1024
    assert split("pytorch", 2048) - split("pytorch", 1024) == 8 * 1024
    # fp8 linears: fc2 keeps its input in fp8 (1 B): 4 + 1 B per inner unit
    fp8 = [layer_activations(llama(f), _spec("megatron", attention="flash", fp8_linears=True)).split
           for f in (1024, 2048)]
    assert fp8[1] - fp8[0] == 5 * 1024


def test_megatron_fp8_weights_and_bf16_main_grads_by_hand():
    # Llama-3.1-8B, d = 8, megatron, bf16-master with fp8 linears and the distributed optimizer. Its linears hold
    # 32 x (4,096 x (4,096 + 2 x 1,024) + 4,096 x 4,096 + 3 x 4,096 x 14,336) = 6,979,321,856 parameters (the
    # embedding, the LM head and the norms stay bf16). fp8_params (--fp8-param-gather): each linear weight is fp8
    # (1 B, not 2) and TE caches only its transpose (1 B, not the fp8 cast + transpose, 2 B): -2 B per linear
    # parameter. bf16_grad_reduce (--grad-reduce-in-bf16): main grads 2 B instead of 4 for all 8,030,261,248.
    linears = 32 * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336)
    assert linears == 6_979_321_856 and LLAMA8.parameter_count() == 8_030_261_248
    par = Parallelism(dp=8)

    def run(**kw):
        spec = _spec("megatron", seq_len=4096, global_batch=64, micro_batch=1, distributed_optimizer=True,
                     fp8_linears=True, **kw)
        return predict_memory(LLAMA8, spec, par, overhead=NO_OVERHEAD)

    base, fp8w, bf16g = run(), run(fp8_params=True), run(bf16_grad_reduce=True)
    assert base.weights_bytes - fp8w.weights_bytes == linears * 1
    assert base.transient_bytes - fp8w.transient_bytes == linears * 1
    assert base.gradients_bytes - bf16g.gradients_bytes == 8_030_261_248 * 2
    assert base.optimizer_bytes == fp8w.optimizer_bytes == bf16g.optimizer_bytes  # fp32 masters and states stay
    assert base.activations_bytes == fp8w.activations_bytes == bf16g.activations_bytes


def test_master_remainders_keep_two_bytes_of_each_fp32_master_sharded_over_d():
    # Apex DistributedFusedAdam store_param_remainders / Megatron's precision-aware optimizer: the fp32 master is the
    # bf16 param plus 16 remainder bits, so the distributed optimizer keeps (2 + 4 + 4) B instead of (4 + 4 + 4) B
    # per parameter, over d = 8: -2 B x 8,030,261,248 / 8 on Llama-3.1-8B. Weights, grads, activations: unchanged.
    par = Parallelism(dp=8)

    def run(**kw):
        spec = _spec("megatron", seq_len=4096, global_batch=64, micro_batch=1, distributed_optimizer=True, **kw)
        return predict_memory(LLAMA8, spec, par, overhead=NO_OVERHEAD)

    base, rem = run(), run(param_remainders=True)
    assert base.optimizer_bytes - rem.optimizer_bytes == 2 * 8_030_261_248 / 8
    assert (base.weights_bytes, base.gradients_bytes, base.activations_bytes) == (
        rem.weights_bytes, rem.gradients_bytes, rem.activations_bytes)


def test_megatron_precision_switches_refuse_what_they_cannot_change():
    for kw, words in ((dict(fp8_params=True, distributed_optimizer=True), "fp8_linears"),
                      (dict(fp8_params=True, fp8_linears=True), "distributed_optimizer"),
                      (dict(bf16_grad_reduce=True, precision="bf16"), "bf16-master"),
                      (dict(fp8_params=True, fp8_linears=True, distributed_optimizer=True, lora_rank=8), "lora_rank"),
                      (dict(param_remainders=True), "distributed_optimizer"),
                      (dict(param_remainders=True, distributed_optimizer=True, precision="bf16"), "bf16-master"),
                      (dict(param_remainders=True, fp8_params=True, fp8_linears=True, distributed_optimizer=True),
                       "fp8_params")):
        with pytest.raises(SpecError) as err:
            make_training(**{"framework": "megatron", "precision": "bf16-master", **kw})
        assert words in str(err.value)
    with pytest.raises(SpecError) as err:
        make_training(framework="fsdp2", precision="bf16-master", bf16_grad_reduce=True)
    assert "bf16_grad_reduce" in str(err.value) and "megatron" in str(err.value)


def _saved_bytes_per_token(module, x) -> float:
    """Bytes per token of the tensors autograd saves in one forward of `module` (parameters left out, the input in),
    each storage once: torch's saved_tensors_hooks see what a compiled graph saves as well as eager ops."""
    import torch

    seen: dict[int, int] = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    return sum(n for ptr, n in seen.items() if ptr not in params) / x.shape[0]


def test_torchtunes_mlp_block_eager_and_compiled_equals_what_torch_saves():
    # torchtune's RMSNorm (modules/rms_norm.py) and FeedForward (w2(silu(w1 x) * w3 x)) with the residual add, bf16,
    # run eager and under torch.compile with AOTAutograd's min-cut partitioner (Inductor's; no-op compilers, so no
    # C++ toolchain is needed): the norm and MLP terms of the torchtune recipe, compile off and on, against the
    # saved tensors. Eager 8,196 B/token at h 256, ffn 768 (x_fp32 + normed + rstd, w1 / w3 input, 4 x inner);
    # compiled 5,636 (x + rstd, w1 / w3 input, 3 x inner: SiLU recomputed).
    torch = pytest.importorskip("torch")
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch import nn
    from torch._dynamo.backends.common import aot_autograd

    from frenzy_core.memory.activations import _layer_context, _mlp_block
    from frenzy_core.recipes import block_recipe

    h, ffn, tokens = 256, 768, 512

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(h))

        def forward(self, x):
            x_fp32 = x.float()
            return (x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * self.scale

    class Block(nn.Module):  # the MLP half of TransformerSelfAttentionLayer
        def __init__(self):
            super().__init__()
            self.norm, self.w1, self.w2, self.w3 = (RMSNorm(), nn.Linear(h, ffn, bias=False),
                                                    nn.Linear(ffn, h, bias=False), nn.Linear(h, ffn, bias=False))

        def forward(self, x):
            y = self.norm(x)
            return x + self.w2(nn.functional.silu(self.w1(y)) * self.w3(y))

    def nop(graph, _):
        return make_boxed_func(graph.forward)

    block = Block().to(torch.bfloat16)
    x = torch.randn(tokens, h, dtype=torch.bfloat16, requires_grad=True)
    backend = aot_autograd(fw_compiler=nop, bw_compiler=nop, partition_fn=min_cut_rematerialization_partition)
    traced = {False: _saved_bytes_per_token(block, x),
              True: _saved_bytes_per_token(torch.compile(block, backend=backend), x)}
    assert traced == {False: 8196.0, True: 5636.0}
    model = ModelSpec(name="tt", vocab_size=1024, hidden_size=h, num_layers=1, num_heads=4, ffn_size=ffn,
                      mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", bias=False)
    for compiled in (False, True):
        training = _spec("torchtune", precision="bf16", compile=compiled)
        recipe = block_recipe(get_recipe("torchtune"), training)
        mlp = _mlp_block(model, recipe, _layer_context(model, training, recipe), False)
        predicted = mlp.norm_input + mlp.norm_stats + mlp.fc1_input + mlp.dropout_mask + mlp.inner_bytes
        assert predicted == traced[compiled], compiled


# --- the fsdp2 recipe against a fake-tensor trace of a torchtitan-style Llama (bench/titan_trace.py) ----------------
TINY_TITAN = dict(V=2048, H=256, L=2, A=4, KV=2, FFN=512, S=256, B=2)


@pytest.mark.parametrize("recompute", ["op-sac", "none"])
def test_fsdp2_activations_and_loss_equal_a_trace_of_torchtitans_llama(recompute):
    torch = pytest.importorskip("torch")
    bench = str(Path(__file__).resolve().parents[1] / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import titan_trace as titan
    V, H, L, A, KV, FFN, S, B = TINY_TITAN.values()
    setup, peak = titan.trace_titan_llama(torch, TINY_TITAN, op_sac=recompute == "op-sac")
    spec = titan.model_spec(TINY_TITAN)
    assert setup == 2 * spec.parameter_count() + S * (H // A // 2) * 8  # bf16 params + the complex64 freqs_cis
    training = TrainingSpec(seq_len=S, global_batch=B, micro_batch=B, precision="amp", framework="fsdp2",
                            recompute=recompute)
    got = predict_memory(spec, training, overhead=NO_OVERHEAD)
    rope_tables = 2 * S * (H // A) * 2  # the model's bf16 cos/sin: the trace holds them in freqs_cis (setup)
    # the trace also holds nll_loss's two fp32 scalars (output, total_weight), one 512-byte block each
    assert peak - setup - 2 * 512 == got.activations_bytes + got.logits_bytes - rope_tables
    assert got.peak_phase == "backward-start"


def test_fsdp2_with_pipeline_keeps_every_block_of_the_stage_unsharded():
    # torchtitan apply_fsdp with PP: reshard_after_forward=False for every block. 12 x 512 GPT (tied 50,304 x 512
    # embedding, 3,152,384 per block), p = 2: the last stage holds 6 blocks + its head copy, all bf16 through the step:
    # (6 x 3,152,384 + 25,755,648) x 2 = 89,339,904; p = 1: one block + the head, (3,152,384 + 25,755,648) x 2.
    training = TrainingSpec(seq_len=1024, global_batch=16, micro_batch=1, precision="amp", framework="fsdp2")
    one = predict_memory(MLM_GPT, training, Parallelism(dp=2), overhead=NO_OVERHEAD)
    two = predict_memory(MLM_GPT, training, Parallelism(dp=2, pp=2), overhead=NO_OVERHEAD)
    assert one.transient_bytes == (3_152_384 + 50_304 * 512) * 2 == 57_816_064
    assert two.transient_bytes == (6 * 3_152_384 + 50_304 * 512) * 2 == 89_339_904


def test_torchao_fp8_linears_keep_bf16_operands_and_cache_no_weight():
    """torchtitan's float8 linears are torchao's Float8Linear, whose autograd function saves its bf16 operands
    (`ctx.save_for_backward(input_hp, weight_hp_t)`, torchao/float8/float8_linear.py) and casts again in backward:
    under fsdp2 fp8 changes no term of the memory. Transformer Engine (the other stacks) keeps each linear's fp8
    input cast and caches every weight's fp8 cast and transpose: 2 B per linear weight on top."""
    from frenzy_core.memory import predict_memory
    from frenzy_core.models import ZOO
    from frenzy_core.training import Parallelism, TrainingSpec

    model = ZOO["llama-3.1-8b"]
    base = dict(seq_len=4096, global_batch=8, micro_batch=1, precision="bf16-master", recompute="full")
    for framework, par in (("fsdp2", Parallelism(dp=8)), ("megatron", Parallelism(dp=8))):
        runs = [predict_memory(model, TrainingSpec(framework=framework, fp8_linears=fp8, **base), par)
                for fp8 in (False, True)]
        if framework == "fsdp2":
            assert runs[1].allocated_bytes == runs[0].allocated_bytes
        else:
            assert runs[1].allocated_bytes != runs[0].allocated_bytes  # TE's fp8 casts and weight cache
    # the cache Megatron keeps: 2 B per linear weight of the layers (LM head bf16), unsharded
    layers, h, kv, ffn = model.num_layers, model.hidden_size, model.num_kv_heads * model.head_dim, model.ffn_size
    linears = layers * (h * (h + 2 * kv) + h * h + 3 * h * ffn)
    from frenzy_core.memory.copies import fp8_weight_cache_bytes
    from frenzy_core.memory.step import step_context

    castable = linears + model.vocab_size * h  # the castable weights of a one-stage model: linears and the head
    for framework, want in (("megatron", 2 * linears), ("fsdp2", 0.0)):
        training = TrainingSpec(framework=framework, fp8_linears=True, **base)
        step = step_context(model, training, 8, 1, 1, 1)
        assert float(fp8_weight_cache_bytes(step, model, training, True, castable)) == pytest.approx(want)
