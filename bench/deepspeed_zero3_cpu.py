"""Write tests/data/deepspeed_zero3_cpu.jsonl: what real DeepSpeed ZeRO-3 keeps gathered at the start of backward.

The deepspeed recipe counts, at the start of backward under ZeRO-3, the parameters still gathered (unsharded, bf16)
from the end of the forward. This script measures that count in the installed DeepSpeed itself: it trains a small
post-LN transformer of the DeepSpeedExamples bf16_master_weight shape (token + learned position embeddings,
nn.MultiheadAttention, LayerNorm, Linear-GELU-Linear, an untied output projection) with `deepspeed.initialize` and
ZeRO-3 on 2 CPU ranks (gloo) or 1, and after the forward of the third step records every parameter whose
`ds_status` is AVAILABLE and whether its data is a gathered buffer of its own (not the rank's partition). Sizes are
scaled so the model/setting ratios are those of the 6.86B run (stage3_max_live_parameters and
stage3_max_reuse_distance 1e9 -> 976,562 elements for a 6.75M-parameter model; the prefetch bucket, reduce bucket and
sub-group likewise); the two limits vary per case. tests/test_deepspeed_recipe.py compares the recipe's gathered elements with these rows (CI reads the
fixture; it does not install deepspeed).

    DS_BUILD_OPS=0 pip install deepspeed     # imports on a CPU-only machine (accelerator "cpu")
    python bench/deepspeed_zero3_cpu.py      # run every case, compare with the fixture (no deepspeed: say so)
    python bench/deepspeed_zero3_cpu.py --write

About 40 s per case on 2 cores. The last line printed is a JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "deepspeed_zero3_cpu.jsonl"

# hidden, layers, heads, vocab, seq, micro-batch: hidden / 32 and vocab / 32 of the 6.86B run (4096, 50000), so
# every matrix is 1/1024 of its size there and the layer / head proportions are the same
DIMS = dict(hidden=128, layers=32, heads=4, vocab=1562, seq=64, batch=1)
SCALE = 1024  # 6.86e9 / 6.75e6 parameters
SCALED = dict(reduce_bucket_size=50_000_000 // SCALE, stage3_prefetch_bucket_size=50_000_000 // SCALE,
              sub_group_size=1_000_000_000 // SCALE)
DEFAULT = 1_000_000_000 // SCALE  # stage3_max_live_parameters and stage3_max_reuse_distance 1e9, scaled
# (case id, ranks, stage3_max_live_parameters, stage3_max_reuse_distance, activation checkpointing)
CASES = [
    ("dp2-live976k-reuse976k", 2, DEFAULT, DEFAULT, False),  # the 6.86B run's defaults, scaled
    ("dp2-live500k-reuse976k", 2, 500_000, DEFAULT, False),
    ("dp2-live2m-reuse976k", 2, 2_000_000, DEFAULT, False),
    ("dp2-live500k-reuse4m", 2, 500_000, 4_000_000, False),  # the reuse window wider than max_live
    ("dp2-live1e9-reuse1e9", 2, 1_000_000_000, 1_000_000_000, False),  # unscaled: more than the model
    ("dp2-live976k-reuse976k-ac", 2, DEFAULT, DEFAULT, True),
    ("dp1-live976k-reuse976k", 1, DEFAULT, DEFAULT, False),  # one rank: the partition is the parameter
]


def model_spec() -> dict:
    """The ModelSpec fields of the traced model (bench/deepspeed_truth.py's DeepSpeedExamples rows, scaled)."""
    h = DIMS["hidden"]
    return dict(name=f"dsx-simple-transformer-{DIMS['layers']}x{h}", vocab_size=DIMS["vocab"], hidden_size=h,
                num_layers=DIMS["layers"], num_heads=DIMS["heads"], ffn_size=4 * h, mlp_kind="gelu",
                tie_embeddings=False, position_kind="learned", max_positions=DIMS["seq"], norm_kind="layernorm",
                bias=True)


# --- one rank (run under torch.distributed.run) ---------------------------------------------------------------------
def _worker(case: dict) -> None:
    import deepspeed
    import torch
    import torch.nn as nn
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from torch.utils.checkpoint import checkpoint

    h, n_layers, heads, vocab, seq, b = (DIMS[k] for k in ("hidden", "layers", "heads", "vocab", "seq", "batch"))

    class Block(nn.Module):  # post-LN: x = norm1(x + attn(x)); x = norm2(x + ff(x))
        def __init__(self):
            super().__init__()
            self.attention = nn.MultiheadAttention(h, heads, batch_first=True)
            self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.ff = nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))

        def forward(self, x):
            x = self.norm1(x + self.attention(x, x, x)[0])
            return self.norm2(x + self.ff(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding, self.pos_embedding = nn.Embedding(vocab, h), nn.Embedding(seq, h)
            self.layers = nn.ModuleList(Block() for _ in range(n_layers))
            self.output_proj = nn.Linear(h, vocab)

        def forward(self, ids):
            x = self.embedding(ids) + self.pos_embedding(torch.arange(ids.shape[1]).unsqueeze(0))
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=False) if case["ac"] else layer(x)
            return self.output_proj(x)

    config = {
        "train_micro_batch_size_per_gpu": b, "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}},
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                              "stage3_param_persistence_threshold": 0,
                              "stage3_max_live_parameters": case["max_live"],
                              "stage3_max_reuse_distance": case["reuse"], **SCALED},
    }
    torch.manual_seed(0)
    net = Net()
    engine, *_ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    names = {id(p): n for n, p in engine.module.named_parameters()}
    loss_fn = nn.CrossEntropyLoss()
    for step in range(3):  # step 1 records the trace; the coordinator follows it from step 2 on
        ids, labels = torch.randint(0, vocab, (b, seq)), torch.randint(0, vocab, (b, seq))
        loss = loss_fn(engine(ids).view(-1, vocab), labels.view(-1))
        if step == 2:
            available = [p for p in engine.module.parameters() if p.ds_status == ZeroParamStatus.AVAILABLE]
            own_buffer = [p for p in available
                          if p.data.untyped_storage().data_ptr() != p.ds_tensor.untyped_storage().data_ptr()]
            result = {"available_elements": sum(p.ds_numel for p in available),
                      "gathered_buffer_elements": sum(p.ds_numel for p in own_buffer),
                      "available": [names[id(p)] for p in available],
                      "parameters": sum(p.ds_numel for p in engine.module.parameters())}
        loss.backward()
        engine.step()
    if int(os.environ.get("RANK", "0")) == 0:
        print("RESULT " + json.dumps(result), flush=True)


# --- the driver -----------------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_case(case_id: str, ranks: int, max_live: int, reuse: int, ac: bool) -> dict:
    import deepspeed
    import torch

    case = {"id": case_id, "ranks": ranks, "max_live": max_live, "reuse": reuse, "ac": ac}
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", f"--master_port={_free_port()}",
           __file__, "--worker", json.dumps(case)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"case {case_id} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    measured = json.loads(lines[-1][len("RESULT "):])
    return {
        "id": f"ds-zero3-cpu:{case_id}", "deepspeed_version": deepspeed.__version__,
        "torch_version": torch.__version__.split("+")[0], "device": "cpu (gloo)", "ranks": ranks, "dims": DIMS,
        "model_spec": model_spec(), "activation_checkpointing": ac,
        "zero_optimization": {"stage": 3, "stage3_max_live_parameters": max_live, "stage3_max_reuse_distance": reuse,
                              "stage3_param_persistence_threshold": 0, **SCALED},
        "measured_at": "after the forward of step 3 (the trace recorded in step 1), before loss.backward()",
        **measured, "seconds": round(time.perf_counter() - start, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the fixture (default: compare with it)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(json.loads(args.worker))
        return 0
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        print(json.dumps({"skipped": "deepspeed is not installed (DS_BUILD_OPS=0 pip install deepspeed)"}))
        return 0
    rows = []
    for case in CASES:
        row = run_case(*case)
        rows.append(row)
        zc = row["zero_optimization"]
        print(f"{row['id']:30s} live {zc['stage3_max_live_parameters']:>13,} reuse {zc['stage3_max_reuse_distance']:>13,}"
              f"  available {row['available_elements']:>10,}  own buffers {row['gathered_buffer_elements']:>10,}"
              f"  of {row['parameters']:,}  ({row['seconds']} s)")
    reproduced = None
    if args.write:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif args.out.exists():
        old = {r["id"]: r for r in map(json.loads, args.out.read_text().splitlines())}
        reproduced = all(old.get(r["id"], {}).get("gathered_buffer_elements") == r["gathered_buffer_elements"]
                         for r in rows)
    print(json.dumps({"cases": len(rows), "reproduced": reproduced,
                      "gathered_elements": {r["id"]: r["gathered_buffer_elements"] for r in rows},
                      "seconds_total": round(sum(r["seconds"] for r in rows), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
