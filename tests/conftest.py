"""Shared fixtures: a tiny model, a tiny cluster, where the shared trace data lives."""

from __future__ import annotations

import sys
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


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Put back sys.modules["__main__"] after every test: Streamlit's AppTest.from_function leaves its temporary
    script there, and a process pool spawned later in the same worker (tests/test_sweep.py) re-runs `__main__`'s
    file in each child, which then fails (NameError) and breaks the pool."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


# The slowest test files (per-file time summed from `--junitxml`, 2026-12-03), longest first: `make test` runs files
# whole on two workers (`--dist loadfile`) in collection order, so these go first and the short files fill in
# around them, instead of one worker starting a long file when the other has almost finished.
SLOW_FIRST = ("test_browser.py", "test_browser_hostile.py", "test_sweep.py", "test_app.py", "test_policies.py",
              "test_simulate.py", "test_frenzy_elastic.py", "test_export_validators.py", "test_whatif.py")


def pytest_collection_modifyitems(items) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests stay together
