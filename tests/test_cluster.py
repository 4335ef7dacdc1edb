from pathlib import Path

import pytest

from frenzy_core.cluster import cluster_to_yaml, load_cluster, parse_cluster_yaml
from frenzy_core.errors import SpecError

SAMPLES = Path(__file__).resolve().parents[1] / "sample_clusters"


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_sample_cluster_loads_and_round_trips(path):
    cluster = load_cluster(path)
    again = parse_cluster_yaml(cluster_to_yaml(cluster))
    assert again.nodes == cluster.nodes
    assert path.read_text().startswith("#"), "each sample starts with a comment saying what it models"


def test_sia_cluster_shape():
    c = load_cluster(SAMPLES / "sia-64.yaml")
    assert c.total_gpus == 64
    assert c.gpus_by_type() == {"T4": 24, "A100-40GB": 16, "RTX-2080Ti": 24}


def test_large_cluster_over_thousand_gpus():
    assert load_cluster(SAMPLES / "alibaba-1k.yaml").total_gpus > 1000


def test_count_expands_nodes(tiny_cluster):
    assert [n.name for n in tiny_cluster.nodes] == ["a-0", "a-1", "t"]
    assert tiny_cluster.max_gpus_per_node("A100-80GB") == 4


@pytest.mark.parametrize(
    "text, needle",
    [
        ("nodes:\n  - {name: x, gpu_type: B999, num_gpus: 4}", "B999"),
        ("nodes:\n  - {name: x, gpu_type: T4, num_gpus: -4}", "num_gpus"),
        ("nodes:\n  - {name: x, gpu_type: T4, num_gpus: 4, colour: red}", "colour"),
        ("nodes: [", "not valid YAML"),
        ("name: only", "nodes"),
        ("nodes:\n  - {name: x, gpu_type: T4, num_gpus: 4}\n  - {name: x, gpu_type: T4, num_gpus: 4}", "duplicate"),
    ],
)
def test_bad_yaml_names_file_and_field(text, needle):
    with pytest.raises(SpecError) as err:
        parse_cluster_yaml(text, source="bad.yaml")
    assert needle in str(err.value) and "bad.yaml" in str(err.value)


def test_bad_node_error_names_node():
    with pytest.raises(SpecError, match="'x'"):
        parse_cluster_yaml("nodes:\n  - {name: x, gpu_type: T4, num_gpus: 0}", source="bad.yaml")


def test_user_defined_gpu_type():
    c = parse_cluster_yaml(
        "gpu_types:\n  - {name: MyGPU, memory_gib: 24, bf16_tflops: 100, fp32_tflops: 50, memory_bandwidth_gbyte_s: 900}\n"
        "nodes:\n  - {name: n, gpu_type: MyGPU, num_gpus: 2}"
    )
    assert c.gpu("MyGPU").memory_gib == 24


def test_bad_node_error_field_is_the_node_field():
    with pytest.raises(SpecError) as err:
        parse_cluster_yaml("nodes:\n  - {name: x, gpu_type: T4, num_gpus: 0}", source="bad.yaml")
    assert err.value.field == "node 'x'.num_gpus"


def test_loading_a_folder_is_a_clear_error(tmp_path):
    with pytest.raises(SpecError, match="folder"):
        load_cluster(tmp_path)
