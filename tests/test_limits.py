"""Hostile input: every case that once hung, exhausted memory, overflowed or printed a traceback (issue 13).

Each test feeds the input a hostile user gave and asserts the clear refusal: a SpecError (exit 2 at the CLI, one line
naming the field and the limit), never a hang, a traceback or a plausible number.
"""

from __future__ import annotations

import json
import math

import pytest

from frenzy_core.cli import main
from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.limits import MAX_NODES, bounded_int, divisors, finite_float, load_json, load_yaml, short_repr
from frenzy_core.models import ModelSpec, parse_hf_config_text
from frenzy_core.traces import load_native, load_philly
from frenzy_core.training import Parallelism, TrainingSpec, check_parallelism


def cli(capsys, tmp_path, *argv, files: dict[str, str] | None = None):
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    argv = [a.replace("@", str(tmp_path) + "/") for a in argv]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


# --- files -----------------------------------------------------------------------------------------------------------
ALIAS_BOMB = """\
a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
nodes:
  - {name: n, gpu_type: T4, num_gpus: *e}
"""


def test_yaml_alias_bomb_is_refused_before_expansion():
    with pytest.raises(SpecError, match="aliases"):
        parse_cluster_yaml(ALIAS_BOMB, "bomb.yaml")


def test_alias_bomb_at_the_cli_is_one_line_exit_2(capsys, tmp_path):
    code, out, err = cli(capsys, tmp_path, "plans", "--model", "gpt2", "--cluster", "@bomb.yaml", "--global-batch",
                         "8", files={"bomb.yaml": ALIAS_BOMB})
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "aliases" in err and len(err) < 300


def test_node_count_is_checked_before_nodes_are_expanded():
    with pytest.raises(SpecError, match=f"{MAX_NODES:,}"):
        parse_cluster_yaml("nodes:\n  - {gpu_type: T4, num_gpus: 4, count: 100000000}\n")


@pytest.mark.parametrize("gpus", [10**12, 2**63, 2**64 + 1, 0, -4])
def test_gpus_per_node_are_bounded(gpus):
    with pytest.raises(SpecError, match="num_gpus"):
        parse_cluster_yaml(f"nodes:\n  - {{gpu_type: T4, num_gpus: {gpus}}}\n")


def test_a_10000_node_cluster_still_loads():
    cluster = parse_cluster_yaml("nodes:\n  - {gpu_type: H100-80GB, num_gpus: 8, count: 10000}\n")
    assert cluster.total_gpus == 80_000


@pytest.mark.parametrize("field", ["memory_gib", "bf16_tflops", "intra_link_gbyte_s", "price_per_hour_usd"])
@pytest.mark.parametrize("bad", [".nan", ".inf", "-.inf"])
def test_nan_and_inf_never_pass_the_positive_checks(field, bad):
    from frenzy_core.gpus import CATALOG

    base = {k: v for k, v in CATALOG["T4"].model_dump().items() if not isinstance(v, (dict, list))}
    assert field in base
    fields = "{" + ", ".join(f"{k}: {json.dumps(v) if k != field else bad}" for k, v in base.items()
                             if k != "name") + "}"
    text = f"gpu_types:\n  - {{name: X, {fields[1:-1]}}}\nnodes:\n  - {{gpu_type: X, num_gpus: 1}}\n"
    with pytest.raises(SpecError, match=field):
        parse_cluster_yaml(text)


def test_nan_network_link_is_refused():
    with pytest.raises(SpecError, match="network_gbit_s"):
        parse_cluster_yaml("nodes:\n  - {gpu_type: T4, num_gpus: 1, network_gbit_s: .nan}\n")


def test_a_spec_file_over_the_size_limit_is_refused_unparsed():
    with pytest.raises(SpecError, match="byte limit"):
        load_yaml("# " + "x" * (5 * 1024**2), "cluster")


def test_deeply_nested_config_json_is_an_error_not_a_crash(capsys, tmp_path):
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(SpecError, match="nested too deeply"):
        parse_hf_config_text(deep)
    code, _, err = cli(capsys, tmp_path, "memory", "--config", "@config.json", files={"config.json": deep})
    assert code == 2 and "nested" in err


def test_error_messages_never_repr_an_unbounded_value():
    huge = "y" * 1_000_000
    with pytest.raises(SpecError) as err:
        parse_cluster_yaml(f"nodes:\n  - {{name: n, gpu_type: '{huge}', num_gpus: 1}}\n")
    assert len(str(err.value)) < 2000
    assert short_repr(list(range(10**5))) == "a list of 100000 items"


# --- models, training, splits -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("field,value", [("num_layers", 10**12), ("hidden_size", 2**40), ("vocab_size", 10**20),
                                         ("num_heads", 2**63)])
def test_absurd_model_shapes_are_refused(field, value):
    fields = dict(name="m", vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4)
    fields[field] = value
    if field == "num_heads":
        fields["hidden_size"] = 64
    with pytest.raises(ValueError, match=field):
        ModelSpec(**fields)


@pytest.mark.parametrize("field", ["seq_len", "global_batch", "micro_batch"])
def test_training_sizes_are_bounded(field):
    fields = {"seq_len": 1024, "global_batch": 2**20, "micro_batch": 1, field: 2**40}
    if field == "micro_batch":
        fields["global_batch"] = 2**40  # micro_batch <= global_batch: the global batch is refused first
    with pytest.raises(ValueError, match="global_batch" if field == "micro_batch" else field):
        TrainingSpec(**fields)


@pytest.mark.parametrize("field,limit", [("lora_rank", 1 << 20), ("loss_chunks", 1 << 24), ("recompute_every", 4096)])
def test_adapter_rank_loss_chunks_and_checkpoint_stride_are_bounded(field, limit):
    # lora_rank 10^30 once wrapped int64 and predicted 1 GiB for a 7B model; each is refused above its limit
    TrainingSpec(**{field: limit})
    with pytest.raises(ValueError, match=f"{field} must be at most {limit:,}"):
        TrainingSpec(**{field: limit + 1})
    with pytest.raises(ValueError, match=field):
        TrainingSpec(**{field: 10**30})


def test_a_split_beyond_any_cluster_is_refused(tiny_model):
    with pytest.raises(SpecError, match="dp"):
        check_parallelism(tiny_model, TrainingSpec(seq_len=64, global_batch=8), Parallelism(dp=2**70))


@pytest.mark.parametrize("flag", ["--micro-batch", "--dp", "--tp", "--global-batch", "--seq-len"])
def test_huge_integer_flags_exit_2_without_traceback(capsys, tmp_path, flag):
    code, out, err = cli(capsys, tmp_path, "memory", "--model", "gpt2", flag, str(10**30))
    assert code == 2 and out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_huge_seed_count_exits_2(capsys, tmp_path):
    code, _, err = cli(capsys, tmp_path, "simulate", "--trace", "@t.csv", "--trace-format", "native", "--cluster",
                       "@c.yaml", "--seeds", "1000000",
                       files={"t.csv": "job_id,arrival_s,num_gpus,duration_s\na,0,1,60\n",
                              "c.yaml": "nodes:\n  - {gpu_type: A100-80GB, num_gpus: 8}\n"})
    assert code == 2 and "seeds" in err and "1,000" in err


def test_a_bad_flag_is_one_line(capsys, tmp_path):
    code, out, err = cli(capsys, tmp_path, "memory", "--micro-batch", "lots")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--micro-batch" in err


def test_overflowing_activation_sizes_never_give_a_small_or_negative_peak(capsys, tmp_path):
    """gpt2 at s = 1024 x b = 16M samples per micro-batch: either refused or an astronomically large peak."""
    code, out, err = cli(capsys, tmp_path, "memory", "--model", "gpt2", "--micro-batch", str(2**24),
                         "--global-batch", str(2**24), "--json")
    if code == 0:
        total = json.loads(out)["total_bytes"]
        # the logits alone are s x b x V x 2 bytes = 1024 x 2^24 x 50257 x 2 ~ 1.7e18 bytes
        assert total > 1024 * 2**24 * 50257 * 2
    else:
        assert code == 2 and "Traceback" not in err


# --- enumeration is O(sqrt n) -----------------------------------------------------------------------------------------
def test_divisors_of_a_large_number_come_from_its_factorisation():
    # 10^12 = 2^12 5^12: (12 + 1)^2 = 169 divisors, every one of the form 2^i 5^j
    got = divisors(10**12)
    assert len(got) == 169 and got == sorted(2**i * 5**j for i in range(13) for j in range(13))
    assert divisors(2**31 - 1) == [1, 2**31 - 1]  # a Mersenne prime: a linear search would take minutes


def test_plans_refuse_a_billion_sample_batch(capsys, tmp_path):
    code, _, err = cli(capsys, tmp_path, "plans", "--model", "gpt2", "--cluster", "sample_clusters/sia-64.yaml",
                       "--global-batch", "1000000000")
    assert code == 2 and "global_batch" in err


# --- traces ------------------------------------------------------------------------------------------------------------
NATIVE = "job_id,arrival_s,num_gpus,duration_s\n"


def test_a_trace_row_of_10_18_gpus_is_skipped_with_its_row_number():
    trace = load_native(NATIVE + "a,0,1000000000000000000,60\nb,1,1,60\n")
    assert [j.job_id for j in trace.jobs] == ["b"]
    assert trace.skipped[0].row == 1 and "num_gpus" in trace.skipped[0].reason


def test_duplicate_header_columns_are_refused():
    with pytest.raises(SpecError, match="appears twice"):
        load_native("job_id,arrival_s,num_gpus,duration_s,num_gpus\na,0,1,60,2\n")


def test_a_csv_field_over_the_csv_module_limit_is_an_error_with_its_line():
    with pytest.raises(SpecError, match="line 2"):
        load_native(NATIVE + "a" * 200_000 + ",0,1,60\n")


PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def test_mixed_time_zones_are_read_row_by_row():
    trace = load_philly(PHILLY + "2017-10-01 00:00:00+00:00,60,1,60,vc\n2017-10-01 02:00:00+01:00,60,1,60,vc\n")
    assert [j.arrival_s for j in trace.jobs] == [0.0, 3600.0]  # 02:00+01:00 is 01:00 UTC


def test_out_of_range_timestamps_are_skipped_not_a_crash():
    trace = load_philly(PHILLY + "99999-10-01 00:00:00,60,1,60,vc\n2017-10-01 00:00:00,60,1,60,vc\n")
    assert trace.kept == 1 and trace.skipped[0].row == 1 and "timestamp" in trace.skipped[0].reason


def test_simulate_json_is_strict_and_carries_skipped_rows(capsys, tmp_path):
    code, out, _ = cli(capsys, tmp_path, "simulate", "--trace", "@t.csv", "--trace-format", "native", "--cluster",
                       "@c.yaml", "--policy", "fcfs", "--json",
                       files={"t.csv": NATIVE + "a,0,1,60\nb,x,1,60\nc,5,-1,60\n",
                              "c.yaml": "nodes:\n  - {gpu_type: A100-80GB, num_gpus: 8}\n"})
    assert code == 0
    summary = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert summary["trace"]["skipped"] == 2
    assert [r["row"] for r in summary["trace"]["skipped_rows"]] == [2, 3]


def test_simulate_text_report_names_the_first_skipped_rows(capsys, tmp_path):
    code, out, _ = cli(capsys, tmp_path, "simulate", "--trace", "@t.csv", "--trace-format", "native",
                       "--cluster", "@c.yaml", "--policy", "fcfs",
                       files={"t.csv": NATIVE + "a,0,1,60\nb,x,1,60\n",
                              "c.yaml": "nodes:\n  - {gpu_type: A100-80GB, num_gpus: 8}\n"})
    assert code == 0 and "skipped row 2: arrival_s" in out


def test_a_named_model_outside_the_zoo_is_refused_not_replaced(capsys, tmp_path):
    code, _, err = cli(capsys, tmp_path, "simulate", "--trace", "@t.csv", "--trace-format", "native", "--cluster",
                       "@c.yaml", "--policy", "fcfs",
                       files={"t.csv": "job_id,arrival_s,num_gpus,duration_s,model\na,0,1,60,gpt-5\n",
                              "c.yaml": "nodes:\n  - {gpu_type: A100-80GB, num_gpus: 8}\n"})
    assert code == 2 and "gpt-5" in err and "zoo" in err


def test_substitutions_and_oversized_jobs_are_counted_in_the_summary(capsys, tmp_path):
    code, out, _ = cli(capsys, tmp_path, "simulate", "--trace", "@t.csv", "--trace-format", "native", "--cluster",
                       "@c.yaml", "--policy", "fcfs", "--json",
                       files={"t.csv": "job_id,arrival_s,num_gpus,duration_s,model\n"
                                       "a,0,1,60,qwen2.5-72b\nb,0,100000,60,\n",
                              "c.yaml": "nodes:\n  - {gpu_type: A100-80GB, num_gpus: 8, count: 10}\n"})
    assert code == 0
    summary = json.loads(out)
    assert summary["model_fallbacks"] == 0  # a model the trace names is never shrunk ...
    assert summary["rejected_no_fit"] == 1  # ... a 72B model does not train on one 80 GB GPU: rejected, counted
    assert summary["oversized_jobs"] == 1  # 100,000 GPUs asked of an 80-GPU cluster


def test_a_cluster_too_small_for_any_model_is_a_clear_error(capsys, tmp_path):
    code, _, err = cli(capsys, tmp_path, "simulate", "--trace", "@t.csv", "--trace-format", "native", "--cluster",
                       "@c.yaml", "--policy", "fcfs",
                       files={"t.csv": NATIVE + "a,0,1,60\n",
                              "c.yaml": "gpu_types:\n  - {name: Tiny, memory_gib: 0.5, bf16_tflops: 10, "
                                        "fp32_tflops: 1, memory_bandwidth_gbyte_s: 100, intra_link: pcie, "
                                        "intra_link_gbyte_s: 16, price_per_hour_usd: 0.1, source: test}\n"
                                        "nodes:\n  - {gpu_type: Tiny, num_gpus: 1}\n"})
    assert code == 2 and "Traceback" not in err


# --- the helpers themselves ----------------------------------------------------------------------------------------
def test_bounded_int_and_finite_float():
    assert bounded_int(4.0, "x", 1, 8) == 4
    for bad in (True, "4", 4.5, None):
        with pytest.raises(SpecError):
            bounded_int(bad, "x", 1, 8)
    assert finite_float("2.5", "x") == 2.5
    for bad in (math.nan, math.inf, "nan", "1e999"):
        with pytest.raises(SpecError, match="finite|number"):
            finite_float(bad, "x")
    # the sign options at their boundary: 0 is not positive but is non-negative
    with pytest.raises(SpecError, match="positive"):
        finite_float(0, "x", positive=True)
    assert finite_float(0, "x", nonneg=True) == 0.0
    with pytest.raises(SpecError, match=">= 0"):
        finite_float(-1e-9, "x", nonneg=True)


def test_yaml_event_limit_is_exact(monkeypatch):
    """A document of exactly MAX_YAML_EVENTS parser events loads; one event fewer allowed refuses it."""
    import yaml

    from frenzy_core import limits

    text = "a: [1, 2, 3]\nb: {c: d}\n"
    events = sum(1 for _ in yaml.parse(text))  # PyYAML's own count of the document's events
    monkeypatch.setattr(limits, "MAX_YAML_EVENTS", events)
    assert limits.load_yaml(text, "x") == {"a": [1, 2, 3], "b": {"c": "d"}}
    monkeypatch.setattr(limits, "MAX_YAML_EVENTS", events - 1)
    with pytest.raises(SpecError, match="YAML items"):
        limits.load_yaml(text, "x")


def test_load_json_parses_ordinary_text():
    assert load_json('{"a": [1, 2]}', "x") == {"a": [1, 2]}


def _nested(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_check_depth_accepts_exactly_the_limit_and_refuses_one_more():
    """The outermost container is level 1: [[[]]] is 3 levels deep."""
    from frenzy_core.limits import check_depth

    check_depth(_nested(3), "f", limit=3)
    check_depth({"a": {"b": []}}, "f", limit=3)
    with pytest.raises(SpecError, match="more than 3 levels"):
        check_depth(_nested(4), "f", limit=3)
    with pytest.raises(SpecError, match="more than 3 levels"):
        check_depth({"a": {"b": [[]]}}, "f", limit=3)


def test_a_missing_path_is_named_as_typed_up_to_200_characters_then_cut():
    """A printable path of at most 200 characters appears as typed; a longer one is cut by short_repr (quoted,
    ending in ...), so the message never grows with the input."""
    from frenzy_core.limits import open_user_file

    exact = "/nonexistent/" + "p" * (200 - len("/nonexistent/"))
    with pytest.raises(SpecError) as err:
        open_user_file(exact, "spec", "a spec")
    assert err.value.reason == f"file not found: {exact}"
    longer = exact + "q"
    with pytest.raises(SpecError) as err:
        open_user_file(longer, "spec", "a spec")
    assert err.value.reason.startswith("file not found: '/nonexistent/") and err.value.reason.endswith("...")


def test_a_file_of_exactly_the_limit_is_read_whole(tmp_path):
    from frenzy_core.limits import read_user_file

    path = tmp_path / "spec.yaml"
    path.write_text("a" * 100)
    assert read_user_file(path, "spec", "a spec", limit=100) == "a" * 100
    with pytest.raises(SpecError, match="99-byte limit"):
        read_user_file(path, "spec", "a spec", limit=99)


def test_docs_limits_is_the_table_of_the_module():
    """docs/limits.md is generated from limits.py (`python -m frenzy_core.limits`): the one limits table."""
    from pathlib import Path

    from frenzy_core import limits

    doc = (Path(__file__).resolve().parents[1] / "docs" / "limits.md").read_text(encoding="utf-8")
    assert doc == limits.table_markdown(), "rerun: python -m frenzy_core.limits > docs/limits.md"
    rows = {name: (value, why) for name, value, why in limits.table()}
    assert rows["MAX_SPEC_FILE_BYTES"][0] == f"{limits.MAX_SPEC_FILE_BYTES:,}" == "1,048,576"
    assert rows["DEFAULT_SAFETY_MARGIN"][0] == "0.1" and rows["DEFAULT_TOKENS"][0] == "10,000,000,000"
    assert "count:" in rows["MAX_SPEC_FILE_BYTES"][1]  # the comment's second line is kept
    assert all(why for _, why in rows.values())  # every limit says why it is what it is
