"""bench/data/published_throughput.jsonl: the bookkeeping every corrected or packed row must carry, and that the
accuracy bench's row -> spec mapping passes the packed fields on (a dropped field would score the row unpacked)."""

import json

import pytest
from bench_support import BENCH, load_bench

from frenzy_core.perf import attention_span

ROWS = [json.loads(line) for line in (BENCH / "data" / "published_throughput.jsonl").read_text().splitlines()
        if line.strip()]


def _bench():
    return load_bench("step_time_accuracy")


def test_a_corrected_mapping_keeps_its_first_fields_and_says_why():
    for row in ROWS:
        first = row.get("first_mapping")
        if not first:
            continue
        assert row.get("mapping_note"), row["id"]
        assert set(first) <= set(row), row["id"]  # only fields the row has
        assert any(row[k] != v for k, v in first.items()), row["id"]  # something did change


@pytest.mark.parametrize("row", [r for r in ROWS if r.get("packed")], ids=lambda r: r["id"])
def test_packed_rows_reach_the_model_as_packed_documents(row):
    bench = _bench()
    assert 0 < row["packed_doc_tokens"] <= row["seq_len"]
    training, _ = bench.build_training(row, bench.build_model(row))
    assert training.packed and training.packed_doc_tokens == row["packed_doc_tokens"]
    # megatron (TE's THD kernels) attends within each document: the span is the document, not the 4,096-token row
    assert attention_span(training) == row["packed_doc_tokens"] < row["seq_len"]
    unpacked, _ = bench.build_training({**row, **row["first_mapping"]}, bench.build_model(row))
    assert attention_span(unpacked) == row["seq_len"]
