"""The phase table of the detailed memory model (frenzy_core/memory/phases.py): the peak is the largest phase, each
phase the sum of the terms the table lists for it. Numbers worked by hand for a model small enough to count."""

from __future__ import annotations

from dataclasses import replace

import pytest

from frenzy_core.memory import NO_OVERHEAD, PHASES, phase_components, predict_memory, stage_terms
from frenzy_core.memory.loss import chunked_head_gradient_bytes
from frenzy_core.memory.phases import PHASE_COMPONENTS
from frenzy_core.memory.step import step_context
from frenzy_core.models import ModelSpec
from frenzy_core.training import Parallelism, TrainingSpec

# A Llama-shaped model to count by hand: h = 64, 4 heads of 16 (q = 64 wide), 2 KV heads (k, v = 32 wide), SwiGLU
# ffn 96, V = 512, 2 layers, RMSNorm, untied head, no biases
TINY = ModelSpec(name="tiny-phases", vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                 ffn_size=96, mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", norm_kind="rmsnorm",
                 bias=False, max_positions=1024)
H, V, L = 64, 512, 2
# embedding V h + per layer (q, k, v, o = 64h + 32h + 32h + 64h; gate, up, down = 3 x 96h; two norms 2h) + final
# norm h + head V h
LAYER_PARAMS = (64 + 32 + 32 + 64) * H + 3 * 96 * H + 2 * H  # 30,848
W = V * H + L * LAYER_PARAMS + H + V * H  # 127,296
FP32 = 4
# fp32 everywhere (4 B per element: params, grads, activations, residual stream), foreach AdamW, one GPU, one
# micro-batch per step: no master copy, no autocast copies, gradients not alive at the start of backward
FP32_ADAMW = dict(precision="fp32", optimizer="adamw", global_batch=1, micro_batch=1, attention="flash")


def _tokens_layer_bytes() -> int:
    """Bytes one layer saves per token (fp32, flash, fused QKV and gate/up as plain PyTorch runs them)."""
    replicated = 2 * (FP32 * H + FP32 * 1 + FP32 * H)  # per block: the norm's input, its rstd, the first linear's input
    attention = FP32 * (64 + 32 + 32) + FP32 * (64 + 32) + FP32 * 64 + FP32 * 4  # qkv out, rotated q k, out, lse
    swiglu = FP32 * 2 * 96 + FP32 * 96 + FP32 * 96  # gate|up output, SiLU output, their product
    return replicated + attention + swiglu  # 1,032 + 1,168 + 1,536 = 3,736


def _outside_layers(s: int) -> int:
    """Token ids, the RoPE cos / sin tables (bf16, head_dim 16) and the final norm's, head's and loss' saved inputs."""
    token_ids = 8 * s
    rope = 2 * s * 16 * 2
    head = s * (FP32 * H + FP32) + s * FP32 * H + 8 * s  # final norm input + rstd, head input, target ids
    return token_ids + rope + head


def test_the_tiny_models_parameters_are_counted_by_hand():
    assert W == 127_296
    assert TINY.parameter_count() == W


def test_the_optimizer_step_of_fp32_adamw_is_twenty_bytes_per_parameter_and_the_peak_of_a_short_sequence():
    """weights 4 + gradients 4 + exp_avg, exp_avg_sq 4 + 4 + foreach temporary 4 = 20 B per parameter; with 8 tokens
    the activations and the loss stay far below the 8W the step adds over the start of backward."""
    got = predict_memory(TINY, TrainingSpec(seq_len=8, **FP32_ADAMW), overhead=NO_OVERHEAD)
    assert got.peak_phase == "optimizer-step"
    assert (got.weights_bytes, got.gradients_bytes, got.optimizer_bytes, got.transient_bytes) == (
        4 * W, 4 * W, 8 * W, 4 * W)
    assert got.activations_bytes == got.logits_bytes == 0
    assert got.total_bytes == 20 * W == 2_545_920


def test_the_start_of_backward_is_the_hand_sum_of_its_terms_and_the_peak_not_the_sum_of_phases():
    s = 256
    activations = L * s * _tokens_layer_bytes() + _outside_layers(s)  # 1,912,832 + 152,576
    loss = s * V * (FP32 + FP32 + FP32)  # fp32 log-softmax + nll_loss's gradient + the one it makes: 1,572,864
    head_gradient = V * H * (2 + FP32) + s * FP32 * H  # bf16 weight grad + its fp32 cast, input grad: 262,144
    backward_start = 4 * W + 8 * W + activations + max(loss, head_gradient)  # no gradient alive yet (one micro-batch)
    got = predict_memory(TINY, TrainingSpec(seq_len=s, **FP32_ADAMW), overhead=NO_OVERHEAD)
    assert got.peak_phase == "backward-start"
    assert (got.gradients_bytes, got.activations_bytes, got.logits_bytes) == (0, activations, loss)
    assert got.total_bytes == backward_start == 5_165_824
    assert got.total_bytes < backward_start + 20 * W  # the larger phase, never the two added


def test_recomputing_a_layer_is_the_peak_when_the_loss_is_chunked():
    """Full recomputation: each layer keeps its fp32 input (256 B per token); recomputing one layer brings its full
    set back beside the kept ones, with the head's input gradient (the loss' buffers are gone). Eight loss chunks
    keep every chunk's log-softmax (4 B) but only one chunk's two gradients: 4 + 8 / 8 = 5 B per logit."""
    s = 256
    kept = L * s * FP32 * H
    recomputed = s * _tokens_layer_bytes() - s * FP32 * H  # the full set, less the input it kept anyway
    head_input_gradient = s * FP32 * H
    loss = s * V * 5
    states = 4 * W + 8 * W
    backward_start = states + kept + _outside_layers(s) + loss  # 2,466,560
    backward_recompute = states + kept + _outside_layers(s) + recomputed + head_input_gradient  # 2,767,616
    assert backward_recompute > max(backward_start, 20 * W)
    got = predict_memory(TINY, TrainingSpec(seq_len=s, recompute="full", loss_chunks=8, **FP32_ADAMW),
                         overhead=NO_OVERHEAD)
    assert got.peak_phase == "backward-recompute"
    assert got.activations_bytes == kept + _outside_layers(s) + recomputed
    assert got.logits_bytes == head_input_gradient
    assert got.total_bytes == backward_recompute == 2_767_616


def test_stage_terms_are_the_hand_counted_terms():
    terms = stage_terms(TINY, TrainingSpec(seq_len=256, **FP32_ADAMW))
    assert terms["weights"] == 4 * W
    assert terms["optimizer_states"] == 8 * W  # AdamW's two fp32 moments, no master copy in fp32
    assert terms["gradients_at_step"] == 4 * W
    assert terms["optimizer_step_temporary"] == 4 * W  # foreach AdamW: one fp32 temporary per parameter
    assert terms["gradients_in_backward"] == 0  # one micro-batch: none yet at the start of backward
    assert terms["layer_activations"] == L * 256 * _tokens_layer_bytes()
    assert terms["weight_copies_at_loss"] == 0  # fp32: autocast caches no copies


def test_only_the_last_pipeline_stage_holds_the_head_and_its_input_gradient():
    """Two stages of one layer each: the LM head, the loss and the gradient the head hands back (s tokens x h x 4 B
    in fp32, no sequence parallelism) live on the last stage only; the first stage holds none of them."""
    s = 256
    training = TrainingSpec(seq_len=s, **FP32_ADAMW)
    par = Parallelism(pp=2)
    first, last = stage_terms(TINY, training, par, stage=0), stage_terms(TINY, training, par, stage=1)
    assert (first["head_activations"], first["loss_or_head_gradient"], first["head_input_gradient"]) == (0, 0, 0)
    assert last["head_input_gradient"] == s * FP32 * H == 65_536
    assert last["loss_or_head_gradient"] == s * V * (FP32 + FP32 + FP32)  # as on one GPU: the fp32 loss' buffers


def test_a_short_sequence_peaks_on_the_head_weight_gradient_and_its_cast():
    """At 8 tokens the head's gradients outgrow the loss buffers (8 x V x 12 B): the bf16 weight gradient of the
    head's matmul (V x h x 2 B), its cast to the fp32 parameter dtype (V x h x 4 B) and the input gradient
    (8 x h x 4 B)."""
    s = 8
    last = stage_terms(TINY, TrainingSpec(seq_len=s, **FP32_ADAMW), Parallelism(pp=2), stage=1)
    assert last["loss_or_head_gradient"] == V * H * (2 + FP32) + s * FP32 * H == 198_656


def test_the_table_lists_every_term_and_names_only_terms_that_exist():
    listed = {name for phase in PHASES for component in PHASE_COMPONENTS for name in getattr(phase, component)}
    assert listed == set(stage_terms(TINY, TrainingSpec(seq_len=8, **FP32_ADAMW)))


def test_every_phase_holds_the_weights_and_the_optimizer_states_and_the_step_holds_no_activations():
    for phase in PHASES:
        assert phase.weights == ("weights",) and phase.optimizer == ("optimizer_states",), phase.name
    step = next(p for p in PHASES if p.name == "optimizer-step")
    assert step.activations == step.logits == ()


# distinct powers of two: every sum of them is exact, and each term is told apart in it
HAND_TERMS = {name: float(2 ** i) for i, name in enumerate(sorted(
    {n for phase in PHASES for component in PHASE_COMPONENTS for n in getattr(phase, component)}))}


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.name)
def test_a_phase_is_the_sum_of_the_terms_it_lists(phase):
    alive = {n for component in PHASE_COMPONENTS for n in getattr(phase, component)}
    assert sum(phase_components(phase, HAND_TERMS, recomputing=True).values()) == sum(HAND_TERMS[n] for n in alive)


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.name)
def test_removing_a_term_from_a_phase_lowers_its_total_by_exactly_that_term(phase):
    total = sum(phase_components(phase, HAND_TERMS, recomputing=True).values())
    for component in PHASE_COMPONENTS:
        names = getattr(phase, component)
        for name in names:
            without = replace(phase, **{component: tuple(n for n in names if n != name)})
            lowered = sum(phase_components(without, HAND_TERMS, recomputing=True).values())
            assert total - lowered == HAND_TERMS[name], (phase.name, component, name)


def test_a_step_without_recomputation_has_no_recompute_phase():
    recompute = next(p for p in PHASES if p.only_when_recomputing)
    assert set(phase_components(recompute, HAND_TERMS, recomputing=False).values()) == {0.0}
    got = predict_memory(TINY, TrainingSpec(seq_len=8, **FP32_ADAMW), overhead=NO_OVERHEAD)
    assert got.peak_phase != recompute.name


@pytest.mark.parametrize("framework", ["pytorch", "hf", "fsdp2"])
def test_the_fsdp1_unit_gradient_phase_is_all_zero_where_no_flat_parameter_exists(framework):
    # `requires`: a stack that never forms an FSDP1 unit gradient never has that moment, so every component of the
    # phase is 0 bytes, not merely small (kills the mutation-seed-1 survivor `dict.fromkeys(..., 0.0)` -> `1.0` in
    # phase_components, which no peak could show: a 1-byte phase never wins the max)
    unit_gradient = next(p for p in PHASES if p.name == "unit-gradient")
    training = TrainingSpec(seq_len=8, framework=framework, precision="bf16", zero_stage=3)
    terms = stage_terms(TINY, training, Parallelism(dp=2))
    assert terms["fsdp1_unit_gradient"] == 0
    assert phase_components(unit_gradient, terms, recomputing=False) == dict.fromkeys(PHASE_COMPONENTS, 0.0)


# --- a tied embedding's last gradient (states.tied_embedding_gradient_bytes) ----------------------------------------
TIED = ModelSpec(name="tiny-tied", vocab_size=16384, hidden_size=64, num_layers=2, num_heads=4, max_positions=128,
                 tie_embeddings=True)


@pytest.mark.parametrize("precision, extra", [
    # fp32 params (amp): head's view + lookup's matrix + their out-of-place sum, 4 B each, less the sum, which
    # becomes `.grad` (already in gradients_at_step): 3 x 4 - 4 = 8 B per element of V x h
    ("amp", 8 * 16384 * 64),
    # bf16 params with a persistent fp32 main grad: all three bf16 matrices are extra, 3 x 2 = 6 B per element
    ("bf16-master", 6 * 16384 * 64),
])
def test_tied_embedding_gradients_meet_at_the_end_of_backward(precision, extra):
    training = TrainingSpec(seq_len=4, global_batch=1, micro_batch=1, precision=precision, optimizer="adamw-fused")
    terms = stage_terms(TIED, training)
    assert terms["tied_embedding_gradient"] == extra
    # nothing of the kind untied, with a frozen embedding, or with the two on different pipeline stages
    untied = TIED.model_copy(update={"tie_embeddings": False})
    assert stage_terms(untied, training)["tied_embedding_gradient"] == 0
    lora = training.model_copy(update={"lora_rank": 8})
    assert stage_terms(TIED, lora)["tied_embedding_gradient"] == 0
    two_stages = TrainingSpec(seq_len=4, global_batch=2, micro_batch=1, precision=precision, optimizer="adamw-fused")
    assert stage_terms(TIED, two_stages, Parallelism(pp=2))["tied_embedding_gradient"] == 0
    # nor under ZeRO, from stage 1 on: the gradients leave per bucket (the same two-sample batch over dp = 2)
    zero1 = two_stages.model_copy(update={"zero_stage": 1})
    assert stage_terms(TIED, two_stages, Parallelism(dp=2))["tied_embedding_gradient"] == extra
    assert stage_terms(TIED, zero1, Parallelism(dp=2))["tied_embedding_gradient"] == 0


@pytest.mark.parametrize("precision", ["amp", "bf16-master"])
def test_tied_embedding_end_of_backward_is_what_real_autograd_allocates(precision):
    """The tracer runs real autograd (its fake-tensor peak equals real CPU tensors', tests/test_tracer.py): with
    4 tokens, a fused optimizer and V = 16,384 the end of backward is the step's peak. Before the term the model
    was 2.1 MB (bf16-master) and 4.2 MB (amp) short of it; the rest of the gap is the tracer's 512-B rounding of
    small tensors (about 40 KB on these models, as on untied ones)."""
    tracer = pytest.importorskip("frenzy_core.tracer", reason="needs the optional torch extra")
    pytest.importorskip("torch")
    training = TrainingSpec(seq_len=4, global_batch=1, micro_batch=1, precision=precision, optimizer="adamw-fused")
    traced = tracer.trace_peak(TIED, training)
    got = predict_memory(TIED, training, Parallelism(), overhead=NO_OVERHEAD)
    assert traced.peak_phase == "step2:backward" and got.peak_phase == "backward-end"
    assert abs(got.allocated_bytes - traced.peak_bytes) < 64 * 1024


def test_side_stream_pools_only_where_fully_shard_runs():
    """torchtune's single-device recipes never call fully_shard, and torchtitan applies it only when dp_shard x cp
    > 1: no FSDP2 side-stream pool then, so reserved == allocated without fragmentation. Sharded over 2 ranks,
    the reduce-scatter pool holds the gradient shards the default stream cannot reuse."""
    training = TrainingSpec(seq_len=64, global_batch=2, micro_batch=1, precision="bf16-master", framework="torchtune",
                            optimizer="adamw-fused")
    one = predict_memory(TINY, training, Parallelism(), overhead=NO_OVERHEAD)
    assert one.reserved_bytes == one.allocated_bytes
    assert stage_terms(TINY, training)["idle_pools_at_step"] == 0
    sharded = training.model_copy(update={"zero_stage": 3})
    two = stage_terms(TINY, sharded, Parallelism(dp=2))
    assert two["idle_pools_in_backward"] > 0


def _adds_in_backward(chunks: int, tied: bool) -> list[tuple[str, int, int]]:
    """(op, calls, bytes allocated) of the additions real autograd makes while a V x h weight, used by `chunks`
    F.linear calls (and by an embedding lookup when `tied`), gets its gradient: CPU tensors, torch.profiler."""
    torch = pytest.importorskip("torch")
    from torch.nn import functional as F
    from torch.profiler import ProfilerActivity, profile

    vocab, width = 4096, 64
    weight = torch.randn(vocab, width, dtype=torch.bfloat16, requires_grad=True)
    ids, targets = torch.randint(0, vocab, (1, 32)), torch.randint(0, vocab, (1, 32))
    x = F.embedding(ids, weight) * 2 if tied else torch.randn(1, 32, width, dtype=torch.bfloat16, requires_grad=True)
    logits = [F.linear(chunk, weight) for chunk in x.chunk(chunks, dim=1)]
    loss = sum(F.cross_entropy(c.float().view(-1, vocab), t.reshape(-1))
               for c, t in zip(logits, targets.chunk(chunks, dim=1), strict=True))
    del logits
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss.backward()
    return sorted((e.key, e.count, e.cpu_memory_usage) for e in prof.key_averages()
                  if e.key in ("aten::add", "aten::add_"))


def test_a_weights_gradient_views_are_summed_out_of_place_once():
    """What chunked_head_gradient_bytes and tied_embedding_gradient_bytes assume about autograd's InputBuffer:
    F.linear's weight gradient is a transposed view, so the first sum of two is a new V x h tensor and every later
    contribution is added into it in place."""
    matrix = 4096 * 64 * 2  # bf16
    assert _adds_in_backward(4, tied=False) == [("aten::add", 1, matrix), ("aten::add_", 2, 0)]
    assert _adds_in_backward(1, tied=True) == [("aten::add", 1, matrix)]  # head view + lookup: out of place
    assert _adds_in_backward(4, tied=True) == [("aten::add", 1, matrix), ("aten::add_", 3, 0)]


def test_chunked_head_gradients_by_hand():
    """torchtune's head per logit chunk (k = 4, bf16 params, compiled bf16 loss): at chunk 2's head backward two
    unreached chunks keep their saved bf16 logits, chunks 1 and 2 their V x h gradient views plus the sum, and
    chunk 2 its logit and input gradients."""
    s, k = 64, 4
    training = TrainingSpec(seq_len=s, global_batch=1, micro_batch=1, precision="bf16", framework="torchtune",
                            optimizer="adamw-fused", loss_chunks=k, loss_dtype="bf16")
    step = step_context(TIED, training, 1, 1, 1, 1)
    V, h, BF16 = 16384, 64, 2
    expected = (k - 2) / k * s * V * BF16 + 3 * V * h * BF16 + s / k * BF16 * (V + h)
    assert float(chunked_head_gradient_bytes(step, TIED, training)) == expected
    # the tied lookup's gradient at the end is added in place into that sum: one matrix beyond `.grad`
    assert stage_terms(TIED, training)["tied_embedding_gradient"] == V * h * BF16


def test_chunked_head_gradients_under_tensor_parallelism_split_the_vocabulary_by_hand():
    """The same chunk-2 moment at t = 2: each rank holds V / t of the logits and of the head's V x h gradients; the
    input gradient stays h wide."""
    s, k, t = 64, 4, 2
    training = TrainingSpec(seq_len=s, global_batch=1, micro_batch=1, precision="bf16", framework="torchtune",
                            optimizer="adamw-fused", loss_chunks=k, loss_dtype="bf16")
    step = step_context(TIED, training, 1, t, 1, 1)
    V, h, BF16 = 16384, 64, 2
    expected = (k - 2) / k * s * V / t * BF16 + 3 * V * h / t * BF16 + s / k * BF16 * (V / t + h)
    assert float(chunked_head_gradient_bytes(step, TIED, training)) == expected


def test_a_quantised_base_dequantises_its_largest_linear_once_by_hand():
    """bitsandbytes / torchao dequantise one NF4 weight at a time, in the activation dtype: TIED's largest linear is
    the MLP's h x 4h = 64 x 256 (the q projection is 64 x 64), 16,384 elements x 2 B; at t = 2 half of it."""
    from frenzy_core.memory.copies import dequantised_weight_bytes

    training = TrainingSpec(seq_len=64, global_batch=1, micro_batch=1, precision="bf16", framework="hf",
                            lora_rank=8, base_quant="nf4")
    for t in (1, 2):
        step = step_context(TIED, training, 1, t, 1, 1)
        assert float(dequantised_weight_bytes(step, TIED, training, False)) == 64 * 256 / t * 2


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_compiled_cross_entropy_keeps_its_input_and_writes_one_gradient(dtype):
    # What Inductor's cross-entropy holds, read from the graphs torch.compile generates on CPU (torch 2.13): the
    # forward returns for backward the input itself, the labels and two [N, 1] fp32 row statistics (max, log-sum);
    # the backward allocates one [N, V] buffer, the input's gradient in the input's dtype, and nothing else that
    # wide. So a torchtune chunk (bf16 logits upcast inside the compiled function) costs its bf16 self while saved and
    # one bf16 gradient while its backward runs; torchtune's plain loss the fp32 logits and one fp32 gradient.
    import re

    import torch
    import torch.nn.functional as F
    from torch._inductor.utils import run_and_get_code

    from frenzy_core.memory.loss import loss_bytes_per_logit
    from frenzy_core.recipes import get_recipe

    n, v = 64, 1024
    torch._dynamo.reset()
    x = torch.randn(n, v, dtype=getattr(torch, dtype), requires_grad=True)
    y = torch.randint(0, v, (n,))
    loss_fn = torch.compile(lambda a, b: F.cross_entropy(a.float(), b, reduction="sum"), backend="inductor")

    def step():
        loss_fn(x, y).backward()

    _, (forward, backward) = run_and_get_code(step)
    buffers = re.compile(r"empty_strided_cpu\(\((\d+), (\d+)\), \([^)]*\), torch\.(\w+)\)")
    wide = [d for rows, cols, d in buffers.findall(backward) if (int(rows), int(cols)) == (n, v)]
    assert wide == [dtype]  # one gradient, in the input's dtype
    assert not [d for rows, cols, d in buffers.findall(forward) if (int(rows), int(cols)) == (n, v)]
    saved = re.search(r"return \(([^\n]*)\)", forward).group(1)
    assert "primals_1" in saved  # the input is what backward reads
    element = x.element_size()
    tt = get_recipe("torchtune")
    if dtype == "bfloat16":  # the chunked loss: every chunk saved, one chunk's gradient at a time
        assert loss_bytes_per_logit(tt, 8, compiled=True) == element + element / 8
    else:  # the plain loss on the decoder's fp32 logits
        assert loss_bytes_per_logit(tt, 1, compiled=True) == 2 * element


def test_torchtunes_recipes_compile_the_chunked_loss_and_only_the_lora_recipe_the_plain_one():
    from frenzy_core.memory.loss import compiled_cross_entropy
    from frenzy_core.recipes import get_recipe
    from frenzy_core.training import make_training

    tt = get_recipe("torchtune")
    base = dict(framework="torchtune", precision="bf16", seq_len=1024, global_batch=1)
    for kw, want in ((dict(compile=True, loss_chunks=8), True), (dict(compile=True), False),  # full: result dropped
                     (dict(compile=True, lora_rank=8), True), (dict(loss_chunks=8), False)):
        assert compiled_cross_entropy(tt, make_training(**base, **kw)) is want, kw
    assert not compiled_cross_entropy(get_recipe("pytorch"), make_training(seq_len=1024, global_batch=1, compile=True,
                                                                           framework="fsdp2"))


def test_the_bounding_stages_give_the_same_bytes_at_once_or_one_by_one(monkeypatch):
    """phases._detailed evaluates the bounding pipeline stages in one array or one at a time, by the grid's size
    (STAGES_AT_ONCE_ELEMENTS): both ways must give the same bytes, so the threshold itself changes no answer."""
    import frenzy_core.memory.phases as phases
    from frenzy_core.models import ZOO

    model = ZOO["llama-2-7b"]
    training = TrainingSpec(seq_len=2048, global_batch=64, micro_batch=1, precision="bf16-master",
                            framework="megatron", distributed_optimizer=True)
    splits = [Parallelism(dp=2, tp=2, pp=4, vp=2), Parallelism(dp=1, tp=1, pp=5, first_stage_layers=5, last_stage_layers=3),
              Parallelism(dp=4, tp=2, pp=2)]
    answers = []
    for limit in (0, 10**12):  # every stage alone, then every stage at once
        monkeypatch.setattr(phases, "STAGES_AT_ONCE_ELEMENTS", limit)
        answers.append([predict_memory(model, training, par).per_stage_allocated_bytes for par in splits])
    assert answers[0] == answers[1] and all(len(a) > 1 for a in answers[0])
