"""Mutation score of the core: can the tests tell when the code is wrong?

Each mutant flips one operator or constant in one function of a core module (a comparison `<` <-> `<=`, `+` <-> `-`,
`*` <-> `/`, `min` <-> `max`, `and` <-> `or`, an integer constant n -> n + 1, a float x -> 1.5 x) and runs the tests
that cover that module on a copy of the repository. A mutant is *killed* when a test fails (or the run exceeds its
time limit), *survives* otherwise. Mutants are drawn deterministically (a fixed seed over every mutable site of each
module), so two runs on the same code report the same mutants; survivors are listed with file, line and change so
each one can be read (some are equivalent mutants: a change no output can reveal).

    python bench/mutation.py                 # 12 mutants per module, the default
    python bench/mutation.py --per-module 30 --modules memory plans

Last line: JSON with the score per module and overall.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# module -> the tests that are meant to catch its regressions
TARGETS: dict[str, tuple[str, ...]] = {
    "memory": ("tests/test_memory.py", "tests/test_recipes.py", "tests/test_training.py"),
    "plans": ("tests/test_plans.py", "tests/test_properties.py"),
    "packing": ("tests/test_packing.py", "tests/test_properties.py"),
    "simulate": ("tests/test_simulate.py", "tests/test_policies.py", "tests/test_properties.py"),
    "metrics": ("tests/test_metrics.py", "tests/test_simulate.py"),
}
SWAPS_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq}
SWAPS_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}


@dataclass(frozen=True)
class Mutant:
    module: str
    site: int  # index of the mutable node in ast.walk order
    line: int
    change: str


def _sites(tree: ast.AST) -> list[tuple[int, ast.AST, str]]:
    """Every mutable node inside a function body (not docstrings, not annotations), with a description."""
    out = []
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inside: set[int] = set()
    for f in funcs:
        body = f.body[1:] if (f.body and isinstance(f.body[0], ast.Expr) and isinstance(f.body[0].value, ast.Constant)
                              and isinstance(f.body[0].value.value, str)) else f.body
        for stmt in body:
            inside.update(id(n) for n in ast.walk(stmt))
    for i, node in enumerate(ast.walk(tree)):
        if id(node) not in inside:
            continue
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAPS_CMP:
            out.append((i, node, f"{type(node.ops[0]).__name__} -> {SWAPS_CMP[type(node.ops[0])].__name__}"))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAPS_BIN:
            out.append((i, node, f"{type(node.op).__name__} -> {SWAPS_BIN[type(node.op)].__name__}"))
        elif isinstance(node, ast.BoolOp):
            out.append((i, node, f"{type(node.op).__name__} -> {'Or' if isinstance(node.op, ast.And) else 'And'}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            out.append((i, node, f"{node.func.id} -> {'max' if node.func.id == 'min' else 'min'}"))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float) and not isinstance(node.value, bool):
            new = node.value + 1 if isinstance(node.value, int) else (node.value * 1.5 or 1.0)
            out.append((i, node, f"{node.value!r} -> {new!r}"))
    return out


def _mutate(source: str, site: int) -> str:
    tree = ast.parse(source)
    for i, node in enumerate(ast.walk(tree)):
        if i != site:
            continue
        if isinstance(node, ast.Compare):
            node.ops[0] = SWAPS_CMP[type(node.ops[0])]()
        elif isinstance(node, ast.BinOp):
            node.op = SWAPS_BIN[type(node.op)]()
        elif isinstance(node, ast.BoolOp):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif isinstance(node, ast.Call):
            node.func.id = "max" if node.func.id == "min" else "min"
        elif isinstance(node, ast.Constant):
            node.value = node.value + 1 if isinstance(node.value, int) else (node.value * 1.5 or 1.0)
        return ast.unparse(tree)
    raise IndexError(site)


def draw_mutants(modules: list[str], per_module: int, seed: int) -> list[Mutant]:
    out = []
    for mod in modules:
        tree = ast.parse((REPO / "frenzy_core" / f"{mod}.py").read_text())
        sites = _sites(tree)
        rng = random.Random(f"{seed}:{mod}")
        for i, node, change in sorted(rng.sample(sites, min(per_module, len(sites))), key=lambda s: s[0]):
            out.append(Mutant(mod, i, node.lineno, change))
    return out


def run_mutant(m: Mutant, work: Path, timeout_s: float) -> tuple[str, float]:
    """'killed' / 'survived' / 'timeout' (counted as killed), and the wall time."""
    target = work / "frenzy_core" / f"{m.module}.py"
    original = (REPO / "frenzy_core" / f"{m.module}.py").read_text()
    target.write_text(_mutate(original, m.site))
    tests = [t for t in TARGETS[m.module] if (work / t).exists()]
    env = {**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                               "--no-header", "-o", "addopts=", *tests], cwd=work, env=env,
                              capture_output=True, timeout=timeout_s)
        verdict = "survived" if proc.returncode == 0 else "killed"
    except subprocess.TimeoutExpired:
        verdict = "timeout"
    finally:
        target.write_text(original)
    return verdict, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument("--per-module", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    args = ap.parse_args()
    mutants = draw_mutants(args.modules, args.per_module, args.seed)
    # a copy beside the repository, so tests that read ../shared still find it
    work = Path(tempfile.mkdtemp(prefix=".mutation-", dir=REPO.parent))
    try:
        for part in ("frenzy_core", "tests", "sample_clusters", "pyproject.toml"):
            src = REPO / part
            (shutil.copytree if src.is_dir() else shutil.copy)(src, work / part)
        baseline = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-o",
                                   "addopts=", *sorted({t for m in args.modules for t in TARGETS[m]
                                                        if (work / t).exists()})],
                                  cwd=work, env={**os.environ, "PYTHONPATH": str(work)}, capture_output=True)
        if baseline.returncode != 0:
            sys.exit("the unmutated tests fail; fix them before measuring mutants:\n" + baseline.stdout.decode()[-2000:])
        results = []
        for k, m in enumerate(mutants, 1):
            verdict, wall = run_mutant(m, work, args.timeout_s)
            results.append((m, verdict))
            print(f"[{k:>3}/{len(mutants)}] {verdict:8} {m.module}.py:{m.line} {m.change} ({wall:.1f} s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    score = {}
    for mod in args.modules:
        mine = [v for m, v in results if m.module == mod]
        score[mod] = round(sum(v != "survived" for v in mine) / len(mine), 3) if mine else None
    survivors = [f"{m.module}.py:{m.line} {m.change}" for m, v in results if v == "survived"]
    print("survivors:", *survivors, sep="\n  ")
    killed = sum(v != "survived" for _, v in results)
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "mutants": len(results), "killed": killed,
                      "mutation_score": round(killed / len(results), 3), "score_by_module": score,
                      "survivors": len(survivors)}))


if __name__ == "__main__":
    main()
