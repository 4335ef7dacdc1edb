"""The litgpt recipe against fake-tensor traces of LitGPT's own code at 8641822b and its finetune/lora.py step
(tests/data/litgpt_traces.jsonl, written by bench/litgpt_traces.py; no LitGPT needed here). Issue 21's target for
code traces, on the rows held out by the fixed rule (every third run): median |error| <= 3%, no under-prediction
worse than -5%; every row within -1% / +5% (the traces run CUDA's dropout, hf_tracer.cuda_semantics: with CPU's
bf16 noise mask the two all-linear rows read -4%; phi-1.5's partial rotary and parallel residual, not modelled,
are the +2.5% to +4.6% ones)."""

import json
import statistics
from pathlib import Path

import pytest

from frenzy_core.memory import predict_memory
from frenzy_core.memory.pools import NO_OVERHEAD
from frenzy_core.models import ModelSpec
from frenzy_core.training import TrainingSpec

ROWS = [json.loads(line) for line in (Path(__file__).parent / "data" / "litgpt_traces.jsonl").read_text().splitlines()]


def error(row) -> float:
    got = predict_memory(ModelSpec(**row["model_spec"]), TrainingSpec(**row["training"]), overhead=NO_OVERHEAD)
    return got.allocated_bytes / row["peak_bytes"] - 1


def test_the_fixture_is_litgpt_lora_at_the_read_commit_with_its_split_rule():
    assert all(r["training"]["framework"] == "litgpt" and r["training"]["lora_rank"] > 0 for r in ROWS)
    assert {r["litgpt_commit"] for r in ROWS} == {"8641822b3249bb94f068c254aa5d13decbc9f0a0"}
    assert [r["split"] for r in ROWS] == ["heldout" if i % 3 == 2 else "calibration" for i in range(len(ROWS))]
    # LitGPT's head is chunked in 128-token pieces: the recipe is given that many loss chunks
    assert all(r["training"]["loss_chunks"] == -(-r["training"]["seq_len"] // 128) for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_each_traced_peak_is_matched(row):
    assert -0.01 <= error(row) <= 0.05


def test_held_out_traces_meet_the_issue_target():
    held = [error(r) for r in ROWS if r["split"] == "heldout"]
    assert len(held) == 3
    assert statistics.median(abs(e) for e in held) <= 0.03 and min(held) >= -0.05
