"""Hostile inputs found by reading the planner as an attacker would (issue 20), each a test that failed on the code
before the fix: a share link or upload that makes the server read a path, a YAML that expands or nests without end,
names that carry markdown or shell, and files that are not files.

Hostile inputs that could hang or exhaust the old code run in a child process with a time and memory limit, so a
regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from frenzy_core.cluster import bundled_clusters, parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.limits import MAX_YAML_DEPTH, check_name, load_json, load_yaml, read_user_file
from frenzy_core.scenario import decode_share, load_scenario, parse_scenario_yaml

ROOT = Path(__file__).resolve().parent.parent
INLINE_CLUSTER = "cluster: {name: lab, nodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8, count: 2}]}\n"


def share_code(data) -> str:
    """A share code built by hand, as an attacker would: base64url(zlib(JSON))."""
    raw = json.dumps(data).encode() if not isinstance(data, bytes) else data
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def run_isolated(code: str, timeout_s: float = 30.0, memory_bytes: int = 1 << 31) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter capped at `memory_bytes` of address space; a hang fails on the timeout."""
    prelude = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({memory_bytes}, {memory_bytes}))\n")
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=timeout_s,
                          cwd=ROOT)


# --- the server reads only what it ships -------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/dev/zero", "/etc/passwd", "/nonexistent/cluster.yaml",
                                  "sample_clusters/sia-64.yaml", "../../etc/hosts"])
def test_a_share_link_never_makes_the_server_read_a_path(path):
    code = share_code({"cluster": path})
    result = run_isolated("from frenzy_core.scenario import decode_share\nfrom frenzy_core.errors import SpecError\n"
                          f"try:\n    decode_share({code!r})\nexcept SpecError as e:\n    print('REFUSED', e)\n",
                          timeout_s=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "REFUSED" in result.stdout and "not a bundled cluster" in result.stdout


def test_a_share_link_cannot_probe_which_paths_exist():
    messages = []
    for path in ("/etc/passwd", "/nonexistent-file"):
        with pytest.raises(SpecError) as err:
            decode_share(share_code({"cluster": path}))
        messages.append(str(err.value).replace(repr(path), "PATH"))
    assert messages[0] == messages[1]


def test_a_share_link_may_name_a_bundled_cluster():
    s = decode_share(share_code({"cluster": "sia-64"}))
    assert s.cluster.name == "sia-64" and "sia-64" in bundled_clusters()


def test_a_fifo_in_a_pasted_scenario_does_not_block(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    result = run_isolated("from frenzy_core.scenario import parse_scenario_yaml\n"
                          "from frenzy_core.errors import SpecError\n"
                          f"try:\n    parse_scenario_yaml('cluster: {fifo}', source='pasted scenario')\n"
                          "except SpecError as e:\n    print('REFUSED', e)\n", timeout_s=30)
    assert "REFUSED" in result.stdout and "not a bundled cluster" in result.stdout


def test_the_cli_reads_only_regular_files(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo), str(tmp_path)):
        result = run_isolated(f"import sys\nfrom frenzy_core.cli import main\nsys.exit(main(['memory', '--spec', "
                              f"{path!r}]))\n", timeout_s=60)
        assert result.returncode == 2, (path, result.stderr[-2000:])
        assert "not a regular file" in result.stderr or "is a folder" in result.stderr


def test_a_scenario_file_may_name_the_users_own_cluster_file(tmp_path):
    (tmp_path / "lab.yaml").write_text("name: lab\nnodes: [{name: h, gpu_type: H100-80GB, num_gpus: 8}]\n")
    (tmp_path / "run.yaml").write_text("cluster: lab.yaml\n")
    assert load_scenario(tmp_path / "run.yaml").cluster.name == "lab"


def test_a_scenario_files_cluster_path_must_be_a_regular_file(tmp_path):
    (tmp_path / "run.yaml").write_text("cluster: /dev/zero\n")
    with pytest.raises(SpecError, match="not a regular file"):
        load_scenario(tmp_path / "run.yaml")


def test_read_user_file_checks_the_size_before_reading(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(8 << 30)  # a sparse 8 GiB file: reading it would take the machine's memory
    started = time.monotonic()
    with pytest.raises(SpecError, match="byte limit"):
        read_user_file(big, "cluster", "a cluster YAML file")
    assert time.monotonic() - started < 1


# --- one loader: aliases, merge keys, duplicate keys, depth --------------------------------------------------------
ALIAS_BOMB = ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
              "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
              "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
              "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n")


def test_an_alias_bomb_in_a_scenario_is_refused_at_once():
    text = "cluster:\n  nodes:\n    - {name: *h, gpu_type: T4, num_gpus: 4}\n" + ALIAS_BOMB
    started = time.monotonic()
    with pytest.raises(SpecError, match="aliases"):
        parse_scenario_yaml(ALIAS_BOMB + text.split(ALIAS_BOMB)[0], source="uploaded.yaml")
    assert time.monotonic() - started < 1


def test_merge_keys_are_refused():
    with pytest.raises(SpecError, match="merge keys"):
        load_yaml("base: {a: 1}\nnode:\n  <<: {a: 2}\n", "cluster")


def test_duplicate_yaml_keys_are_refused_not_last_wins():
    with pytest.raises(SpecError, match="duplicate key 'num_gpus'"):
        parse_cluster_yaml("nodes: [{name: a, gpu_type: T4, num_gpus: 4, num_gpus: 8}]")


def test_duplicate_json_keys_in_a_share_link_are_refused():
    raw = b'{"cluster": "sia-64", "name": "a", "name": "b"}'
    with pytest.raises(SpecError, match="duplicate key"):
        decode_share(share_code(raw))


@pytest.mark.parametrize("depth", [MAX_YAML_DEPTH + 1, 1000, 100_000])
def test_deep_json_in_a_share_link_is_a_clear_error(depth):
    raw = ('{"cluster": ' + '[' * depth + ']' * depth + '}').encode()
    with pytest.raises(SpecError):
        decode_share(share_code(raw))


def test_deep_yaml_is_refused_in_linear_time():
    deep = "a: " + "[" * 12_000 + "]" * 12_000  # 25 KB: the old loader did not finish in 400 s
    started = time.monotonic()
    with pytest.raises(SpecError, match="nested more than"):
        parse_scenario_yaml(deep, source="pasted scenario")
    assert time.monotonic() - started < 1
    with pytest.raises(SpecError, match="nested more than"):
        load_yaml("- " * 5000 + "x", "cluster")


def test_ordinary_nesting_still_loads():
    assert load_json('{"a": {"b": [[1]]}}', "x") == {"a": {"b": [[1]]}}
    assert load_yaml("a: {b: [[1]]}", "x") == {"a": {"b": [[1]]}}


# --- one name type -------------------------------------------------------------------------------------------------
HOSTILE_NAMES = ["lab\ntouch PWNED", "$(touch PWNED)", "`id`", "a;b", "[click](http://evil.example)", ":red[x]",
                 "$x^2$", "a b", "", "x" * 65, "..", "émoji🚀"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_hostile_name_is_refused_at_every_boundary(name):
    with pytest.raises(SpecError):
        check_name(name)
    quoted = json.dumps(name)
    with pytest.raises(SpecError):  # cluster name
        parse_cluster_yaml(f"name: {quoted}\nnodes: [{{name: a, gpu_type: T4, num_gpus: 4}}]")
    with pytest.raises(SpecError) if name else contextlib.nullcontext():  # node name ("" = the default node0)
        parse_cluster_yaml(f"nodes: [{{name: {quoted}, gpu_type: T4, num_gpus: 4}}]")
    with pytest.raises(SpecError):  # custom GPU type name
        parse_cluster_yaml(f"gpu_types: [{{name: {quoted}, memory_gib: 80, bf16_tflops: 900, fp32_tflops: 60, "
                           f"memory_bandwidth_gbyte_s: 3000}}]\nnodes: [{{name: a, gpu_type: {quoted}, num_gpus: 8}}]")
    with pytest.raises(SpecError):  # scenario name, from a share link
        decode_share(share_code({"name": name, "cluster": "sia-64"}))
    with pytest.raises(SpecError):  # model name, inline in a pasted scenario
        parse_scenario_yaml(f"model: {{name: {quoted}, vocab_size: 100, hidden_size: 64, num_layers: 2, "
                            f"num_heads: 4}}\n" + INLINE_CLUSTER)


def test_a_config_json_file_name_becomes_a_valid_model_name(tmp_path):
    from frenzy_core.models import load_hf_config

    folder = tmp_path / "my model (v2)"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128}))
    assert check_name(load_hf_config(folder / "config.json").name) == "my-model-v2"


def test_num_gpus_true_is_not_one():
    with pytest.raises(SpecError, match="num_gpus"):
        parse_cluster_yaml("nodes: [{name: a, gpu_type: T4, num_gpus: true}]")


# --- the app keeps its page ------------------------------------------------------------------------------------------
def test_markdown_in_a_message_is_shown_as_typed():
    from pages.common import md_escape

    shown = md_escape("bad file [click](http://evil.example) :red[boo] $x$ <b>")
    for raw in ("[", "]", "(", ")", ":", "$", "<", ">"):  # each special character reaches markdown escaped
        assert shown.count(raw) == shown.count("\\" + raw) > 0
    assert shown.replace("\\", "") == "bad file [click](http://evil.example) :red[boo] $x$ <b>"


@pytest.mark.parametrize("code", [
    share_code(('{"cluster": ' + '[' * 1000 + ']' * 1000 + '}').encode()),  # 1 KB of nesting: a RecursionError page
    share_code({"cluster": "/etc/passwd"}),
    share_code({"name": "[click](http://evil.example)", "cluster": "sia-64"}),
    "!!not base64!!",
], ids=["deep", "path", "markdown-name", "garbage"])
def test_a_hostile_share_link_keeps_the_page_and_the_state(code, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.delenv("FRENZY_CLUSTER", raising=False)
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    app.query_params["s"] = code
    app.run()
    assert not app.exception
    assert app.session_state.model.name == "llama-2-7b"  # the defaults stay loaded
    shown = [e.value for e in app.error]
    assert any("share link" in e for e in shown)
    assert not any("[click](" in e for e in shown)  # user text is escaped before markdown


def test_a_trace_path_that_is_a_device_or_a_fifo_is_refused_before_reading(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        result = run_isolated("from frenzy_core.traces import load_trace\nfrom frenzy_core.errors import SpecError\n"
                              f"try:\n    load_trace({path!r}, 'philly')\nexcept SpecError as e:\n    print('REFUSED', e)\n",
                              timeout_s=30)
        assert "REFUSED" in result.stdout and "not a regular file" in result.stdout, (path, result.stderr[-500:])


# --- the remaining reproducers, end to end through the CLI (their unit tests live beside their modules) ----
def test_a_whatif_addition_of_10_to_the_20_gpus_is_one_line_exit_2():
    result = run_isolated("import sys\nfrom frenzy_core.cli import main\nsys.exit(main(['whatif', '--cluster', "
                          "'sample_clusters/sia-64.yaml', '--job', 'gpt2:10:1:1', '--add', "
                          "'A100-80GB:100000000000000000000']))\n", timeout_s=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "100,000" in result.stderr  # the limit, named


def test_a_trace_row_with_a_huge_gpu_count_or_a_year_9999_is_a_counted_skip(tmp_path):
    from frenzy_core.traces import load_trace

    path = tmp_path / "philly.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,60,1,60,vc\n"
                    "9999-10-01 00:00:00,60,1,60,vc\n2017-10-01 00:00:01,60,1e40,60,vc\n")
    trace = load_trace(path, "philly")
    assert len(trace.jobs) == 1 and sorted(p.row for p in trace.skipped) == [2, 3]


def test_a_hostile_cluster_name_never_reaches_an_export(tmp_path):
    (tmp_path / "c.yaml").write_text('name: "lab\\ntouch PWNED"\nnodes: [{name: a, gpu_type: A100-80GB, num_gpus: 8}]\n')
    result = run_isolated("import sys\nfrom frenzy_core.cli import main\nsys.exit(main(['plans', '--model', 'gpt2', "
                          f"'--global-batch', '32', '--cluster', {str(tmp_path / 'c.yaml')!r}, '--export', 'slurm']))\n", timeout_s=120)
    assert result.returncode == 2 and "PWNED" not in result.stdout and "name" in result.stderr
