"""benchmarks.libraries: the tutorials' small-configuration figures are measured, resumable and rendered from the file."""

from __future__ import annotations

import json

import pytest

from benchmarks import libraries


def fake_run(rate: float):
    def run():
        summary = {"episodes": 4, "completion_rate": rate, "invalid_actions": 0, "conflicts": 3}
        return {"library": "fake", "env_steps": 64, "first": summary, "last": summary, "all": summary, "budget": "64 steps",
                "greedy": {"completion_rate": rate}}
    return run


def test_run_fills_missing_libraries_keeps_the_others_and_reruns_only_what_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(libraries, "LIBRARIES", {"a": fake_run(0.25), "b": fake_run(0.5)})
    monkeypatch.setattr(libraries, "references", lambda: {"edf": 0.4})
    out = tmp_path / "libraries.json"
    saved = libraries.run(out=out)
    assert set(saved["runs"]) == {"a", "b"} and json.loads(out.read_text())["runs"]["b"]["greedy"]["completion_rate"] == 0.5
    monkeypatch.setattr(libraries, "LIBRARIES", {"a": fake_run(0.75), "b": fake_run(0.0)})
    saved = libraries.run(only=["a"], out=out)  # b is kept as it was measured
    assert saved["runs"]["a"]["greedy"]["completion_rate"] == 0.75 and saved["runs"]["b"]["greedy"]["completion_rate"] == 0.5
    text = libraries.table(saved)
    assert "| a | 64 steps | 0.750 → 0.750 | **0.750** | 0 | 3 in 4 episodes |" in text and "edf 0.400" in text


def test_published_table_has_every_library_and_the_reference_rules():
    saved = json.loads(libraries.OUT.read_text())
    assert set(saved["runs"]) == set(libraries.LIBRARIES)
    assert all(run["all"]["invalid_actions"] == 0 for run in saved["runs"].values())  # the masks hold in every library
    assert set(libraries.REFERENCES) <= set(saved["references"])
    runs = saved["runs"]
    assert all(runs[name]["all"]["conflicts"] == 0 for name in ("tianshou", "sb3-slot", "torchrl-slot"))  # the per-slot joint distribution
    # sb3-vectorized.md: the same run through one CoreVecEnv and through DummyVecEnv sees the same episodes
    assert runs["sb3-vectorized"]["episodes_sha256"] == runs["sb3-dummy"]["episodes_sha256"]
    assert "identical (sha256" in libraries.vec_env_table(saved)


def test_unknown_library_is_a_cli_error():
    with pytest.raises(SystemExit) as error:
        libraries.main(["--only", "keras"])
    assert error.value.code == 2
