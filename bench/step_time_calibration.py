"""Calibrate and check the step-time model (frenzy_core/perf.py) against Sia's measured step times.

Data: ../shared/traces/sia-sosp23/traces/{bert,gpt_pmp}/{placements,scalability}-<cluster>.csv (Sia SOSP'23 artifact,
siasosp23/artifacts sia-simulator/). How the rows map onto our model (see docs/perf.md for the reasoning):

* bert: BERT-base (110M) fine-tuned on SQuAD, sequence 384 (Pollux OSDI'21 Table 1 / AdaptDL example), mixed
  precision. Pure data parallelism: d = num_replicas (one GPU each), micro-batch = global/d = local_bsz, one
  micro-batch per step. `step_time` is the whole iteration (gradient sync included), which we predict.
* gpt_pmp: a GPT trained with GPipe-style pipeline parallelism, p = 8 stages on rtx and 2 on dgx-ext, m = 48
  micro-batches per step (Sia's `PMPApplication`). `step_time` there is the forward time of one stage on one
  micro-batch of local_bsz samples; Sia turns it into a step as 3 x (p - 1 + m) x step_time + sync_time, which is the
  "measured" step we compare against. d = GPUs / p. The model is not named in the artifact; we assume the GPT-3 2.7B
  shape (h 2560, l 32, 32 heads, context 2048; Brown et al. 2020 Table 2.1), the size whose Adam states need 2 A100-40GB
  and 8 RTX 2080 Ti but not 1 and 4 (the stage counts Sia uses).

Clusters (Sia README): dgx/dgx-ext = 8 x A100-40GB, rtx = 8 x RTX 2080 Ti, azure = ND40rs_v2 (8 x V100-32GB), aws =
g4dn.12xlarge (4 x T4). quad (Quadro RTX 6000) is not in our catalog and is skipped. NIC speeds are assumptions.

Method: rows split in two halves by a seeded shuffle within each (app, cluster). Per (app, GPU type) -- MFU depends on
the workload as well as the GPU -- and, for comparison, per GPU type pooled over apps, MFU is fitted on the
training half by grid search minimising the median |log(predicted / measured)| (the compute term scales as 1 / MFU,
so this is the "median of ratios" fit, made robust to the communication terms); errors are reported on the held-out
half. A second fit adds a fixed per-step overhead (non-negative least squares in relative error) to show how much of the
gap is per-step framework cost. Prints a table; the LAST LINE is one JSON object.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core.gpus import CATALOG  # noqa: E402
from frenzy_core.models import ModelSpec  # noqa: E402
from frenzy_core.perf import step_time_totals  # noqa: E402
from frenzy_core.training import TrainingSpec  # noqa: E402

TRACES = REPO.parent / "shared" / "traces" / "sia-sosp23" / "traces"
SEED = 0

# cluster -> (catalog GPU, GPUs per node, assumed NIC Gbit/s per node, why)
CLUSTERS = {
    "dgx-ext": ("A100-40GB", 8, 200.0, "DGX-A100, one HDR InfiniBand port assumed"),
    "dgx": ("A100-40GB", 8, 200.0, "DGX-A100, one HDR InfiniBand port assumed"),
    "rtx": ("RTX-2080Ti", 8, 40.0, "8 x 2080 Ti servers, 40 GbE assumed"),
    "azure": ("V100-32GB", 8, 100.0, "ND40rs_v2: 100 Gb/s EDR InfiniBand"),
    "aws": ("T4", 4, 50.0, "g4dn.12xlarge: 50 Gb/s"),
}

# BERT-base (Devlin et al. 2019): V 30522, h 768, l 12, 12 heads, 512 learned positions. An encoder, but its FLOPs
# follow the same transformer formula (the MLM/QA head is small; we keep the tied V x h head as the formula's logits).
BERT = ModelSpec(name="bert-base", vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12, max_positions=512)
BERT_SEQ = 384
# Assumed gpt_pmp model: GPT-3 2.7B shape with GPT-2's vocabulary.
GPT_PMP = ModelSpec(
    name="gpt3-2.7b", vocab_size=50257, hidden_size=2560, num_layers=32, num_heads=32, max_positions=2048
)
GPT_SEQ = 2048
PMP_STAGES = {"rtx": 8, "dgx-ext": 2}  # Sia applications.py: PMPApplication(num_stages=...)
PMP_MICRO_BATCHES = 48  # Sia PMPApplication: accum_steps = 48
PMP_FWD_BWD_OVER_FWD = 3  # Sia: a stage's forward + backward = 3 x its forward


def _placement_rows(df: pd.DataFrame, node_size: int) -> pd.DataFrame:
    digits = df["placement"].astype(str)
    df = df.assign(num_nodes=digits.str.len(), num_gpus=digits.map(lambda p: sum(map(int, p))))
    # A multi-node placement spans nodes whatever its digits: pass the fullest node as the node size, so the
    # model sees N > gpus_per_node and uses the network.
    per_node = digits.map(lambda p: max(map(int, p)))
    return df.assign(gpus_per_node=np.where(df["num_nodes"] > 1, per_node, node_size))


def load_rows() -> pd.DataFrame:
    """One row per measured configuration, mapped to (model, d, t, p, micro-batch, global batch, measured step)."""
    frames = []
    for cluster, (gpu, node_size, nic, _) in CLUSTERS.items():
        f = TRACES / "bert" / f"placements-{cluster}.csv"
        if f.exists():
            pl = _placement_rows(pd.read_csv(f), node_size)
            sc = pd.read_csv(TRACES / "bert" / f"scalability-{cluster}.csv").rename(
                columns={"num_replicas": "num_gpus"}
            )
            sc["gpus_per_node"] = np.where(
                sc["num_nodes"] > 1, np.ceil(sc["num_gpus"] / sc["num_nodes"]).astype(int), node_size
            )
            bert = pd.concat([pl, sc], ignore_index=True)
            bert = bert.drop_duplicates(["num_nodes", "num_gpus", "gpus_per_node", "local_bsz"])
            frames.append(
                bert.assign(
                    app="bert",
                    cluster=cluster,
                    gpu=gpu,
                    nic_gbit_s=nic,
                    dp=bert["num_gpus"],
                    pp=1,
                    micro_batch=bert["local_bsz"],
                    global_batch=bert["num_gpus"] * bert["local_bsz"],
                    measured_s=bert["step_time"],
                    measured_sync_s=bert["sync_time"],
                )
            )
        f = TRACES / "gpt_pmp" / f"placements-{cluster}.csv"
        if cluster in PMP_STAGES and f.exists():
            p = PMP_STAGES[cluster]
            pmp = _placement_rows(pd.read_csv(f), node_size)
            pmp = pmp[pmp["num_gpus"] % p == 0]
            d = pmp["num_gpus"] // p
            measured = PMP_FWD_BWD_OVER_FWD * (p - 1 + PMP_MICRO_BATCHES) * pmp["step_time"] + pmp["sync_time"]
            frames.append(
                pmp.assign(
                    app="gpt_pmp",
                    cluster=cluster,
                    gpu=gpu,
                    nic_gbit_s=nic,
                    dp=d,
                    pp=p,
                    micro_batch=pmp["local_bsz"],
                    global_batch=d * PMP_MICRO_BATCHES * pmp["local_bsz"],
                    measured_s=measured,
                    measured_sync_s=pmp["sync_time"],
                )
            )
    rows = pd.concat(frames, ignore_index=True)
    rng = np.random.default_rng(SEED)
    rows["train"] = False
    for _, idx in rows.groupby(["app", "cluster"]).groups.items():
        idx = rng.permutation(np.asarray(idx))
        rows.loc[idx[: len(idx) // 2], "train"] = True
    return rows.reset_index(drop=True)


def predict_parts(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(compute_s at MFU 1, everything else) per row: prediction at MFU u is compute / u + rest."""
    compute1 = np.empty(len(rows))
    rest = np.empty(len(rows))
    for (app, cluster, gb, gpn), grp in rows.groupby(["app", "cluster", "global_batch", "gpus_per_node"]):
        model, seq = (BERT, BERT_SEQ) if app == "bert" else (GPT_PMP, GPT_SEQ)
        gpu = CATALOG[CLUSTERS[cluster][0]]
        mb = grp["micro_batch"].to_numpy()
        training = TrainingSpec(seq_len=seq, global_batch=int(gb), micro_batch=int(mb.min()), precision="amp")
        kw = dict(network_gbit_s=CLUSTERS[cluster][2], gpus_per_node=int(gpn))
        args = (grp["dp"].to_numpy(), 1, grp["pp"].to_numpy(), mb)
        at1 = step_time_totals(model, training, gpu, *args, mfu=1.0, **kw)
        at_half = step_time_totals(model, training, gpu, *args, mfu=0.5, **kw)
        # compute/u + rest: two evaluations give both parts (pipeline bubble scales with compute too).
        compute1[grp.index] = at_half - at1
        rest[grp.index] = 2 * at1 - at_half
    return compute1, rest


def fit_mfu(compute1: np.ndarray, rest: np.ndarray, measured: np.ndarray) -> float:
    grid = np.logspace(-3, 0, 1201)
    pred = compute1[None, :] / grid[:, None] + rest[None, :]
    err = np.median(np.abs(np.log(pred / measured[None, :])), axis=1)
    return float(grid[int(np.argmin(err))])


def fit_mfu_overhead(compute1: np.ndarray, rest: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    a = np.column_stack([compute1, np.ones_like(compute1)]) / measured[:, None]
    x, _ = nnls(a, (measured - rest) / measured)
    inv_mfu, overhead = x
    return (min(1.0, 1.0 / inv_mfu) if inv_mfu > 0 else 1.0), float(overhead)


def _abs_err(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.abs(pred / measured - 1.0)


def _fit_by(rows, key, compute1, rest, measured, train):
    """Fit MFU (and MFU + overhead) per group of `key` columns on the training half; returns per-row arrays too."""
    mfu, ovh_mfu, ovh_s = (np.empty(len(rows)) for _ in range(3))
    fits = {}
    for k, idx in rows.groupby(key).groups.items():
        idx = np.asarray(idx)
        tr = idx[train[idx]]
        u = fit_mfu(compute1[tr], rest[tr], measured[tr])
        uo, o = fit_mfu_overhead(compute1[tr], rest[tr], measured[tr])
        mfu[idx], ovh_mfu[idx], ovh_s[idx] = u, uo, o
        fits[k] = (u, uo, o)
    return fits, compute1 / mfu + rest, compute1 / ovh_mfu + rest + ovh_s


def main() -> dict:
    if not TRACES.exists():
        raise SystemExit(f"trace data not found at {TRACES}")
    rows = load_rows()
    compute1, rest = predict_parts(rows)
    measured = rows["measured_s"].to_numpy()
    train = rows["train"].to_numpy()

    catalog_pred = compute1 / rows["gpu"].map(lambda g: CATALOG[g].mfu).to_numpy() + rest
    fits, pred, pred_ovh = _fit_by(rows, ["app", "gpu"], compute1, rest, measured, train)
    pooled, pred_pooled, _ = _fit_by(rows, "gpu", compute1, rest, measured, train)
    for col, values in (("err", pred), ("err_cat", catalog_pred), ("err_ovh", pred_ovh), ("err_pool", pred_pooled)):
        rows[col] = _abs_err(values, measured)

    held = rows[~rows["train"]]
    print(
        "Held-out |predicted / measured - 1|, medians. mfu_fit: per (app, GPU type); err_pool: one MFU per GPU "
        "type pooled over apps;\nerr_ovh: MFU + fixed per-step overhead ovh_s fitted per (app, GPU type)."
    )
    print(
        f"{'app':8} {'cluster':8} {'gpu':11} {'rows':>5} {'cat_mfu':>8} {'err_cat':>8} {'mfu_fit':>8} {'err':>7} "
        f"{'p90':>7} {'err_pool':>8} {'ovh_mfu':>8} {'ovh_s':>7} {'err_ovh':>8}"
    )
    per_group = {}
    for (app, cluster), g in held.groupby(["app", "cluster"]):
        gpu = CLUSTERS[cluster][0]
        u, uo, o = fits[(app, gpu)]
        n_all = int(((rows["app"] == app) & (rows["cluster"] == cluster)).sum())
        med = float(g["err"].median())
        per_group[f"{app}/{cluster}"] = {"rows": n_all, "held_out_median_abs_err": round(med, 4)}
        print(
            f"{app:8} {cluster:8} {gpu:11} {n_all:5d} {CATALOG[gpu].mfu:8.2f} {g['err_cat'].median():8.3f} "
            f"{u:8.3f} {med:7.3f} {g['err'].quantile(0.9):7.3f} {g['err_pool'].median():8.3f} {uo:8.3f} "
            f"{o:7.3f} {g['err_ovh'].median():8.3f}"
        )
    result = {
        "step_time_median_abs_err": round(float(held["err"].median()), 4),
        "step_time_p90_abs_err": round(float(held["err"].quantile(0.9)), 4),
        "step_time_median_abs_err_by_app": {a: round(float(g["err"].median()), 4) for a, g in held.groupby("app")},
        "step_time_median_abs_err_pooled_gpu_mfu": round(float(held["err_pool"].median()), 4),
        "step_time_median_abs_err_catalog_mfu": round(float(held["err_cat"].median()), 4),
        "step_time_median_abs_err_with_overhead": round(float(held["err_ovh"].median()), 4),
        "mfu_fitted": {f"{g}/{a}": round(v[0], 4) for (a, g), v in fits.items()},
        "mfu_fitted_pooled_per_gpu": {g: round(v[0], 4) for g, v in pooled.items()},
        "mfu_overhead_fit": {
            f"{g}/{a}": {"mfu": round(v[1], 4), "overhead_s": round(v[2], 4)} for (a, g), v in fits.items()
        },
        "rows": {k: int(v) for k, v in rows.groupby("gpu").size().items()},
        "rows_by_app": {k: int(v) for k, v in rows.groupby("app").size().items()},
        "rows_total": len(rows),
        "rows_held_out": len(held),
        "per_app_cluster": per_group,
        "assumptions": {"bert": f"bert-base seq {BERT_SEQ} amp", "gpt_pmp": f"gpt3-2.7b seq {GPT_SEQ} amp m=48"},
    }
    if math.isnan(result["step_time_median_abs_err"]):
        raise SystemExit("no held-out rows")
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
