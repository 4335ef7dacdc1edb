"""Mutation score of the core: can the tests tell when the code is wrong?

Each mutant flips one operator or constant in one function of a core module (a comparison `<` <-> `<=`, `+` <-> `-`,
`*` <-> `/`, `min` <-> `max`, `and` <-> `or`, an integer constant n -> n + 1, a float x -> 1.5 x) and runs the tests
that cover that module on a copy of the repository. A mutant is *killed* when a test fails (or the run exceeds its
time limit), *survives* otherwise. Mutants are drawn deterministically (a fixed seed over every mutable site of each
module), so two runs on the same code report the same mutants; survivors are listed with file, line and change so
each one can be read (some are equivalent mutants: a change no output can reveal).

    python bench/mutation.py                 # 12 mutants per module, the default
    python bench/mutation.py --per-module 30 --modules memory plans
    python bench/mutation.py --seed 0 1        # two draws; a mutant both draw runs once

Tests that already fail on the unmutated code are named and deselected, so they cannot count as kills.

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


# Equivalent mutants, each read and argued: no input can make the mutated code's output differ, so no test can kill
# it and it is left out of the draw (the score is over mutants a test could catch). Keyed by module, the innermost
# function, the mutated node as source (for a constant, the expression around it) and the change; `_sites` checks that each entry
# still names exactly one site and says so when the code under it changed (then the mutant is drawn again).
EQUIVALENT: dict[tuple[str, str, str, str], str] = {
    ("packing", "_place_on_type", "tp > 1", "Gt -> GtE"):
        "tp >= 1 takes f - f % 1, which is f: the same value",
    ("packing", "_place_on_type", "f - num_gpus", "Sub -> Add"):
        "f + n instead of f - n shifts every candidate by the same 2n: argmin picks the same node, and `left` is only "
        "compared with other types' `left`, shifted alike",
    ("packing", "_place_on_type", "int(csum[k - 1]) if k else 0", "0 -> 1"):
        "k >= 1 here (no single node fits, so the largest usable node holds < num_gpus): the else branch is dead",
    ("packing", "_place_on_type", "k + 1", "1 -> 2"):
        "the node count of a multi-node placement only orders multi-node placements among themselves (k + 2 keeps "
        "the order, and stays > 1 so it still loses to a single node)",
    ("packing", "_place_on_type", "f[order[k:]].sum() - rem", "Sub -> Add"):
        "`left` of a multi-node placement is never read: `place` keys multi-node placements by (nodes, memory, 0)",
    ("packing", "place", "(n_nodes, mem, 0)", "0 -> 1"):
        "the same constant in every multi-node key: the order is unchanged",
    ("packing", "has_place", "t is None or (free_by_type is not None and free_by_type[t] < plan.num_gpus)",
     "Or -> And"):
        "a shortcut only: an absent type makes `place(gpu_types=(type,))` return None, and free_by_type (the free "
        "totals of `free`, as documented) below the plan's GPUs makes `place` return None too",
    ("packing", "_index_type", "int(self.index.node_gpus[ix].max()) if len(ix) else 0", "0 -> 1"):
        "every type of a ClusterIndex has nodes (types are those present): the else branch is dead",
    ("packing", "_index_type", "int(f.max()) if len(ix) else 0", "0 -> 1"):
        "every type of a ClusterIndex has nodes (types are those present): the else branch is dead",
    ("packing", "__init__", "[0]", "0 -> 1"):
        "the initial _max_free is never read: first_plan and max_free index a type (which sets it) before reading, "
        "take skips unindexed types",
    ("packing", "first_plan", "n <= max_free[t]", "LtE -> Lt"):
        "at n == max_free the numpy walk `_place_on_type` gives the same single-node best fit as the bucket fast path",
    ("packing", "take", "m > 0", "Gt -> GtE"):
        "the node just moved sits in bucket k - n >= 0, so the walk down stops there before m > 0 could decide",
    ("packing", "_index_type", "size + 1", "1 -> 2"):
        "one more bucket, always empty (no node has more free GPUs than its size): same placements, and "
        "buckets[t][k] still holds exactly the nodes with k free",
    ("plans", "within_scaling_floor", "floor <= 0 or not plans", "Or -> And"):
        "a shortcut only: scaling_keep has the same guard (floor <= 0 keeps every plan; no plans give an empty mask)",
    ("plans", "within_scaling_floor", "floor <= 0", "LtE -> Lt"):
        "at floor 0 scaling_keep keeps every plan, as the shortcut does",
    ("plans", "rank_plans", "float(mem_g.min()) if len(mem_g) else 0.0", "0.0 -> 1.0"):
        "the grid is never empty (d = t = p = 1 with a micro-batch that divides the batch is always enumerated): "
        "the else branch is dead",
    ("plans", "rank_plans", "np.array(pairs, dtype=np.int64).reshape(-1, 2)", "1 -> 2"):
        "numpy (>= 2) reads any negative size in reshape as 'infer this dimension': reshape(-2, 2) is reshape(-1, 2)",
    ("simulate", "_start", "st.token += 1", "1 -> 2"):
        "a run's token is only compared for equality with the token its end event carries (_event; no policy reads "
        "it): any strictly increasing sequence tells stale events apart the same way",
    ("simulate", "_preempt", "st.token += 1", "1 -> 2"):
        "a run's token is only compared for equality with the token its end event carries (_event; no policy reads "
        "it): any strictly increasing sequence tells stale events apart the same way",
    ("simulate", "__init__", "self.wake_token = 0", "0 -> 1"):
        "wake tokens are only compared for equality with the latest one pushed (bumped before each push): the start "
        "value is never seen",
    ("simulate", "loop", "self.push(wake, WAKE, -1, self.wake_token)", "1 -> 2"):
        "the job field of a WAKE event is never read (the loop skips to the next event before _event), and the heap "
        "orders by (time, kind, unique sequence) before it",
    ("simulate", "gpu_hours_by_type", "max(self.makespan_s, 0.0) if math.isfinite(self.makespan_s) else 0.0",
     "0.0 -> 1.0"):
        "the else branch runs only when no job finished; a run ends with every GPU free (a running job always has an "
        "end event on the heap), so the last busy step is 0 and `until` only multiplies that 0",
    ("simulate", "loop", "self.queue and self.running", "And -> Or"):
        "the extra wake-ups it schedules are for instants when the queue is empty: a wake-up calls the policy only "
        "with a non-empty queue, and every instant that leaves jobs queued beside running ones computes (and bumps) "
        "the wake-up anew, with either operator; next_wake_s is read-only",
    ("simulate", "_true_memory", "truth.noise <= 0", "LtE -> Lt"):
        "noise is >= 0 (_check_options): at noise 0 the draw is uniform(-0, 0) = 0, so base x (1 + 0) is base",
    ("simulate", "_push_round", "self.push(k * self.policy.round_s, ROUND, -1)", "1 -> 2"):
        "the job field of a ROUND event is never read (the loop skips to the next event), and the heap orders by "
        "(time, kind, unique sequence) before it",
    ("simulate", "push", "self.seq += 1", "1 -> 2"):
        "the sequence only orders events pushed at the same time and kind: any strictly increasing counter gives "
        "the same order",
    ("simulate", "_event", "st.done_fraction = 1.0", "1.0 -> 1.5"):
        "a completed job's trained share is never read again: a done job is in neither the queue nor the running "
        "set, and the result reports state and finish time, not the share",
    ("simulate", "gpu_hours_by_type", "max(self.makespan_s, 0.0)", "0.0 -> 1.0"):
        "a run ends with every GPU free (a running job always has an end event on the heap), so the last busy step "
        "is 0 and `until` only multiplies that 0",
    ("simulate", "_job_done", "min(f, 1.0)", "1.0 -> 1.5"):
        "f = finished jobs / jobs never exceeds 1, so min(f, 1.5) is f, as min(f, 1.0) is",
    ("simulate", "loop", "self.wake_token += 1", "1 -> 2"):
        "wake tokens are only compared for equality with the latest one pushed: any strictly increasing counter "
        "tells a stale wake-up apart the same way",
    ("memory", "effective_zero_stage", "return 3", "3 -> 4"):
        "the stage is only compared (_detailed: == 0, >= 1, >= 3; _compute_copies: < 3; model_state_bytes: >= 1, "
        ">= 2, >= 3) and has no caller outside memory.py: 4 passes every test 3 passes",
    ("memory", "layer_activations", "ps.compute_copy_bytes > 0", "0 -> 1"):
        "compute_copy_bytes is 0 or 2 in every PrecisionSetup (training.PRECISIONS, recipes.precision_setup's "
        "fsdp2/deepspeed setups; TrainingSpec.precision names one of them): > 1 and > 0 agree",
    ("memory", "_detailed", "0.0 * optimizer", "Mult -> Div"):
        "optimizer > 0 on every stage (every stage has parameters, LoRA adapters when lora_rank >= 1, and every "
        "optimizer keeps states: OPTIMIZER_STATE_BYTES > 0), finite (check_sizes bounds the sizes): 0 / x == 0 * x",
}


def _key(module: str, func: str, node: ast.AST, parent: dict[int, ast.AST], change: str) -> tuple[str, str, str, str]:
    shown = node
    if isinstance(node, ast.Constant):  # a constant is named by the expression around it (past a unary minus)
        while id(shown) in parent and (shown is node or isinstance(shown, ast.UnaryOp)):
            shown = parent[id(shown)]
    return (module, func, ast.unparse(shown), change)


def _sites(tree: ast.AST, module: str = "") -> list[tuple[int, ast.AST, str]]:
    """Every mutable node inside a function body (not docstrings, not annotations), with a description; the
    reviewed equivalent mutants of `module` (EQUIVALENT) are left out."""
    out = []
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inside: dict[int, str] = {}  # node id -> innermost enclosing function (ast.walk meets outer functions first)
    for f in funcs:
        body = f.body[1:] if (f.body and isinstance(f.body[0], ast.Expr) and isinstance(f.body[0].value, ast.Constant)
                              and isinstance(f.body[0].value.value, str)) else f.body
        for stmt in body:
            inside.update((id(n), f.name) for n in ast.walk(stmt))
    parent = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
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
    if not module:
        return out
    keys = [_key(module, inside[id(node)], node, parent, change) for _, node, change in out]
    for entry in (e for e in EQUIVALENT if e[0] == module):
        if (n := keys.count(entry)) != 1:
            print(f"mutation.py: EQUIVALENT entry {entry} matches {n} sites; review it", file=sys.stderr)
    return [site for site, key in zip(out, keys, strict=True) if key not in EQUIVALENT]


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
        sites = _sites(tree, mod)
        rng = random.Random(f"{seed}:{mod}")
        for i, node, change in sorted(rng.sample(sites, min(per_module, len(sites))), key=lambda s: s[0]):
            out.append(Mutant(mod, i, node.lineno, change))
    return out


def run_mutant(m: Mutant, work: Path, timeout_s: float, deselect: tuple[str, ...] = ()) -> tuple[str, float]:
    """'killed' / 'survived' / 'timeout' (counted as killed), and the wall time."""
    target = work / "frenzy_core" / f"{m.module}.py"
    original = (REPO / "frenzy_core" / f"{m.module}.py").read_text()
    target.write_text(_mutate(original, m.site))
    tests = [t for t in TARGETS[m.module] if (work / t).exists()]
    env = {**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                               "--no-header", "-o", "addopts=", *tests,
                               *(a for d in deselect if d.split("::")[0] in tests for a in ("--deselect", d))],
                              cwd=work, env=env,
                              capture_output=True, timeout=timeout_s)
        verdict = "survived" if proc.returncode == 0 else "killed"
    except subprocess.TimeoutExpired:
        verdict = "timeout"
    finally:
        target.write_text(original)
    return verdict, time.perf_counter() - t0


def _baseline_failures(work: Path, tests: list[str]) -> tuple[str, ...]:
    """The tests that fail on the unmutated code (deselected in every mutant run, and named, so a failure that is
    not the mutant's cannot count as a kill); exits when the failure is not a test that can be deselected."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-o", "addopts=",
                           *tests], cwd=work, env={**os.environ, "PYTHONPATH": str(work)}, capture_output=True)
    if proc.returncode == 0:
        return ()
    out = proc.stdout.decode()
    failing = tuple(line.split(" ", 1)[1].split(" - ", 1)[0] for line in out.splitlines()
                    if line.startswith("FAILED ") and "::" in line)
    if proc.returncode != 1 or not failing or any(line.startswith("ERROR ") for line in out.splitlines()):
        sys.exit("the unmutated tests fail; fix them before measuring mutants:\n" + out[-2000:])
    print("failing before any mutation, deselected:", *failing, sep="\n  ", flush=True)
    return failing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument("--per-module", type=int, default=12)
    ap.add_argument("--seed", type=int, nargs="+", default=[0],
                    help="one or more seeds; a mutant drawn by several seeds runs once")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    args = ap.parse_args()
    drawn = {seed: draw_mutants(args.modules, args.per_module, seed) for seed in args.seed}
    mutants = sorted({m for ms in drawn.values() for m in ms}, key=lambda m: (args.modules.index(m.module), m.site))
    # a copy beside the repository, so tests that read ../shared still find it
    work = Path(tempfile.mkdtemp(prefix=".mutation-", dir=REPO.parent))
    try:
        for part in ("frenzy_core", "tests", "bench", "sample_clusters", "pyproject.toml"):
            src = REPO / part
            (shutil.copytree if src.is_dir() else shutil.copy)(src, work / part)
        deselect = _baseline_failures(work, sorted({t for m in args.modules for t in TARGETS[m]
                                                    if (work / t).exists()}))
        verdicts: dict[Mutant, str] = {}
        for k, m in enumerate(mutants, 1):
            verdict, wall = run_mutant(m, work, args.timeout_s, deselect)
            verdicts[m] = verdict
            print(f"[{k:>3}/{len(mutants)}] {verdict:8} {m.module}.py:{m.line} {m.change} ({wall:.1f} s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    trees = {mod: ast.parse((REPO / "frenzy_core" / f"{mod}.py").read_text()) for mod in args.modules}
    sites_by_module = {mod: len(_sites(t, mod)) for mod, t in trees.items()}
    equivalent_by_module = {mod: len(_sites(t)) - sites_by_module[mod] for mod, t in trees.items()}
    summaries = {}
    for seed, ms in drawn.items():
        results = [(m, verdicts[m]) for m in ms]
        score = {}
        for mod in args.modules:
            mine = [v for m, v in results if m.module == mod]
            score[mod] = round(sum(v != "survived" for v in mine) / len(mine), 3) if mine else None
        survivors = [f"{m.module}.py:{m.line} {m.change}" for m, v in results if v == "survived"]
        print(f"seed {seed} survivors:", *survivors, sep="\n  ")
        killed = sum(v != "survived" for _, v in results)
        summaries[seed] = {"date": time.strftime("%Y-%m-%d"), "seed": seed, "per_module": args.per_module,
                           "mutants": len(results), "killed": killed,
                           "mutation_score": round(killed / len(results), 3), "score_by_module": score,
                           "survivors": len(survivors), "deselected_failing_tests": len(deselect),
                           "sites_by_module": sites_by_module, "equivalent_left_out_by_module": equivalent_by_module}
    for seed in args.seed[:-1]:
        print(json.dumps(summaries[seed]))
    print(json.dumps(summaries[args.seed[-1]] if len(args.seed) == 1 else
                     {"date": time.strftime("%Y-%m-%d"), "seeds": [summaries[s] for s in args.seed]}))

if __name__ == "__main__":
    main()
