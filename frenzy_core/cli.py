"""`frenzy`: the command line. Bad input exits with status 2 and one line naming the field, never a traceback.

The CLI is a boundary like the app: it parses flags, calls the core and prints. The core itself never prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from frenzy_core.errors import SpecError

EXIT_BAD_INPUT = 2


def _add_model_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", default="gpt2", help="zoo model name (see `frenzy models`); default gpt2")
    src.add_argument("--config", help="path to a Hugging Face config.json (GPT-2, Llama, Mistral, Qwen2, Mixtral)")


def _add_training_args(p: argparse.ArgumentParser, split: bool = True) -> None:
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per sample (default 1024)")
    if split:
        p.add_argument("--micro-batch", type=int, default=1, help="samples per forward/backward per GPU (default 1)")
    else:
        p.add_argument("--micro-batch", type=int, default=None,
                       help="fix every plan's micro-batch (default: the planner picks the fastest that fits)")
    p.add_argument("--global-batch", type=int, default=None, help="samples per optimizer step (default micro x dp)")
    p.add_argument("--precision", default="amp", choices=["amp", "bf16-master", "fp32"])
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "adamw-fused", "sgd"])
    p.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO stage (default 0)")
    p.add_argument("--distributed-optimizer", action="store_true", help="Megatron distributed optimizer")
    p.add_argument("--attention", default="flash", choices=["eager", "flash"])
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--recompute", default="none", choices=["none", "selective", "full"])
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--method", default="detailed", choices=["detailed", "paper"], help="memory method")
    if split:
        p.add_argument("--dp", type=int, default=1, help="data-parallel replicas")
        p.add_argument("--tp", type=int, default=1, help="tensor-parallel shards")
        p.add_argument("--pp", type=int, default=1, help="pipeline stages")


def _model(args):
    from frenzy_core.models import get_model, load_hf_config

    return load_hf_config(args.config) if args.config else get_model(args.model)


def _training(args, dp: int = 1):
    from frenzy_core.training import make_training

    micro_batch = args.micro_batch if args.micro_batch is not None else 1
    if micro_batch <= 0:
        raise SpecError("micro_batch", f"must be a positive integer, got {micro_batch}")
    global_batch = args.global_batch if args.global_batch is not None else micro_batch * dp
    return make_training(
        seq_len=args.seq_len, global_batch=global_batch, micro_batch=micro_batch, precision=args.precision,
        optimizer=args.optimizer, zero_stage=args.zero, distributed_optimizer=args.distributed_optimizer,
        attention=args.attention, dropout=args.dropout, recompute=args.recompute,
        sequence_parallel=args.sequence_parallel,
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


def cmd_memory(args) -> int:
    from frenzy_core.memory import predict_memory
    from frenzy_core.training import Parallelism

    model = _model(args)
    par = Parallelism(dp=args.dp, tp=args.tp, pp=args.pp)
    training = _training(args, dp=args.dp)
    mem = predict_memory(model, training, par, method=args.method)
    if args.json:
        print(json.dumps({"model": model.name, "parameters": model.parameter_count(), "method": mem.method,
                          "dp": par.dp, "tp": par.tp, "pp": par.pp, "total_bytes": int(mem.total_bytes),
                          "peak_phase": mem.peak_phase,
                          "breakdown": {k: int(v) for k, v in mem.components().items()}}))
        return 0
    print(f"{model.name}: {model.parameter_count():,} parameters; d={par.dp} t={par.tp} p={par.pp}; "
          f"method={mem.method}; peak in {mem.peak_phase}")
    for name, value in mem.components().items():
        print(f"  {name:14} {_fmt_bytes(value)}")
    print(f"  {'total':14} {_fmt_bytes(mem.total_bytes)}")
    return 0


def cmd_plans(args) -> int:
    from frenzy_core.cluster import load_cluster
    from frenzy_core.plans import rank_plans

    model = _model(args)
    if args.global_batch is None:
        raise SpecError("global_batch", "required for plans: pass --global-batch N (samples per optimizer step)")
    if args.top < 0:
        raise SpecError("top", f"must be 0 (all plans) or positive, got {args.top}")
    deadline_h = _hours(args.deadline, "deadline") if args.deadline is not None else None
    training = _training(args)
    cluster = load_cluster(args.cluster)
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
        print(json.dumps([{**p.as_dict(), "memory_bytes": int(p.memory_bytes), "cost": p.cost_usd} for p in top]))
        return 0
    print(f"{len(result.plans)} feasible plans for {model.name} on {cluster.name}, ranked by {args.objective}:")
    print(f"{'#':>3} {'gpu':12} {'d':>4} {'t':>3} {'p':>3} {'gpus':>5} {'mb':>3} {'GiB/GPU':>8} {'step s':>8} "
          f"{'days':>7} {'GPU-h':>9} {'cost $':>10}")
    for i, p in enumerate(top, 1):
        print(f"{i:>3} {p.gpu_type:12} {p.dp:>4} {p.tp:>3} {p.pp:>3} {p.num_gpus:>5} {p.micro_batch:>3} "
              f"{p.memory_bytes / 2**30:>8.1f} {p.step_time_s:>8.3f} {p.time_to_train_s / 86400:>7.2f} "
              f"{p.gpu_hours:>9.0f} {p.cost_usd:>10.0f}")
    if result.why_top:
        print(result.why_top)
    print(result.ranking_text)
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
    return 0


def cmd_simulate(args) -> int:
    from frenzy_core.cluster import load_cluster
    from frenzy_core.simulate import SimOptions, simulate_seeds
    from frenzy_core.traces import load_trace

    if args.seeds < 1:
        raise SpecError("seeds", f"must be at least 1, got {args.seeds}")
    if args.limit_jobs < 0:
        raise SpecError("limit_jobs", f"must be 0 (all jobs) or positive, got {args.limit_jobs}")
    trace = load_trace(args.trace, args.trace_format)
    if args.limit_jobs:
        trace = trace.head(args.limit_jobs)
    cluster = load_cluster(args.cluster)
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
    finally:
        sys.stdout.flush()
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
    if bar is not None:
        bar.close()
    summary = result.summary_dict()
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{trace.summary()}; cluster {cluster.name} ({cluster.total_gpus} GPUs); policy {args.policy}")
    for key, value in summary.items():
        print(f"  {key:34} {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="frenzy", description="Frenzy Planner: memory-aware LLM training planner")
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
    p.add_argument("--cluster", required=True, help="cluster YAML (see sample_clusters/)")
    p.add_argument("--objective", default="time", choices=["time", "gpu-hours", "cost", "gpus"])
    p.add_argument("--tokens", type=float, default=1e10, help="token budget to train for (default 1e10)")
    p.add_argument("--safety-margin", type=float, default=0.10, help="fraction of GPU memory kept free (0.10)")
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
    p.set_defaults(func=cmd_simulate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SpecError as err:
        print(f"frenzy {args.command}: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `frenzy models | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
