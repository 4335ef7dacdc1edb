"""Step-time model: FLOPs per optimizer step, then compute, tensor/data/pipeline communication and bubble time.

The FLOPs count follows Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", arXiv 2104.04473, Sec. 5.1 eq. 3). Their eq. 3 is, for B samples of s tokens, l layers, width h and
vocabulary V, with full activation recomputation:

    F = 96 B s l h^2 (1 + s / (6h) + V / (16 l h))
      = 96 B s l h^2          (layer matmuls, 4 passes: forward + recomputed forward + backward = 2x forward)
      + 16 B s^2 l h          (attention scores QK^T and context AV, 4 passes)
      + 6 B s h V             (LM-head logits: forward + backward only, never recomputed)

Without recomputation the layer and attention terms take 3 passes (x 3/4), so F = 72 B s l h^2 (1 + s/(6h)) + 6 B s h V,
which is the familiar 6 x parameters x tokens plus the attention term 12 l h s per token. We use the model's exact
per-layer parameter count (biases, norms, GQA, SwiGLU, top-k MoE experts) in place of 12 h^2.

Time per step on N = d x t x p x cp GPUs of one type (all terms per GPU, on the critical path, no overlap by default):

    compute_s   = FLOPs / (N x peak TFLOP/s(compute dtype) x MFU)   MFU: the type's measured `mfu` / `fp32_mfu`
    tp_comm_s   = Megatron's all-reduces of b x s x h activations over the intra-node link (Shoeybi et al. 2019)
    pp_bubble_s = (p - 1) / (m vp) x (compute_s + tp_comm_s), m = micro-batches per replica (Narayanan 2021 Sec. 2.2.1;
                  vp interleaved chunks per rank divide it, Sec. 2.2.2)
    pp_p2p_s    = activation sends between stages (scatter/gather: 1/t of b x s x h each, Narayanan 2021 Sec. 4.1)
    ep_comm_s   = MoE token all-to-alls (dispatch + combine) over the expert-parallel group, per MoE layer
    cp_comm_s   = context parallelism's ring: each layer passes K and V chunks (and dK, dV in backward) cp - 1 hops
    dp_comm_s   = ring all-reduce of one shard's gradients over the slowest link the plan spans (routed experts
                  over the d / ep ranks that hold the same experts)
    optimizer_s = the optimizer's memory-bound sweep over its shard of parameters, gradients and states

    overhead_s  = the type's measured fixed per-step cost (`step_overhead_s`)

Links run at nominal bandwidth x the type's measured all-reduce efficiency (`intra_link_efficiency` inside a node,
`network_efficiency` across nodes); the efficiencies and MFUs come from measurements (gpus.py, docs/perf.md).
`step_time_totals` is the same model over numpy arrays of d, t, p and micro-batch, for ranking thousands of plans.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from frenzy_core.gpus import GPUType
from frenzy_core.models import ModelSpec
from frenzy_core.training import OPTIMIZER_STATE_BYTES, Parallelism, TrainingSpec, check_parallelism, expert_tp_array

# --- named constants ------------------------------------------------------------------------------------------------
# Matmul FLOPs per parameter per token: 2 forward (multiply + add) + 4 backward (input and weight gradients).
FLOPS_PER_PARAM_TOKEN = 6
# Attention core per layer per token, forward only: QK^T (2 s h) + scores x V (2 s h) = 4 s h. Times 3 for fwd+bwd
# gives Narayanan's 12 l h s per token (the s/(6h) term of eq. 3).
ATTENTION_FWD_FLOPS_PER_LAYER_TOKEN_PER_SH = 4
# Megatron tensor parallelism: 2 all-reduces in forward (after attention, after MLP) and 2 in backward (their
# conjugates) per layer per micro-batch (Shoeybi et al. 2019, arXiv 1909.08053, Fig. 4). Full recomputation repeats
# the 2 forward ones (Narayanan 2021 Sec. 3.5 counts the recomputed forward as a third pass).
TP_ALLREDUCES_PER_LAYER = 4
TP_ALLREDUCES_PER_LAYER_RECOMPUTE = 2
# Expert parallelism: Megatron-Core's alltoall token dispatcher (megatron/core/transformer/moe/token_dispatcher.py,
# MoEAlltoAllTokenDispatcher: token_permutation and token_unpermutation) runs one all-to-all to send each token's
# top-k copies to the experts' ranks and one to bring them back, in forward, and their conjugates in backward; full
# recomputation repeats the forward pair.
EP_ALLTOALLS_PER_MOE_LAYER = 4
EP_ALLTOALLS_PER_MOE_LAYER_RECOMPUTE = 2
# Context parallelism (ring attention, Transformer Engine's AttnFuncWithCPAndKVP2P in
# transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py): forward sends each rank's K and V
# chunk cp - 1 hops round the ring; backward sends K, V and their gradients dK, dV: twice the forward bytes; full
# recomputation repeats the forward.
CP_KV_PASSES = 3
CP_KV_PASSES_RECOMPUTE = 1
# Fraction of the data-parallel gradient all-reduce hidden behind backward compute. 0 = no overlap (conservative);
# PyTorch DDP / Megatron overlap bucketed all-reduces with backward, so the truth lies between 0 and ~0.8.
DP_COMM_OVERLAP = 0.0
# ZeRO-3 (parameter sharding) adds a parameter all-gather in forward and in backward: 1.5x the all-reduce volume
# of plain data parallelism (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 7.2.2). ZeRO-1/2 and Megatron's
# distributed optimizer replace the all-reduce by reduce-scatter + all-gather: the same volume (1x).
ZERO3_DP_VOLUME_FACTOR = 1.5
BITS_PER_BYTE = 8


# --- FLOPs ----------------------------------------------------------------------------------------------------------
def training_flops_per_step(model: ModelSpec, training: TrainingSpec) -> float:
    """Model FLOPs of one optimizer step (forward + backward, plus recomputation), after Narayanan 2021 eq. 3.

    per token:  6 x (layer weights + LM head)            weights: 2 forward + 4 backward FLOPs each
              + 6 x a (d_qk + d_v) x keys                attention scores and context, forward + backward
                                                         (= 12 l h s for d_qk = d_v = h / a; keys: attended_keys)
    recompute:  full      + 2 x layer weights + 2 a (d_qk + d_v) keys   (one more forward; LM head not recomputed)
                selective + 2 a (d_qk + d_v) keys         (the attention core only, Korthikanti et al. 2022)

    >>> from frenzy_core.models import ZOO
    >>> f"{training_flops_per_step(ZOO['gpt2'], TrainingSpec(seq_len=1024, global_batch=8)):.4g}"
    '7.005e+12'
    """
    tokens = training.tokens_per_step()
    layers = model.num_layers
    active_layer = model.attention_parameters() + model.active_mlp_parameters() + 2 * model.norm_parameters()
    layer_weights = layers * active_layer
    head_weights = model.vocab_size * model.hidden_size
    # Attention core: QK^T over query heads x q/k head width, scores x V over heads x value width (GQA shrinks K/V
    # projections, not these matmuls; MLA: qk_nope + qk_rope, then v_head_dim). 2 FLOPs per multiply-add each, i.e.
    # 4 s h per layer and token when both widths are h / a (Narayanan's term).
    score_context_width = model.num_heads * (model.head_dim + model.value_head_dim)
    attn_fwd_per_token = ATTENTION_FWD_FLOPS_PER_LAYER_TOKEN_PER_SH / 2 * score_context_width * attended_keys(
        model, training
    )

    weights_fwd_bwd = FLOPS_PER_PARAM_TOKEN * (layer_weights + head_weights)
    attention_fwd_bwd = 3 * attn_fwd_per_token
    if training.recompute == "full":
        recompute = 2 * layer_weights + attn_fwd_per_token
    elif training.recompute == "selective":
        recompute = attn_fwd_per_token
    else:
        recompute = 0
    return float(tokens) * (weights_fwd_bwd + attention_fwd_bwd + recompute)


def attended_keys(model: ModelSpec, training: TrainingSpec) -> int:
    """Keys each query's score and context matmuls run over, summed over layers: s per full-attention layer;
    under flash attention a sliding-window layer computes only its window (flash_attn window_size), while eager
    attention computes all s x s scores and masks them (HF sliding-window mask), so it still costs s.

    >>> from frenzy_core.models import ZOO
    >>> attended_keys(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8))  # 12 layers x 1024
    12288
    """
    s = training.seq_len
    sliding = model.num_sliding_layers if training.attention == "flash" else 0
    window = min(s, model.sliding_window or s)
    return (model.num_layers - sliding) * s + sliding * window


# --- step time ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepTime:
    """Where one optimizer step's time goes, per GPU on the critical path. Seconds unless named otherwise."""

    flops_per_step: float  # model FLOPs of the whole step over all GPUs (recomputation included)
    micro_batches: float  # m: micro-batches per replica per step = global_batch / (d x micro_batch)
    compute_s: float  # FLOPs / (N x peak x MFU): the step's matmul work spread evenly over all GPUs
    tp_comm_s: float  # tensor-parallel activation all-reduces (intra-node link)
    ep_comm_s: float  # expert-parallel token all-to-alls (MoE; 0 at ep = 1)
    cp_comm_s: float  # context-parallel K/V ring passes (0 at cp = 1)
    pp_bubble_s: float  # pipeline fill/drain: (p - 1) / m x (compute + tensor-parallel time)
    pp_p2p_s: float  # activations / gradients sent between pipeline stages
    dp_comm_s: float  # gradient all-reduce across replicas, after overlap with backward (DP_COMM_OVERLAP)
    optimizer_s: float  # optimizer sweep over the local shard of weights, grads and states (memory-bound)
    overhead_s: float  # fixed per-step framework cost (launches, data loading, Python): the type's measured figure
    step_time_s: float  # the sum of the above: seconds per optimizer step
    tokens_per_step: int  # global_batch x seq_len
    num_gpus: int  # N = d x t x p

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def achieved_tflops_per_gpu(self) -> float:
        """Model TFLOP/s each GPU delivers over the whole step (the MFU numerator, Chowdhery et al. 2022 App. B)."""
        return self.flops_per_step / self.step_time_s / self.num_gpus / 1e12


def _components(
    model: ModelSpec,
    training: TrainingSpec,
    gpu: GPUType,
    dp,
    tp,
    pp,
    micro_batch,
    *,
    intra_link_gbyte_s: float | None,
    network_gbit_s: float,
    gpus_per_node: int,
    mfu: float | None,
    overhead_s: float | None,
    ep=1,
    cp=1,
    vp=1,
    etp=0,
) -> dict[str, np.ndarray]:
    """The whole model over broadcast numpy arrays; `step_time` and `step_time_totals` both call this."""
    d, t, p, b, e, c, v = (np.asarray(x, dtype=np.float64) for x in (dp, tp, pp, micro_batch, ep, cp, vp))
    et = expert_tp_array(etp, t)  # expert tensor parallel; 0 = t
    setup = training.precision_setup
    eff = gpu.efficiency(setup.compute_dtype) if mfu is None else mfu
    overhead_s = gpu.step_overhead_s if overhead_s is None else overhead_s
    # Achieved, not nominal, bandwidth: nominal link x the all-reduce efficiency measured for this type (gpus.py).
    nominal_intra = gpu.intra_link_gbyte_s if intra_link_gbyte_s is None else intra_link_gbyte_s
    intra_bytes_s = nominal_intra * 1e9 * gpu.intra_link_efficiency
    node_nic_bytes_s = network_gbit_s * 1e9 / BITS_PER_BYTE * gpu.network_efficiency
    n_gpus = d * t * p * c
    s, h = training.seq_len / c, model.hidden_size  # s: the tokens of each sample one GPU holds (seq_len / cp)

    # Compute: the step's FLOPs spread over all N GPUs at the achievable fraction of peak.
    flops = training_flops_per_step(model, training)
    peak_flops_s = gpu.peak_tflops(setup.compute_dtype) * 1e12
    compute_s = flops / (n_gpus * peak_flops_s * eff)

    # Micro-batches per replica; the pipeline is filled m times per step.
    m = training.global_batch / (d * b)
    layers_per_stage = model.num_layers / p

    # Tensor parallel: per layer and micro-batch, 4 ring all-reduces of b x s x h activations (+2 with full
    # recomputation); a ring moves 2 (t - 1) / t of the buffer through each GPU's link. TP stays inside a node;
    # a t larger than a node would cross the network, so it then gets a node's NIC shared by its t GPUs.
    activation_msg_bytes = b * s * h * setup.activation_bytes
    allreduces = TP_ALLREDUCES_PER_LAYER + (TP_ALLREDUCES_PER_LAYER_RECOMPUTE if training.recompute == "full" else 0)
    tp_link = np.where(t <= gpus_per_node, intra_bytes_s, node_nic_bytes_s / np.minimum(t, gpus_per_node))
    tp_comm_s = allreduces * layers_per_stage * m * 2 * (t - 1) / t * activation_msg_bytes / tp_link

    # Expert parallel (MoE): per MoE layer and micro-batch, each GPU sends the top-k copies of its tokens (b x s / t:
    # Megatron needs sequence parallelism for MoE with t > 1) to the ep ranks holding their experts, (ep - 1) / ep
    # of them off the GPU. Megatron lays ranks out t, cp, ep, d (parallel_state.py): the expert group is etp x ep
    # consecutive ranks, inside a node while etp x ep <= the node, else every GPU of the node shares its NIC.
    a2a_bytes = b * s / t * model.moe_top_k * h * setup.activation_bytes
    alltoalls = EP_ALLTOALLS_PER_MOE_LAYER + (EP_ALLTOALLS_PER_MOE_LAYER_RECOMPUTE if training.recompute == "full" else 0)
    ep_link = np.where(et * e <= gpus_per_node, intra_bytes_s,
                       np.minimum(intra_bytes_s, node_nic_bytes_s / gpus_per_node))
    moe_layers_per_stage = model.num_moe_layers / p
    ep_comm_s = alltoalls * moe_layers_per_stage * m * (e - 1) / e * a2a_bytes / ep_link

    # Context parallel: per layer and micro-batch each GPU's K and V chunks (b x seq_len / cp tokens x the K and V
    # widths / t: heads split over t) travel cp - 1 hops. Megatron's rank order is t, cp, ...: the ring stays in a
    # node while t x cp fits it; else every hop out of the node shares the NIC with the node's other t rings.
    kv_chunk_bytes = b * s * (model.kv_dim + model.v_dim) / t * setup.activation_bytes
    # selective recomputation re-runs core attention, and with it the ring (op-sac saves attention's outputs)
    passes = CP_KV_PASSES + (CP_KV_PASSES_RECOMPUTE if training.recompute in ("full", "selective") else 0)
    cp_link = np.where(t * c <= gpus_per_node, intra_bytes_s,
                       np.minimum(intra_bytes_s, node_nic_bytes_s / np.minimum(t, gpus_per_node)))
    cp_comm_s = passes * layers_per_stage * m * (c - 1) * kv_chunk_bytes / cp_link

    # Pipeline bubble (GPipe / 1F1B): (p - 1) idle micro-batch slots out of m (Narayanan 2021 Sec. 2.2.1); the
    # interleaved schedule with vp chunks per rank shrinks it vp-fold (Sec. 2.2.2: (p - 1) / (m vp)).
    pp_bubble_s = (p - 1) / (m * v) * (compute_s + tp_comm_s + ep_comm_s + cp_comm_s)

    # Placement model: ranks are laid out t fastest, then p, then d, filling nodes of `gpus_per_node` in order
    # (Narayanan 2021 Sec. 3.3: tensor inside a node, pipeline and data across). A replica spans t x p GPUs.
    spans_nodes = n_gpus > gpus_per_node
    replica_spans_nodes = t * p * c > gpus_per_node
    # One node's NIC is shared by every ring that leaves the node: one per distinct shard on it (min(t x p, node)).
    rings_per_nic = np.minimum(t * p, gpus_per_node)
    net_per_ring = node_nic_bytes_s / rings_per_nic

    # Pipeline point-to-point: each stage sends m activations forward and m gradients backward, each b x s x h,
    # split 1/t by Megatron's scatter/gather (Narayanan 2021 Sec. 4.1); the network when stages cross nodes. With
    # vp chunks per rank every micro-batch crosses each rank vp times: vp times the sends (Sec. 2.2.2).
    p2p_link = np.where(replica_spans_nodes, np.minimum(net_per_ring, intra_bytes_s), intra_bytes_s)
    pp_p2p_s = np.where(p > 1, 2 * m * v * activation_msg_bytes / t / p2p_link, 0.0)

    # Data parallel: ring all-reduce of one shard's gradients, params / (t x p) x grad bytes, moving
    # 2 (d - 1) / d of it through the slowest link the ring uses (the NIC share once the plan spans nodes). The cp
    # ranks of a replica hold the same parameters: the ring runs over d x cp ranks (Megatron's data-parallel group
    # with context parallelism; torchtitan's dp_shard_cp mesh). Routed experts are split ep ways more and
    # all-reduced over the t x d x cp / (etp x ep) ranks that hold the same expert shard (Megatron's
    # expert-data-parallel group; d x cp / ep at etp = t).
    routed = float(model.routed_expert_parameters() * model.num_moe_layers)
    dense_shard = (model.parameter_count() - routed) / (t * p)
    expert_shard = routed / (et * p * e)  # each expert's linears split etp ways, the experts ep ways
    d_grad = d * c
    d_expert = t * d_grad / (et * e)  # the expert grid etp x ep x expert-dp re-tiles the t x d x cp ranks
    volume = ZERO3_DP_VOLUME_FACTOR if training.zero_stage == 3 else 1.0
    dp_link = np.where(spans_nodes, np.minimum(net_per_ring, intra_bytes_s), intra_bytes_s)
    ring_bytes = (2 * (d_grad - 1) / d_grad * dense_shard + 2 * (d_expert - 1) / d_expert * expert_shard) \
        * setup.grad_bytes
    dp_comm_s = (1.0 - DP_COMM_OVERLAP) * volume * ring_bytes / dp_link

    # Optimizer: one sweep reading weights, grads, master copy and states and writing weights, master and states,
    # over the local shard (sharded further by d under ZeRO >= 1 or the distributed optimizer). Memory-bound.
    state_bytes = OPTIMIZER_STATE_BYTES[training.optimizer]
    read_bytes = setup.param_bytes + setup.grad_bytes + setup.master_bytes + state_bytes
    write_bytes = setup.param_bytes + setup.master_bytes + state_bytes
    sharded = training.zero_stage >= 1 or training.distributed_optimizer
    opt_params = dense_shard / d_grad + expert_shard / d_expert if sharded else dense_shard + expert_shard
    optimizer_s = opt_params * (read_bytes + write_bytes) / (gpu.memory_bandwidth_gbyte_s * 1e9)

    total = compute_s + tp_comm_s + ep_comm_s + cp_comm_s + pp_bubble_s + pp_p2p_s + dp_comm_s + optimizer_s \
        + overhead_s
    return {
        "flops": np.asarray(flops),
        "m": m,
        "compute_s": compute_s,
        "tp_comm_s": tp_comm_s,
        "ep_comm_s": ep_comm_s,
        "cp_comm_s": cp_comm_s,
        "pp_bubble_s": pp_bubble_s,
        "pp_p2p_s": pp_p2p_s,
        "dp_comm_s": dp_comm_s,
        "optimizer_s": optimizer_s,
        "total": total,
        "n_gpus": n_gpus,
    }


def step_time(
    model: ModelSpec,
    training: TrainingSpec,
    par: Parallelism,
    gpu: GPUType,
    *,
    intra_link_gbyte_s: float | None = None,
    network_gbit_s: float = 100.0,
    gpus_per_node: int = 8,
    mfu: float | None = None,
    overhead_s: float | None = None,
) -> StepTime:
    """Predicted seconds per optimizer step of `training` on d x t x p GPUs of one type, with its breakdown.

    `intra_link_gbyte_s` defaults to the GPU type's nominal link, `mfu` to its measured MFU for the compute dtype,
    `overhead_s` to its measured per-step cost; `network_gbit_s` is one node's nominal NIC. Raises SpecError when
    the split does not fit the model or batch (see `check_parallelism`).

    >>> from frenzy_core.gpus import CATALOG
    >>> from frenzy_core.models import ZOO
    >>> st = step_time(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8, precision="amp"),
    ...                Parallelism(), CATALOG["A100-40GB"], mfu=0.5)
    >>> round(st.compute_s, 4), round(st.step_time_s, 4), st.dp_comm_s
    (0.0449, 0.1681, 0.0)
    """
    check_parallelism(model, training, par)
    c = _components(
        model,
        training,
        gpu,
        par.dp,
        par.tp,
        par.pp,
        training.micro_batch,
        intra_link_gbyte_s=intra_link_gbyte_s,
        network_gbit_s=network_gbit_s,
        gpus_per_node=gpus_per_node,
        mfu=mfu,
        overhead_s=overhead_s,
        ep=par.ep,
        cp=par.cp,
        vp=par.vp,
        etp=par.etp,
    )
    return StepTime(
        flops_per_step=float(c["flops"]),
        micro_batches=float(c["m"]),
        compute_s=float(c["compute_s"]),
        tp_comm_s=float(c["tp_comm_s"]),
        ep_comm_s=float(c["ep_comm_s"]),
        cp_comm_s=float(c["cp_comm_s"]),
        pp_bubble_s=float(c["pp_bubble_s"]),
        pp_p2p_s=float(c["pp_p2p_s"]),
        dp_comm_s=float(c["dp_comm_s"]),
        optimizer_s=float(c["optimizer_s"]),
        overhead_s=float(gpu.step_overhead_s if overhead_s is None else overhead_s),
        step_time_s=float(c["total"]),
        tokens_per_step=training.tokens_per_step(),
        num_gpus=par.num_gpus,
    )


def step_time_totals(
    model: ModelSpec,
    training: TrainingSpec,
    gpu: GPUType,
    dp,
    tp,
    pp,
    micro_batch,
    *,
    intra_link_gbyte_s: float | None = None,
    network_gbit_s: float = 100.0,
    gpus_per_node: int = 8,
    mfu: float | None = None,
    overhead_s: float | None = None,
    ep=1,
    cp=1,
    vp=1,
) -> np.ndarray:
    """`step_time(...).step_time_s` for arrays of d, t, p, micro-batch, ep, cp and vp (broadcast together), no loop.

    `micro_batch` replaces `training.micro_batch`; splits are not validated here (filter them before ranking).

    >>> from frenzy_core.gpus import CATALOG
    >>> from frenzy_core.models import ZOO
    >>> tr = TrainingSpec(seq_len=1024, global_batch=8, micro_batch=8, precision="amp")
    >>> step_time_totals(ZOO["gpt2"], tr, CATALOG["A100-40GB"], [1, 2], 1, 1, [8, 4], mfu=0.5).round(4)
    array([0.1681, 0.1474])
    """
    c = _components(
        model,
        training,
        gpu,
        dp,
        tp,
        pp,
        micro_batch,
        intra_link_gbyte_s=intra_link_gbyte_s,
        network_gbit_s=network_gbit_s,
        gpus_per_node=gpus_per_node,
        mfu=mfu,
        overhead_s=overhead_s,
        ep=ep,
        cp=cp,
        vp=vp,
    )
    return np.asarray(c["total"], dtype=np.float64)
