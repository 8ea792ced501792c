"""Benchmarks for core_env and mara_agents, run as ``python -m benchmarks SUITE``.

Every suite writes its results under :data:`RESULTS_DIR` (gitignored) as ``SUITE.json`` (and, for
per-episode tables, ``SUITE.csv``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"


def write_results(name: str, payload: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] | None = None) -> list[Path]:
    """Write ``payload`` to ``RESULTS_DIR/name.json`` and ``rows`` (if given) to ``name.csv``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    paths = [RESULTS_DIR / f"{name}.json"]
    paths[0].write_text(json.dumps(payload, indent=1) + "\n")
    if rows:
        paths.append(RESULTS_DIR / f"{name}.csv")
        with paths[1].open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return paths


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
