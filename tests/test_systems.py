"""frenzy_core.systems: the vendor nodes a cluster file or `frenzy estimate --system` may name."""

from __future__ import annotations

import json

import pytest

from frenzy_core.cli import EXIT_BAD_INPUT, main
from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.errors import SpecError
from frenzy_core.gpus import CATALOG
from frenzy_core.systems import SYSTEMS, get_system


def test_every_system_is_a_catalog_gpu_with_its_nics_added_by_hand():
    # compute-fabric NICs x their speed: DGX A100 8 x 200 Gb/s HDR; DGX H100 / H200 / B200 8 x 400 Gb/s ConnectX-7
    # (DGX BasePOD reference architecture); GB200 NVL72 72 GPUs x 400 Gb/s (assumed, and flagged so)
    want = {"dgx-a100": ("A100-80GB", 8, 1600.0), "dgx-h100": ("H100-80GB", 8, 3200.0),
            "dgx-h200": ("H200-141GB", 8, 3200.0), "dgx-b200": ("B200", 8, 3200.0),
            "gb200-nvl72": ("GB200", 72, 28800.0)}
    assert {name: (s.gpu_type, s.gpus_per_node, s.network_gbit_s) for name, s in SYSTEMS.items()} == want
    assert all(s.gpu_type in CATALOG for s in SYSTEMS.values())
    assert [name for name, s in SYSTEMS.items() if s.assumed] == ["gb200-nvl72"]
    assert "assumed" in SYSTEMS["gb200-nvl72"].describes


def test_an_unknown_system_names_the_field_and_the_choices():
    with pytest.raises(SpecError) as err:
        get_system("dgx-z")
    assert err.value.field == "system" and "dgx-h100" in str(err.value)


def test_a_cluster_node_may_name_a_system():
    cluster = parse_cluster_yaml("nodes:\n  - name: dgx\n    system: dgx-h100\n    count: 2\n"
                                 "  - name: half\n    system: dgx-a100\n    num_gpus: 4\n    network_gbit_s: 400\n")
    got = [(n.name, n.gpu_type, n.num_gpus, n.network_gbit_s) for n in cluster.nodes]
    assert got == [("dgx-0", "H100-80GB", 8, 3200.0), ("dgx-1", "H100-80GB", 8, 3200.0),
                   ("half", "A100-80GB", 4, 400.0)]  # the entry's own fields win over the system's


@pytest.mark.parametrize("text, field", [
    ("nodes:\n  - system: dgx-h100\n    gpu_type: T4\n", "nodes[0].gpu_type"),
    ("nodes:\n  - gpu_type: T4\n    num_gpus: 1\n  - system: nope\n", "nodes[1].system"),
])
def test_a_bad_system_entry_names_the_node_field(text, field):
    with pytest.raises(SpecError) as err:
        parse_cluster_yaml(text, source="c.yaml")
    assert err.value.field == field and err.value.source == "c.yaml"


def _estimate(capsys, *argv):
    code = main(["estimate", "--model", "llama-3.1-8b", "--framework", "megatron", "--seq-len", "4096",
                 "--global-batch", "64", "--dp", "16", "--tp", "1", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_with_a_system_is_the_estimate_with_its_links_spelt_out(capsys):
    code, by_system, _ = _estimate(capsys, "--system", "dgx-h100", "--json")
    assert code == 0
    code, by_hand, _ = _estimate(capsys, "--gpu", "H100-80GB", "--gpus-per-node", "8", "--inter-node-gbps", "3200",
                                 "--json")
    assert code == 0 and json.loads(by_system) == json.loads(by_hand)
    # the default network (100 Gbit/s) is slower: d = 16 spans two nodes, its gradient ring crosses it
    code, default, _ = _estimate(capsys, "--gpu", "H100-80GB", "--json")
    assert json.loads(default)["step_time_s"] > json.loads(by_hand)["step_time_s"]
    # a flag overrides the system's figure
    code, slower, _ = _estimate(capsys, "--system", "dgx-h100", "--inter-node-gbps", "100", "--json")
    assert json.loads(slower) == json.loads(default)


@pytest.mark.parametrize("argv, field", [(["--system", "dgx-h100", "--gpu", "A100-80GB"], "gpu"), ([], "gpu")])
def test_estimate_refuses_a_gpu_that_is_not_the_systems_or_none_at_all(capsys, argv, field):
    code, out, err = _estimate(capsys, *argv)
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.count("\n") == 1 and err.startswith(f"frenzy estimate: error: {field}: ")


def _plans(capsys, *argv):
    code = main(["plans", "--model", "llama-3.1-8b", "--framework", "megatron", "--seq-len", "4096",
                 "--global-batch", "64", "--top", "5", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_plans_on_a_system_are_the_plans_on_the_same_cluster_file(capsys, tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text("nodes:\n  - name: n\n    gpu_type: H100-80GB\n    num_gpus: 8\n    network_gbit_s: 3200\n"
                    "    count: 2\n")
    code, by_system, _ = _plans(capsys, "--system", "dgx-h100", "--nodes", "2", "--json")
    assert code == 0
    code, by_file, _ = _plans(capsys, "--cluster", str(path), "--json")
    assert code == 0 and json.loads(by_system) == json.loads(by_file) and json.loads(by_file)


@pytest.mark.parametrize("argv", [["--system", "dgx-h100"], ["--system", "dgx-h100", "--nodes", "0"],
                                  ["--cluster", "sample_clusters/sia-64.yaml", "--nodes", "2"]])
def test_plans_refuse_a_system_without_a_node_count_and_a_count_without_a_system(capsys, argv):
    code, out, err = _plans(capsys, *argv)
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.count("\n") == 1 and err.startswith("frenzy plans: error: nodes: ")


def test_estimate_says_when_a_multi_node_split_runs_on_the_default_network(capsys):
    code, out, err = _estimate(capsys, "--gpu", "H100-80GB", "--json")  # d = 16: two nodes of 8
    assert code == 0 and json.loads(out) and "default 100 Gbit/s" in err and "--system" in err
    for argv in (["--system", "dgx-h100"], ["--gpu", "H100-80GB", "--inter-node-gbps", "100"],
                 ["--gpu", "H100-80GB", "--gpus-per-node", "16"]):  # named, given, or one node
        code, _, err = _estimate(capsys, *argv, "--json")
        assert code == 0 and err == "", argv
