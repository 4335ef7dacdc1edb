"""Trace loaders: real files (when ../shared/traces exists), bundled samples, malformed fixtures, synthetic traces."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from frenzy_core.errors import SpecError
from frenzy_core.traces import (
    LOADERS,
    SIA_APP_GPU_HOURS,
    RowProblem,
    Trace,
    bundled_traces,
    load_alibaba2020,
    load_alibaba2023,
    load_gavel,
    load_helios,
    load_native,
    load_philly,
    load_sia,
    load_trace,
    offered_load,
    synthetic_trace,
)

DATA = Path(__file__).resolve().parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared trace data not found at {SHARED}")


def csv_data_rows(path: Path, delimiter: str = ",", header: bool = True) -> int:
    """Independent row count with the csv module (non-blank records, minus the header)."""
    with open(path, newline="") as f:
        n = sum(1 for rec in csv.reader(f, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t"
                                        else csv.QUOTE_MINIMAL) if rec)
    return n - 1 if header else n


def assert_ordered(trace: Trace) -> None:
    """Arrivals start at 0 and never decrease; equal arrivals are ordered by job id; ids are unique."""
    arrivals = [j.arrival_s for j in trace.jobs]
    assert arrivals[0] == 0.0
    keys = [(j.arrival_s, j.job_id) for j in trace.jobs]
    assert keys == sorted(keys)
    assert len({j.job_id for j in trace.jobs}) == len(trace.jobs)
    assert all(j.num_gpus >= 1 and j.duration_s >= 0 for j in trace.jobs)


# ---- real data ------------------------------------------------------------------------------------------------------


@needs_shared
def test_full_philly_loads_every_row():
    # load time is a benchmark figure (bench/trace_load.py), not a test assertion
    path = SHARED / "sia-sosp23" / "traces" / "philly.csv"
    trace = load_philly(path)
    assert csv_data_rows(path) == 82_247
    assert trace.kept == 82_247 and trace.skipped == ()
    assert_ordered(trace)
    # 1:76627 GPU counts published in the Sia README
    assert sum(j.num_gpus == 1 for j in trace.jobs) == 76_627


@needs_shared
@pytest.mark.parametrize("folder", ["philly", "saturn", "newtrace"])
def test_every_sia_workload_loads(folder):
    for path in sorted((SHARED / "sia-sosp23" / "workloads" / folder).glob("workload-*.csv")):
        trace = load_sia(path)
        assert trace.kept == csv_data_rows(path), path
        assert_ordered(trace)


@needs_shared
def test_gavel_msr_traces_load_with_durations():
    paths = sorted((SHARED / "gavel-osdi20" / "traces-msr-seed0").glob("*.trace"))
    total = 0
    for path in paths:
        trace = load_gavel(path)
        assert trace.kept == csv_data_rows(path, "\t", header=False) and not trace.skipped
        assert all(j.duration_s > 0 for j in trace.jobs)
        total += trace.kept
    assert total == 15_264  # the README's count


@needs_shared
def test_alibaba2023_pod_list_skips_cpu_and_unscheduled_pods():
    path = SHARED / "alibaba-pai-gpu-v2023" / "openb_pod_list_gpuspec33.csv"
    trace = load_alibaba2023(path)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    cpu = sum(r["num_gpu"] == "0" for r in rows)
    unscheduled = sum(r["num_gpu"] != "0" and r["scheduled_time"] == "" for r in rows)
    assert (cpu, len(rows)) == (1088, 8152)  # the README's counts
    assert trace.kept == len(rows) - cpu - unscheduled
    assert trace.skip_reasons() == {"non-GPU pod (num_gpu == 0)": cpu,
                                    "never scheduled (scheduled_time empty)": unscheduled}
    assert {j.gpu_type for j in trace.jobs} >= {"T4", "P100-16GB", None}


@needs_shared
def test_alibaba2023_multigpu50_file_is_not_the_pod_format():
    with pytest.raises(SpecError, match="scheduled_time"):
        load_alibaba2023(SHARED / "alibaba-pai-gpu-v2023" / "openb_pod_list_multigpu50.csv")


# ---- bundled samples -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(bundled_traces()))
def test_bundled_trace_loads_all_rows(name):
    path, fmt = bundled_traces()[name]
    trace = load_trace(path, fmt)
    expected = csv_data_rows(path, "\t", header=False) if fmt == "gavel" else csv_data_rows(path)
    assert trace.kept == expected and not trace.skipped
    assert_ordered(trace)


def test_bundled_philly_sample_is_a_contiguous_window_of_2000_jobs():
    path, _ = bundled_traces()["philly-2000"]
    trace = load_philly(path)
    assert trace.kept == 2000
    assert trace.jobs[-1].arrival_s < 2 * 86_400  # about 27 h of submissions, not a scatter over 3.5 months


def test_bundled_samples_stay_small():
    total = sum(p.stat().st_size for p in (Path(bundled_traces()["philly-2000"][0]).parent).iterdir())
    assert total < 300_000


def test_sia_duration_is_application_gpu_hours_over_replicas():
    trace = load_sia("name,time,application,num_replicas,batch_size\nimagenet-0,5,imagenet,8,512\n")
    assert trace.jobs[0].duration_s == pytest.approx(147.9 * 3600 / 8)
    assert trace.jobs[0].job_type == "imagenet"
    custom = load_sia("name,time,application,num_replicas,batch_size\nx-0,5,gpt_pmp,4,8\n",
                      app_gpu_hours={"gpt_pmp": 2.0})
    assert custom.jobs[0].duration_s == pytest.approx(1800.0)


@needs_shared
def test_sia_cifar10_work_recomputed_by_hand_from_its_profiles():
    """cifar10's T4-hours: iterations to epoch 100 at batch 128 x one T4's step at local batch 128 (Sia's CSVs)."""
    app = SHARED / "sia-sosp23" / "traces" / "cifar10"
    with open(app / "validation-128.csv") as f:
        iterations = float(list(csv.DictReader(f))[99]["iteration"])  # row of epoch 100 (max_epochs in Sia)
    with open(app / "placements-aws.csv") as f:
        one_t4 = {int(r["local_bsz"]): float(r["step_time"]) for r in csv.DictReader(f) if r["placement"] == "1"}
    assert iterations == 39062
    lo, hi = one_t4[91], one_t4[129]  # the profiled batches either side of 128
    step = lo + (128 - 91) / (129 - 91) * (hi - lo)
    assert step == pytest.approx(0.1031, abs=1e-4)
    t4_hours = iterations * step / 3600
    assert SIA_APP_GPU_HOURS["cifar10"] == pytest.approx(t4_hours, rel=2e-3)
    assert 1.0 < t4_hours < 1.25  # ~5x the 0.217 h the table used to hold


def test_limit_keeps_the_earliest_arrivals():
    path, _ = bundled_traces()["philly-2000"]
    full, first = load_philly(path), load_philly(path, limit=10)
    assert [j.job_id for j in first.jobs] == [j.job_id for j in full.jobs[:10]]


def test_loaders_accept_text_and_file_objects():
    text = "job_id,arrival_s,num_gpus,duration_s\na,5,1,10\n"
    with open(DATA / "native_malformed.csv") as f:
        from_file = load_native(f)
    assert load_native(text).jobs[0].job_id == "a"
    assert from_file.source == "native_malformed.csv" and from_file.kept == 3


# ---- malformed fixtures ----------------------------------------------------------------------------------------------


def test_philly_malformed_rows_are_reported_by_row_and_reason():
    trace = load_philly(DATA / "philly_malformed.csv")
    assert trace.skipped == (
        RowProblem(2, "duration: not a number (got 'abc')"),
        RowProblem(3, "num_gpus: must be > 0 (got '0')"),
        RowProblem(4, "timestamp: unparseable timestamp (got 'not-a-date')"),
        RowProblem(5, "duration: must be >= 0 (got '-5')"),
        RowProblem(6, "duration: missing"),
        RowProblem(7, "expected 5 fields, got 3"),
        RowProblem(9, "num_gpus: not a whole number (got '1.5')"),  # row 8 is a blank line
    )
    assert [j.source_row for j in trace.jobs] == [10, 1]  # 06:13:03 arrives before 07:01:55
    assert trace.summary().startswith("philly_malformed.csv: kept 2 rows, skipped 7 (")


def test_helios_fixture_skips_cpu_jobs_and_bad_rows():
    trace = load_helios(DATA / "helios_cluster_log.csv")
    assert [p.row for p in trace.skipped] == [2, 5, 7]
    assert trace.skipped[0].reason == "non-GPU job (gpu_num == 0)"
    assert [(j.job_id, j.arrival_s, j.num_gpus, j.duration_s) for j in trace.jobs] == [
        ("1003", 0.0, 2, 600.0), ("1001", 10.0, 8, 3600.0), ("1004", 300.0, 1, 30.0), ("1006", 420.0, 16, 36000.0)]


def test_alibaba2020_tasks_are_grouped_into_jobs():
    trace = load_alibaba2020(DATA / "alibaba2020_task_table.csv")
    assert [(p.row, p.reason) for p in trace.skipped] == [
        (2, "non-GPU task (plan_gpu empty or 0)"), (6, "start_time: missing"), (7, "end_time: before start_time")]
    jobs = {j.job_id: j for j in trace.jobs}
    assert set(jobs) == {"j1", "j2", "j3", "j6"}
    assert (jobs["j1"].num_gpus, jobs["j1"].duration_s, jobs["j1"].gpu_type) == (2, 3600.0, "V100-32GB")
    assert (jobs["j3"].num_gpus, jobs["j3"].gpu_type) == (5, None)  # 4 x 100% + 1 x 50%; mixed P100/V100
    assert (jobs["j2"].num_gpus, jobs["j2"].gpu_type) == (1, "T4")  # half a GPU rounds up to one
    assert jobs["j1"].arrival_s == 0.0


def test_alibaba2023_fixture_maps_gpu_specs_and_fractional_pods():
    trace = load_alibaba2023(DATA / "alibaba2023_pods.csv")
    assert [(p.row, p.reason) for p in trace.skipped] == [
        (3, "non-GPU pod (num_gpu == 0)"), (5, "never scheduled (scheduled_time empty)"),
        (6, "num_gpu: must be >= 0 (got '-1')")]
    jobs = {j.job_id: j for j in trace.jobs}
    assert (jobs["pod-b"].num_gpus, jobs["pod-b"].gpu_type, jobs["pod-b"].duration_s) == (1, "T4", 490.0)
    assert jobs["pod-d"].gpu_type is None  # "V100M16|V100M32" is ambiguous


def test_native_fixture_reports_bad_gpu_type_tokens_and_duplicates():
    trace = load_native(DATA / "native_malformed.csv")
    assert [(p.row, p.reason) for p in trace.skipped] == [
        (4, "gpu_type: not in the GPU catalog (got 'K80')"),
        (5, "tokens: must be a positive whole number (got '12.5')"),
        (6, "job_id: duplicate id (got 'j-a')"),
        (7, "num_gpus: not a number (got 'two')")]
    assert [j.job_id for j in trace.jobs] == ["j-a", "j-c", "j-b"]  # tie at t=100 broken by id
    assert (trace.jobs[1].gpu_type, trace.jobs[2].model, trace.jobs[2].tokens) == ("V100-32GB", "llama-7b", 10**9)


def test_gavel_fixture_derives_duration_from_steps_and_throughput():
    trace = load_gavel(DATA / "gavel_malformed.trace", throughputs={
        "ResNet-50 (batch size 64)": {1: 4.0}, "LM (batch size 20)": {1: 10.0, 2: 25.0}, "A3C": {1: 5.0}})
    assert [(p.row, p.reason.split(" (")[0]) for p in trace.skipped] == [
        (3, "job_type: no Gavel throughput for it"), (4, "arrival_time: not a number"), (6, "expected 7 fields, got 4")]
    by_row = {j.source_row: j for j in trace.jobs}
    assert by_row[1].duration_s == 250.0  # 1000 steps at 4 steps/s
    assert by_row[2].duration_s == 20.0  # measured 2-GPU throughput
    assert by_row[5].duration_s == 30.0  # A3C at 2 GPUs: linear from 1 GPU, 300 / (2 * 5)


def test_sia_fixture_reports_unknown_application():
    trace = load_sia(DATA / "sia_malformed.csv")
    assert [p.row for p in trace.skipped] == [2, 4, 5]
    assert trace.skipped[1].reason.startswith("application: no typical GPU-hours known (got 'gpt_pmp')")


@pytest.mark.parametrize("fmt", sorted(LOADERS))
def test_wrong_header_raises_spec_error_naming_the_format(fmt):
    with pytest.raises(SpecError, match=fmt) as err:
        load_trace(DATA / "wrong_header.csv", fmt)
    assert "expected" in str(err.value)


@pytest.mark.parametrize("fmt", sorted(LOADERS))
def test_empty_file_raises_spec_error(fmt):
    with pytest.raises(SpecError, match="empty"):
        load_trace(DATA / "empty.csv", fmt)


def test_wrong_header_message_lists_missing_columns():
    with pytest.raises(SpecError, match="missing column\\(s\\) timestamp, duration, num_gpus"):
        load_philly(DATA / "wrong_header.csv")


def test_unknown_format_and_missing_file_raise_spec_error():
    with pytest.raises(SpecError, match="unknown trace format"):
        load_trace(DATA / "empty.csv", "slurm")
    with pytest.raises(SpecError, match="file not found"):
        load_philly(DATA / "does-not-exist.csv")


# ---- synthetic -------------------------------------------------------------------------------------------------------


def test_synthetic_trace_is_deterministic_by_seed():
    a, b, c = (synthetic_trace(200, 0.7, 64, seed=s) for s in (3, 3, 4))
    assert a == b
    assert a.jobs != c.jobs


@pytest.mark.parametrize("load", [0.3, 0.9, 1.5])
def test_synthetic_trace_hits_the_target_load(load):
    trace = synthetic_trace(500, load, 128, seed=0)
    assert offered_load(trace, 128) == pytest.approx(load, rel=1e-6)
    assert_ordered(trace)
    assert max(j.num_gpus for j in trace.jobs) <= 128


def test_synthetic_trace_respects_custom_distributions():
    trace = synthetic_trace(300, 0.5, 8, seed=1, duration_dist=(600.0, 0.0), gpu_count_dist={2: 1, 16: 1})
    assert {j.num_gpus for j in trace.jobs} == {2}  # 16 > cluster size is dropped
    assert all(j.duration_s == pytest.approx(600.0) for j in trace.jobs)


def test_synthetic_trace_rejects_bad_parameters():
    with pytest.raises(SpecError, match="load"):
        synthetic_trace(10, 0, 8)
    with pytest.raises(SpecError, match="gpu_count_dist"):
        synthetic_trace(10, 0.5, 2, gpu_count_dist={4: 1})


def test_head_keeps_the_first_jobs_by_arrival():
    trace = synthetic_trace(50, 0.5, 16, seed=2)
    assert trace.head(5).jobs == trace.jobs[:5] and trace.head(5).source == trace.source


# ---- issue 20: bad rows are counted skips, never a traceback; nothing loaded is lost ---------------------------------

PHILLY_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
ALIBABA_OK = "j0,worker,1,Terminated,1590000000,1590003600,600,29.3,100,T4\n"


@pytest.mark.parametrize(("inst", "plan"), [
    ("1", "1e30"),  # 1e30 % of a GPU
    ("1" + "0" * 40, "100"),  # 10**40 instances, as text
    ("1000000000000000", "1000000000000000"),  # each under MAX_TRACE_NUMBER, the product 1e28 GPUs
    ("2097152", "100"),  # 2**21 GPUs: every number plausible, the job over the limit
])
def test_alibaba2020_task_over_max_job_gpus_is_a_counted_skip(inst, plan):
    from frenzy_core.limits import MAX_JOB_GPUS

    trace = load_alibaba2020(f"j1,worker,{inst},Terminated,1590000000,1590003600,600,29.3,{plan},V100M32\n"
                             + ALIBABA_OK)
    assert [j.job_id for j in trace.jobs] == ["j0"]
    assert [p.row for p in trace.skipped] == [1]
    assert f"{MAX_JOB_GPUS:,}" in trace.skipped[0].reason and "MAX_JOB_GPUS" in trace.skipped[0].reason
    assert len(trace.skipped[0].reason) < 200  # the user's value is cut, never printed whole


def test_alibaba2020_job_whose_tasks_add_up_over_max_job_gpus_is_skipped_at_its_first_row():
    half = 2**19 + 1  # two tasks of 524,289 GPUs: each fine, the job 1,048,578 > MAX_JOB_GPUS
    rows = "".join(f"big,w{k},{half},Terminated,1590000000,1590003600,600,29.3,100,T4\n" for k in range(2))
    trace = load_alibaba2020(ALIBABA_OK + rows)
    assert [j.job_id for j in trace.jobs] == ["j0"]
    assert [p.row for p in trace.skipped] == [2] and "MAX_JOB_GPUS" in trace.skipped[0].reason
    assert trace.skip_reasons() == {trace.skipped[0].reason.split(" (got ")[0]: 1}


@pytest.mark.parametrize("stamp", ["9999-10-01 00:00:00", "9999-12-31 23:59:59+00:00", "0001-01-01 00:00:00",
                                   "1969-12-31 23:59:59", "2101-01-01 00:00:00", "not-a-date",
                                   "2017-13-45 99:00:00", "2017-10-01 00:00:00+99:00"])
def test_philly_timestamp_out_of_range_or_garbage_is_a_counted_skip(stamp):
    trace = load_philly(PHILLY_HEAD + f"{stamp},60,1,60,vc\n2017-10-01 00:00:00,60,1,60,vc\n")
    assert trace.kept == 1 and [p.row for p in trace.skipped] == [1]
    assert trace.skipped[0].reason.startswith("timestamp: ")
    assert sum(trace.skip_reasons().values()) == 1


def test_philly_timestamps_outside_the_trace_years_name_the_range():
    from frenzy_core.limits import TRACE_TIMESTAMP_RANGE

    trace = load_philly(PHILLY_HEAD + "9999-10-01 00:00:00,60,1,60,vc\n1969-01-01 00:00:00,60,1,60,vc\n"
                        "2017-10-01 00:00:00,60,1,60,vc\n")
    lo, hi = TRACE_TIMESTAMP_RANGE
    assert [p.reason.split(" (got ")[0] for p in trace.skipped] == [f"timestamp: outside {lo} to {hi}"] * 2


def test_an_unterminated_quote_is_reported_and_the_next_row_kept():
    trace = load_philly(PHILLY_HEAD + "2017-10-01 00:00:00,60,1,60,vc\n"
                        '2017-10-01 00:00:01,"60,1,60,vc\n'
                        "2017-10-01 00:00:02,60,2,120,vc\n"
                        '"2017-10-01 00:00:03",60,4,240,"vc"\n')  # quoted fields that close are fine
    assert [p.row for p in trace.skipped] == [2] and "quote" in trace.skipped[0].reason
    assert [(j.source_row, j.num_gpus) for j in trace.jobs] == [(1, 1), (3, 2), (4, 4)]


def test_an_unterminated_quote_in_a_native_row_does_not_swallow_the_next_id():
    trace = load_native('job_id,arrival_s,num_gpus,duration_s\n"a,0,1,60\nb,1,1,60\n')
    assert [j.job_id for j in trace.jobs] == ["b"] and trace.skipped[0].row == 1


def test_a_row_that_is_not_utf8_is_skipped_and_the_rest_kept():
    import io

    raw = (PHILLY_HEAD + "2017-10-01 00:00:00,60,1,60,vc\n").encode() + b"2017-10-01 00:00:01,60,1,60,v\xff\n" + \
        b"2017-10-01 00:00:02,60,2,120,vc\n"
    trace = load_philly(io.BytesIO(raw))
    assert [p.row for p in trace.skipped] == [2] and "UTF-8" in trace.skipped[0].reason
    assert [j.source_row for j in trace.jobs] == [1, 3]


@pytest.mark.parametrize("name", ["philly_malformed.csv", "native_malformed.csv", "alibaba2020_task_table.csv",
                                  "helios_cluster_log.csv", "gavel_malformed.trace"])
def test_rows_are_read_the_same_whatever_the_block_size_and_source(name, monkeypatch):
    """The loader streams the file in blocks of lines: block edges must not move row numbers or lose rows."""
    import io

    import frenzy_core.traces as traces

    fmt = {"philly_malformed.csv": "philly", "native_malformed.csv": "native", "helios_cluster_log.csv": "helios",
           "alibaba2020_task_table.csv": "alibaba2020", "gavel_malformed.trace": "gavel"}[name]
    opts = {"throughputs": {"ResNet-50 (batch size 64)": {1: 4.0}, "LM (batch size 20)": {1: 10.0}, "A3C": {1: 5.0}}
            } if fmt == "gavel" else {}
    path = DATA / name
    whole = load_trace(path, fmt, **opts)
    text = path.read_text()
    for block in (1, 7, 64):
        monkeypatch.setattr(traces, "_BLOCK_CHARS", block)
        for source in (path, text, io.StringIO(text), io.BytesIO(text.encode()),
                       io.BytesIO(text.replace("\n", "\r\n").encode()), text.replace("\n", "\r")):
            got = load_trace(source, fmt, **opts)
            assert (got.jobs, got.skipped) == (whole.jobs, whole.skipped), (block, type(source))


def test_a_loaded_trace_holds_its_jobs_as_columns_that_read_as_trace_jobs():
    import pickle

    from frenzy_core.traces import TraceJob, TraceJobs

    trace = load_philly(bundled_traces()["philly-2000"][0])
    jobs = trace.jobs
    assert isinstance(jobs, TraceJobs) and len(jobs) == 2000
    as_tuple = tuple(jobs)
    assert all(type(j) is TraceJob for j in as_tuple) and jobs == as_tuple and as_tuple == jobs
    assert jobs[0] == as_tuple[0] and jobs[-1] == as_tuple[-1] and jobs[10:20] == as_tuple[10:20]
    assert repr(jobs) == repr(as_tuple) and hash(jobs) == hash(as_tuple)
    assert pickle.loads(pickle.dumps(trace)) == trace
    assert isinstance(jobs[0].num_gpus, int) and isinstance(jobs[0].arrival_s, float)
    assert trace.head(5) == Trace(as_tuple[:5], trace.source, trace.format, trace.skipped)
    with pytest.raises(IndexError):
        jobs[2000]


def test_more_rows_than_the_limit_is_an_error_before_the_rest_is_read(monkeypatch):
    import frenzy_core.traces as traces

    monkeypatch.setattr(traces, "MAX_TRACE_ROWS", 3)
    text = PHILLY_HEAD + "".join(f"2017-10-01 00:00:0{k},60,1,60,vc\n" for k in range(4))
    assert load_philly(PHILLY_HEAD + "2017-10-01 00:00:00,60,1,60,vc\n" * 3).kept == 3
    with pytest.raises(SpecError, match="more than 3 rows"):
        load_philly(text)


def test_an_open_file_over_the_size_limit_is_refused(monkeypatch):
    import io

    import frenzy_core.traces as traces

    monkeypatch.setattr(traces, "MAX_TRACE_FILE_BYTES", 100)
    monkeypatch.setattr(traces, "_BLOCK_CHARS", 16)
    with pytest.raises(SpecError, match="100-byte limit"):
        load_philly(io.BytesIO((PHILLY_HEAD + "2017-10-01 00:00:00,60,1,60,vc\n" * 5).encode()))


def test_a_binary_file_is_refused_as_not_text(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"PK\x03\x04\x00\xff\xfe" * 100)
    with pytest.raises(SpecError, match="UTF-8"):
        load_philly(path)


def test_a_directory_or_an_unreadable_path_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="is a folder"):
        load_philly(tmp_path)
    with pytest.raises(SpecError):
        load_philly("bad\x00name.csv")


def test_skipped_rows_are_columns_that_read_as_row_problems():
    import pickle
    from collections import Counter

    from frenzy_core.traces import RowProblems

    trace = load_philly(DATA / "philly_malformed.csv")
    skipped = trace.skipped
    assert isinstance(skipped, RowProblems) and skipped == tuple(skipped) and tuple(skipped) == skipped
    assert skipped[1:3] == tuple(skipped)[1:3] and skipped[-1].row == 9
    assert trace.skip_reasons() == dict(Counter(p.reason.split(" (got ")[0] for p in tuple(skipped)))
    assert list(trace.skip_reasons())[0] == "duration: not a number"  # first-seen order, as before
    assert pickle.loads(pickle.dumps(trace)) == trace and repr(skipped) == repr(tuple(skipped))


def test_file_ids_sort_as_python_sorts_them_on_equal_arrivals():
    ids = ["é", "b", "a", "\U0001f600", "B", "a0"]
    trace = load_native("job_id,arrival_s,num_gpus,duration_s\n" + "".join(f"{i},5,1,60\n" for i in ids))
    assert [j.job_id for j in trace.jobs] == sorted(ids)


# --- boundaries the mutation run of 2026-12-02 found untested -----------------------------------------------------
def test_an_over_long_field_names_its_own_line(tmp_path):
    """The line number in the message is the file's (header = line 1), also for a row deep in a block."""
    from frenzy_core.limits import MAX_FIELD_CHARS

    rows = (DATA / "golden_trace.csv").read_text().splitlines()
    rows[4] = "g03,10,1," + "9" * (MAX_FIELD_CHARS + 5)
    path = tmp_path / "long.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(SpecError, match=r"line 5: a field of over 4,096 characters"):
        load_trace(path, "native")


def test_limit_zero_is_valid_and_negative_is_refused():
    from frenzy_core.traces import _check_limit

    _check_limit(0)  # non-negative: 0 is allowed
    _check_limit(None)
    with pytest.raises(SpecError, match="non-negative"):
        _check_limit(-1)


def test_alibaba2020_task_ending_when_it_starts_is_kept():
    """end_time == start_time is a zero-length task, not one that ends before it starts."""
    trace = load_alibaba2020("z,worker,1,Terminated,1590000000,1590000000,600,29.3,100,T4\n" + ALIBABA_OK)
    assert "z" in [j.job_id for j in trace.jobs] and not trace.skipped


def test_synthetic_trace_keeps_one_gpu_jobs():
    from frenzy_core.traces import synthetic_trace

    trace = synthetic_trace(20, 0.5, 8, seed=1, gpu_count_dist={1: 1.0})
    assert len(trace.jobs) == 20 and {j.num_gpus for j in trace.jobs} == {1}
