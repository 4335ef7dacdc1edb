"""Shared fixtures: a tiny model, a tiny cluster, where the shared trace data lives."""

from __future__ import annotations

from pathlib import Path

import pytest

from frenzy_core.cluster import parse_cluster_yaml
from frenzy_core.models import ModelSpec

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def tiny_model() -> ModelSpec:
    """A 2-layer GPT-2-shaped model small enough to reason about by hand."""
    return ModelSpec(name="tiny", vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, max_positions=128)


@pytest.fixture
def tiny_cluster():
    """Two 4 x A100-80GB nodes and one 2 x T4 node."""
    return parse_cluster_yaml(
        """
name: tiny
nodes:
  - {name: a, gpu_type: A100-80GB, num_gpus: 4, count: 2}
  - {name: t, gpu_type: T4, num_gpus: 2}
""",
        source="tiny.yaml",
    )


@pytest.fixture
def shared_traces() -> Path:
    path = SHARED / "traces"
    if not path.is_dir():
        pytest.skip(f"../shared/traces not found at {path}: the real-trace tests need the shared data folder")
    return path
