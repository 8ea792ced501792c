"""``python -m benchmarks restore``: a cell cache rebuilt from the published outputs re-renders a suite's
tables exactly (every row but the ceilings, which are recomputed from the stored ceilings), and refuses
CSVs that do not match the suite's spec."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.__main__ import main as run
from benchmarks.ceiling_cells import CEILING_ROWS
from benchmarks.cells import CellStore
from benchmarks.paper import specs

PUBLISHED = Path(__file__).resolve().parent.parent / "docs" / "results"


def test_a_restored_cache_re_renders_the_published_stress_table(tmp_path, capsys):
    store, spec = CellStore(tmp_path / "cells"), specs()["stress"]
    cells = spec.cells()
    expected = sum(c.agent not in CEILING_ROWS for c in cells)  # every cell of the spec but the ceilings'
    assert run(["restore", "--out", str(tmp_path), "--suites", "stress"]) == 0
    assert f"stress: {expected} cells restored, {len(cells) - expected} left" in capsys.readouterr().out
    assert sum(store.load(c) is not None for c in cells) == expected
    (tmp_path / "stress" / "stress.json").unlink()  # the copy of the published payload; the run writes it again
    assert run(["stress", "--out", str(tmp_path), "--workers", "1"]) == 0
    published, again = (json.loads((d / "stress" / "stress.json").read_text()) for d in (PUBLISHED, tmp_path))
    assert again["table"] == published["table"] and again["rows"] == published["rows"]
    assert (tmp_path / "stress" / "stress.csv").read_text() == (PUBLISHED / "stress" / "stress.csv").read_text()


def test_restore_refuses_a_csv_line_that_matches_no_cell(tmp_path, capsys):
    source = tmp_path / "published"
    shutil.copytree(PUBLISHED / "stress", source / "stress")
    with (source / "stress" / "stress.csv").open("a") as handle:
        handle.write("no-such-row,0,stress,train,[],0,0,0.5,1,2,1,0,0.5,1,0,0,0,0,3\n")
    with pytest.raises(SystemExit) as stop:
        run(["restore", "--from", str(source), "--out", str(tmp_path / "out"), "--suites", "stress"])
    assert stop.value.code == 2 and "match no cell of the suite's spec" in capsys.readouterr().err


def test_restore_refuses_a_suite_published_with_other_roots_and_missing_files(tmp_path, capsys):
    source = tmp_path / "published"
    shutil.copytree(PUBLISHED / "stress", source / "stress")
    payload = json.loads((source / "stress" / "stress.json").read_text())
    (source / "stress" / "stress.json").write_text(json.dumps({**payload, "roots": payload["roots"] + 1}))
    with pytest.raises(SystemExit) as stop:
        run(["restore", "--from", str(source), "--out", str(tmp_path / "out"), "--suites", "stress"])
    assert stop.value.code == 2 and "roots" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        run(["restore", "--from", str(source), "--out", str(tmp_path / "out"), "--suites", "paper"])
    assert stop.value.code == 2 and "lacks the published JSON or CSV of paper" in capsys.readouterr().err
