"""The attention core at its fused kernel's measured throughput (perf.attention_kernel_tflops): hand-worked seconds,
the published figures it rests on, the stacks' kernel choice, and the fallbacks to the GEMMs' efficiency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from frenzy_core.frameworks import FRAMEWORKS, get
from frenzy_core.gpus import CATALOG
from frenzy_core.models import ModelSpec
from frenzy_core.perf import (
    ATTENTION_KERNEL_SEQ_LENS,
    H100_BWD_NONCAUSAL_TFLOPS,
    H100_FWD_CAUSAL_TFLOPS,
    H100_FWD_NONCAUSAL_TFLOPS,
    attention_kernel_tflops,
    causal_backward_tflops,
    gemm_efficiency_of_run,
    step_time,
    training_flops_per_step,
)
from frenzy_core.training import Parallelism, TrainingSpec

H100, A100 = CATALOG["H100-80GB"], CATALOG["A100-80GB"]
# A small model with the benchmarks' head dim 128: h 1024 = 8 heads x 128, 2 layers
TINY = ModelSpec(name="tiny", vocab_size=1000, hidden_size=1024, num_layers=2, num_heads=8, max_positions=65536)
H, LAYERS = 1024, 2


def attention_forward_flops(seq: int, samples: int = 1) -> float:
    """Forward FLOPs of the attention core over the step: QK^T and AV, 2 x 2 h FLOPs per query and key, causal
    (s / 2 keys per query), every layer, every token."""
    return LAYERS * samples * seq * 4 * H * seq / 2


def megatron(seq: int, **kw) -> TrainingSpec:
    return TrainingSpec(seq_len=seq, global_batch=1, micro_batch=1, precision="bf16-master", framework="megatron",
                        **kw)


# --- the published figures -------------------------------------------------------------------------------------------
def test_the_causal_backward_is_the_unmasked_one_scaled_by_what_the_mask_costs_the_forward():
    # FA3 arXiv 2407.08608 Fig. 6(b) backward (no mask) x Fig. 5(d) / Fig. 5(c) forward (mask / no mask), at 2k:
    # FlashAttention-2 291 x 298 / 362 = 239.55, cuDNN 465 x 484 / 617 = 364.76 TFLOP/s
    assert causal_backward_tflops("flash-attn-2")[2] == pytest.approx(291 * 298 / 362, rel=1e-12)
    assert causal_backward_tflops("cudnn")[2] == pytest.approx(465 * 484 / 617, rel=1e-12)
    for kernel in ("flash-attn-2", "cudnn"):  # the mask costs every kernel something at every length
        assert all(c < n for c, n in zip(H100_FWD_CAUSAL_TFLOPS[kernel], H100_FWD_NONCAUSAL_TFLOPS[kernel],
                                         strict=True))
        assert all(c < b for c, b in zip(causal_backward_tflops(kernel), H100_BWD_NONCAUSAL_TFLOPS[kernel],
                                         strict=True))


# FA2 arXiv 2307.08691's own H100 measurement of FlashAttention-2, causal, head dim 128, forward + backward together
# (Dao-AILab/flash-attention@0251105a assets/flash2_h100_fwd_bwd_benchmark.png, panel (d)), TFLOP/s at 512 .. 16k
FA2_PAPER_H100_FWD_BWD_CAUSAL = (163, 221, 265, 294, 308, 328)


def test_the_derived_causal_backward_agrees_with_fa2s_own_causal_forward_and_backward_on_h100():
    """An independent check of the derivation: fwd + bwd = 3.5 forwards of FLOPs in 1 / fwd + 2.5 / bwd of time;
    with FA3's FlashAttention-2 forward and the derived backward it lands within 12% of FA2's own combined bars (a
    year apart, flash-attn 2.0 vs 2.5)."""
    forward, backward = H100_FWD_CAUSAL_TFLOPS["flash-attn-2"], causal_backward_tflops("flash-attn-2")
    for f, b, measured in zip(forward, backward, FA2_PAPER_H100_FWD_BWD_CAUSAL, strict=True):
        combined = 3.5 / (1 / f + 2.5 / b)
        assert combined == pytest.approx(measured, rel=0.12)
        assert combined < measured  # the derivation is on the slow side at every length


def test_rates_between_benchmarked_lengths_are_interpolated_in_log2_and_held_outside():
    tr = TrainingSpec()  # pytorch: FlashAttention-2
    # A100 (Fig. 4(d) of FA2, fwd + bwd together): 3k is 0.585 of the way from 2k (155) to 4k (173) in log2
    fwd, bwd = attention_kernel_tflops(tr, A100, 3072)
    assert fwd == bwd == pytest.approx(155 + (math.log2(3072) - 11) * (173 - 155), rel=1e-12)
    assert attention_kernel_tflops(tr, A100, 256)[0] == 99  # below 512: the 512 bar
    assert attention_kernel_tflops(tr, A100, 262144)[0] == 189  # above 16k: the 16k bar
    # arrays broadcast (the planner's vectorised ranking passes seq_len / cp per plan)
    got = attention_kernel_tflops(tr, H100, np.array(ATTENTION_KERNEL_SEQ_LENS))[0]
    np.testing.assert_allclose(got, H100_FWD_CAUSAL_TFLOPS["flash-attn-2"])


# --- the stacks' choice ----------------------------------------------------------------------------------------------
def test_megatron_runs_cudnn_on_hopper_and_flash_attention_2_before_the_sdpa_stacks_flash_attention_2():
    assert get("megatron").attention_kernel(megatron(2048), (9, 0)) == "cudnn"
    assert get("megatron").attention_kernel(megatron(2048), (8, 0)) == "flash-attn-2"
    for name in set(FRAMEWORKS) - {"megatron"}:
        assert get(name).attention_kernel(TrainingSpec(), (9, 0)) == "flash-attn-2", name


# --- seconds by hand -------------------------------------------------------------------------------------------------
def test_megatron_on_h100_times_the_attention_core_at_cudnns_forward_and_backward_by_hand():
    """One 2,048-token sample, 2 layers: forward 2 x 2048 x 4 x 1024 x 1024 = 1.718e10 FLOPs at cuDNN's 484 TFLOP/s
    (Fig. 5(d), 2k), backward 2.5 x that (flash recomputes Q K^T) at 465 x 484 / 617 = 364.76: 35.5 + 117.7 us."""
    forward = attention_forward_flops(2048)
    assert forward == pytest.approx(1.718e10, rel=1e-3)
    want = forward / 484e12 + 2.5 * forward / (465 * 484 / 617 * 1e12)
    assert want == pytest.approx(153.2e-6, rel=1e-3)
    st = step_time(TINY, megatron(2048), Parallelism(), H100)
    assert st.compute_attention_s == pytest.approx(want, rel=1e-12)
    # the model FLOPs stay eq. 3's: 3 forwards of the attention core (MFU does not count flash's recompute)
    assert st.flops_per_step == training_flops_per_step(TINY, megatron(2048))


def test_plain_pytorch_on_h100_runs_flash_attention_2_slower_than_megatrons_cudnn_by_hand():
    """Same step under SDPA: FlashAttention-2 at 298 forward (Fig. 5(d)) and 291 x 298 / 362 backward."""
    tr = TrainingSpec(seq_len=2048, global_batch=1, micro_batch=1, precision="bf16-master")
    forward = attention_forward_flops(2048)
    st = step_time(TINY, tr, Parallelism(), H100)
    assert st.compute_attention_s == pytest.approx(forward / 298e12 + 2.5 * forward / (291 * 298 / 362 * 1e12),
                                                   rel=1e-12)
    assert st.compute_attention_s > step_time(TINY, megatron(2048), Parallelism(), H100).compute_attention_s


def test_context_parallel_ranks_run_their_seq_len_over_cp_block_at_that_lengths_rate_by_hand():
    """cp = 2 at 8,192 tokens: each rank runs 4,096-long blocks (518 forward, 499 x 518 / 609 backward) over half
    the step's attention FLOPs."""
    forward = attention_forward_flops(8192) / 2
    st = step_time(TINY, megatron(8192), Parallelism(cp=2), H100)
    assert st.compute_attention_s == pytest.approx(forward / 518e12 + 2.5 * forward / (499 * 518 / 609 * 1e12),
                                                   rel=1e-12)


def test_selective_recompute_replays_the_forward_at_the_forward_rate_by_hand():
    forward = attention_forward_flops(2048)
    st = step_time(TINY, megatron(2048, recompute="selective"), Parallelism(), H100)
    assert st.compute_attention_s == pytest.approx(2 * forward / 484e12 + 2.5 * forward / (465 * 484 / 617 * 1e12),
                                                   rel=1e-12)


def test_the_attention_kernel_sits_inside_compute_not_beside_it():
    st = step_time(TINY, megatron(2048), Parallelism(), H100)
    assert st.compute_s == pytest.approx(st.compute_linear_s + st.compute_attention_s + st.compute_other_s,
                                         rel=1e-12)
    # the GEMMs keep the type's efficiency: the linears' seconds do not depend on the attention kernel
    flash2 = step_time(TINY, megatron(2048).model_copy(update={"framework": "pytorch"}), Parallelism(), H100)
    assert flash2.compute_linear_s == pytest.approx(st.compute_linear_s, rel=1e-12)


# --- where no figure applies: the GEMMs' efficiency, as before --------------------------------------------------------
def gemm_rate_attention_s(gpu, tr, eff) -> float:
    """The attention core (3.5 forwards under flash) at the type's efficiency of its bf16 peak."""
    return 3.5 * attention_forward_flops(tr.seq_len) / (gpu.bf16_tflops * 1e12 * eff)


@pytest.mark.parametrize("gpu_name", ["B200", "GB200", "MI300X", "L40S", "V100-32GB"])
def test_types_without_published_kernel_figures_run_attention_at_the_gemm_efficiency(gpu_name):
    gpu = CATALOG[gpu_name]
    tr = megatron(2048)
    st = step_time(TINY, tr, Parallelism(), gpu)
    assert st.compute_attention_s == pytest.approx(gemm_rate_attention_s(gpu, tr, gpu.efficiency("bf16")),
                                                   rel=1e-12)


def test_an_explicit_efficiency_charges_every_flop_at_it():
    st = step_time(TINY, megatron(2048), Parallelism(), H100, mfu=0.5)
    assert st.compute_attention_s == pytest.approx(gemm_rate_attention_s(H100, megatron(2048), 0.5), rel=1e-12)


def test_fp32_and_eager_attention_have_no_kernel_figure():
    assert attention_kernel_tflops(TrainingSpec(precision="fp32"), H100, 2048) is None  # flash kernels: fp16/bf16
    assert attention_kernel_tflops(TrainingSpec(attention="eager"), H100, 2048) is None
    assert attention_kernel_tflops(TrainingSpec(), CATALOG["B200"], 2048) is None


# --- what the catalog's efficiency would be with the attention at its own rate --------------------------------------
def test_gemm_efficiency_of_a_run_leaves_the_attention_kernels_seconds_out_by_hand():
    """A run that reached 40% of H100's peak on a count of F = 6 x 1e9 + attention FLOPs per token: T = F / (0.4 x
    989e12) per token; perf.py's attention core takes its FlashAttention-2 seconds out of T, and so do the layers'
    element-wise ops (their bytes at HBM bandwidth), the rest of its FLOPs fill what remains. With eager attention
    (no kernel figure) only the element-wise seconds come out."""
    tr = TrainingSpec(seq_len=2048, global_batch=1)
    ours = training_flops_per_step(TINY, tr) / 2048
    theirs = 1.2 * ours
    forward = attention_forward_flops(2048) / 2048  # per token
    attention_s = forward / 298e12 + 2.5 * forward / (291 * 298 / 362 * 1e12)
    # TINY under the pytorch stack (eager): per layer and token two LayerNorms of h (one kernel: 4 + 6 bytes per
    # element), GeLU over 4h (4 + 6), two residual adds of h (6 + 6); 2 layers, at the H100's 3.35 TB/s
    elementwise_s = 2 * (2 * 1024 * 10 + 4096 * 10 + 2 * 1024 * 12) / 3350e9
    run_s = theirs / (0.4 * 989e12)
    want = (ours - 3 * forward) / (989e12 * (run_s - attention_s - elementwise_s))
    assert gemm_efficiency_of_run(TINY, tr, H100, theirs, 0.4) == pytest.approx(want, rel=1e-12)
    # eager: the element-wise seconds also hold every head's 2,048 x 2,048 scores, 70 B each op by op
    # (perf.EAGER_SCORES_BYTES), too many for a 40% run of so small a model: take a run at 10%
    eager = tr.model_copy(update={"attention": "eager"})
    ours_eager = training_flops_per_step(TINY, eager) / 2048
    scores_s = 2 * TINY.num_heads * 2048 * 70 / 3350e9
    slow_s = theirs / (0.1 * 989e12)
    assert gemm_efficiency_of_run(TINY, eager, H100, theirs, 0.1) == pytest.approx(
        ours_eager / (989e12 * (slow_s - elementwise_s - scores_s)), rel=1e-12)


def test_the_catalogs_llm_foundry_efficiencies_are_the_procedure_applied_to_their_runs():
    """gpus.py's llm-foundry types are gemm_efficiency_of_run on the run each came from (MPT-7B, seq 2048, 8 GPUs,
    llm-foundry's MFU count), not a hand-kept number: a change to perf.py's terms must re-derive them
    (tests/test_gpus.py recomputes them by hand)."""
    n, layers, h, s = 6_658_859_008, 32, 4096, 2048  # the quoted MPT-7B rows
    mpt7b = ModelSpec(name="mpt-7b", vocab_size=50368, hidden_size=h, num_layers=layers, num_heads=32,
                      max_positions=s)
    theirs = 3 * (2 * n + 4 * layers * h * s)
    tr = TrainingSpec(seq_len=s, global_batch=1)
    for name, published in (("H100-80GB", 0.4644), ("A100-80GB", 0.6423)):
        assert CATALOG[name].hw_efficiency == pytest.approx(
            gemm_efficiency_of_run(mpt7b, tr, CATALOG[name], theirs, published), abs=6e-5)


def test_the_vectorised_ranking_prices_each_plans_cp_at_its_own_block_length():
    from frenzy_core.perf import step_time_totals

    tr = megatron(16384).model_copy(update={"global_batch": 8})
    splits = [Parallelism(dp=8), Parallelism(dp=4, cp=2), Parallelism(dp=2, cp=4), Parallelism(dp=1, cp=8)]
    got = step_time_totals(TINY, tr, H100, [p.dp for p in splits], 1, 1, 1, cp=[p.cp for p in splits])
    want = [step_time(TINY, tr, p, H100).step_time_s for p in splits]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_packed_documents_attend_within_themselves_where_the_kernel_skips_the_others():
    # Llama-3.1-8B (32 layers, h = 4,096 = 32 heads x 128), rows of 4,096 tokens packed with 512-token documents.
    # Under megatron (TE THD / cu_seqlens) each query attends within its document: the causal core's model FLOPs per
    # token and layer are 3 x 4 h x keys (forward + backward), keys s / 2 -> d / 2, so the step loses
    # tokens x 32 x 3 x 4 x 4,096 x (4,096 - 512) / 2. Under hf (SDPA with the materialised s x s mask) nothing.
    from frenzy_core.models import ZOO
    from frenzy_core.perf import training_flops_per_step

    model, tokens = ZOO["llama-3.1-8b"], 8 * 4096
    for framework, want in (("megatron", tokens * 32 * 3 * 4 * 4096 * (4096 - 512) / 2), ("hf", 0.0)):
        precision = "bf16-master" if framework == "megatron" else "amp"
        base = dict(seq_len=4096, global_batch=8, micro_batch=1, framework=framework, precision=precision)
        rows = training_flops_per_step(model, TrainingSpec(**base))
        docs = training_flops_per_step(model, TrainingSpec(**base, packed=True, packed_doc_tokens=512))
        assert rows - docs == pytest.approx(want, rel=1e-12), framework
    # the document length needs packed rows, and fits in one
    for kw in (dict(packed_doc_tokens=512), dict(packed=True, packed_doc_tokens=8192)):
        with pytest.raises(ValueError, match="packed_doc_tokens"):
            TrainingSpec(seq_len=4096, global_batch=8, **kw)


def test_the_h200_rates_are_the_stored_measurement():
    """perf.ATTENTION_KERNEL_TFLOPS_BY_TYPE's H200 figures are bench/data/gpu_h200_2026-12-04/kernels_gpu.json's
    (bench/measure_gpu.py --mode kernels on a lent H200), and an H200 run takes them over the H100 papers'."""
    import json
    from pathlib import Path

    from frenzy_core.gpus import CATALOG
    from frenzy_core.perf import ATTENTION_KERNEL_SEQ_LENS, ATTENTION_KERNEL_TFLOPS_BY_TYPE, attention_kernel_tflops
    from frenzy_core.training import TrainingSpec

    path = Path(__file__).resolve().parents[1] / "bench" / "data" / "gpu_h200_2026-12-04" / "kernels_gpu.json"
    rows = {r["seq_len"]: r for r in json.loads(path.read_text())["attention"]}
    for kernel, key in (("flash-attn-2", "flash"), ("cudnn", "cudnn")):
        fwd, bwd = ATTENTION_KERNEL_TFLOPS_BY_TYPE[(kernel, "H200-141GB")]
        assert fwd == tuple(rows[s][f"{key}_fwd_tflops"] for s in ATTENTION_KERNEL_SEQ_LENS)
        assert bwd == tuple(rows[s][f"{key}_bwd_tflops"] for s in ATTENTION_KERNEL_SEQ_LENS)
    h200 = attention_kernel_tflops(TrainingSpec(), CATALOG["H200-141GB"], 8192)
    assert [round(float(x), 2) for x in h200] == [313.39, 280.89]  # measured, not the H100's 333 / 286
