"""A user's own agent in the suites: ``--rows module.path:attr`` from outside the repository, the Python
API, provenance in the results file; the engine imports from any directory and writes only under --out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import benchmarks
from benchmarks import agents as rows
from mara_agents.heuristics import EDF

REPO = Path(benchmarks.__file__).resolve().parent.parent
AGENT_SOURCE = '''
import numpy as np
from mara_agents.protocols import Agent


class IdleAgent(Agent):
    """Never serves anything: completion 0 on every workload."""

    def act(self, observation, action_mask, oracle=None):
        return np.zeros(observation.shape[:2], dtype=np.int64)


def make():
    return IdleAgent()


not_an_agent = 42
'''


def _tree_state() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file of the checkout that a run could touch (caches excluded)."""
    state = {}
    for top in ("benchmarks", "core_env", "mara_agents", "docs", "tests"):
        for path in (REPO / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and "results" not in path.relative_to(REPO).parts[:2]:
                stat = path.stat()
                state[str(path)] = (stat.st_mtime_ns, stat.st_size)
    results = REPO / "benchmarks" / "results"
    state["results-listing"] = (len(list(results.rglob("*"))) if results.exists() else 0, 0)
    return state


def _run(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env, **kwargs)


def test_a_third_party_agent_runs_through_the_cli_from_outside_the_repository(tmp_path):
    (tmp_path / "my_agents.py").write_text(AGENT_SOURCE)
    out = tmp_path / "results"
    before = _tree_state()
    run = _run(["-m", "benchmarks", "paper", "--rows", "my_agents:IdleAgent", "my_agents:make", "edf", "milp-slots", "milp", "--scenarios", "id/train",
                "--roots", "2", "--episodes", "1", "--out", str(out)], cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert _tree_state() == before  # nothing written into the checkout
    payload = json.loads((out / "paper" / "paper.json").read_text())
    table = payload["table"]
    assert table["my_agents:IdleAgent"]["id/train"]["mean"] == 0.0 and table["my_agents:make"]["id/train"]["mean"] == 0.0
    assert table["edf"]["id/train"]["mean"] > 30 and table["milp"]["id/train"]["mean"] > table["edf"]["id/train"]["mean"]
    assert payload["gap_closed"]["my_agents:IdleAgent"]["id/train"] < -100  # idles: worse than EDF by more than the whole gap
    assert payload["gap_closed"]["my_agents:IdleAgent"]["id/train"] < payload["gap_closed_bound"]["my_agents:IdleAgent"]["id/train"]
    assert table["edf"]["id/train"]["mean"] < table["milp-slots"]["id/train"]["mean"] <= table["milp"]["id/train"]["mean"]
    fingerprint = payload["agents"]["my_agents:IdleAgent"]["weights_or_source_sha256"]
    assert fingerprint and len(fingerprint) == 16
    assert payload["env_version"] == "discrete_core_v1" and "id/train" in payload["suite_sha256"] and payload["commit"]
    against_best = [d for d in payload["differences"] if d["a"] == "my_agents:IdleAgent" and d["best_fixed"]]
    assert against_best and against_best[0]["b"] == "edf" and against_best[0]["mean"] < 0
    assert "my_agents:IdleAgent (third-party)" in (out / "paper" / "paper.md").read_text()


def test_a_bad_third_party_row_fails_with_a_clear_message(tmp_path):
    (tmp_path / "my_agents.py").write_text(AGENT_SOURCE)
    for row, message in (("my_agents:not_an_agent", "must name an Agent"), ("my_agents:missing", "has no attribute"),
                         ("no_such_module_xyz:Agent", "cannot import module")):
        run = _run(["-m", "benchmarks", "paper", "--rows", row, "--scenarios", "id/train", "--roots", "1", "--episodes", "1",
                    "--out", str(tmp_path / "out")], cwd=tmp_path)
        assert run.returncode != 0 and message in run.stderr, (row, run.stderr[-2000:])


def test_editing_a_third_party_agent_changes_its_cell_keys(tmp_path, monkeypatch):
    from benchmarks.cells import Cell

    (tmp_path / "my_edited_agent.py").write_text(AGENT_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    first = Cell("my_edited_agent:IdleAgent").key
    (tmp_path / "my_edited_agent.py").write_text(AGENT_SOURCE + "\n# edited\n")
    assert Cell("my_edited_agent:IdleAgent").key != first


WEIGHTS_SOURCE = AGENT_SOURCE + '''

def trained():
    return IdleAgent()

trained.weights = "policy.bin"
'''


def test_retrained_weights_named_by_a_third_party_row_change_its_cell_keys(tmp_path, monkeypatch):
    from benchmarks.cells import Cell

    (tmp_path / "my_weighted_agent.py").write_text(WEIGHTS_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="do not exist"):
        Cell("my_weighted_agent:trained").key
    (tmp_path / "policy.bin").write_bytes(b"first weights")
    first = Cell("my_weighted_agent:trained").key
    assert Cell("my_weighted_agent:trained").key == first  # the same weights: the same cells
    (tmp_path / "policy.bin").write_bytes(b"retrained weights")
    assert Cell("my_weighted_agent:trained").key != first


def test_the_python_api_returns_the_table_with_paired_differences(tmp_path):
    class Cautious(EDF):
        """EDF under another name (an in-memory agent)."""

    payload = benchmarks.evaluate(Cautious, suite="paper", out=tmp_path, scenarios=["id/train"], roots=2, episodes=1, against=("edf", "lara"))
    assert payload["rows"] == ["Cautious", "edf", "lara", "milp-slots", "milp"]
    assert payload["table"]["milp-slots"]["id/train"]["mean"] <= payload["table"]["milp"]["id/train"]["mean"]
    assert payload["table"]["Cautious"]["id/train"] == payload["table"]["edf"]["id/train"]  # the same policy
    pairs = {(d["a"], d["b"]): d for d in payload["differences"] if d["scenario"] == "id/train"}
    assert pairs[("Cautious", "edf")]["mean"] == 0.0 and pairs[("Cautious", "lara")]["n"] == 2
    assert (tmp_path / "paper" / "paper.json").exists()
    with pytest.raises(ValueError, match="unknown suite"):
        benchmarks.evaluate(Cautious, suite="nope", out=tmp_path)
    with pytest.raises(ValueError, match="shipped row"):
        rows.register("edf", EDF)


def test_the_engine_imports_and_runs_from_any_directory(tmp_path):
    """The torchrl wheel installs a bare top-level ``benchmarks/`` folder; ours must still win."""
    run = _run(["-c", "import benchmarks, benchmarks.cells, benchmarks.report; print(benchmarks.__file__)"], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()).resolve() == REPO / "benchmarks" / "__init__.py"
    script = Path(sys.executable).with_name("core-benchmarks")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "benchmarks"]
    listed = subprocess.run([*command, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "quick" in listed.stdout and "prediction" in listed.stdout, listed.stderr


def test_quick_writes_only_under_out(tmp_path):
    before = _tree_state()
    (tmp_path / "my_agents.py").write_text(AGENT_SOURCE)
    run = _run(["-m", "benchmarks", "quick", "--rows", "edf", "window-edf", "my_agents:make", "--roots", "2", "--episodes", "1",
                "--out", str(tmp_path)], cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert _tree_state() == before
    payload = json.loads((tmp_path / "quick.json").read_text())
    assert payload["env_version"] == "discrete_core_v1" and "window-edf" in payload["summary"] and payload["roots"] == 2
    assert payload["summary"]["my_agents:make"]["id/train"]["mean"] == 0.0
    assert (tmp_path / "quick.csv").stat().st_size > 0
    assert np.isfinite(payload["summary"]["slot-relaxed MILP (upper bound)"]["id/train"]["mean"])
