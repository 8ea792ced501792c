"""Generated blocks of the docs pages: figures quoted in README.md and docs/*.md come from the files the benchmarks write.

A page marks a block as

    <!-- begin generated: NAME -->
    ...
    <!-- end generated: NAME -->

and :func:`expected` says what each block holds, computed from the published outputs (``docs/results/``)
and the shipped manifests. ``python -m benchmarks all`` refreshes every block after it publishes
(:func:`refresh`); ``tests/test_docs_figures.py`` checks that every block matches its files, so a page
cannot quote a figure that the committed outputs do not contain.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from benchmarks import write_atomic

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _pfn_validation() -> str:
    from mara_agents.predictors.pfn import DEFAULT_CHECKPOINT
    from mara_agents.predictors.train_pfn import validation_table

    return validation_table(_json(DEFAULT_CHECKPOINT.with_suffix(".json")))


def _prediction_targets() -> str:
    from benchmarks.prediction import targets_table

    return targets_table(_json(RESULTS / "prediction.json")).strip()


def _prediction_targets_unselected() -> str:
    from benchmarks.prediction import UNSELECTED_POLICY, targets_table

    return targets_table(_json(RESULTS / "prediction.json"), policy=UNSELECTED_POLICY).strip()


def _completion_targets() -> str:
    from benchmarks.report import pfn_targets_table

    return pfn_targets_table(_json(RESULTS / "paper" / "paper.json")).strip()


def _posterior_targets() -> str:
    from benchmarks.report import pfn_targets_table

    return pfn_targets_table(_json(RESULTS / "paper" / "paper.json"), "posterior_targets").strip()


def _budget() -> str:
    return (RESULTS / "budget" / "budget.md").read_text().strip()


def _quick_table() -> str:
    from benchmarks.quick import table

    saved = _json(RESULTS / "quick.json")
    return table(saved["summary"], saved["roots"]).strip()


def _suite_table(name: str) -> Callable[[], str]:
    def make() -> str:
        import importlib

        return importlib.import_module(f"benchmarks.{name}").table(_json(RESULTS / f"{name}.json")["rows"]).strip()

    return make


def _library_rows() -> str:
    """The shipped third-party-library rows of the paper suite: completion on the train load of each task
    set, and the paired root-level differences from EDF and from the best fixed row on id/train."""
    from benchmarks.agents import LIBRARY_ROWS, library_checkpoints
    from benchmarks.report import row_label

    paper = _json(RESULTS / "paper" / "paper.json")
    table, columns = paper["table"], [c for c in paper["scenarios"] if c.endswith("/train")]
    pairs = {(d["a"], d["b"], d["scenario"]): d for d in paper["differences"]}
    best = {d["scenario"]: d["b"] for d in paper["differences"] if d["best_fixed"]}

    def diff(a: str, b: str | None, column: str) -> str:
        d = pairs.get((a, b, column))
        return "—" if d is None else f"{d['mean']:+.1f} [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}]"

    lines = ["| row | " + " | ".join(f"{c} %" for c in columns) + " | − edf on id/train, points [95% CI] | − best fixed row on id/train |",
             "|---" * (len(columns) + 3) + "|"]
    for row in (*LIBRARY_ROWS, "edf"):
        if row not in table:
            continue
        cells = [f"{table[row][c]['mean']:.1f} ± {table[row][c]['sd']:.1f}" if c in table[row] else "—" for c in columns]
        versus = f"{diff(row, best.get('id/train'), 'id/train')} ({best.get('id/train')})" if row != "edf" else "—"
        lines.append(f"| {row_label(row)} | " + " | ".join(cells) + f" | {diff(row, 'edf', 'id/train') if row != 'edf' else '—'} | {versus} |")
    lines += ["", f"Mean ± sd over {paper['roots']} evaluation roots (docs/results/paper/paper.json, commit {paper['commit']}); differences are "
              "paired by root. How each shipped policy was trained (its train.json):", "",
              "| row | command | env steps | training wall s | machine |", "|---|---|---|---|---|"]
    for row, checkpoint in library_checkpoints().items():
        train = checkpoint.with_name("train.json")
        if row in table and train.exists():
            run = _json(train)
            machine = run.get("machine", "—")
            if isinstance(machine, dict):
                machine = f"{machine.get('cpus')} CPUs, torch threads {machine.get('torch_threads')}" + (f"; {machine['note']}" if machine.get("note") else "")
            lines.append(f"| {row} | `{run.get('command', '—')}` | {run['env_steps']:,} | {run['seconds']:,.0f} | {machine} |")
    return "\n".join(lines)


def _library_small() -> str:
    from benchmarks.libraries import OUT, table

    return table(_json(OUT))


def _tutorial_example() -> str:
    """evaluate-your-agent.md's example run (docs/results/tutorial/paper.json): the rows' completion and the
    third-party row's paired differences from the best fixed row (★) and the better leak probe (◆)."""
    from benchmarks.report import row_label

    run = _json(RESULTS / "tutorial" / "paper.json")
    columns, table = run["scenarios"], run["table"]
    lines = ["| agent | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {row_label(row)} | " + " | ".join(f"{table[row][c]['mean']:.1f} ± {table[row][c]['sd']:.1f}" for c in columns) + " |"
              for row in table]
    lines += ["", "| difference | scenario | mean | 95% CI | p | roots |", "|---|---|---|---|---|---|"]
    third = run["rows"][0]
    for d in run["differences"]:
        if d["a"] == third and (d["best_fixed"] or d["best_probe"]):
            mark = "★" if d["best_fixed"] else "◆"
            lines.append(f"| {d['a']} − {d['b']} {mark} | {d['scenario']} | {d['mean']:+.1f} | [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}] | "
                         f"{d['p_value']:.4f} | {d['n']} |")
    lines += ["", f"docs/results/tutorial/paper.json: the command above run from docs/tutorials/ (which holds closest_to_target.py), "
              f"commit {run['commit']}, {run['machine']['cpus']} CPUs."]
    return "\n".join(lines)


def _benchmarl_routes() -> str:
    """benchmarl.md's side-by-side speed of BenchMARL's two routes (docs/results/libraries/benchmarl_routes.json)."""
    run = _json(RESULTS / "libraries" / "benchmarl_routes.json")
    env = run["env"]
    lines = ["| route | env steps | wall s | env steps / s |", "|---|---|---|---|"]
    lines += [f"| {route} | {r['env_steps']:,} | {r['seconds']:.1f} | {r['env_steps_per_s']:,.1f} |" for route, r in run["routes"].items()]
    machine = run["machine"]
    lines += ["", f"Batched / PettingZoo: **{run['ratio']:.1f}×** the env steps per second. BenchMARL's MAPPO with its MLP policy, "
              f"{run['iterations']} iterations × {run['frames_per_batch']:,} env steps, {run['n_envs']} envs per collector, "
              f"N = {env.get('n_nodes')}, K = {env.get('n_slots')}, the two runs one after the other on {machine['cpus']} CPUs "
              f"(torch threads {machine['torch_threads']}; docs/results/libraries/benchmarl_routes.json, `{run['command']}`)."]
    return "\n".join(lines)


def _perf() -> str:
    from benchmarks.perf import summary

    return summary(_json(RESULTS / "perf.json")).strip()


def _sb3_vec_env() -> str:
    from benchmarks.libraries import OUT, vec_env_table

    return vec_env_table(_json(OUT))


def _ray_cluster() -> str:
    from benchmarks.ray_cluster import table

    return table(_json(RESULTS / "ray_cluster.json"))


def _ray_cluster_live() -> str:
    from benchmarks.ray_cluster import table_live

    return table_live(_json(RESULTS / "ray_cluster_live.json"))


def _fidelity() -> str:
    from benchmarks.fidelity import table

    return table(_json(RESULTS / "fidelity" / "fidelity.json"))


#: (page, relative to the repository root; block name) -> the function that computes its content from the published files.
BLOCKS: dict[tuple[str, str], Callable[[], str]] = {
    ("README.md", "quick-table"): _quick_table,
    ("docs/curves.md", "calibration-table"): _suite_table("calibration"),
    ("docs/curves.md", "leakage-table"): _suite_table("leakage"),
    ("docs/prediction.md", "pfn-validation"): _pfn_validation,
    ("docs/prediction.md", "prediction-targets"): _prediction_targets,
    ("docs/prediction.md", "prediction-targets-edf"): _prediction_targets_unselected,
    ("docs/prediction.md", "completion-targets"): _completion_targets,
    ("docs/agents.md", "posterior-targets"): _posterior_targets,
    ("docs/agents.md", "budget-study"): _budget,
    ("docs/tutorials/README.md", "library-rows"): _library_rows,
    ("docs/tutorials/tianshou.md", "library-rows"): _library_rows,
    ("docs/tutorials/sb3.md", "library-rows"): _library_rows,
    ("docs/tutorials/torchrl.md", "library-rows"): _library_rows,
    ("docs/tutorials/rllib.md", "library-rows"): _library_rows,
    ("docs/tutorials/benchmarl.md", "library-rows"): _library_rows,
    ("docs/tutorials/benchmarl.md", "benchmarl-routes"): _benchmarl_routes,
    ("docs/tutorials/sb3-vectorized-maskable-ppo.md", "sb3-vec-env"): _sb3_vec_env,
    ("docs/tutorials/evaluate-your-agent.md", "tutorial-example"): _tutorial_example,
    ("docs/benchmarks.md", "perf"): _perf,
    ("docs/fidelity.md", "fidelity-table"): _fidelity,
    ("docs/benchmarks.md", "ray-cluster"): _ray_cluster,
    ("docs/benchmarks.md", "ray-cluster-live"): _ray_cluster_live,
    **{(f"docs/tutorials/{page}", "library-small"): _library_small for page in ("README.md", "tianshou.md", "sb3.md", "torchrl.md")},
}


def _pattern(name: str) -> re.Pattern:
    name = re.escape(name)
    return re.compile(rf"(<!-- begin generated: {name} -->\n)(.*?)(<!-- end generated: {name} -->)", re.S)


def block(text: str, name: str) -> str:
    """The content of block ``name`` in a page's ``text`` (without its markers and final newline).

    Raises:
        ValueError: the page has no such block, or has it more than once.
    """
    found = _pattern(name).findall(text)
    if len(found) != 1:
        raise ValueError(f"expected one generated block {name!r}, found {len(found)}")
    return found[0][1].rstrip("\n")


def expected() -> dict[tuple[str, str], str]:
    """Every block's content as the published files give it."""
    return {key: make() for key, make in BLOCKS.items()}


def refresh(root: Path = ROOT) -> list[Path]:
    """Rewrite every block from the published files; returns the pages changed."""
    changed = []
    for (page, name), content in expected().items():
        path = root / page
        text = path.read_text()
        block(text, name)  # exactly one block, or a clear error
        new = _pattern(name).sub(lambda m: m.group(1) + content + "\n" + m.group(3), text)
        if new != text:
            write_atomic(path, new)
            changed.append(path)
    return changed
