"""`frenzy`: the command line. Bad input exits with status 2 and one line naming the field, never a traceback.

The CLI is a boundary like the app: it parses flags, calls the core and prints. The core itself never prints.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence

from frenzy_core.errors import SpecError
from frenzy_core.frameworks import FRAMEWORKS
from frenzy_core.frameworks import get as get_framework
from frenzy_core.limits import DEFAULT_SAFETY_MARGIN, DEFAULT_TOKENS, MAX_FLAG_INT, MAX_REPORTED_SKIPS
from frenzy_core.systems import SYSTEMS

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line on stderr and exit 2 (no usage block)."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _check_int_flags(args: argparse.Namespace) -> None:
    """Refuse integer flags too large to mean anything, before any of them reaches numpy's int64."""
    for name, value in vars(args).items():
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_FLAG_INT:
            from frenzy_core.limits import short_repr

            raise SpecError(name, f"{short_repr(value)} is too large (limit {MAX_FLAG_INT:,}); use a realistic value")


def dumps_strict(obj) -> str:
    """Strict JSON: NaN and infinity (never valid JSON) are written as null."""
    import math

    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(obj), allow_nan=False)


def _skipped_rows(trace) -> dict:
    """The loader's report of skipped rows: every reason counted, the first rows listed with their numbers."""
    return {"kept": trace.kept, "skipped": len(trace.skipped), "skip_reasons": trace.skip_reasons(),
            "skipped_rows": [{"row": p.row, "reason": p.reason} for p in trace.skipped[:MAX_REPORTED_SKIPS]]}


def _add_model_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", default="gpt2", help="zoo model name (see `frenzy models`); default gpt2")
    src.add_argument("--config", help="path to a Hugging Face config.json (GPT-2, Llama, Mistral, Qwen2, Mixtral; "
                     "Gemma-2/3, Phi-3/4, Qwen3, DeepSeek-V2/V3, OLMo-2: docs/models.md)")
    src.add_argument("--spec", help="path to a JSON or YAML file of ModelSpec fields (shapes config.json cannot "
                     "express, e.g. GELU with GQA); see docs/models.md")


def _elements(text: str) -> int:
    """A count of elements as DeepSpeed's JSON writes it: 50000000 or 5e7 (a whole, finite number)."""
    from frenzy_core.limits import finite_float

    try:
        value = finite_float(text, "elements")
    except SpecError:
        value = math.nan
    if not value.is_integer():  # NaN and inf are not integers either
        raise argparse.ArgumentTypeError(f"expected a whole number of elements such as 5e7, got {text!r}")
    return int(value)


def _add_training_args(p: argparse.ArgumentParser, split: bool = True) -> None:
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per sample (default 1024)")
    if split:
        p.add_argument("--micro-batch", type=int, default=1, help="samples per forward/backward per GPU (default 1)")
    else:
        p.add_argument("--micro-batch", type=int, default=None,
                       help="fix every plan's micro-batch (default: the planner picks the fastest that fits)")
    p.add_argument("--global-batch", type=int, default=None, help="samples per optimizer step (default micro x dp)")
    p.add_argument("--precision", default=None, choices=["amp", "bf16-master", "bf16", "fp32"],
                   help="amp (fp32 params + autocast), bf16-master (Megatron), bf16 (pure: bf16 Adam states), fp32; "
                        "default amp, bf16-master under --framework megatron (it has no autocast mode)")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "adamw-fused", "adamw-8bit", "sgd"])
    p.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO stage (default 0)")
    p.add_argument("--distributed-optimizer", action="store_true", help="Megatron distributed optimizer")
    p.add_argument("--attention", default="flash", choices=["eager", "flash"])
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--recompute", default="none", choices=["none", "selective", "full", "op-sac"])
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--recompute-every", type=int, default=1, help="with full/op-sac: checkpoint every k-th layer")
    p.add_argument("--recompute-modules", default="",
                   help="megatron: comma list of layernorm, moe_act (Megatron --recompute-modules beyond core_attn, "
                        "which --recompute selective is), e.g. layernorm,moe_act")
    p.add_argument("--loss-chunks", type=int, default=1, help="cross-entropy over k chunks of the logits")
    p.add_argument("--offload", default="none", choices=["none", "optimizer", "params"],
                   help="CPU offload: optimizer states + grads (ZeRO-Offload), or the parameters too")
    p.add_argument("--lora-rank", type=int, default=0, help="LoRA rank (0: full training); the base is frozen")
    p.add_argument("--lora-targets", default="all-linear",
                   help="attention, all-linear, or a comma list of q,k,v,o,gate,up,down,head")
    p.add_argument("--lora-dropout", type=float, default=0.0, help="LoRA dropout P (keeps a mask + dropped input)")
    p.add_argument("--lora-variant", default="lora", choices=["lora", "dora"])
    p.add_argument("--base-quant", default="none", choices=["none", "nf4", "nf4-dq", "int8"],
                   help="frozen base linears: NF4 (QLoRA), NF4 + double quantisation, LLM.int8")
    p.add_argument("--quant-backend", default="bitsandbytes", choices=["bitsandbytes", "bitsandbytes-legacy", "torchao"],
                   help="bitsandbytes (>= 0.43.2), bitsandbytes-legacy (< 0.43.2: saves each input), torchao NF4")
    p.add_argument("--quant-head", action="store_true", help="quantise the LM head too (LitGPT)")
    p.add_argument("--loss-dtype", default="fp32", choices=["fp32", "bf16"], help="dtype the loss keeps")
    p.add_argument("--optimizer-dtype", default="auto", choices=["auto", "fp32", "bf16"], help="optimizer states")
    p.add_argument("--paged-optimizer", action="store_true", help="bitsandbytes paged optimizer states")
    p.add_argument("--optimizer-in-backward", action="store_true", help="step and free each gradient in backward")
    p.add_argument("--activation-offload", action="store_true", help="saved activations offloaded to the host")
    p.add_argument("--packed", action="store_true",
                   help="several documents packed into each row, attention kept within each (hf: an s x s mask)")
    p.add_argument("--packed-doc-tokens", type=int, default=0, metavar="N",
                   help="with --packed: the documents' mean length in tokens; attention runs within each where the "
                        "stack's kernel skips the others (0: one document fills the row)")
    p.add_argument("--fp8", action="store_true", help="Transformer Engine fp8 linears")
    p.add_argument("--compile", action="store_true", help="torchtitan per-block torch.compile (framework fsdp2)")
    p.add_argument("--moe-grouped-gemm", action="store_true", help="Megatron --moe-grouped-gemm (TE GroupedLinear)")
    p.add_argument("--fp8-params", action="store_true",
                   help="Megatron --fp8-param-gather: fp8 weights for the fp8 linears (needs --fp8 and the "
                        "distributed optimizer)")
    p.add_argument("--bf16-grad-reduce", action="store_true",
                   help="Megatron --grad-reduce-in-bf16: bf16 main grads and reduce-scatter (fp32 by default)")
    p.add_argument("--param-remainders", action="store_true",
                   help="the distributed optimizer keeps fp32 masters as 16-bit remainders of the bf16 params "
                        "(NeMo distributed_fused_adam, Megatron --use-precision-aware-optimizer)")
    p.add_argument("--fsdp", type=int, default=0, metavar="{1,2}",
                   help="the FSDP of a --zero 3 run: 1 FullyShardedDataParallel (FlatParameter; hf, litgpt), 2 "
                        "fully_shard (fsdp2, torchtune); default: the stack's own (litgpt 1, fsdp2 / torchtune 2)")
    _OVERLAP = {"auto": None, "on": True, "off": False}
    p.add_argument("--overlap-dp-comm", default="auto", choices=list(_OVERLAP), type=str,
                   help="data-parallel comm hidden behind compute (Megatron --overlap-grad-reduce/--overlap-param-"
                        "gather, FSDP prefetch, DeepSpeed overlap_comm); auto: on for megatron, fsdp2 and ZeRO-3")
    p.add_argument("--tp-comm-overlap", default="auto", choices=list(_OVERLAP), type=str,
                   help="tensor-parallel comm hidden behind the GEMMs (Megatron --tp-comm-overlap, torchtitan "
                        "AsyncTP); auto: on for megatron with --sequence-parallel")
    p.add_argument("--overlap-pp-comm", default="auto", choices=list(_OVERLAP), type=str,
                   help="pipeline sends hidden behind the other chunks' compute, interleaved plans only (Megatron "
                        "overlap_p2p_comm; off: --no-overlap-p2p-communication); auto: on for megatron")
    for flag, default in (("reduce-bucket-size", "5e8"), ("stage3-max-live-parameters", "1e9"),
                          ("stage3-max-reuse-distance", "1e9")):
        p.add_argument(f"--{flag}", type=_elements, default=0, metavar="N",
                       help=f"DeepSpeed zero_optimization.{flag.replace('-', '_')} in elements (framework deepspeed; "
                            f"0: DeepSpeed's default {default})")
    p.add_argument("--method", default="detailed", choices=["detailed", "paper"], help="memory method")
    p.add_argument("--framework", default="pytorch", choices=list(FRAMEWORKS),
                   help="training stack whose memory recipe applies (unknown: the band over all; docs/memory.md)")
    if split:
        p.add_argument("--dp", type=int, default=1, help="data-parallel replicas")
        p.add_argument("--tp", type=int, default=1, help="tensor-parallel shards")
        p.add_argument("--pp", type=int, default=1, help="pipeline stages")
        p.add_argument("--cp", type=int, default=1, help="context-parallel ranks (sequence split, ring attention)")
        p.add_argument("--vp", type=int, default=1, help="virtual pipeline chunks per rank (interleaved 1F1B)")
        p.add_argument("--ep", type=int, default=1, help="expert-parallel ranks (MoE experts split over them)")
        p.add_argument("--etp", type=int, default=0, help="expert tensor-parallel size (default 0: as --tp)")


def _model(args):
    from frenzy_core.models import get_model, load_hf_config, load_model_spec

    if getattr(args, "spec", None):
        return load_model_spec(args.spec)
    return load_hf_config(args.config) if args.config else get_model(args.model)


_FINETUNE_FLAGS = ("lora_dropout", "lora_variant", "quant_backend", "quant_head", "loss_dtype", "optimizer_dtype",
                   "paged_optimizer", "optimizer_in_backward", "activation_offload", "packed", "packed_doc_tokens")


def _training(args, dp: int = 1):
    from frenzy_core.training import make_training

    micro_batch = args.micro_batch if args.micro_batch is not None else 1
    if micro_batch <= 0:
        raise SpecError("micro_batch", f"must be a positive integer, got {micro_batch}")
    global_batch = args.global_batch if args.global_batch is not None else micro_batch * dp
    return make_training(
        seq_len=args.seq_len, global_batch=global_batch, micro_batch=micro_batch,
        precision=args.precision or get_framework(args.framework).default_precision,
        optimizer=args.optimizer, zero_stage=args.zero, distributed_optimizer=args.distributed_optimizer,
        attention=args.attention, dropout=args.dropout, recompute=args.recompute,
        sequence_parallel=args.sequence_parallel, framework=args.framework,
        recompute_every=args.recompute_every, loss_chunks=args.loss_chunks, offload=args.offload,
        recompute_modules=tuple(m.strip() for m in getattr(args, "recompute_modules", "").split(",") if m.strip()),
        lora_rank=args.lora_rank, lora_targets=args.lora_targets, base_quant=args.base_quant,
        **{f: getattr(args, f) for f in _FINETUNE_FLAGS if hasattr(args, f)},
        fp8_linears=args.fp8, compile=args.compile, moe_grouped_gemm=args.moe_grouped_gemm,
        fp8_params=args.fp8_params, bf16_grad_reduce=args.bf16_grad_reduce, param_remainders=args.param_remainders,
        fsdp=getattr(args, "fsdp", 0),
        overlap_dp_comm={"on": True, "off": False}.get(getattr(args, "overlap_dp_comm", "auto")),
        tp_comm_overlap={"on": True, "off": False}.get(getattr(args, "tp_comm_overlap", "auto")),
        overlap_pp_comm={"on": True, "off": False}.get(getattr(args, "overlap_pp_comm", "auto")),
        reduce_bucket_size=args.reduce_bucket_size, stage3_max_live_parameters=args.stage3_max_live_parameters,
        stage3_max_reuse_distance=args.stage3_max_reuse_distance,
    )


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**30:8.2f} GiB"


def cmd_models(args) -> int:
    from frenzy_core.models import ZOO

    rows = [{"name": m.name, "parameters": m.parameter_count(), "hidden": m.hidden_size, "layers": m.num_layers,
             "heads": m.num_heads, "kv_heads": m.kv_heads, "vocab": m.vocab_size, "mlp": m.mlp_kind} for m in ZOO.values()]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'model':16} {'parameters':>16} {'h':>6} {'l':>4} {'a':>4} {'kv':>4} {'vocab':>7}  mlp")
    for r in rows:
        print(f"{r['name']:16} {r['parameters']:>16,} {r['hidden']:>6} {r['layers']:>4} {r['heads']:>4} "
              f"{r['kv_heads']:>4} {r['vocab']:>7}  {r['mlp']}")
    return 0


def cmd_gpus(args) -> int:
    from frenzy_core.gpus import CATALOG

    rows = [g.model_dump() for g in CATALOG.values()]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'gpu':12} {'GiB':>5} {'bf16 TF':>8} {'GB/s':>6} {'link':>16} {'$/h':>6}")
    for g in CATALOG.values():
        print(f"{g.name:12} {g.memory_gib:>5g} {g.bf16_tflops:>8g} {g.memory_bandwidth_gbyte_s:>6g} "
              f"{g.intra_link + ' ' + format(g.intra_link_gbyte_s, 'g'):>16} {g.price_per_hour_usd:>6.2f}")
    return 0


def _warn_positions(model, training) -> None:
    """A sequence beyond a rotary model's trained context is allowed, with a warning on stderr (both modes)."""
    from frenzy_core.models import beyond_trained_positions

    note = beyond_trained_positions(model, training.seq_len)
    if note:
        print(f"warning: {note}", file=sys.stderr)


def cmd_memory(args) -> int:
    from frenzy_core.memory import predict_memory
    from frenzy_core.training import Parallelism

    model = _model(args)
    par = Parallelism(dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp, vp=args.vp, ep=args.ep, etp=args.etp)
    training = _training(args, dp=args.dp)
    _warn_positions(model, training)
    mem = predict_memory(model, training, par, method=args.method)
    band = None
    if get_framework(training.framework).is_band and args.method == "detailed":
        from frenzy_core.memory import predict_memory_band

        band = [r.total_bytes for r in predict_memory_band(model, training, par)]
    if args.json:
        print(json.dumps({"model": model.name, "parameters": model.parameter_count(), "method": mem.method,
                          "framework": training.framework, "dp": par.dp, "tp": par.tp, "pp": par.pp,
                          **mem.gpu_report(), "peak_phase": mem.peak_phase,
                          **({"total_bytes_band": band} if band else {}),
                          "breakdown": {k: int(v) for k, v in mem.components().items()}}))
        return 0
    print(f"{model.name}: {model.parameter_count():,} parameters; d={par.dp} t={par.tp} p={par.pp}; "
          f"method={mem.method}; peak in {mem.peak_phase}")
    for name, value in mem.components().items():
        print(f"  {name:14} {_fmt_bytes(value)}")
    print(f"  {'total':14} {_fmt_bytes(mem.total_bytes)}")
    print(f"  allocated {_fmt_bytes(mem.allocated_bytes)} (max_memory_allocated), reserved "
          f"{_fmt_bytes(mem.reserved_bytes)}, nvidia-smi {_fmt_bytes(mem.total_bytes)}; framework {training.framework}")
    if par.pp > 1:
        print("  per stage allocated: " + ", ".join(f"{v / 2**30:.2f}" for v in mem.per_stage_allocated_bytes) + " GiB")
    if band:
        print(f"  unknown framework: {band[0] / 2**30:.2f} .. {band[1] / 2**30:.2f} GiB over all recipes")
    return 0


def _plans_cluster(args):
    """The cluster `frenzy plans` ranks on: the --cluster file, or --nodes nodes of a --system."""
    from frenzy_core.cluster import load_cluster, system_cluster

    if args.system is None:
        if args.nodes is not None:
            raise SpecError("nodes", "counts the nodes of a --system; with --cluster the file lists its nodes")
        return load_cluster(args.cluster)
    if args.nodes is None:
        raise SpecError("nodes", f"how many {args.system} nodes to plan on: pass --nodes N")
    return system_cluster(args.system, args.nodes)


def cmd_plans(args) -> int:
    from frenzy_core.plans import rank_plans

    model = _model(args)
    if args.global_batch is None:
        raise SpecError("global_batch", "required for plans: pass --global-batch N (samples per optimizer step)")
    if args.top < 0:
        raise SpecError("top", f"must be 0 (all plans) or positive, got {args.top}")
    deadline_h = _hours(args.deadline, "deadline") if args.deadline is not None else None
    training = _training(args)
    _warn_positions(model, training)
    cluster = _plans_cluster(args)
    result = rank_plans(model, training, cluster, objective=args.objective, tokens=args.tokens, method=args.method,
                        safety_margin=args.safety_margin, micro_batch=args.micro_batch,
                        scaling_floor=args.scaling_floor, max_gpus=args.max_gpus,
                        deadline_s=None if deadline_h is None else deadline_h * 3600.0, budget_usd=args.budget)
    top = result.plans[: args.top] if args.top else result.plans
    if not result.plans:  # infeasible: the explanation goes to stderr in both modes, the exit status says it
        if args.json:
            print("[]")
        print(f"frenzy plans: {result.explanation}", file=sys.stderr)
        return 1
    if args.export:
        from frenzy_core.export import export_plan

        sys.stdout.write(export_plan(args.export, model, training, result.plans[0], cluster, tokens=args.tokens))
        return 0
    if args.per_type:
        top = result.best_per_type()
    if args.json:
        print(dumps_strict([{**p.as_dict(), "memory_bytes": int(p.memory_bytes), "cost": p.cost_usd} for p in top]))
        return 0
    print(f"{len(result.plans)} feasible plans for {model.name} on {cluster.name}, ranked by {args.objective}:")
    # the vp / cp / ep columns only where some listed plan uses them; first / last (layers) where one is uneven
    extra = {k: (k, 3) for k in ("vp", "cp", "ep") if any(getattr(p, k) > 1 for p in top)}
    if any(p.first_stage_layers or p.last_stage_layers for p in top):
        extra |= {"first_stage_layers": ("first", 5), "last_stage_layers": ("last", 4)}
    print(f"{'#':>3} {'gpu':12} {'d':>4} {'t':>3} {'p':>3}{''.join(f' {h:>{w}}' for h, w in extra.values())} "
          f"{'gpus':>5} {'mb':>3} {'GiB/GPU':>8} {'step s':>8} {'days':>7} {'GPU-h':>9} {'cost $':>10}")
    for i, p in enumerate(top, 1):
        cols = "".join(f" {getattr(p, k):>{w}}" for k, (_, w) in extra.items())
        print(f"{i:>3} {p.gpu_type:12} {p.dp:>4} {p.tp:>3} {p.pp:>3}{cols} {p.num_gpus:>5} {p.micro_batch:>3} "
              f"{p.memory_bytes / 2**30:>8.1f} {p.step_time_s:>8.3f} {p.time_to_train_s / 86400:>7.2f} "
              f"{p.gpu_hours:>9.0f} {p.cost_usd:>10.0f}")
    if result.why_top:
        print(result.why_top)
    print(result.ranking_text)
    return 0


def _estimate_hardware(args) -> tuple[str, int, float]:
    """(GPU type, GPUs per node, node network Gbit/s) of `frenzy estimate`: the flags, else the --system's, else the
    defaults (estimate.DEFAULT_GPUS_PER_NODE, cluster.DEFAULT_NETWORK_GBIT_S); a --gpu other than the system's is
    refused."""
    from frenzy_core.cluster import DEFAULT_NETWORK_GBIT_S
    from frenzy_core.estimate import DEFAULT_GPUS_PER_NODE

    if args.system is None:
        if args.gpu is None:
            raise SpecError("gpu", "give the GPU type (--gpu H100-80GB, see `frenzy gpus`) or a system (--system "
                                   f"{', '.join(sorted(SYSTEMS))})")
        return args.gpu, _given(args.gpus_per_node, DEFAULT_GPUS_PER_NODE), _given(args.inter_node_gbps,
                                                                                   DEFAULT_NETWORK_GBIT_S)
    system = SYSTEMS[args.system]
    if args.gpu is not None and args.gpu != system.gpu_type:
        raise SpecError("gpu", f"{args.gpu} is not system {system.name}'s GPU ({system.gpu_type}); drop --gpu or "
                               f"--system")
    return (system.gpu_type, _given(args.gpus_per_node, system.gpus_per_node),
            _given(args.inter_node_gbps, system.network_gbit_s))


def _given(value, default):
    return default if value is None else value


def cmd_estimate(args) -> int:
    """One fixed split in, its step time, throughput and memory out (frenzy_core.estimate, the code plans ranks by)."""
    from frenzy_core.estimate import estimate
    from frenzy_core.gpus import get_gpu
    from frenzy_core.training import Parallelism

    model = _model(args)
    par = Parallelism(dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp, vp=args.vp, ep=args.ep, etp=args.etp,
                      first_stage_layers=args.first_stage_layers, last_stage_layers=args.last_stage_layers)
    training = _training(args, dp=args.dp)
    _warn_positions(model, training)
    gpu_name, per_node, network = _estimate_hardware(args)
    gpu = get_gpu(gpu_name)
    result = estimate(model, training, par, gpu, num_gpus=args.gpus, gpus_per_node=per_node,
                      intra_link_gbyte_s=args.intra_node_gbps, network_gbit_s=network, method=args.method)
    if args.system is None and args.inter_node_gbps is None and par.num_gpus > per_node:
        # the default is one NIC per node: a multi-node split over it is usually far slower than the cluster it
        # stands for (a DGX-H100 node has 32 x that)
        print(f"frenzy estimate: note: {par.num_gpus} GPUs span {-(-par.num_gpus // per_node)} nodes over the default "
              f"{network:g} Gbit/s per node; pass --inter-node-gbps or --system (e.g. --system dgx-h100: "
              f"{SYSTEMS['dgx-h100'].network_gbit_s:,.0f} Gbit/s)", file=sys.stderr)
    if args.json:
        print(dumps_strict(result.as_dict()))
        return 0
    st = result.step
    print(f"{model.name} on {par.num_gpus} x {gpu.name} ({par.label()}), micro-batch {training.micro_batch}, "
          f"{st.micro_batches:g} micro-batches per replica")
    print(f"  step {result.step_time_s:.4f} s, {result.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, "
          f"{result.model_tflops_per_gpu:.1f} model TFLOP/s per GPU, MFU {result.mfu:.1%}")
    for part in result.parts:
        hidden = f" (+{part.overlapped_s:.4f} s overlapped)" if part.overlapped_s else ""
        print(f"  {part.name:10} {part.exposed_s:10.4f} s{hidden}")
    verdict = "fits" if result.fits else "does NOT fit"
    print(f"  allocated {_fmt_bytes(result.allocated_bytes)}, reserved {_fmt_bytes(result.reserved_bytes)}, "
          f"nvidia-smi {_fmt_bytes(result.total_bytes)}: {verdict} in {result.usable_bytes / 2**30:.1f} GiB "
          f"({gpu.memory_gib:g} GiB less the planner's safety margin)")
    if par.pp > 1:
        print("  per stage allocated: " + ", ".join(f"{v / 2**30:.2f}" for v in result.per_stage_allocated_bytes)
              + f" GiB; layers {', '.join(map(str, par.stage_layers(model.num_layers)))}")
    return 0


def _hours(text: str, field: str) -> float:
    """'72', '72h', '3d' or '90m' as hours; anything else is a SpecError naming the field."""
    units = {"h": 1.0, "d": 24.0, "m": 1 / 60}
    raw = str(text).strip().lower()
    scale = units.get(raw[-1:], None)
    number = raw[:-1] if scale is not None else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise SpecError(field, f"{text!r} is not a duration; give hours (72), or 72h, 3d, 90m") from None
    if not (value > 0 and value < float("inf")):
        raise SpecError(field, f"must be a positive duration, got {text!r}")
    return value


def cmd_scenario_run(args) -> int:
    from frenzy_core.scenario import load_scenario, run_scenario

    scenario = load_scenario(args.file)
    if args.top < 1:
        raise SpecError("top", f"must be positive, got {args.top}")
    if args.simulate:  # HiGHS (the sia policy) may write to fd 1: keep stdout for our output only
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
        try:
            out = run_scenario(scenario, top=args.top, simulate=True)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
    else:
        out = run_scenario(scenario, top=args.top)
    if args.json:
        print(json.dumps(out))
        return 0 if out["plans"]["count"] else 1
    mem = out["memory"]
    print(f"{out['scenario']} ({out['user']}): {out['model']} on {out['cluster']}")
    print(f"  memory at d={mem['dp']} t={mem['tp']} p={mem['pp']}: {_fmt_bytes(mem['total_bytes']).strip()} "
          f"per GPU (peak in {mem['peak_phase']})")
    plans = out["plans"]
    if not plans["count"]:
        print(f"  no plan: {plans['explanation']}")
        return 1
    print(f"  {plans['count']} plans; {plans['ranking']}")
    print(f"  best: {plans['why_top']}")
    for row in plans["best_per_type"]:
        print(f"  best on {row['gpu_type']:12} {row['label']}: {row['time_to_train_s'] / 3600:,.1f} h, "
              f"${row['cost_usd']:,.0f}")
    for policy, summary in out.get("simulation", {}).items():
        print(f"  simulation {policy}: avg JCT {summary['avg_jct_s'] / 3600:.2f} h over {summary['jobs']} jobs")
    for lines in out.get("simulation_why", {}).values():
        print("  why: " + "\n       ".join(lines))
    return 0


def cmd_simulate(args) -> int:
    from frenzy_core.cluster import load_cluster
    from frenzy_core.limits import MAX_SEEDS, bounded_int
    from frenzy_core.simulate import SimOptions, simulate_seeds
    from frenzy_core.traces import load_trace

    bounded_int(args.seeds, "seeds", 1, MAX_SEEDS, "use fewer seeds (10 give tight 95% intervals)")
    if args.limit_jobs < 0:
        raise SpecError("limit_jobs", f"must be 0 (all jobs) or positive, got {args.limit_jobs}")
    trace = load_trace(args.trace, args.trace_format)
    if args.limit_jobs:
        trace = trace.head(args.limit_jobs)
    cluster = load_cluster(args.cluster)
    if args.job_model == "sia-apps":
        if args.compare is not None:
            raise SpecError("compare", "--compare needs the llm job model; with --job-model sia-apps run each "
                                       "policy on its own (bench/fidelity.py and bench/elastic.py compare them)")
        return _simulate_sia_apps(args, trace, cluster)
    if args.efficiency_floor is not None:
        raise SpecError("efficiency_floor", "--efficiency-floor needs --job-model sia-apps (frenzy-elastic)")
    if args.compare is not None:
        from frenzy_core.policies import EVENT_POLICIES

        if args.compare not in EVENT_POLICIES:
            raise SpecError("compare", f"unknown policy {args.compare!r}; choose one of {', '.join(EVENT_POLICIES)}")
        if args.compare == args.policy:
            raise SpecError("compare", f"--compare {args.compare} is the --policy itself; name another policy")
    progress = None
    bar = None
    if not args.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=100, desc=f"{args.policy} on {cluster.name}", unit="%", file=sys.stderr)

        def progress(fraction: float) -> None:
            bar.n = round(100 * fraction)
            bar.refresh()

    elif not args.json:
        def progress(fraction: float, _last=[-1]) -> None:  # noqa: B006 - a tiny throttle for plain stderr
            step = int(fraction * 10)
            if step != _last[0]:
                _last[0] = step
                print(f"{args.policy}: {step * 10}%", file=sys.stderr)

    # HiGHS (behind the sia policy's scipy.optimize.milp) can print solver diagnostics straight to file
    # descriptor 1; send them to stderr so that stdout carries only our table or the one JSON object.
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        result = simulate_seeds(trace, cluster, args.policy, seeds=range(args.seeds), options=SimOptions(),
                                progress=progress)
        other = None if args.compare is None else simulate_seeds(trace, cluster, args.compare,
                                                                 seeds=range(args.seeds), options=SimOptions())
    finally:
        sys.stdout.flush()
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
    if bar is not None:
        bar.close()
    summary = result.summary_dict()
    why = None
    if other is not None:
        from frenzy_core.comparison import explain_gap, jct_gap

        why = explain_gap(jct_gap(args.policy, result, args.compare, other))
    if args.json:
        extra = {} if other is None else {"compare": {"policy": args.compare, **other.summary_dict()}, "why": why}
        print(dumps_strict({**summary, "trace": {"source": trace.source, **_skipped_rows(trace)}, **extra}))
        return 0
    print(f"{trace.summary()}; cluster {cluster.name} ({cluster.total_gpus} GPUs); policy {args.policy}")
    for problem in trace.skipped[:5]:
        print(f"  skipped row {problem.row}: {problem.reason}")
    if len(trace.skipped) > 5:
        print(f"  ... and {len(trace.skipped) - 5} more skipped rows (--json lists them)")
    for key, value in summary.items():
        print(f"  {key:34} {value}")
    if why is not None:
        print(f"against {args.compare}:")
        for line in why:
            print(f"  {line}")
    return 0


def _round_policy_options(args) -> dict | None:
    """The policy options given on the command line (--efficiency-floor), for policies whose allocator takes them."""
    from frenzy_core.policies import REGISTRY

    if getattr(args, "efficiency_floor", None) is None:
        return None
    if "efficiency_floor" not in getattr(REGISTRY.get(args.policy), "round_options", ()):
        raise SpecError("efficiency_floor", f"--efficiency-floor applies to frenzy-elastic and frenzy-elastic-srpt, "
                                            f"not {args.policy!r}")
    return {"efficiency_floor": float(args.efficiency_floor)}


def _simulate_sia_apps(args, trace, cluster) -> int:
    """`frenzy simulate --job-model sia-apps`: one run of rounds.simulate_rounds (deterministic, no seeds)."""
    from frenzy_core.rounds import app_jobs, simulate_rounds

    sys.stdout.flush()  # HiGHS may write to file descriptor 1: keep stdout for our table or JSON only
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        summary = simulate_rounds(app_jobs(trace), cluster, args.policy, _round_policy_options(args)).summary_dict()
    finally:
        sys.stdout.flush()
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{trace.summary()}; cluster {cluster.name} ({cluster.total_gpus} GPUs); policy {args.policy}; "
          f"job model sia-apps")
    for key, value in summary.items():
        print(f"  {key:34} {value}")
    return 0


class _StdoutToStderr:
    """HiGHS (behind sia) and worker processes may write to file descriptor 1; send that to stderr so stdout carries
    only our table or the one JSON object (pool workers started inside inherit the redirected descriptor)."""

    def __enter__(self):
        sys.stdout.flush()
        self.saved = os.dup(1)
        os.dup2(2, 1)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        os.dup2(self.saved, 1)
        os.close(self.saved)
        return False


def _sweep_progress(args, what: str):
    """A progress callback (done, total) and a closer: a tqdm bar on a terminal's stderr, else tenths as lines."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(desc=what, unit="run", file=sys.stderr)

        def progress(done: float, total: int) -> None:
            bar.total = total
            bar.n = round(done, 1)
            bar.refresh()

        return progress, bar.close
    if args.json:
        return None, lambda: None
    last = [0]

    def progress(done: float, total: int) -> None:
        runs = int(done)
        if runs > last[0] and (10 * runs // total > 10 * last[0] // total or runs == total):
            print(f"{what}: {runs}/{total} runs", file=sys.stderr)
        last[0] = max(last[0], runs)

    return progress, lambda: None


EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


def _interruptible(args, command: str, what: str, call):
    """`call(progress)` with a progress display and stdout sent to stderr; on Ctrl-C (the sweep has already stopped
    its runs) one line on stderr and None.

    The first Ctrl-C raises KeyboardInterrupt and ignores the ones after it until the command exits: a second one
    used to land inside the sweep's cleanup (ray.shutdown(), stopping the pool) and leave Ray's agents running."""
    import signal
    import threading

    fired = []

    def first_ctrl_c(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the stop that follows must run to its end
        fired.append(signum)
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGINT)
    ours = previous is signal.default_int_handler and threading.current_thread() is threading.main_thread()
    if ours:
        signal.signal(signal.SIGINT, first_ctrl_c)
    progress, close = _sweep_progress(args, what)
    try:
        with _StdoutToStderr():
            out = call(progress)
    except KeyboardInterrupt:
        close()
        print(f"frenzy {command}: interrupted; the runs left were cancelled", file=sys.stderr)
        return None
    finally:
        if ours and not fired:  # after a Ctrl-C the command is exiting 130: later ones stay ignored
            signal.signal(signal.SIGINT, previous)
    close()
    return out


def _whatif_inputs(args):
    """Today's cluster, the candidates (today first) and the workload (label, Trace or WeeklyJobs) from the flags."""
    from frenzy_core.cluster import load_cluster
    from frenzy_core.limits import MAX_SEEDS, bounded_int
    from frenzy_core.traces import load_trace
    from frenzy_core.whatif import WeeklyJobs, build_candidates, parse_addition, parse_weekly_job

    # before range(args.seeds) is ever materialised (the flag allows up to 2^40)
    bounded_int(args.seeds, "seeds", 1, MAX_SEEDS, "use fewer (--seeds; 10 already give tight 95% intervals)")
    if args.limit_jobs < 0:
        raise SpecError("limit_jobs", f"must be 0 (all jobs) or positive, got {args.limit_jobs}")
    if bool(args.trace) == bool(args.job):
        raise SpecError("trace", "give either --trace FILE or one or more --job MODEL:RUNS_PER_WEEK:GPUS:HOURS")
    base = load_cluster(args.cluster)
    if args.trace:
        workload = load_trace(args.trace, args.trace_format, limit=args.limit_jobs or None)  # as the page's picker
        label = os.path.basename(args.trace)
    else:
        workload = WeeklyJobs(tuple(parse_weekly_job(j) for j in args.job), weeks=args.weeks)
        label = "my jobs"
    rows = [r for a in args.add for r in parse_addition(a)]
    return base, rows, label, workload, build_candidates


def _json_out(data) -> None:
    from frenzy_core.sweep import json_safe

    print(json.dumps(json_safe(data)))


def _pairs(values, field: str) -> dict[str, float]:
    """TYPE=NUMBER flags (repeatable) -> {type: number}."""
    out = {}
    for v in values:
        t, sep, num = v.rpartition("=")
        try:
            out[t] = float(num)
        except ValueError:
            t = ""
        if not sep or not t:
            raise SpecError(field, f"expected GPU_TYPE=NUMBER, got {v!r}")
    return out


def cmd_whatif(args) -> int:
    from frenzy_core.tco import CostModel
    from frenzy_core.whatif import run_whatif, search_mixes

    base, rows, label, workload, build_candidates = _whatif_inputs(args)
    costs = CostModel().with_overrides(purchase_usd=_pairs(args.purchase, "purchase"), tdp_w=_pairs(args.tdp, "tdp"),
                                       rental_usd_per_hour=_pairs(args.rental, "rental"), life_years=args.life_years,
                                       pue=args.pue, usd_per_kwh=args.usd_per_kwh)
    if args.search:
        rows += search_mixes(base, [t.strip() for t in args.search.split(",") if t.strip()], args.budget, costs,
                             args.pricing, step=args.step, max_candidates=args.max_candidates)
    candidates = build_candidates(base, rows)
    result = _interruptible(args, "whatif", f"what-if on {base.name}", lambda progress: run_whatif(
        base, candidates, workload, workload_label=label, policy=args.policy, seeds=range(args.seeds),
        budget_per_hour=args.budget, pricing=args.pricing, costs=costs, backend=args.backend, workers=args.workers,
        address=args.address, progress=progress))
    if result is None:
        return EXIT_INTERRUPTED
    if args.json:
        _json_out(result.as_dict())
        return 0
    print(f"{label} on {base.name} + candidates; policy {result.policy}; {len(result.seeds)} seeds; "
          f"{result.pricing} prices")
    print(f"{'candidate':28} {'GPUs':>5} {'avg JCT h':>9} {'95% CI h':>15} {'$/h':>9} {'added $/h':>9} "
          f"{'purchase $':>11}  budget frontier")
    for c in result.candidates:
        ci = f"{c.ci_low_s / 3600:.2f}-{c.ci_high_s / 3600:.2f}" if c.ci_low_s == c.ci_low_s else "n/a"
        print(f"{c.candidate[:28]:28} {c.gpus:>5} {c.avg_jct_s / 3600:>9.2f} {ci:>15} {c.cost_per_hour:>9.2f} "
              f"{c.added_cost_per_hour:>9.2f} {c.tco.purchase_usd:>11,.0f}  {'yes' if c.within_budget else 'no':6} "
              f"{'yes' if c.on_frontier else ''}")
    print(result.message)
    for c in result.candidates:
        if c.why:
            print(f"why {c.candidate}: {c.why}")
    for note in result.notes:
        print(f"note: {note}")
    return 0


def cmd_sweep(args) -> int:
    from frenzy_core.sweep import Grid, run_sweep

    base, rows, label, workload, build_candidates = _whatif_inputs(args)
    candidates = build_candidates(base, rows)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    grid = Grid.make(base, candidates, policies, range(args.seeds), {label: workload})
    table = _interruptible(args, "sweep", f"sweep of {len(grid.runs())} runs", lambda progress: run_sweep(
        grid, backend=args.backend, workers=args.workers, address=args.address, progress=progress))
    if table is None:
        return EXIT_INTERRUPTED
    if args.json:
        _json_out({"results": list(table.rows), "aggregates": table.aggregate("avg_jct_s"), "runs": len(table.rows),
                   "backend": table.backend, "workers": table.workers, "wall_s": table.wall_s})
        return 0
    print(f"{len(table.rows)} runs on {table.backend} ({table.workers} workers) in {table.wall_s:.1f} s")
    print(f"{'candidate':28} {'policy':12} {'seeds':>5} {'avg JCT h':>9} {'95% CI h':>15}")
    for a in table.aggregate("avg_jct_s"):
        lo, hi = a["avg_jct_s_ci_low"], a["avg_jct_s_ci_high"]
        ci = f"{lo / 3600:.2f}-{hi / 3600:.2f}" if lo == lo else "n/a"
        print(f"{a['candidate'][:28]:28} {a['policy'][:12]:12} {a['seeds']:>5} {a['avg_jct_s'] / 3600:>9.2f} {ci:>15}")
    return 0


def _add_sweep_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", required=True, help="today's cluster YAML")
    p.add_argument("--trace", help="trace file (or use --job for your own jobs)")
    p.add_argument("--trace-format", default="philly")
    p.add_argument("--limit-jobs", type=int, default=0, help="the first N jobs of the trace (0 = all)")
    p.add_argument("--job", action="append", default=[],
                   help="your own jobs instead of a trace: MODEL:RUNS_PER_WEEK:GPUS:HOURS[:GPU_TYPE] (repeatable)")
    p.add_argument("--weeks", type=float, default=4.0, help="weeks of --job arrivals to simulate (default 4)")
    p.add_argument("--add", action="append", default=[],
                   help="a candidate: TYPE:N (label '+N TYPE') or LABEL=TYPE:N,TYPE:N (repeatable); a system instead "
                        "of a type counts whole nodes (dgx-h100:2: 16 H100-80GB, 8 per node, 3,200 Gbit/s); today "
                        "is always in")
    p.add_argument("--workers", type=int, default=None, help="processes (local) or CPUs (local Ray); default cores-1")
    p.add_argument("--backend", default="local", choices=["local", "ray"])
    p.add_argument("--address", default=None, help="an existing Ray cluster, e.g. ray://head:10001 or auto")
    p.add_argument("--json", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="frenzy", description="Frenzy Planner: memory-aware LLM training planner")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="list the model zoo")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("gpus", help="list the GPU catalog")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gpus)

    p = sub.add_parser("memory", help="per-GPU peak memory breakdown for a model and training setup")
    _add_model_args(p)
    _add_training_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_memory)

    p = sub.add_parser("plans", help="feasible (GPU type, d, t, p) plans ranked by an objective")
    _add_model_args(p)
    _add_training_args(p, split=False)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--cluster", help="cluster YAML (see sample_clusters/)")
    where.add_argument("--system", choices=sorted(SYSTEMS),
                       help="plan on --nodes nodes of a catalog system instead of a cluster file")
    p.add_argument("--nodes", type=int, default=None, help="with --system: how many nodes (NVLink domains)")
    p.add_argument("--objective", default="time", choices=["time", "gpu-hours", "cost", "gpus"])
    p.add_argument("--tokens", type=float, default=DEFAULT_TOKENS, help=f"token budget to train for ({DEFAULT_TOKENS:g})")
    p.add_argument("--safety-margin", type=float, default=DEFAULT_SAFETY_MARGIN,
                   help=f"fraction of GPU memory kept free ({DEFAULT_SAFETY_MARGIN})")
    p.add_argument("--top", type=int, default=10, help="show the best K plans (0 = all)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--deadline", help="train the token budget within this time: hours, or 72h, 3d, 90m")
    p.add_argument("--max-gpus", type=int, default=None, help="use at most N GPUs")
    p.add_argument("--budget", type=float, default=None, help="spend at most this many USD on the run")
    p.add_argument("--scaling-floor", type=float, default=0.5,
                   help="drop plans whose added GPUs buy less than this share of linear speed-up over any smaller "
                        "plan of the same type (default 0.5: doubling the GPUs must be at least 1.5x faster; 0 = off)")
    p.add_argument("--per-type", action="store_true", help="show the best plan of each GPU type")
    p.add_argument("--export", choices=["megatron", "deepspeed", "torchtitan", "accelerate", "slurm", "kubernetes"],
                   help="print the launch file of the top plan instead of the table")
    p.set_defaults(func=cmd_plans)

    p = sub.add_parser("estimate", help="step time, throughput and memory of one fixed split (the numbers plans ranks)")
    _add_model_args(p)
    _add_training_args(p)
    p.add_argument("--first-stage-layers", type=int, default=0, metavar="K",
                   help="layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers; 0: even)")
    p.add_argument("--last-stage-layers", type=int, default=0, metavar="K",
                   help="layers on the last pipeline stage (Megatron --decoder-last-pipeline-num-layers; 0: even)")
    p.add_argument("--gpu", default=None, help="GPU type (see `frenzy gpus`); or give --system")
    p.add_argument("--system", default=None, choices=sorted(SYSTEMS),
                   help="a catalog system (dgx-h100, gb200-nvl72, ...): its GPU type, GPUs per node (NVLink domain) "
                        "and node network; the flags below override them")
    p.add_argument("--gpus", type=int, default=None, help="GPUs in all; must equal dp x tp x pp x cp (the default)")
    p.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node (default 8, or the system's)")
    p.add_argument("--intra-node-gbps", type=float, default=None,
                   help="each GPU's link inside a node in GB/s (gigabytes, as the cluster YAML's intra_link_gbyte_s; "
                        "default: the GPU type's)")
    p.add_argument("--inter-node-gbps", type=float, default=None,
                   help="each node's network link in Gbit/s (gigabits, as the cluster YAML's network_gbit_s; "
                        "default 100, or the system's)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("scenario", help="run a scenario YAML (see sample_scenarios/)")
    scen = p.add_subparsers(dest="action", required=True)
    p = scen.add_parser("run", help="memory, ranked plans (and with --simulate the simulation) of a scenario")
    p.add_argument("file", help="scenario YAML")
    p.add_argument("--top", type=int, default=5, help="plans to list (default 5)")
    p.add_argument("--simulate", action="store_true", help="also run the scenario's simulation (slower)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_scenario_run)

    p = sub.add_parser("simulate", help="trace-driven simulation of a scheduling policy")
    p.add_argument("--trace", required=True)
    p.add_argument("--trace-format", default="philly")
    p.add_argument("--cluster", required=True)
    p.add_argument("--policy", default="frenzy")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--limit-jobs", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--job-model", default="llm", choices=["llm", "sia-apps"],
                   help="llm: trace jobs mapped to LLM training jobs (default); sia-apps: Sia's measured "
                        "applications (needs --trace-format sia; round-based, deterministic, --seeds ignored)")
    p.add_argument("--efficiency-floor", type=float, default=None, metavar="X",
                   help="frenzy-elastic(-srpt), in [0, 1): the GPU-hours knob; each job's allocation is valued "
                        "speed / (1 + X GPUs), i.e. JCT + X GPU-hours (default: the policy's, chosen on saturn-1)")
    p.add_argument("--compare", default=None, metavar="POLICY",
                   help="also run POLICY on the same jobs and seeds and say why the average JCTs differ "
                        "(queueing vs running, GPUs per job, GPU-hours, waits with GPUs free); llm job model only")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("whatif", help="procurement what-if: candidate GPU purchases, JCT with CIs, cost, budget verdict")
    _add_sweep_args(p)
    p.add_argument("--policy", default="frenzy-eft")
    p.add_argument("--seeds", type=int, default=5, help="seeds per candidate (default 5)")
    p.add_argument("--budget", type=float, default=100.0, help="$ per hour for the additions (default 100)")
    p.add_argument("--pricing", default="rental", choices=["rental", "owned"],
                   help="cost per hour as rental prices or owned (amortised purchase + power)")
    p.add_argument("--search", default="", help="also try every mix of these GPU types (comma list) that fills the "
                   "budget in steps of --step GPUs")
    p.add_argument("--step", type=int, default=8, help="GPUs per step of the mix search (default 8, one server)")
    p.add_argument("--max-candidates", type=int, default=8, help="mixes the search keeps (default 8)")
    p.add_argument("--life-years", type=float, default=5.0, help="amortisation period (default 5 years)")
    p.add_argument("--pue", type=float, default=1.58, help="power usage effectiveness (default 1.58)")
    p.add_argument("--usd-per-kwh", type=float, default=0.127, help="electricity price (default 0.127 $/kWh)")
    p.add_argument("--purchase", action="append", default=[], help="TYPE=USD per GPU (repeatable)")
    p.add_argument("--tdp", action="append", default=[], help="TYPE=W (repeatable)")
    p.add_argument("--rental", action="append", default=[], help="TYPE=USD per GPU-hour (repeatable)")
    p.set_defaults(func=cmd_whatif)

    p = sub.add_parser("sweep", help="simulate candidates x policies x seeds on a local process pool or Ray")
    _add_sweep_args(p)
    p.add_argument("--policies", default="frenzy-eft", help="comma list of policies (default frenzy-eft)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per cell (default 5)")
    p.set_defaults(func=cmd_sweep)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_int_flags(args)
        return args.func(args)
    except SpecError as err:
        print(f"frenzy {args.command}: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (OverflowError, RecursionError, MemoryError) as err:  # a number or a file too large for any limit above
        print(f"frenzy {args.command}: error: input too large ({type(err).__name__}); use smaller values",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `frenzy models | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
