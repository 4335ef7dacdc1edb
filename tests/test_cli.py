"""The `frenzy` command line: JSON outputs carry the documented keys; bad input exits 2 with one line."""

import json

import pytest

from frenzy_core.cli import main
from frenzy_core.models import ZOO


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_json_lists_zoo_with_exact_counts(capsys):
    code, out, _ = run(capsys, "models", "--json")
    rows = {r["name"]: r["parameters"] for r in json.loads(out)}
    assert code == 0 and rows["llama-2-7b"] == 6_738_415_616 and set(rows) == set(ZOO)


def test_gpus_table(capsys):
    code, out, _ = run(capsys, "gpus")
    assert code == 0 and "H100-80GB" in out and "MI300X" in out


def test_memory_json_keys(capsys):
    code, out, _ = run(capsys, "memory", "--model", "gpt2", "--seq-len", "1024", "--micro-batch", "4", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["parameters"] == 124_439_808
    assert isinstance(data["total_bytes"], int) and data["total_bytes"] > 124_439_808 * 16
    assert sum(data["breakdown"].values()) == data["total_bytes"]


def test_memory_paper_method_by_hand(capsys):
    code, out, _ = run(capsys, "memory", "--model", "gpt2", "--seq-len", "1024", "--micro-batch", "8",
                       "--method", "paper", "--json")
    W = 50257 * 768 + 12 * (12 * 768**2 + 13 * 768)
    act = 1024 * 8 * 768 * 12 * (10 + 24 + 5 * 12 * 1024 / 768)
    assert code == 0 and json.loads(out)["total_bytes"] == pytest.approx(20 * W + act, abs=2)


@pytest.mark.parametrize(
    "argv, field",
    [
        (["memory", "--model", "gpt5"], "model"),
        (["memory", "--model", "gpt2", "--micro-batch", "-2"], "micro_batch"),
        (["memory", "--model", "gpt2", "--tp", "5"], "tp"),
        (["memory", "--config", "/nonexistent/config.json"], "config"),
        (["memory", "--config", "/"], "config"),
        (["memory", "--model", "gpt2", "--seq-len", "-5"], "seq_len"),
        (["memory", "--model", "gpt2", "--seq-len", "4096"], "seq_len"),
        (["plans", "--model", "gpt2", "--cluster", "/", "--global-batch", "8"], "cluster"),
        (["plans", "--model", "gpt2", "--cluster", "sample_clusters/sia-64.yaml", "--global-batch", "8",
          "--tokens", "inf"], "tokens"),
        (["plans", "--model", "gpt2", "--cluster", "sample_clusters/sia-64.yaml", "--global-batch", "8",
          "--top", "-2"], "top"),
        (["plans", "--model", "gpt2", "--cluster", "sample_clusters/sia-64.yaml", "--global-batch", "7",
          "--micro-batch", "2"], "micro_batch"),
        (["plans", "--model", "gpt2", "--cluster", "/nonexistent.yaml", "--global-batch", "8"], "cluster"),
        (["plans", "--model", "gpt2", "--cluster", "sample_clusters/sia-64.yaml"], "global_batch"),
        (["simulate", "--trace", "x.csv", "--cluster", "sample_clusters/sia-64.yaml", "--seeds", "0"], "seeds"),
        (["simulate", "--trace", "frenzy_core/data/traces/philly-2000.csv", "--trace-format", "nope",
          "--cluster", "sample_clusters/sia-64.yaml"], "format"),
        (["simulate", "--trace", "frenzy_core/data/traces/philly-2000.csv", "--cluster",
          "sample_clusters/sia-64.yaml", "--policy", "nope", "--limit-jobs", "5"], "policy"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, field):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and field in err and "Traceback" not in err


def test_plans_json_rank_order(capsys):
    code, out, _ = run(capsys, "plans", "--model", "gpt2", "--cluster", "sample_clusters/sia-64.yaml",
                       "--global-batch", "32", "--micro-batch", "4", "--objective", "gpus", "--top", "5", "--json")
    rows = json.loads(out)
    assert code == 0 and 0 < len(rows) <= 5
    for key in ("gpu_type", "dp", "tp", "pp", "num_gpus", "memory_bytes", "step_time_s", "time_to_train_s",
                "gpu_hours", "cost"):
        assert key in rows[0]
    assert [r["num_gpus"] for r in rows] == sorted(r["num_gpus"] for r in rows)


def test_simulate_json_has_documented_keys_and_matches_the_core(capsys):
    from frenzy_core.cluster import load_cluster
    from frenzy_core.simulate import SimOptions, simulate_seeds
    from frenzy_core.traces import load_trace

    trace_path = "frenzy_core/data/traces/philly-2000.csv"
    code, out, _ = run(capsys, "simulate", "--trace", trace_path, "--trace-format", "philly", "--cluster",
                       "sample_clusters/sia-64.yaml", "--policy", "fcfs", "--limit-jobs", "40", "--json")
    data = json.loads(out)
    assert code == 0
    for key in ("jobs", "completed", "avg_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s", "gpu_hours",
                "oom_failures", "sched_overhead_ms_per_decision", "wall_s"):
        assert key in data
    direct = simulate_seeds(load_trace(trace_path, "philly").head(40), load_cluster("sample_clusters/sia-64.yaml"),
                            "fcfs", seeds=range(1), options=SimOptions()).summary_dict()
    assert data["jobs"] == 40 and data["avg_jct_s"] == pytest.approx(direct["avg_jct_s"])


def test_simulate_compare_says_why_and_its_terms_add_up(capsys):
    trace_path = "frenzy_core/data/traces/philly-2000.csv"
    code, out, _ = run(capsys, "simulate", "--trace", trace_path, "--cluster", "sample_clusters/paper-testbed.yaml",
                       "--policy", "frenzy", "--compare", "fcfs", "--limit-jobs", "30", "--json")
    data = json.loads(out)
    assert code == 0 and data["compare"]["policy"] == "fcfs"
    first = data["why"][0]
    # the sentence's gap is the two summaries' difference (every job completed under both)
    gap_h = abs(data["avg_jct_s"] - data["compare"]["avg_jct_s"]) / 3600
    assert f"({gap_h:.2f} h," in first and "queueing" in first and "running" in first


@pytest.mark.parametrize("argv, message", [
    (("--compare", "fcfs", "--policy", "fcfs"), "is the --policy itself"),
    (("--compare", "nope"), "unknown policy 'nope'"),
    (("--compare", "fcfs", "--job-model", "sia-apps", "--trace-format", "sia"), "needs the llm job model"),
])
def test_simulate_compare_refuses_what_it_cannot_compare(capsys, argv, message):
    trace = ("frenzy_core/data/traces/sia-saturn-workload-1.csv" if "sia" in argv
             else "frenzy_core/data/traces/philly-2000.csv")
    code, _, err = run(capsys, "simulate", "--trace", trace, "--cluster", "sample_clusters/sia-64.yaml",
                       "--limit-jobs", "5", *argv)
    assert code == 2 and message in err


def test_simulate_bad_trace_exits_2(capsys):
    code, _, err = run(capsys, "simulate", "--trace", "tests/data/wrong_header.csv", "--trace-format", "philly",
                       "--cluster", "sample_clusters/sia-64.yaml")
    assert code == 2 and "missing column" in err


def test_plans_json_infeasible_explains_on_stderr(capsys):
    code, out, err = run(capsys, "plans", "--model", "llama-2-70b", "--cluster", "sample_clusters/sia-64.yaml",
                         "--global-batch", "48", "--json")
    assert code == 1 and json.loads(out) == [] and "No plan fits" in err and "A100-40GB" in err


def test_plans_fixed_micro_batch(capsys):
    code, out, _ = run(capsys, "plans", "--model", "gpt2", "--cluster", "sample_clusters/sia-64.yaml",
                       "--global-batch", "48", "--micro-batch", "4", "--top", "0", "--json")
    rows = json.loads(out)
    assert code == 0 and rows and {r["micro_batch"] for r in rows} == {4}


def test_memory_spec_file_gives_the_model(capsys, tmp_path):
    spec = tmp_path / "gelu-gqa.yaml"
    spec.write_text("vocab_size: 1000\nhidden_size: 64\nnum_layers: 2\nnum_heads: 4\nnum_kv_heads: 2\n"
                    "position_kind: rotary\nbias: false\n")
    code, out, _ = run(capsys, "memory", "--spec", str(spec), "--seq-len", "128", "--json")
    # embedding 1000 x 64 (tied) + 2 x (q, o 64^2 + k, v 64 x 32 + GELU 2 x 64 x 256 + 2 LayerNorms) + final LayerNorm
    expected = 1000 * 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 2 * 64 * 256 + 4 * 64) + 2 * 64
    assert code == 0 and json.loads(out)["model"] == "gelu-gqa" and json.loads(out)["parameters"] == expected
    spec.write_text("hidden_size: [64]\n")
    code, out, err = run(capsys, "memory", "--spec", str(spec))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "gelu-gqa.yaml: hidden_size" in err


def test_memory_compile_flag_drops_the_uncompiled_sac_outputs(capsys):
    # fsdp2, Llama-3.1-8B, op-SAC, b = 2, s = 8,192, d = 8: compiled blocks do not save w2's output (2 x 4,096 B per
    # token per layer): 32 x 16,384 x 8,192 = 4,294,967,296 bytes less allocated (tests/test_recipes.py by hand)
    argv = ["memory", "--model", "llama-3.1-8b", "--framework", "fsdp2", "--precision", "amp", "--recompute", "op-sac",
            "--seq-len", "8192", "--micro-batch", "2", "--dp", "8", "--json"]
    code, out, _ = run(capsys, *argv)
    code_c, out_c, _ = run(capsys, *argv, "--compile")
    assert code == code_c == 0
    assert json.loads(out)["allocated_bytes"] - json.loads(out_c)["allocated_bytes"] == 4_294_967_296


def test_memory_compile_needs_fsdp2(capsys):
    code, _, err = run(capsys, "memory", "--model", "gpt2", "--seq-len", "1024", "--framework", "hf", "--compile")
    assert code == 2 and "compile" in err and len(err.strip().splitlines()) == 1


def test_memory_deepspeed_sizes_take_deepspeeds_notation_and_move_the_bucket(capsys):
    # --reduce-bucket-size 5e7 (DeepSpeed's JSON notation) takes (5e8 - 5e7) x 2 B (bf16 params) off a ZeRO-3 peak
    base = ["memory", "--model", "gpt2", "--framework", "deepspeed", "--zero", "3", "--dp", "4", "--global-batch", "8",
            "--precision", "bf16-master", "--json"]
    _, default, _ = run(capsys, *base)
    code, small, _ = run(capsys, *base, "--reduce-bucket-size", "5e7")
    assert code == 0
    assert json.loads(default)["allocated_bytes"] - json.loads(small)["allocated_bytes"] == 450_000_000 * 2
    for bad in ("nan", "1.5", "lots"):
        with pytest.raises(SystemExit) as exit_:
            main([*base, "--stage3-max-live-parameters", bad])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "--stage3-max-live-parameters" in err and "number of elements" in err
    code, _, err = run(capsys, "memory", "--model", "gpt2", "--reduce-bucket-size", "5e7")
    assert code == 2 and "use framework deepspeed" in err and err.count("\n") == 1


def test_framework_megatron_defaults_to_its_bf16_master_precision(capsys):
    """Megatron has no autocast mode: without --precision the CLI takes bf16-master there, and amp elsewhere."""
    from frenzy_core.memory import predict_memory
    from frenzy_core.models import ZOO
    from frenzy_core.training import Parallelism, TrainingSpec

    assert main(["memory", "--model", "gpt2", "--seq-len", "1024", "--framework", "megatron", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["total_bytes"]
    want = predict_memory(ZOO["gpt2"], TrainingSpec(seq_len=1024, global_batch=1, precision="bf16-master",
                                                    framework="megatron"), Parallelism())
    assert got == int(want.total_bytes)
    assert main(["memory", "--model", "gpt2", "--seq-len", "1024", "--framework", "megatron", "--precision", "amp"]) == 2
    assert "no autocast" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["memory"], ["plans", "--cluster", "sample_clusters/modern-mixed.yaml", "--global-batch", "8", "--top", "1"],
                                     ["estimate", "--gpu", "H100-80GB", "--gpus", "8", "--tp", "8"]])
def test_a_sequence_past_the_trained_context_warns_on_stderr_and_still_answers(capsys, command):
    args = [*command, "--model", "llama-2-7b", "--seq-len", "65536", "--json"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "warning: sequence length 65,536 is beyond the 4,096 positions llama-2-7b" in out.err
    json.loads(out.out)  # the answer itself stays clean JSON
    assert main([*command, "--model", "llama-2-7b", "--seq-len", "4096", "--json"]) == 0
    assert "warning" not in capsys.readouterr().err
