"""Write tests/data/real_gpu_peaks.jsonl from the frameworks' own published peak-memory figures.

Megatron-LM: every functional test under tests/functional_tests/test_cases/gpt/ with `mem-max-allocated-bytes` in
its golden values, read with its model_config.yaml from a local mirror of the repository (a bare git directory, read
with `git show`). torchtitan: the benchmark tables transcribed below, each with its file, table and row. The rules
(which tests, which platform, the mappings to ModelSpec / TrainingSpec fields, the held-out split) are stated in
tests/data/README.md; this script is what applies them.

    .venv/bin/python bench/real_gpu_peaks.py --megatron /work/.mirror/NVIDIA+Megatron-LM/repo \
        --shared ../shared/reference/real-gpu-peaks.jsonl

The last line printed is a JSON object with the row counts.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "real_gpu_peaks.jsonl"
GIB = 2**30

# --- Megatron-LM ---------------------------------------------------------------------------------------------------
# Arguments that put a test outside what ModelSpec / TrainingSpec describe (fp8, fp16, MLA, MTP, RL, ...).
NOT_EXPRESSIBLE = {
    "--fp8-format", "--fp16", "--perform-rl-step", "--cuda-graph-impl", "--muon-momentum",
    "--fine-grained-activation-offloading", "--mtp-num-layers", "--multi-latent-attention",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--moe-latent-size", "--num-layers-at-start-in-bf16",
    "--hybrid-layer-pattern", "--test-mode", "--inference-max-seq-length", "--finetune", "--step-batch-size-schedule",
    "--flextron", "--export-te-mcore-model", "--fim-data", "--optimizer", "--spec", "--squared-relu",
    "--first-last-layers-bf16",
}
PLATFORMS = ["golden_values_dev_dgx_h100.json", "golden_values_dev_dgx_a100.json", "golden_values_lts_dgx_a100.json"]
GPU = {"dev_dgx_h100": "H100 80GB", "dev_dgx_a100": "A100 80GB", "lts_dgx_a100": "A100 80GB"}
FLAG_FEATURES = [
    ("--overlap-grad-reduce", "overlap-grad-reduce"), ("--overlap-param-gather", "overlap-param-gather"),
    ("--cross-entropy-loss-fusion", "cross-entropy-loss-fusion"),
    ("--defer-embedding-wgrad-compute", "defer-embedding-wgrad-compute"), ("--no-rope-fusion", "no-rope-fusion"),
    ("--rotary-interleaved", "rotary-interleaved"),
    ("--no-create-attention-mask-in-dataloader", "no-attention-mask-in-dataloader"),
    ("--overlap-param-gather-with-optimizer-step", "overlap-param-gather-with-optimizer-step"),
    ("--account-for-embedding-in-pipeline-split", "account-for-embedding-in-pipeline-split"),
    ("--account-for-loss-in-pipeline-split", "account-for-loss-in-pipeline-split"),
    ("--no-bias-gelu-fusion", "no-bias-gelu-fusion"),
]
KNOWN_TOKENIZERS = (None, "GPT2BPETokenizer", "NullTokenizer")  # others: the vocabulary size is not in the config
MOE_MAPPED = {"--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size"}
SUITES = ("gpt", "moe")  # test_cases/<suite>/; mixtral/ holds release runs whose tokenizers are not in the configs
VALUE_FEATURES = [
    "--num-distributed-optimizer-instances", "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--cp-comm-type", "--hierarchical-context-parallel-sizes", "--microbatch-group-size-per-virtual-pipeline-stage",
    "--wgrad-deferral-limit", "--recompute-method", "--recompute-num-layers",
]


class Repo:
    """A bare git mirror, read at its HEAD."""

    def __init__(self, path: Path):
        self.path = path
        self.commit = self.git("rev-parse", "HEAD").strip()

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.path), *args], capture_output=True, text=True, check=True).stdout

    def show(self, path: str) -> str:
        return self.git("show", f"HEAD:{path}")

    def last_change(self, path: str) -> dict | None:
        out = self.git("log", "-1", "--format=%H %cs", "--", path).split()
        return {"commit": out[0], "date": out[1]} if out else None


def megatron_rows(repo: Repo, shared_ids: set[str]) -> tuple[list[dict], list[tuple[str, str]]]:
    recipes = {f: repo.show(f) for f in repo.git("ls-tree", "-r", "--name-only", "HEAD",
                                                  "tests/test_utils/recipes/h100/").split()}

    def world_size(test: str) -> tuple[int, str]:
        for f, text in recipes.items():
            if re.search(r"\b" + re.escape(test) + r"\b", text):
                spec = yaml.safe_load(text)["spec"]
                return int(spec.get("nodes", 1)) * int(spec["gpus"]), f
        # dropped from the recipes since; the gpt recipe ran every test on 1 node x 8 GPUs
        return 8, "not listed in tests/test_utils/recipes/h100/ at this commit; gpt recipe: 1 node x 8 GPUs"

    shared_tests = {i.split(":")[1] for i in shared_ids}
    files = [f for suite in SUITES for f in repo.git(
        "ls-tree", "-r", "--name-only", "HEAD", f"tests/functional_tests/test_cases/{suite}/").split()]
    by_dir = collections.defaultdict(set)
    for f in files:
        d, name = f.rsplit("/", 1)
        by_dir[d].add(name)
    dirs = sorted((d for d, names in by_dir.items() if "model_config.yaml" in names),
                  key=lambda d: (d.rsplit("/", 1)[1] not in shared_tests, d))  # shared rows win the dedupe
    rows, seen, skipped = [], {}, []
    for d in dirs:
        test = d.rsplit("/", 1)[1]
        if test.endswith("_1node"):
            skipped.append((test, "1node variant"))
            continue
        cfg = yaml.safe_load(repo.show(f"{d}/model_config.yaml"))
        a = cfg.get("MODEL_ARGS") or {}
        if not a:
            skipped.append((test, "no MODEL_ARGS"))
            continue
        if set(a) & NOT_EXPRESSIBLE:
            skipped.append((test, "not expressible: " + ",".join(sorted(set(a) & NOT_EXPRESSIBLE))))
            continue
        if a.get("--tokenizer-type") not in KNOWN_TOKENIZERS:
            skipped.append((test, f"vocabulary of {a['--tokenizer-type']} not in the config"))
            continue
        gv = next((p for p in PLATFORMS if p in by_dir[d]), None)
        if gv is None:
            skipped.append((test, "no dev/lts dgx golden values"))
            continue
        golden = json.loads(repo.show(f"{d}/{gv}"))
        series = golden.get("mem-max-allocated-bytes")
        if not isinstance(series, dict):
            skipped.append((test, "no mem-max-allocated-bytes"))
            continue
        measured = int(max(v for v in series["values"].values() if isinstance(v, (int, float))))
        ws, recipe = world_size(test)
        row = _megatron_row(repo, d, gv, cfg, a, measured, ws, recipe)
        key = json.dumps([row["model_spec"], row["training"], row["parallel"], sorted(row["features"]), ws],
                         sort_keys=True)
        if key in seen:
            skipped.append((test, f"same config as {seen[key]}"))
            continue
        seen[key] = test
        row["in_shared_reference"] = row["id"] in shared_ids
        rows.append(row)
    return rows, skipped


def _megatron_row(repo: Repo, d: str, gv: str, cfg: dict, a: dict, measured: int, ws: int, recipe: str) -> dict:
    def flag(k: str) -> bool:
        return bool(a.get(k, False))

    test = d.rsplit("/", 1)[1]
    h, layers, heads = int(a["--hidden-size"]), int(a["--num-layers"]), int(a["--num-attention-heads"])
    tp = int(a.get("--tensor-model-parallel-size", 1))
    pp = int(a.get("--pipeline-model-parallel-size", 1) or 1)
    cp = int(a.get("--context-parallel-size", 1))
    dp = ws // (tp * pp * cp)
    swiglu = flag("--swiglu")
    assert int(a.get("--kv-channels", h // heads)) * heads == h, test
    # megatron/training/arguments.py: SwiGLU without --ffn-hidden-size uses int(4h * 2/3 / 64) * 64
    ffn = int(a["--ffn-hidden-size"]) if "--ffn-hidden-size" in a else (
        int((4 * h * 2 / 3) / 64) * 64 if swiglu else 4 * h)
    if "--vocab-size" in a and a.get("--tokenizer-type") == "NullTokenizer":
        orig_vocab, tokenizer = int(a["--vocab-size"]), f"NullTokenizer vocab_size={a['--vocab-size']}"
    else:
        orig_vocab, tokenizer = 50257, "GPT2BPETokenizer (50257)"
    # megatron/core/tokenizers/utils/build_tokenizer.py vocab_size_with_padding: a multiple of 128 x tp
    multiple = int(a.get("--make-vocab-size-divisible-by", 128)) * tp
    vocab = -(-orig_vocab // multiple) * multiple
    rope = a.get("--position-embedding-type") == "rope"
    norm = "rmsnorm" if a.get("--normalization") == "RMSNorm" else "layernorm"
    gqa = flag("--group-query-attention")
    spec = {k: v for k, v in dict(
        name=f"megatron-ci-gpt-{layers}x{h}", vocab_size=vocab, hidden_size=h, num_layers=layers, num_heads=heads,
        num_kv_heads=int(a["--num-query-groups"]) if gqa else None, ffn_size=ffn, mlp_kind="swiglu" if swiglu else "gelu",
        tie_embeddings=not flag("--untie-embeddings-and-output-weights"),
        position_kind="rotary" if rope else "learned", max_positions=int(a["--max-position-embeddings"]),
        norm_kind=norm, bias=not flag("--disable-bias-linear"),
    ).items() if v is not None}
    experts = int(a.get("--num-experts", 0))
    if experts:  # megatron/training/arguments.py: --moe-router-topk defaults to 2, --moe-ffn-hidden-size to ffn
        spec.update(num_experts=experts, moe_top_k=int(a.get("--moe-router-topk", 2)))
        if int(a.get("--moe-ffn-hidden-size", ffn)) != ffn:
            spec["expert_ffn_size"] = int(a["--moe-ffn-hidden-size"])
    ep = int(a.get("--expert-model-parallel-size", 1))
    vp = None
    if "--num-layers-per-virtual-pipeline-stage" in a:
        vp = layers // (pp * int(a["--num-layers-per-virtual-pipeline-stage"]))
    if "--num-virtual-stages-per-pipeline-rank" in a:
        vp = int(a["--num-virtual-stages-per-pipeline-rank"])
    granularity = a.get("--recompute-granularity")
    backend = a.get("--attention-backend", "auto")
    impl = a.get("--transformer-impl", "transformer_engine")
    eager = backend == "unfused" or (impl == "local" and backend in ("auto", "local"))
    hidden_dropout, attention_dropout = float(a.get("--hidden-dropout", 0.1)), float(a.get("--attention-dropout", 0.1))
    fsdp, distopt = flag("--use-megatron-fsdp"), flag("--use-distributed-optimizer")
    sp = flag("--sequence-parallel") and tp > 1  # Megatron turns sequence parallelism off at tp = 1
    training = dict(
        seq_len=int(a["--seq-length"]), global_batch=int(a["--global-batch-size"]), micro_batch=int(a["--micro-batch-size"]),
        precision="bf16-master", optimizer="adamw-fused", zero_stage=3 if fsdp else 0,
        distributed_optimizer=distopt and not fsdp, recompute={"full": "full", "selective": "selective", None: "none"}[granularity],
        sequence_parallel=sp, attention="eager" if eager else "flash", dropout=hidden_dropout, framework="megatron",
    )
    features = [name for k, name in FLAG_FEATURES if flag(k)] + [f"{k[2:]}={a[k]}" for k in VALUE_FEATURES if k in a]
    if impl == "local":
        features.append("transformer-impl=local")
    if fsdp:
        features.append("megatron-fsdp:" + a.get("--data-parallel-sharding-strategy", "no_shard"))
    if attention_dropout != hidden_dropout:
        features.append(f"attention-dropout={attention_dropout}")
    if experts:
        features += [f"{k[2:]}={a[k]}" for k in sorted(a) if k.startswith("--moe-") and k not in MOE_MAPPED]
        if "--expert-tensor-parallel-size" in a:
            features.append(f"expert-tensor-parallel-size={a['--expert-tensor-parallel-size']}")
    platform = gv[len("golden_values_"):-len(".json")]
    moe_text = f"MoE {experts} experts top-{spec['moe_top_k']}, " if experts else ""
    attention_text = ("eager (TE unfused DotProductAttention, softmax fp32)" if backend == "unfused" else
                      "eager (local unfused attention)" if eager else
                      f"flash (attention-backend={backend}: TE flash/cuDNN fused)")
    return dict(
        id=f"mlm:{test}:{platform}", framework="megatron", split=None,
        source=f"NVIDIA/Megatron-LM {d}/ (model_config.yaml + {gv}, key \"mem-max-allocated-bytes\", max over logged "
               f"iterations; torch.cuda.memory_stats()[\"allocated_bytes.all.peak\"], never reset, megatron/training/"
               f"training.py training_log) at commit {repo.commit}",
        source_repo="NVIDIA/Megatron-LM", source_path=f"{d}/{gv}", source_config_path=f"{d}/model_config.yaml",
        source_commit=repo.commit, golden_values_last_changed=repo.last_change(f"{d}/{gv}"),
        test_type=cfg.get("TEST_TYPE"), quoted=f"max over iterations of mem-max-allocated-bytes = {measured} ({platform})",
        measured_bytes=measured, measured_kind="max_memory_allocated",
        measured_rank="last rank (world_size - 1): last pipeline stage",
        model=f"Megatron CI GPT {layers}x{h}, {heads} heads{' GQA ' + str(spec.get('num_kv_heads')) if gqa else ''}, "
              f"{moe_text}"
              f"{'SwiGLU' if swiglu else 'GELU'} ffn {ffn}, {norm}, {'RoPE' if rope else 'learned positions'}, "
              f"{'tied' if spec['tie_embeddings'] else 'untied'}, {'biases' if spec['bias'] else 'no linear biases'}; "
              f"vocab {tokenizer} padded to a multiple of {multiple}",
        model_spec=spec, seq_len=training["seq_len"], micro_batch=training["micro_batch"],
        global_batch=training["global_batch"], dp=dp, tp=tp, pp=pp, vp=vp, cp=cp, ep=ep,
        zero_or_fsdp=("Megatron-FSDP " + a.get("--data-parallel-sharding-strategy", "")) if fsdp else
                     ("Megatron distributed optimizer (ZeRO-1)" if distopt else "none"),
        precision="bf16 params + fp32 main-grad buffer + fp32 master (Megatron --bf16)",
        optimizer="Adam (Megatron FusedAdam, weight decay 0.01)",
        recompute="none" if granularity is None else
                  f"{granularity} ({a.get('--recompute-method')}, {a.get('--recompute-num-layers')} layer)",
        attention=attention_text, dropout=f"hidden {hidden_dropout}, attention {attention_dropout}",
        framework_detail=f"Megatron-LM mcore, transformer-impl={impl}, "
                         f"{'--no-gradient-accumulation-fusion, ' if flag('--no-gradient-accumulation-fusion') else ''}"
                         f"{'sequence-parallel, ' if sp else ''}attention-backend={backend}",
        gpu=f"{GPU[platform]} x{ws} ({recipe})", world_size=ws,
        training=training, parallel=dict(dp=dp, tp=tp, pp=pp, vp=vp, cp=cp, ep=ep), features=features,
    )


# --- torchtitan ----------------------------------------------------------------------------------------------------
TORCHTITAN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"  # the file commit the tables were read at


def _llama(name, vocab, h, layers, heads, kv, ffn):
    return dict(name=name, vocab_size=vocab, hidden_size=h, num_layers=layers, num_heads=heads, num_kv_heads=kv,
                ffn_size=ffn, mlp_kind="swiglu", tie_embeddings=False, position_kind="rotary", max_positions=131072,
                norm_kind="rmsnorm", bias=False)


# torchtitan/models/llama/__init__.py llama3_configs at 9dec370: ffn = multiple_of x ceil(1.3 or 1.2 x 8h/3)
L8 = _llama("llama-3.1-8b", 128256, 4096, 32, 32, 8, 14336)
L70 = _llama("llama-3.1-70b", 128256, 8192, 80, 64, 8, 28672)
L405 = _llama("llama-3.1-405b", 128256, 16384, 126, 128, 8, 53248)
MODEL_TEXT = {
    "llama-3.1-8b": "torchtitan llama3_configs['8B']: dim 4096, 32 layers, 32 heads, 8 kv heads, ffn_dim_multiplier 1.3 "
                    "multiple_of 1024 -> 14336, vocab 128256 (tiktoken), untied, RMSNorm, RoPE theta 500000",
    "llama-3.1-70b": "torchtitan llama3_configs['70B']: dim 8192, 80 layers, 64 heads, 8 kv heads, ffn 1.3 x multiple_of "
                     "4096 -> 28672, vocab 128256, untied, RMSNorm, RoPE",
    "llama-3.1-405b": "torchtitan llama3_configs['405B']: dim 16384, 126 layers, 128 heads, 8 kv heads, ffn 1.2 x "
                      "multiple_of 4096 -> 53248, vocab 128256, untied, RMSNorm, RoPE",
}
BENCH_2024 = dict(
    path="benchmarks/llama3_h100_202412_torchtitan.md", run_commit="9dec370ad26b5f8e9a7333a0e36165018262644b",
    gpu="H100 96GB HBM2e (Grand Teton, 500 W)", optimizer="adamw",
    optimizer_text="AdamW foreach (torchtitan optimizer.fused default False at 9dec370, torchtitan/optimizer.py)",
    config="train_configs/llama3_{8b,70b,405b}.toml at 9dec370 + the table's overrides",
    rank="max over all GPUs (footnote 1 of the 2024-12 tables)")
BENCH_TRAINY = dict(
    path="benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md", run_commit="e7c0cae934df78d6e9c2835f42ff1f757dc3fddc",
    gpu="H200 141GB (WhiteFiber, 8 per host)", optimizer="adamw-fused",
    optimizer_text="AdamW fused (torchtitan Optimizer.implementation default 'fused' at e7c0cae)",
    config="torchtitan/models/llama3/train_configs/llama3_8b.toml at e7c0cae + the command line in the file",
    rank="rank logged by torchtitan (metrics rank); FSDP ranks are symmetric")
C, F8, LP, ATP, CPAR = "torch.compile", "float8-linears", "loss-parallel", "async-tp", "context-parallel"
PP8 = ["pp-schedule=1F1B", "pp-microbatches=8"]
TRAINY_F8 = [C, F8, "float8-fsdp-all-gather", "float8-precompute-dynamic-scale", "force-recompute-fp8-weight-in-bwd"]
# (id suffix, bench, table, row, model, seq_len, local batch, FSDP degree, tp, pp, vp, cp, recompute, features, GiB)
TORCHTITAN_TABLE = [
    ("table1:fsdp", BENCH_2024, "Table 1", "FSDP", L8, 8192, 2, 8, 1, 1, None, 1, "op-sac", [], 82.4),
    ("table1:fsdp+compile", BENCH_2024, "Table 1", "FSDP + torch.compile", L8, 8192, 2, 8, 1, 1, None, 1, "op-sac", [C], 77.0),
    ("table1:fsdp+compile+float8", BENCH_2024, "Table 1", "FSDP + torch.compile + Float8", L8, 8192, 2, 8, 1, 1, None, 1,
     "op-sac", [C, F8], 76.8),
    ("table2:fsdp8-cp1", BENCH_2024, "Table 2", "FSDP 8, CP 1 | 32768", L8, 32768, 1, 8, 1, 1, None, 1, "full", [C, F8], 83.9),
    ("table2:fsdp4-cp2", BENCH_2024, "Table 2", "FSDP 4, CP 2 | 65536", L8, 65536, 1, 4, 1, 1, None, 2, "full",
     [C, F8, CPAR], 84.2),
    ("table2:fsdp2-cp4", BENCH_2024, "Table 2", "FSDP 2, CP 4 | 131072", L8, 131072, 1, 2, 1, 1, None, 4, "full",
     [C, F8, CPAR], 84.0),
    ("table2:fsdp1-cp8", BENCH_2024, "Table 2", "FSDP 1, CP 8 | 262144", L8, 262144, 1, 1, 1, 1, None, 8, "full",
     [C, F8, CPAR], 84.5),
    ("table3:fsdp", BENCH_2024, "Table 3", "FSDP", L8, 8192, 2, 128, 1, 1, None, 1, "op-sac", [], 67.0),
    ("table3:fsdp+compile", BENCH_2024, "Table 3", "FSDP + torch.compile", L8, 8192, 2, 128, 1, 1, None, 1, "op-sac", [C], 62.0),
    ("table3:fsdp+compile+float8", BENCH_2024, "Table 3", "FSDP + torch.compile + Float8", L8, 8192, 2, 128, 1, 1, None, 1,
     "op-sac", [C, F8], 61.8),
    ("table4:2d", BENCH_2024, "Table 4", "2D", L70, 8192, 16, 32, 8, 1, None, 1, "full", [C, F8, LP], 71.9),
    ("table4:2d+asynctp", BENCH_2024, "Table 4", "2D + AsyncTP", L70, 8192, 16, 32, 8, 1, None, 1, "full",
     [C, F8, LP, ATP], 67.6),
    ("table5:1f1b", BENCH_2024, "Table 5", "1F1B", L405, 8192, 32, 8, 8, 8, None, 1, "full", [C, F8, LP, ATP, *PP8], 82.5),
    ("table5:interleaved-1f1b", BENCH_2024, "Table 5", "Interleaved 1F1B", L405, 8192, 32, 8, 8, 8, 2, 1, "full",
     [C, F8, LP, ATP, "pp-schedule=Interleaved1F1B", "pp-microbatches=8"], 72.7),
    ("table6:fsdp8-cp1", BENCH_2024, "Table 6", "FSDP 8, CP 1 | 32768", L405, 32768, 8, 8, 8, 8, None, 1, "full",
     [C, F8, LP, ATP, *PP8], 75.3),
    ("table6:fsdp4-cp2", BENCH_2024, "Table 6", "FSDP 4, CP 2 | 65536", L405, 65536, 8, 4, 8, 8, None, 2, "full",
     [C, F8, LP, ATP, CPAR, *PP8], 75.9),
    ("table6:fsdp2-cp4", BENCH_2024, "Table 6", "FSDP 2, CP 4 | 131072", L405, 131072, 8, 2, 8, 8, None, 4, "full",
     [C, F8, LP, ATP, CPAR, *PP8], 77.1),
    ("table6:fsdp1-cp8", BENCH_2024, "Table 6", "FSDP 1, CP 8 | 262144", L405, 262144, 8, 1, 8, 8, None, 8, "full",
     [C, F8, LP, ATP, CPAR, *PP8], 84.9),
    ("nodes4", BENCH_TRAINY, "Results", "NUM_NODES 4", L8, 8192, 2, 32, 1, 1, None, 1, "op-sac", TRAINY_F8, 47.96),
    ("nodes8", BENCH_TRAINY, "Results", "NUM_NODES 8", L8, 8192, 2, 64, 1, 1, None, 1, "op-sac", TRAINY_F8, 46.97),
]


def torchtitan_rows() -> list[dict]:
    rows = []
    for suffix, bench, table, label, spec, seq, local, fsdp, tp, pp, vp, cp, recompute, features, gib in TORCHTITAN_TABLE:
        name = bench["path"].rsplit("/", 1)[1][:-3]
        # with PP, torchtitan splits the local batch into n_microbatches (default: the PP degree,
        # torchtitan/parallelisms/pipeline_llama.py at 9dec370); without PP one micro-batch per step
        micro = local // 8 if pp > 1 else local
        n_gpus = fsdp * tp * pp * cp
        if pp > 1 and spec["num_layers"] % (pp * (vp or 1)):
            features = [*features, f"uneven-pipeline-split ({spec['num_layers']} layers over {pp * (vp or 1)} stages)"]
        training = dict(seq_len=seq, global_batch=local * fsdp, micro_batch=micro, precision="amp",
                        optimizer=bench["optimizer"], zero_stage=3, distributed_optimizer=False, recompute=recompute,
                        sequence_parallel=tp > 1, attention="flash", dropout=0.0, framework="fsdp2",
                        compile=C in features)  # apply_compile: torch.compile per TransformerBlock
        rows.append(dict(
            id=f"titan:{name}:{suffix}", framework="fsdp2", split=None,
            source=f"pytorch/torchtitan {bench['path']} ({table}, row '{label}', column Memory(GiB)) at commit "
                   f"{TORCHTITAN_COMMIT}; the run used torchtitan {bench['run_commit'][:7]}; torchtitan logs "
                   f"device_memory_monitor.get_peak_stats().max_reserved_gib = torch.cuda.memory_stats()"
                   f"['reserved_bytes.all.peak'] / 2**30 (torchtitan/metrics.py)",
            source_repo="pytorch/torchtitan", source_path=bench["path"], source_config_path=bench["config"],
            source_commit=TORCHTITAN_COMMIT, run_commit=bench["run_commit"], test_type="published benchmark",
            quoted=f"{table}, {label}: Memory(GiB) {gib}", measured_bytes=round(gib * GIB),
            measured_kind="max_memory_reserved", measured_rank=bench["rank"],
            model=MODEL_TEXT[spec["name"]], model_spec=spec, seq_len=seq, micro_batch=micro,
            global_batch=training["global_batch"], dp=fsdp, tp=tp, pp=pp, vp=vp, cp=cp, ep=1,
            zero_or_fsdp=f"FSDP2 fully_shard per TransformerBlock (ZeRO-3), data_parallel_shard_degree={fsdp}",
            precision="FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): fp32 sharded params, grads and "
                      "AdamW states; bf16 all-gathered params; no autocast",
            optimizer=bench["optimizer_text"],
            recompute={"op-sac": "selective, selective_ac_option='op' (per-op SAC)", "full": "full"}[recompute],
            attention="flash (F.scaled_dot_product_attention, is_causal)", dropout="none (Llama)",
            framework_detail="torchtitan FSDP2" + (f" + TP {tp} (SequenceParallel norms, loss parallel)" if tp > 1 else "")
                             + (f" + PP {pp}" if pp > 1 else "") + (f" + CP {cp}" if cp > 1 else "")
                             + (" + " + ", ".join(features) if features else ""),
            gpu=f"{bench['gpu']} x{n_gpus}", world_size=n_gpus,
            training=training, parallel=dict(dp=fsdp, tp=tp, pp=pp, vp=vp, cp=cp, ep=1), features=features,
            in_shared_reference=False,
        ))
    return rows


# --- the fixture ---------------------------------------------------------------------------------------------------
ORDER = ["id", "framework", "split", "source", "source_repo", "source_path", "source_config_path", "source_commit",
         "run_commit", "golden_values_last_changed", "test_type", "quoted", "measured_bytes", "measured_kind",
         "measured_rank", "model", "model_spec", "seq_len", "micro_batch", "global_batch", "dp", "tp", "pp", "vp", "cp",
         "ep", "zero_or_fsdp", "precision", "optimizer", "recompute", "attention", "dropout", "framework_detail", "gpu",
         "world_size", "training", "parallel", "features", "in_shared_reference"]


def split_of(row: dict) -> str:
    """Fixed before any fitting: the shared reference rows calibrate; otherwise sha256(id) % 3 == 0 is held out."""
    held = not row["in_shared_reference"] and int(hashlib.sha256(row["id"].encode()).hexdigest(), 16) % 3 == 0
    return "heldout" if held else "calibration"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megatron", type=Path, required=True, help="bare git mirror of NVIDIA/Megatron-LM")
    parser.add_argument("--shared", type=Path, required=True, help="the shared reference real-gpu-peaks.jsonl")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    shared_ids = {json.loads(line)["id"] for line in args.shared.read_text().splitlines() if line.strip()}
    mlm, skipped = megatron_rows(Repo(args.megatron), shared_ids)
    rows = mlm + torchtitan_rows()
    missing = shared_ids - {r["id"] for r in rows}
    if missing:
        print(f"error: shared rows not reproduced: {sorted(missing)}", file=sys.stderr)
        return 1
    for row in rows:
        row["split"] = split_of(row)
    args.out.write_text("".join(json.dumps({k: r[k] for k in ORDER if k in r}) + "\n" for r in rows))
    counts = collections.Counter(f"{r['framework']}_{r['split']}" for r in rows)
    print(json.dumps({"rows": len(rows), **dict(sorted(counts.items())), "megatron_tests_skipped": len(skipped),
                      "megatron_commit": Repo(args.megatron).commit, "torchtitan_commit": TORCHTITAN_COMMIT}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
