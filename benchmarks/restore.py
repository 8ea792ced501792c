"""restore: rebuild a cell cache from published suite outputs, to re-render them without replaying the rows.

``python -m benchmarks restore [--from docs/results] [--out DIR] [--suites paper ...]``

Each cell-based suite publishes ``SUITE.json`` (its rows and roots) and ``SUITE.csv`` (one line per
episode of every cell). This command copies the published outputs (every suite's directory and the flat
JSON/PNG files) into ``DIR`` and writes ``DIR/cells``: one cached result per cell of the suite's current
spec, from its CSV lines, so that ``python -m benchmarks SUITE --out DIR`` (or ``all --out DIR``) finds
every row's cells cached and computes only what is missing. The **ceiling rows** (``milp-slots``,
``milp``) are never restored: the next run recomputes them from the stored ceilings
(``core_env/data/suites/*ceilings.json``), which is the point after ``python -m benchmarks ceilings``
improves them.

What a CSV cannot carry is restored from the published JSON, as row means: a cell's ``decision_ms`` and
``teacher_agreement`` (only their means over the first scenario's cells are published, in
``diagnostics``; every cell of the row gets that mean, so the published means are reproduced exactly)
and ``wall_s`` (0). ``feasibility_bound`` is recomputed from the cell's workloads. A cell of the spec that
the CSV lacks (a row added since) is left out and computed by the next run; a suite published with a
different row list or root count than its spec has now, or a CSV line that matches no cell, is an error
(exit 2): restoring would mix two protocols.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS_DIR

#: The suites whose cells can be restored (those with per-episode CSVs).
CELL_SUITES = ("paper", "stress", "diagnostics", "shaping", "falsifier", "scale")


def _number(text: str) -> int | float:
    return int(text) if text.lstrip("-").isdigit() else float(text)


def _episodes(path: Path) -> dict[tuple, list[dict[str, Any]]]:
    """CSV lines grouped by cell (agent, seed, task_set, load, env, root), in episode order."""
    from benchmarks.cells import EPISODE_STATS

    grouped: dict[tuple, dict[int, dict[str, Any]]] = {}
    with path.open(newline="") as handle:
        for line in csv.DictReader(handle):
            key = (line["agent"], int(line["seed"]), line["task_set"], line["load"], json.dumps(json.loads(line["env"])), int(line["root"]))
            grouped.setdefault(key, {})[int(line["episode"])] = {name: _number(line[name]) for name in EPISODE_STATS}
    return {key: [by_episode[e] for e in sorted(by_episode)] for key, by_episode in grouped.items()}


def restore_suite(name: str, source: Path, out: Path) -> tuple[int, int]:
    """Restore one suite's cells from ``source/name/`` into ``out/cells``; returns (restored, left to compute)."""
    from benchmarks.cells import EPISODE_STATS, FORMAT, CellStore
    from benchmarks.ceiling_cells import CEILING_ROWS
    from benchmarks.paper import specs

    payload = json.loads((source / name / f"{name}.json").read_text())
    spec = specs()[name]
    if payload["roots"] != spec.roots:
        raise ValueError(f"{source / name}: published with {payload['roots']} roots, the suite now has {spec.roots}")
    episodes = _episodes(source / name / f"{name}.csv")
    store, restored, left, used = CellStore(out / "cells"), 0, 0, set()
    for cell in spec.cells([row for row in payload["rows"] if row in spec.rows]):
        fields = json.loads(json.dumps(cell.fields(), default=list))
        key = (cell.agent, cell.seed, cell.task_set, str(cell.load), json.dumps(fields["env"]), cell.root)
        if cell.agent in CEILING_ROWS or key not in episodes:
            left += 1
            continue
        used.add(key)
        rows = episodes[key]
        diagnostics = payload["diagnostics"].get(cell.agent, {})
        result = {"format": FORMAT, "key": cell.key, "cell": fields, "episodes": rows,
                  "mean": {stat: float(np.mean([e[stat] for e in rows])) for stat in EPISODE_STATS},
                  "feasibility_bound": float(np.mean([w.feasibility_bound() for w in cell.workloads()])),
                  "decision_ms": float(diagnostics.get("decision_ms", 0.0)), "wall_s": 0.0, "restored_from": str(source / name / f"{name}.csv")}
        if "teacher" in diagnostics:
            result["teacher_agreement"] = {"teacher": diagnostics["teacher"], **{k: diagnostics[k] for k in ("same_tasks_served", "served_also_by_shadow")}}
        store.save(cell, result)
        if store.load(cell) is None:
            raise ValueError(f"{source / name}: the restored cell {cell} is not a valid result (a damaged CSV?)")
        restored += 1
    stray = {key for key in episodes if key[0] not in CEILING_ROWS} - used
    if stray:
        raise ValueError(f"{source / name / f'{name}.csv'}: {len(stray)} cells match no cell of the suite's spec, e.g. {sorted(stray)[0]}")
    return restored, left


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks restore", description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "results",
                        help="published outputs (default: docs/results)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help=f"output directory (default {RESULTS_DIR})")
    parser.add_argument("--suites", nargs="+", default=list(CELL_SUITES), choices=CELL_SUITES, help="default: all")
    args = parser.parse_args(argv)
    missing = [s for s in args.suites if not (args.source / s / f"{s}.csv").exists() or not (args.source / s / f"{s}.json").exists()]
    if missing:
        parser.error(f"{args.source} lacks the published JSON or CSV of {', '.join(missing)}")
    if args.out.resolve() == args.source.resolve():
        parser.error("--out must differ from --from (the published outputs are copied into it)")
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.source.iterdir():
        if path.is_dir() and path.name != "cells":
            shutil.copytree(path, args.out / path.name, dirs_exist_ok=True)
        elif path.suffix in (".json", ".png"):
            shutil.copy2(path, args.out / path.name)
    for name in args.suites:
        try:
            restored, left = restore_suite(name, args.source, args.out)
        except ValueError as error:
            parser.error(str(error))
        print(f"{name}: {restored} cells restored, {left} left for the next run (ceiling rows and cells the CSV lacks)")
    print(f"wrote {args.out / 'cells'}; next: python -m benchmarks all --out {args.out} --skip prediction training perf")
    return 0
