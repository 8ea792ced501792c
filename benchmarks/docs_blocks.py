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


def _completion_targets() -> str:
    from benchmarks.report import pfn_targets_table

    return pfn_targets_table(_json(RESULTS / "paper" / "paper.json")).strip()


def _quick_table() -> str:
    from benchmarks.quick import table

    saved = _json(RESULTS / "quick.json")
    return table(saved["summary"], saved["roots"]).strip()


def _suite_table(name: str) -> Callable[[], str]:
    def make() -> str:
        import importlib

        return importlib.import_module(f"benchmarks.{name}").table(_json(RESULTS / f"{name}.json")["rows"]).strip()

    return make


#: (page, relative to the repository root; block name) -> the function that computes its content from the published files.
BLOCKS: dict[tuple[str, str], Callable[[], str]] = {
    ("README.md", "quick-table"): _quick_table,
    ("docs/curves.md", "calibration-table"): _suite_table("calibration"),
    ("docs/curves.md", "leakage-table"): _suite_table("leakage"),
    ("docs/prediction.md", "pfn-validation"): _pfn_validation,
    ("docs/prediction.md", "prediction-targets"): _prediction_targets,
    ("docs/prediction.md", "completion-targets"): _completion_targets,
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
