"""The element-wise HBM term (perf.elementwise_bytes_per_token): hand-counted bytes for a tiny Llama-style layer,
eager (torchtitan's aten ops) against compiled (Inductor: one kernel per chain), and its seconds at a bandwidth."""

import pytest

from frenzy_core.gpus import make_gpu
from frenzy_core.models import ModelSpec
from frenzy_core.perf import elementwise_bytes_per_token, elementwise_time_flops
from frenzy_core.training import TrainingSpec

# h 64, 4 heads of 16 (q = k width 64), SwiGLU ffn 128, RMSNorm, rotary; bf16 activations (A = 2, fp32 F = 4)
TINY = ModelSpec(name="tiny", vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128,
                 mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", max_positions=64)
EAGER = TrainingSpec(framework="fsdp2", seq_len=64, global_batch=1)


def test_eager_torchtitan_layer_bytes_are_the_aten_ops_counts():
    # RMSNorm: forward 4A + 7F = 36, backward 8A + 19F = 92 per element, 2 norms of h
    norms = 2 * 64 * (36 + 92)
    swiglu = 128 * (10 + 18)  # silu 2A + mul 3A; mul's two gradients 3A + 3A + silu_backward 3A
    rotary = (64 + 64) * (20 + 20)  # float() A + F, complex mul 2F, type_as F + A, each way
    adds = 2 * 64 * (6 + 6)  # read 2, write 1; the residual gradients summed
    assert elementwise_bytes_per_token(TINY, EAGER) == (norms + swiglu + rotary + adds,) * 2 == (26624.0,) * 2


def test_compiled_layer_reads_each_input_once_and_writes_each_output_once():
    norms = 2 * 64 * (4 + 6)  # read x, write y; read dy and x, write dx
    swiglu = 128 * (6 + 10)  # read gate, up, write product; read grad, gate, up, write both gradients
    rotary = 128 * (4 + 4)
    adds = 2 * 64 * 12
    compiled = EAGER.model_copy(update={"compile": True})
    assert elementwise_bytes_per_token(TINY, compiled) == (norms + swiglu + rotary + adds,) * 2 == (5888.0,) * 2


def test_megatron_runs_fused_kernels_and_op_sac_replays_the_forward():
    assert elementwise_bytes_per_token(TINY, TrainingSpec(framework="megatron", precision="bf16-master",
                                                          seq_len=64))[0] == 5888.0
    replay = EAGER.model_copy(update={"recompute": "op-sac"})
    forward = 2 * 64 * 36 + 128 * 10 + 128 * 20 + 2 * 64 * 6  # every element-wise forward runs again in backward
    assert elementwise_bytes_per_token(TINY, replay)[0] == 26624.0 + forward


def test_seconds_are_bytes_over_bandwidth():
    gpu = make_gpu(name="X", memory_gib=8, bf16_tflops=100, fp32_tflops=50, memory_bandwidth_gbyte_s=1000)
    dense, _ = elementwise_time_flops(TINY, EAGER, gpu, 0.5)
    # 26,624 B per token per layer at 1 TB/s = 26.624 ns, as FLOPs at 100 TF x 0.5
    assert dense / (100e12 * 0.5) == pytest.approx(26_624 / 1e12)
    assert elementwise_time_flops(TINY, EAGER.model_copy(update={"precision": "fp32"}), gpu, 0.5) == (0.0, 0.0)


def test_megatrons_recompute_modules_replay_the_moe_layers_norm_and_expert_activation_forward():
    # Megatron's element-wise ops are fused (TE): the pre-MLP norm's forward reads and writes h (2 x 2 B per
    # element), the fused SwiGLU's reads gate and up and writes their product (3 x 2 B per inner element), once more
    # in backward for each routed copy: h = 64, top-2 of expert_ffn 32
    from frenzy_core.models import ModelSpec
    from frenzy_core.perf import elementwise_bytes_per_token
    from frenzy_core.training import TrainingSpec

    moe = ModelSpec(name="m", vocab_size=128, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128,
                    mlp_kind="swiglu", norm_kind="rmsnorm", position_kind="rotary", num_experts=4, moe_top_k=2,
                    expert_ffn_size=32, max_positions=64)
    base = dict(framework="megatron", seq_len=64, global_batch=1, precision="bf16-master")
    dense0, moe0 = elementwise_bytes_per_token(moe, TrainingSpec(**base))
    dense1, moe1 = elementwise_bytes_per_token(moe, TrainingSpec(**base, recompute_modules=("layernorm", "moe_act")))
    assert dense1 == dense0 and moe1 - moe0 == 64 * 2 * 2 + 2 * 32 * 3 * 2


def test_eager_attention_scores_by_hand():
    """Eager attention moves every head's s x s scores through HBM, op by op (tracer / HF: 8 A + 4 F forward, 9 A +
    5 F backward = 70 B per score at bf16), Megatron's fused scale-mask-softmax 4 A + 6 A = 20 B; dropout adds a
    pass each way and its 1-byte mask written and read (2 A + 2 A + 2 = 10 B). Flash attention keeps no scores."""
    from frenzy_core.models import ZOO
    from frenzy_core.perf import elementwise_bytes_per_token

    gpt2 = ZOO["gpt2"]
    scores = gpt2.num_heads * 1024  # per token: every query against every key, per head
    for framework, precision, per_score in (("pytorch", "amp", 70), ("megatron", "bf16-master", 20)):
        flash, eager, dropped = (elementwise_bytes_per_token(gpt2, TrainingSpec(
            framework=framework, precision=precision, seq_len=1024, attention=attn, dropout=p))[0]
            for attn, p in (("flash", 0.0), ("eager", 0.0), ("eager", 0.1)))
        assert eager - flash == scores * per_score, framework
        assert dropped - eager == scores * 10, framework
