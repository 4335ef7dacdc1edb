"""Calibrate the step-time model (frenzy_core/perf.py) on Sia's measured profiles and check the catalog values on held-out rows.

Data: ../shared/traces/sia-sosp23/traces/{bert,gpt_pmp}/{placements,scalability}-<cluster>.csv (Sia SOSP'23 artifact,
siasosp23/artifacts @ aaf7a0de, sia-simulator/). How the rows map onto our model (docs/perf.md has the reasoning):

* bert: BERT-base (110M) fine-tuned on SQuAD, sequence 384, **fp32** (the artifact's adaptdl/benchmark/models/bert/
  adaptdljob.yaml runs run_squad.py with no fp16/amp flag, and run_squad.py has no autocast). Pure data parallelism:
  d = replicas, micro-batch = local_bsz, one micro-batch per step; `step_time` is the whole iteration (gradient sync
  included), which we predict.
* gpt_pmp: a GPT trained with GPipe-style pipelines, p = 8 stages on rtx and 2 on dgx-ext, m = 48 micro-batches
  (Sia's `PMPApplication`); Sia turns the profiled per-stage forward time into a step as
  3 x (p - 1 + m) x step_time + sync_time, which we compare against. The model is not named in the artifact; we assume
  the GPT-3 2.7B shape in amp (the size whose Adam states need 2 A100-40GB and 8 RTX 2080 Ti but not 1 and 4).

Clusters (Sia README): dgx/dgx-ext = 8 x A100-40GB, rtx = 8 x RTX 2080 Ti, azure = ND40rs_v2 (8 x V100-32GB), aws =
g4dn.12xlarge (4 x T4). quad (Quadro RTX 6000) is not in our catalog and is skipped. NIC speeds are assumptions.

Split, fixed before any fitting: a configuration (app, placement or (nodes, replicas), local batch) is held out when
crc32 of its key is odd, so the same configuration is held out on every cluster and the cross-type ratios compare
held-out rows only. Calibration rows only are used to fit, per GPU type on bert: the intra-node and network all-reduce
efficiency (median of ring time at nominal bandwidth / measured sync_time, single-node resp. multi-node rows), then
fp32 MFU and a fixed per-step overhead (non-negative least squares in relative error); on gpt_pmp's single-node rows:
the RTX 2080 Ti's bf16/fp16 MFU (median of ratios); the T4's fp16 MFU = the 2080 Ti's achieved TFLOP/s x the median one-GPU speed
ratio T4 / 2080 Ti of Sia's mixed-precision apps (imagenet, yolov3, deepspeech2). The catalog (frenzy_core/gpus.py) holds these fits, rounded; this script refits
them and prints the largest difference. Errors |predicted / measured - 1| are reported on held-out rows with (a) the
catalog values users get, (b) the datasheet catalog this replaced, (c) an MFU fitted per (app, GPU type) on the
calibration rows (the old bench's headline). Prints tables; the LAST LINE is one JSON object.
"""

from __future__ import annotations

import glob
import json
import math
import sys
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frenzy_core.gpus import CATALOG, GPUType  # noqa: E402
from frenzy_core.models import ModelSpec  # noqa: E402
from frenzy_core.perf import step_time_totals  # noqa: E402
from frenzy_core.traces import SIA_APP_GPU_HOURS  # noqa: E402
from frenzy_core.training import TrainingSpec  # noqa: E402

TRACES = REPO.parent / "shared" / "traces" / "sia-sosp23" / "traces"

# cluster -> (catalog GPU, GPUs per node, assumed NIC Gbit/s per node, why)
CLUSTERS = {
    "dgx-ext": ("A100-40GB", 8, 200.0, "DGX-A100, one HDR InfiniBand port assumed"),
    "dgx": ("A100-40GB", 8, 200.0, "DGX-A100, one HDR InfiniBand port assumed"),
    "rtx": ("RTX-2080Ti", 8, 40.0, "8 x 2080 Ti servers, 40 GbE assumed"),
    "azure": ("V100-32GB", 8, 100.0, "ND40rs_v2: 100 Gb/s EDR InfiniBand"),
    "aws": ("T4", 4, 50.0, "g4dn.12xlarge: 50 Gb/s"),
}

# BERT-base (Devlin et al. 2019): V 30522, h 768, l 12, 12 heads, 512 learned positions.
BERT = ModelSpec(name="bert-base", vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12, max_positions=512)
BERT_SEQ = 384
BERT_PRECISION = "fp32"
GPT_PMP = ModelSpec(
    name="gpt3-2.7b", vocab_size=50257, hidden_size=2560, num_layers=32, num_heads=32, max_positions=2048
)
GPT_SEQ = 2048
GPT_PRECISION = "amp"
PMP_STAGES = {"rtx": 8, "dgx-ext": 2}  # Sia applications.py: PMPApplication(num_stages=...)
PMP_MICRO_BATCHES = 48  # Sia PMPApplication: accum_steps = 48
PMP_FWD_BWD_OVER_FWD = 3  # Sia: a stage's forward + backward = 3 x its forward
FP32_GRAD_BYTES = 4

# The catalog before calibration (datasheet peaks at one assumed MFU, nominal links, no overhead): the "before" column.
DATASHEET_MFU = {"A100-40GB": 0.45, "RTX-2080Ti": 0.30, "V100-32GB": 0.40, "T4": 0.30}

# Fits the catalog does not take: the A100's LLM throughput comes end-to-end from llm-foundry (links nominal there);
# Sia's dgx sync times (440 MB fp32 buckets, 2021 NCCL) would charge LLM all-reduces a second time.
NOT_TAKEN = {("A100-40GB", "intra_link_efficiency"), ("A100-40GB", "network_efficiency")}

# Sia applications (sia-simulator/applications.py APPLICATIONS["aws"]): max_epochs per app.
SIA_MAX_EPOCHS = {"cifar10": 100, "ncf": 10, "deepspeech2": 80, "bert": 2, "yolov3": 50, "imagenet": 90}


def held_out(app: str, key: str, local_bsz: int) -> bool:
    return zlib.crc32(f"{app}|{key}|{int(local_bsz)}".encode()) % 2 == 1


def _placement_rows(df: pd.DataFrame, node_size: int) -> pd.DataFrame:
    digits = df["placement"].astype(str)
    df = df.assign(num_nodes=digits.str.len(), num_gpus=digits.map(lambda p: sum(map(int, p))))
    # A multi-node placement spans nodes whatever its digits: pass the fullest node as the node size, so the
    # model sees N > gpus_per_node and uses the network.
    per_node = digits.map(lambda p: max(map(int, p)))
    return df.assign(gpus_per_node=np.where(df["num_nodes"] > 1, per_node, node_size), key=digits)


def load_rows() -> pd.DataFrame:
    """One row per measured configuration, mapped to (model, d, p, micro-batch, global batch, measured step)."""
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
            sc["key"] = "n" + sc["num_nodes"].astype(str) + "r" + sc["num_gpus"].astype(str)
            bert = pd.concat([pl, sc], ignore_index=True)
            bert = bert.drop_duplicates(["num_nodes", "num_gpus", "gpus_per_node", "local_bsz"])
            frames.append(bert.assign(app="bert", cluster=cluster, gpu=gpu, nic_gbit_s=nic, dp=bert["num_gpus"], pp=1,
                                      micro_batch=bert["local_bsz"], global_batch=bert["num_gpus"] * bert["local_bsz"],
                                      measured_s=bert["step_time"], measured_sync_s=bert["sync_time"]))
        f = TRACES / "gpt_pmp" / f"placements-{cluster}.csv"
        if cluster in PMP_STAGES and f.exists():
            p = PMP_STAGES[cluster]
            pmp = _placement_rows(pd.read_csv(f), node_size)
            pmp = pmp[pmp["num_gpus"] % p == 0]
            d = pmp["num_gpus"] // p
            measured = PMP_FWD_BWD_OVER_FWD * (p - 1 + PMP_MICRO_BATCHES) * pmp["step_time"] + pmp["sync_time"]
            frames.append(pmp.assign(app="gpt_pmp", cluster=cluster, gpu=gpu, nic_gbit_s=nic, dp=d, pp=p,
                                     micro_batch=pmp["local_bsz"], global_batch=d * PMP_MICRO_BATCHES * pmp["local_bsz"],
                                     measured_s=measured, measured_sync_s=pmp["sync_time"]))
    rows = pd.concat(frames, ignore_index=True)
    rows["train"] = [not held_out(a, k, b) for a, k, b in zip(rows["app"], rows["key"], rows["local_bsz"], strict=True)]
    return rows.reset_index(drop=True)


def predict_parts(rows: pd.DataFrame, gpus: dict[str, GPUType]) -> tuple[np.ndarray, np.ndarray]:
    """(compute_s at efficiency 1, everything else incl. the type's overhead) per row, with `gpus`' link figures."""
    rows = rows.reset_index(drop=True)
    compute1 = np.empty(len(rows))
    rest = np.empty(len(rows))
    for (app, cluster, gb, gpn), grp in rows.groupby(["app", "cluster", "global_batch", "gpus_per_node"]):
        model, seq, prec = (BERT, BERT_SEQ, BERT_PRECISION) if app == "bert" else (GPT_PMP, GPT_SEQ, GPT_PRECISION)
        gpu = gpus[CLUSTERS[cluster][0]]
        mb = grp["micro_batch"].to_numpy()
        training = TrainingSpec(seq_len=seq, global_batch=int(gb), micro_batch=int(mb.min()), precision=prec)
        kw = dict(network_gbit_s=CLUSTERS[cluster][2], gpus_per_node=int(gpn))
        args = (grp["dp"].to_numpy(), 1, grp["pp"].to_numpy(), mb)
        at1 = step_time_totals(model, training, gpu, *args, mfu=1.0, **kw)
        at_half = step_time_totals(model, training, gpu, *args, mfu=0.5, **kw)
        compute1[grp.index] = at_half - at1  # compute/u + rest: the pipeline bubble scales with compute too
        rest[grp.index] = 2 * at1 - at_half
    return compute1, rest


def predict(rows: pd.DataFrame, gpus: dict[str, GPUType]) -> np.ndarray:
    compute1, rest = predict_parts(rows, gpus)
    prec = np.where(rows["app"] == "bert", "fp32", "bf16")
    eff = np.array([gpus[g].efficiency(p) for g, p in zip(rows["gpu"], prec, strict=True)])
    return compute1 / eff + rest


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


def ring_time_nominal_s(rows: pd.DataFrame) -> np.ndarray:
    """Ring all-reduce of BERT's fp32 gradients at nominal bandwidth: the NIC across nodes, the intra link inside."""
    d = rows["dp"].to_numpy(dtype=float)
    grad = BERT.parameter_count() * FP32_GRAD_BYTES
    intra = rows["gpu"].map(lambda g: CATALOG[g].intra_link_gbyte_s * 1e9).to_numpy()
    nic = rows["nic_gbit_s"].to_numpy() * 1e9 / 8
    link = np.where(rows["num_nodes"].to_numpy() > 1, np.minimum(nic, intra), intra)
    return 2 * (d - 1) / d * grad / link


def fit_catalog(rows: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The measured figures per GPU type from calibration rows only (see the module docstring)."""
    cal = rows[rows["train"]]
    fits: dict[str, dict[str, float]] = {}
    for gpu, g in cal[cal["app"] == "bert"].groupby("gpu"):
        multi = g["dp"] > 1
        inside, across = multi & (g["num_nodes"] == 1), multi & (g["num_nodes"] > 1)
        ratio = ring_time_nominal_s(g) / g["measured_sync_s"].to_numpy()
        # Efficiencies above 1 mean the assumed NIC is slower than the real one (a DGX-A100 has 8 HDR ports): cap.
        fit = {
            "intra_link_efficiency": min(1.0, float(np.median(ratio[inside.to_numpy()]))),
            "network_efficiency": min(1.0, float(np.median(ratio[across.to_numpy()]))),
        }
        # fp32 MFU and overhead from one-GPU rows (no communication): the slope and intercept in local batch.
        one = g[g["dp"] == 1]
        probe = {**CATALOG, gpu: CATALOG[gpu].model_copy(update={**fit, "step_overhead_s": 0.0})}
        compute1, rest = predict_parts(one, probe)
        fit["fp32_mfu"], fit["step_overhead_s"] = fit_mfu_overhead(compute1, rest, one["measured_s"].to_numpy())
        fits[gpu] = fit
    # One node only (d = 1, 8 stages): the compute-bound rows, as for bert's one-GPU fit.
    pmp = cal[(cal["app"] == "gpt_pmp") & (cal["gpu"] == "RTX-2080Ti") & (cal["num_nodes"] == 1)]
    probe = {**CATALOG, "RTX-2080Ti": CATALOG["RTX-2080Ti"].model_copy(update=fits["RTX-2080Ti"])}
    compute1, rest = predict_parts(pmp, probe)
    fits["RTX-2080Ti"]["mfu"] = fit_mfu(compute1, rest, pmp["measured_s"].to_numpy())
    # T4 tensor cores: no transformer in amp was profiled on aws. Both are Turing; transfer the 2080 Ti's achieved
    # TFLOP/s by the measured speed ratio of the mixed-precision apps on one GPU (calibration rows, same local batch).
    ratio = np.median(amp_step_ratios("rtx", "aws", train=True))
    fits["T4"]["mfu"] = fits["RTX-2080Ti"]["mfu"] * CATALOG["RTX-2080Ti"].bf16_tflops * ratio / CATALOG["T4"].bf16_tflops
    return fits


# Sia applications trained in mixed precision (the artifact's adaptdl/benchmark/models: imagenet and yolov3 use apex
# amp, deepspeech2 apex FP16_Optimizer); bert, cifar10 and ncf run fp32.
AMP_APPS = ("imagenet", "yolov3", "deepspeech2")


def amp_step_ratios(fast: str, slow: str, *, train: bool) -> list[float]:
    """step(fast cluster) / step(slow cluster) on one GPU at the same local batch, for AMP_APPS, one split."""
    out = []
    for app in AMP_APPS:
        steps = {}
        for cluster in (fast, slow):
            pl = pd.read_csv(TRACES / app / f"placements-{cluster}.csv")
            pl = pl[pl["placement"].astype(str) == "1"]
            keep = [held_out(app, "1", b) != train for b in pl["local_bsz"]]
            steps[cluster] = dict(zip(pl["local_bsz"][keep], pl["step_time"][keep], strict=True))
        out += [steps[fast][b] / steps[slow][b] for b in sorted(set(steps[fast]) & set(steps[slow]))]
    return out


def datasheet_catalog() -> dict[str, GPUType]:
    """The catalog as it was: datasheet peaks at one assumed MFU (for fp32 too), nominal links, no overhead."""
    out = dict(CATALOG)
    for name, mfu in DATASHEET_MFU.items():
        out[name] = CATALOG[name].model_copy(update={"mfu": mfu, "fp32_mfu": None, "step_overhead_s": 0.0,
                                                     "intra_link_efficiency": 1.0, "network_efficiency": 1.0})
    return out


def per_job_fitted(rows: pd.DataFrame) -> np.ndarray:
    """Predictions with an MFU fitted per (app, GPU type) on its calibration rows (datasheet links, no overhead)."""
    gpus = datasheet_catalog()
    compute1, rest = predict_parts(rows, gpus)
    out = np.empty(len(rows))
    for _, idx in rows.groupby(["app", "gpu"]).groups.items():
        idx = np.asarray(idx)
        tr = idx[rows["train"].to_numpy()[idx]]
        u = fit_mfu(compute1[tr], rest[tr], rows["measured_s"].to_numpy()[tr])
        out[idx] = compute1[idx] / u + rest[idx]
    return out


def _pairs(rows: pd.DataFrame, pred_col: str, num: tuple[str, str], den: tuple[str, str]) -> dict[str, list[float]]:
    """Held-out speed ratios den_step / num_step at the same key and local batch: measured and predicted."""
    h = rows[~rows["train"] & (rows["app"] == "bert")]
    a = h[(h["cluster"] == num[0]) & (h["key"] == num[1])].set_index("local_bsz")
    b = h[(h["cluster"] == den[0]) & (h["key"] == den[1])].set_index("local_bsz")
    common = sorted(set(a.index) & set(b.index))
    return {
        "local_bsz": [int(x) for x in common],
        "measured": [float(b.loc[x, "measured_s"] / a.loc[x, "measured_s"]) for x in common],
        "predicted": [float(b.loc[x, pred_col] / a.loc[x, pred_col]) for x in common],
    }


def speed_ratios(rows: pd.DataFrame, pred_col: str) -> dict[str, dict]:
    """A100/T4 and 2080Ti/T4 on one GPU, and 8-GPU throughput scaling (8 x step(1) / step(8)) inside one node."""
    out = {}
    for name, fast in (("A100/T4", "dgx-ext"), ("2080Ti/T4", "rtx"), ("V100/T4", "azure")):
        pooled = [_pairs(rows, pred_col, (fast, k), ("aws", k)) for k in ("1", "2", "3", "4")]  # one node each
        out[name] = {f: [x for r in pooled for x in r[f]] for f in ("local_bsz", "measured", "predicted")}
    for cluster in ("rtx", "azure", "dgx-ext"):
        r = _pairs(rows, pred_col, (cluster, "8"), (cluster, "1"))
        out[f"8gpu_scaling/{cluster}"] = {**r, "measured": [8 * x for x in r["measured"]],
                                          "predicted": [8 * x for x in r["predicted"]]}
    return out


def sia_app_t4_hours() -> dict[str, float]:
    """Each Sia application's work in T4-hours (derivation in frenzy_core/traces.py, SIA_APP_GPU_HOURS)."""
    out = {}
    for app, epochs in SIA_MAX_EPOCHS.items():
        curves = {int(Path(f).stem.split("-")[-1]): pd.read_csv(f) for f in glob.glob(str(TRACES / app / "validation-*.csv"))}
        batch = min(curves)  # Sia's init_batch_size
        iterations = float(curves[batch]["iteration"].iloc[epochs - 1])
        pl = pd.read_csv(TRACES / app / "placements-aws.csv")
        one = pl[pl["placement"].astype(str) == "1"].sort_values("local_bsz")
        assert batch <= one["local_bsz"].max(), app  # no gradient accumulation needed on one T4
        step = float(np.interp(batch, one["local_bsz"], one["step_time"]))
        out[app] = iterations * step / 3600
    return out


def _med(x) -> float:
    return round(float(np.median(x)), 4)


def main() -> dict:
    if not TRACES.exists():
        raise SystemExit(f"trace data not found at {TRACES}")
    rows = load_rows()
    measured = rows["measured_s"].to_numpy()
    rows["pred_catalog"] = predict(rows, CATALOG)
    rows["pred_datasheet"] = predict(rows, datasheet_catalog())
    rows["pred_fitted"] = per_job_fitted(rows)
    for col in ("catalog", "datasheet", "fitted"):
        rows[f"err_{col}"] = np.abs(rows[f"pred_{col}"] / measured - 1)
    held = rows[~rows["train"]]

    fits = fit_catalog(rows)
    drift = {f"{g}.{k}": round(abs(v / getattr(CATALOG[g], k) - 1), 4)
             for g, f in fits.items() for k, v in f.items() if (g, k) not in NOT_TAKEN}
    print("Refit on calibration rows vs catalog (gpus.py):")
    for g, f in fits.items():
        print(f"  {g:11} " + "  ".join(f"{k} {v:.4g} (catalog {getattr(CATALOG[g], k):.4g}{' not taken' if (g, k) in NOT_TAKEN else ''})" for k, v in f.items()))

    print("\nHeld-out |predicted / measured - 1|, medians: catalog = values users get; datasheet = the catalog before;"
          " fitted = MFU fitted per (app, GPU type)")
    print(f"{'app':8} {'gpu':11} {'rows':>5} {'held':>5} {'catalog':>8} {'datasheet':>9} {'fitted':>7}")
    by_app_gpu = {}
    for (app, gpu), g in held.groupby(["app", "gpu"]):
        n_all = int(((rows["app"] == app) & (rows["gpu"] == gpu)).sum())
        by_app_gpu[f"{app}/{gpu}"] = {"catalog": _med(g["err_catalog"]), "datasheet": _med(g["err_datasheet"]),
                                      "fitted_per_app_gpu": _med(g["err_fitted"]), "held_out_rows": len(g)}
        print(f"{app:8} {gpu:11} {n_all:5d} {len(g):5d} {g['err_catalog'].median():8.3f} "
              f"{g['err_datasheet'].median():9.3f} {g['err_fitted'].median():7.3f}")

    span = np.where(held["dp"] * held["pp"] == 1, "1 GPU", np.where(held["num_nodes"] == 1, "one node", "multi-node"))
    by_span = {}
    print("\nHeld-out median error by span (which links the step uses):")
    for (app, where), g in held.groupby([held["app"], span]):
        by_span[f"{app}/{where}"] = {"catalog": _med(g["err_catalog"]), "datasheet": _med(g["err_datasheet"]),
                                     "fitted_per_app_gpu": _med(g["err_fitted"]), "held_out_rows": len(g)}
        print(f"  {app:8} {where:10} rows {len(g):4d}  catalog {g['err_catalog'].median():.3f}  "
              f"datasheet {g['err_datasheet'].median():.3f}  fitted {g['err_fitted'].median():.3f}")

    ratios = {k: speed_ratios(rows, f"pred_{k}") for k in ("catalog", "datasheet")}
    print("\nHeld-out speed ratios (bert, same local batch), measured vs predicted:")
    ratio_summary = {}
    for name, r in ratios["catalog"].items():
        d = ratios["datasheet"][name]
        if not r["measured"]:
            continue
        ratio_summary[name] = {"measured": [round(min(r["measured"]), 2), round(max(r["measured"]), 2)],
                               "catalog": [round(min(r["predicted"]), 2), round(max(r["predicted"]), 2)],
                               "datasheet": [round(min(d["predicted"]), 2), round(max(d["predicted"]), 2)],
                               "local_bsz": r["local_bsz"]}
        s = ratio_summary[name]
        print(f"  {name:20} measured {s['measured']}  catalog {s['catalog']}  datasheet {s['datasheet']}  "
              f"(local_bsz {s['local_bsz']})")

    held_ratio = amp_step_ratios("rtx", "aws", train=False)
    t4_ratio_pred = CATALOG["RTX-2080Ti"].achieved_tflops() / CATALOG["T4"].achieved_tflops()
    print(f"\nMixed-precision apps, one GPU, held-out: 2080Ti/T4 speed measured median {1 / np.median(held_ratio):.2f} "
          f"(n={len(held_ratio)}), catalog achieved-TFLOP/s ratio {t4_ratio_pred:.2f}")
    ratio_summary["2080Ti/T4_amp_apps"] = {"measured_median": round(float(1 / np.median(held_ratio)), 2),
                                           "catalog": round(float(t4_ratio_pred), 2), "rows": len(held_ratio)}

    work = sia_app_t4_hours()
    print("\nSia application work, T4-hours (derived from the CSVs vs traces.SIA_APP_GPU_HOURS):")
    for app, h in work.items():
        print(f"  {app:12} {h:9.3f}  table {SIA_APP_GPU_HOURS[app]:9.3f}")

    result = {
        "step_time_median_abs_err_heldout": _med(held["err_catalog"]),
        "step_time_p90_abs_err_heldout": round(float(held["err_catalog"].quantile(0.9)), 4),
        "step_time_median_abs_err_heldout_datasheet": _med(held["err_datasheet"]),
        "step_time_median_abs_err_heldout_fitted_per_app_gpu": _med(held["err_fitted"]),
        "step_time_median_abs_err_heldout_by_app": {a: _med(g["err_catalog"]) for a, g in held.groupby("app")},
        "step_time_median_abs_err_heldout_by_gpu": {a: _med(g["err_catalog"]) for a, g in held.groupby("gpu")},
        "by_app_gpu": by_app_gpu,
        "by_span": by_span,
        "speed_ratios_heldout": ratio_summary,
        "catalog_refit_max_rel_diff": float(np.max(list(drift.values()))),
        "sia_app_t4_hours": {a: round(h, 3) for a, h in work.items()},
        "sia_app_table_max_rel_diff": round(max(abs(SIA_APP_GPU_HOURS[a] / h - 1) for a, h in work.items()), 4),
        "rows_total": len(rows),
        "rows_held_out": len(held),
        "split": "crc32(app|placement|local_bsz) odd = held out",
        "assumptions": {"bert": f"bert-base seq {BERT_SEQ} {BERT_PRECISION}",
                        "gpt_pmp": f"gpt3-2.7b seq {GPT_SEQ} {GPT_PRECISION} m={PMP_MICRO_BATCHES}"},
    }
    if math.isnan(result["step_time_median_abs_err_heldout"]):
        raise SystemExit("no held-out rows")
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
