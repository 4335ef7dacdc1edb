"""Mutation score of the core: can the tests tell when the code is wrong?

Each mutant flips one operator or constant in one function of a core module (a comparison `<` <-> `<=`, `+` <-> `-`,
`*` <-> `/`, `min` <-> `max`, `and` <-> `or`, an integer constant n -> n + 1, a float x -> 1.5 x) and runs, on a copy
of the repository, every test file that imports the module (an `import`/`from` of `frenzy_core.<module>` or
`from frenzy_core import <module>`, or the dotted name `frenzy_core.<module>` anywhere in a `tests/test_*.py`) plus
the module's own doctests (`--doctest-modules frenzy_core/<module>.py`). `--indirect` adds the test files that import
a core module which imports it (metrics.py, say, is also run by test_simulate.py through simulate.py). A package
whose `__init__` re-exports its modules' names (FACADE_PACKAGES: `memory`) stands for all of them: `--modules
memory` mutates each of frenzy_core/memory/*.py on its own, with every test file that imports the package or that
module (the rest of the repository imports the package, never a module inside it).

A mutant is *killed* when a test fails (pytest exit 1, or 2 when a test file no longer imports), *survives* when
they all pass, *times out* when the run exceeds `--timeout-s` (reported apart, never counted as killed) and is an
*error* on any other pytest exit (3 internal error, 4 usage, 5 nothing collected). The score is
killed / (killed + survived); the conservative score is killed / every mutant drawn, so a timeout or error lowers it.
Mutants are drawn deterministically (a fixed seed over every mutable site of each module, less the reviewed
equivalent mutants in EQUIVALENT), so two runs on the same code report the same mutants; survivors and timeouts are
listed with file:line:column, the function and the source before and after, so each one can be read.

    python bench/mutation.py                 # 12 mutants per module, the default
    python bench/mutation.py --per-module 30 --modules memory plans
    python bench/mutation.py --seed 0 1        # two draws; a mutant both draws hold runs once
    python bench/mutation.py --modules metrics --per-module 6 --indirect
    python bench/mutation.py --modules memory --list  # the modules, their test files and the mutants; runs none

Tests that already fail on the unmutated code are named and deselected, so they cannot count as kills.

Last line: one JSON object, the headline figures: per module and overall the mutants, killed, survived, timeout,
error, score_pct and conservative_score_pct (and per seed when several are given).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "frenzy_core"
DEFAULT_MODULES = ("memory", "plans", "packing", "simulate", "metrics")
# Packages whose __init__ re-exports the names of its modules: every file outside imports the package, so a test that
# imports it runs each of its modules, and naming the package names all of them (`expand_modules`)
FACADE_PACKAGES = ("memory",)
# what the copy leaves out: the environment, history, caches and earlier copies
COPY_IGNORE = shutil.ignore_patterns(".venv", ".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mutation-*",
                                     "*.egg-info", "node_modules")
# pytest exit codes (docs.pytest.org, "Exit codes"): 1 tests failed, 2 interrupted (a collection error here: the
# mutant breaks an import), 3 internal error, 4 usage error, 5 no tests collected
KILLED_EXIT_CODES = (1, 2)
SWAPS_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq}
SWAPS_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}


def core_modules() -> list[str]:
    """Every core module by dotted name under frenzy_core (`memory`, `policies.fcfs`), package inits left out."""
    return sorted(".".join(p.relative_to(CORE).with_suffix("").parts) for p in CORE.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def expand_modules(names: list[str]) -> list[str]:
    """Module names with each facade package (FACADE_PACKAGES) replaced by its modules, in order, each once.

    >>> expand_modules(["plans", "memory"])[:3]
    ['plans', 'memory.activations', 'memory.adapters']
    """
    out: list[str] = []
    for name in names:
        for mod in ([m for m in core_modules() if m.startswith(name + ".")] if name in FACADE_PACKAGES else [name]):
            if mod not in out:
                out.append(mod)
    return out


def module_path(mod: str) -> str:
    """`policies.fcfs` -> `frenzy_core/policies/fcfs.py` (relative to the repository)."""
    return "frenzy_core/" + mod.replace(".", "/") + ".py"


def _imported_core_modules(source: str, importer: str = "") -> set[str]:
    """The core modules (dotted, under frenzy_core) a source file imports; `importer` (dotted) resolves relative
    imports. `from frenzy_core import memory` and `from frenzy_core.memory import x` both name `memory`; a dotted
    `frenzy_core.memory` anywhere in the text (a monkeypatch target, a `python -c` string) counts too."""
    found = {m.group(1) for m in re.finditer(r"\bfrenzy_core\.([A-Za-z_][\w.]*\w)", source)}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    package = importer.rsplit(".", 1)[0].split(".") if "." in importer else []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.removeprefix("frenzy_core.") for a in node.names if a.name.startswith("frenzy_core."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative, inside the core
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                dotted = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and (node.module == "frenzy_core" or node.module.startswith("frenzy_core.")):
                dotted = node.module.removeprefix("frenzy_core").removeprefix(".")
            else:
                continue
            if dotted:
                found.add(dotted)
            found.update(f"{dotted}.{a.name}".lstrip(".") for a in node.names)
    # a name like `memory.GIB` or `policies.base.X` is kept as every dotted prefix, so a module is matched exactly
    return {".".join(n.split(".")[:k]) for n in found for k in range(1, n.count(".") + 2)}


def test_files_for(mod: str, indirect: bool = False) -> list[str]:
    """The tests/test_*.py files that import `mod` (see _imported_core_modules) or the facade package holding it
    (FACADE_PACKAGES); with `indirect`, also those that import a core module which imports either, at any depth."""
    targets = {mod} | {pkg for pkg in FACADE_PACKAGES if mod.startswith(pkg + ".")}
    if indirect:
        imports = {m: _imported_core_modules((REPO / module_path(m)).read_text(), m) for m in core_modules()}
        grew = True
        while grew:
            new = {m for m, names in imports.items() if names & targets} - targets
            targets |= new
            grew = bool(new)
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")
                  if _imported_core_modules(p.read_text()) & targets)


@dataclass(frozen=True)
class Mutant:
    module: str
    site: int  # index of the mutable node in ast.walk order
    line: int
    change: str
    func: str = ""  # the innermost enclosing function
    col: int = 0  # 1-based column of the mutated node (two sites on one line read apart)
    before: str = ""  # the mutated node as source, before and after
    after: str = ""

    def where(self) -> str:
        return (f"{module_path(self.module)}:{self.line}:{self.col} in {self.func}(): {self.change}: "
                f"`{_short(self.before)}` -> `{_short(self.after)}`")


def _short(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    ("packing", "best_node", "int(left.argmin()) if len(ix) else 0", "0 -> 1"):
        "every type of a ClusterIndex has nodes (types are those present): the else branch is dead",
    ("limits", "open_user_file", "getattr(os, 'O_NOCTTY', 0)", "0 -> 1"):
        "the default is read only where os has no O_NOCTTY (not on Linux or macOS, where the tests run)",
    ("limits", "load_yaml", "short_repr(problem, 80)", "80 -> 81"):
        "no PyYAML problem string reaches 80 characters: the longest template (scanner.py, 'expected URI escape "
        "sequence of 2 hexadecimal numbers, but found %r') is 67 with one character's repr, under 78 quoted",
    ("memory.activations", "megatron_expert_inner_bytes", "model.mlp_kind == 'swiglu'", "Eq -> NotEq"):
        "both branches keep 3 x act x inner bytes (SwiGLU: fc1's 2 x inner output + the weighted inner; GELU: fc1 "
        "output + GELU output + weighted copy, inner each): no output can tell which ran",
    ("simulate", "__init__", "self.seq = 0", "0 -> 1"):
        "seq is only the heap's tie-break between events of the same time and kind, read in push after `+= 1`: "
        "starting from 1 shifts every sequence number alike, so the heap orders the same",
    ("simulate", "__init__", "self.release_epoch = 0", "0 -> 1"):
        "policies only compare a stored release_epoch with the current one for equality (fcfs, frenzy, frenzy-eft "
        "`_failed_epoch` / `waiting`; a missing entry is None, never equal): a common offset changes no decision",
    ("memory.phases", "_detailed", "stage_all.size <= STAGES_AT_ONCE_ELEMENTS", "LtE -> Lt"):
        "the threshold only picks between evaluating the bounding stages at once or one by one, element by element "
        "the same arithmetic (tests/test_memory_phases.py checks both paths give the same bytes): at exactly the "
        "threshold either path is right",
    ("memory.states", "stage_model_states", "0.0 * weights", "Mult -> Div"):
        "0 / weights is 0 as 0 x weights is: every stage holds weights (> 0), so no 0 / 0 arises",
    ("memory.copies", "zero3_gathered_elements", "_compute_copies(model, recipe, ps, 3, float(par.tp), p, 0.0, np.asarray(True), training.recompute == 'full', float(par.ep), p - 1, float(par.expert_tp), float(par.dp * par.cp), training.offload == 'params', (par.first_stage_layers, par.last_stage_layers, par.vp))", "3 -> 4"):
        "_compute_copies only asks `zero < 3`: 3 and 4 take the same ZeRO-3 branch",
    ("memory.copies", "zero3_gathered_elements", "training.recompute == 'full'", "Eq -> NotEq"):
        "_compute_copies reads full_recompute only below ZeRO-3; this call is always ZeRO-3",
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
    ("plans", "_dense_ids", "ids.min() < 0", "Lt -> LtE"):
        "which path `_dense_ids` takes is speed only: ids with a 0 take np.unique's inverse, the same dense ids the "
        "lookup table gives (its doctest and tests/test_plans.py compare the two)",
    ("plans", "_layouts", "p - 1", "1 -> 2"):
        "the dedup key (first stage's layers, stage p - 2's) determines the last stage's as well as (first, last) "
        "does: the stages sum to num_layers and the middle ones hold equal shares, so (first, a middle one) fixes "
        "the last (at p = 2, stage 0 and the total fix it)",
    ("plans", "rank_plans", "len(chain) + 1 if get_framework(training.framework).is_band else 1", "1 -> 2"):
        "the first round's size is speed only: a chain's rows go in ascending micro-batch, so the extra rows a "
        "larger round evaluates need more memory than the row before them; they fit no GPU the earlier one did not, "
        "and never become a cell's smallest-memory row (the band framework evaluates every row at once, the same way)",
    ("simulate", "_job_done", "min(f, 1.0)", "1.0 -> 1.5"):
        "f = finished jobs / jobs never exceeds 1, so min(f, 1.5) is f, as min(f, 1.0) is",
    ("simulate", "loop", "self.wake_token += 1", "1 -> 2"):
        "wake tokens are only compared for equality with the latest one pushed: any strictly increasing counter "
        "tells a stale wake-up apart the same way",
    ("memory.states", "effective_zero_stage", "return 3", "3 -> 4"):
        "the stage is only compared (step_context: == 0; stage_model_states: >= 3; gradient_bucket_bytes, "
        "optimizer_step_terms: >= 1; backward_gradients: in (1, 2); _compute_copies: < 3; model_state_bytes: >= 1, "
        ">= 2, >= 3) and has no caller outside frenzy_core/memory/: 4 passes every test 3 passes",
    ("memory.activations", "_layer_context", "ps.compute_copy_bytes > 0", "0 -> 1"):
        "compute_copy_bytes is 0 or 2 in every PrecisionSetup (training.PRECISIONS, recipes.precision_setup's "
        "fsdp2/deepspeed setups; TrainingSpec.precision names one of them): > 1 and > 0 agree",
    ("memory.states", "stage_model_states", "0.0 * optimizer", "Mult -> Div"):
        "optimizer > 0 on every stage (every stage has parameters, LoRA adapters when lora_rank >= 1, and every "
        "optimizer keeps states: OPTIMIZER_STATE_BYTES > 0), finite (check_sizes bounds the sizes): 0 / x == 0 * x",
    ("memory.copies", "fp8_weight_cache_bytes", "fp8_linear_parameters(step, model, last, castable) * copies * FP8_BYTES",
     "Mult -> Div"):
        "FP8_BYTES is 1 (an e4m3 / e5m2 element, sizes.py): x * 1 == x / 1",
    ("memory.pipeline", "in_flight_layers", "first > 0", "Gt -> GtE"):
        "the clause is and-ed with np.mod(first, vp) > 0, which is False at first == 0: first >= 0 selects the same "
        "stages",
    ("memory.predict", "_evaluate", "parts.get('stream_pools', 0.0)", "0.0 -> 1.0"):
        "only the paper method's parts lack 'stream_pools' (_detailed always returns it), and pools._gpu_reports "
        "ignores the pools under the paper method (allocated = reserved = total = tensors)",
    ("memory.states", "model_state_bytes", "weights + 0 * d", "Add -> Sub"):
        "0 * d is 0 (d a finite rank count, broadcast only): weights - 0 == weights + 0",
    ("limits", "divisors", "n <= 0", "LtE -> Lt"):
        "only n = 0 tells them apart, and for n = 0 the loop `while i * i <= n` never runs: both return []",
    ("limits", "check_size", "len(text) * 4 > limit", "Gt -> GtE"):
        "the test only picks how a str is measured: at len(text) * 4 == limit the UTF-8 size is at most 4 bytes per "
        "character, so at most the limit, and len(text) is at most the limit too: neither path raises",
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


def _mutate(source: str, site: int) -> tuple[str, str, str]:
    """The mutated module source, and the mutated node as source before and after (for a constant, the expression
    around it, as `_key` names it)."""
    tree = ast.parse(source)
    parent = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    for i, node in enumerate(ast.walk(tree)):
        if i != site:
            continue
        shown = node
        if isinstance(node, ast.Constant):
            while id(shown) in parent and (shown is node or isinstance(shown, ast.UnaryOp)):
                shown = parent[id(shown)]
        before = ast.unparse(shown)
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
        return ast.unparse(tree), before, ast.unparse(shown)
    raise IndexError(site)


def _function_of(tree: ast.AST) -> dict[int, str]:
    """node index in ast.walk order -> the innermost enclosing function's name."""
    index = {id(n): i for i, n in enumerate(ast.walk(tree))}
    out: dict[int, str] = {}
    for f in ast.walk(tree):  # outer functions first, so an inner one overwrites
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.update((index[id(n)], f.name) for n in ast.walk(f) if n is not f)
    return out


def draw_mutants(modules: list[str], per_module: int, seed: int) -> list[Mutant]:
    out = []
    for mod in modules:
        source = (REPO / module_path(mod)).read_text()
        tree = ast.parse(source)
        sites = _sites(tree, mod)
        func = _function_of(tree)
        rng = random.Random(f"{seed}:{mod}")
        for i, node, change in sorted(rng.sample(sites, min(per_module, len(sites))), key=lambda s: s[0]):
            _, before, after = _mutate(source, i)
            out.append(Mutant(mod, i, node.lineno, change, func.get(i, "?"), node.col_offset + 1, before, after))
    return out


def _pytest(work: Path, args: list[str], timeout_s: float | None = None) -> tuple[int | None, str]:
    """Run pytest in `work` (its own process group, so a timeout stops every process the tests started); the exit
    code (None on timeout) and the output."""
    env = {**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--no-header",
                             "-o", "addopts=", *args], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out.decode(errors="replace")


def _test_args(mod: str, tests: list[str], deselect: tuple[str, ...]) -> list[str]:
    paths = [*tests, module_path(mod)]
    return ["--doctest-modules", *paths,
            *(a for d in deselect if d.split("::")[0] in paths for a in ("--deselect", d))]


def run_mutant(m: Mutant, work: Path, tests: list[str], timeout_s: float,
               deselect: tuple[str, ...] = ()) -> tuple[str, float]:
    """'killed' / 'survived' / 'timeout' / 'error' (see the module docstring), and the wall time."""
    target = work / module_path(m.module)
    original = (REPO / module_path(m.module)).read_text()
    target.write_text(_mutate(original, m.site)[0])
    t0 = time.perf_counter()
    try:
        code, _ = _pytest(work, ["-q", "-x", *_test_args(m.module, tests, deselect)], timeout_s)
    finally:
        target.write_text(original)
    verdict = ("timeout" if code is None else "survived" if code == 0 else
               "killed" if code in KILLED_EXIT_CODES else "error")
    return verdict, time.perf_counter() - t0


def _baseline_failures(work: Path, tests_by_module: dict[str, list[str]]) -> tuple[str, ...]:
    """The tests that fail on the unmutated code (deselected in every mutant run, and named, so a failure that is
    not the mutant's cannot count as a kill); exits when the failure is not a test that can be deselected, or
    when a module has no test at all."""
    paths = sorted({t for ts in tests_by_module.values() for t in ts} | {module_path(m) for m in tests_by_module})
    code, out = _pytest(work, ["-q", "-rfE", "--doctest-modules", *paths])
    if code == 0:
        return ()
    if code == 5:
        sys.exit("no test collected for " + ", ".join(tests_by_module) + ": nothing can kill a mutant")
    failing = tuple(line.split(" ", 1)[1].split(" - ", 1)[0] for line in out.splitlines()
                    if line.startswith("FAILED ") and "::" in line)
    if code != 1 or not failing or any(line.startswith("ERROR ") for line in out.splitlines()):
        sys.exit("the unmutated tests fail; fix them before measuring mutants:\n" + out[-2000:])
    print("failing before any mutation, deselected:", *failing, sep="\n  ", flush=True)
    return failing


def _pct(num: int, den: int) -> float | None:
    return round(100.0 * num / den, 1) if den else None


def _tally(verdicts: list[str]) -> dict[str, int | float | None]:
    n = {v: verdicts.count(v) for v in ("killed", "survived", "timeout", "error")}
    return {"mutants": len(verdicts), **n, "score_pct": _pct(n["killed"], n["killed"] + n["survived"]),
            "conservative_score_pct": _pct(n["killed"], len(verdicts))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", nargs="+", default=list(DEFAULT_MODULES), choices=[*core_modules(), *FACADE_PACKAGES],
                    metavar="MODULE", help="core modules by dotted name under frenzy_core, or a package of "
                    f"FACADE_PACKAGES ({', '.join(FACADE_PACKAGES)}) for each of its modules (default: %(default)s)")
    ap.add_argument("--per-module", type=int, default=12, help="mutants drawn per module and seed")
    ap.add_argument("--seed", type=int, nargs="+", default=[0],
                    help="one or more seeds; a mutant drawn by several seeds runs once")
    ap.add_argument("--timeout-s", type=float, default=120.0, help="per mutant; a run past it is a 'timeout'")
    ap.add_argument("--indirect", action="store_true",
                    help="also run the test files that import a core module which imports the mutated one")
    ap.add_argument("--list", action="store_true",
                    help="print the modules, their test files and the mutants drawn, then exit without running any")
    args = ap.parse_args()
    args.modules = expand_modules(args.modules)
    t_start = time.perf_counter()
    tests_by_module = {mod: test_files_for(mod, args.indirect) for mod in args.modules}
    for mod, tests in tests_by_module.items():
        print(f"{mod}: {len(tests)} test files + doctests of {module_path(mod)}:", *tests, flush=True)
    drawn = {seed: draw_mutants(args.modules, args.per_module, seed) for seed in args.seed}
    mutants = sorted({m for ms in drawn.values() for m in ms}, key=lambda m: (args.modules.index(m.module), m.site))
    if args.list:
        print(f"{len(mutants)} mutants:", *(m.where() for m in mutants), sep="\n  ")
        return
    # a copy beside the repository, so tests that read ../shared still find it
    work = Path(tempfile.mkdtemp(prefix=".mutation-", dir=REPO.parent))
    try:
        shutil.copytree(REPO, work, ignore=COPY_IGNORE, dirs_exist_ok=True)
        deselect = _baseline_failures(work, tests_by_module)
        verdicts: dict[Mutant, str] = {}
        for k, m in enumerate(mutants, 1):
            verdict, wall = run_mutant(m, work, tests_by_module[m.module], args.timeout_s, deselect)
            verdicts[m] = verdict
            print(f"[{k:>3}/{len(mutants)}] {verdict:8} {m.where()} ({wall:.1f} s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for kind in ("survived", "timeout", "error"):
        hits = [m for m in mutants if verdicts[m] == kind]
        if hits:
            print(f"{kind} ({len(hits)}):", *(m.where() for m in hits), sep="\n  ")
    trees = {mod: ast.parse((REPO / module_path(mod)).read_text()) for mod in args.modules}
    modules = {}
    for mod in args.modules:
        sites = len(_sites(trees[mod], mod))
        modules[mod] = {**_tally([v for m, v in verdicts.items() if m.module == mod]), "sites": sites,
                        "equivalent_left_out": len(_sites(trees[mod])) - sites,
                        "test_files": len(tests_by_module[mod])}
    summary = {"date": time.strftime("%Y-%m-%d"), "seeds": args.seed, "per_module": args.per_module,
               "timeout_s": args.timeout_s, "indirect": args.indirect, "modules": modules,
               "overall": _tally(list(verdicts.values())), "deselected_failing_tests": len(deselect),
               "wall_s": round(time.perf_counter() - t_start, 1)}
    if len(args.seed) > 1:
        summary["by_seed"] = {str(seed): {mod: _tally([verdicts[m] for m in ms if m.module == mod])
                                          for mod in args.modules} for seed, ms in drawn.items()}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
