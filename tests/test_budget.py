"""The budget suite: snapshots found by name, played on the committed id/train roots, paired with their teacher."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from benchmarks import budget
from mara_agents.mat.agent import save_policy
from mara_agents.mat.model import MATConfig, MATModel


def _snapshot(directory, name: str, teacher: str = "edf", seed: int = 0, manifest_seed: int | None = None) -> None:
    torch.manual_seed(seed)
    stated = int(name.split("-s")[1]) if "-s" in name else 0
    model = MATModel(MATConfig(predictor=None, d_model=16, n_heads=2, history=8))
    with torch.no_grad():  # the model's own initialisation is fixed: the seed makes each snapshot's weights its own
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    save_policy(model, directory / f"{name}.pt",
                {"variant": "mat", "seed": stated if manifest_seed is None else manifest_seed, "teacher": teacher,
                 "env_steps": int(name.split("-")[1])})


def test_the_suite_pairs_every_snapshot_with_its_teacher_by_root(tmp_path):
    _snapshot(tmp_path, "dense-1000")
    _snapshot(tmp_path, "dense-4000", seed=1)
    _snapshot(tmp_path, "sparse-1000", seed=2)
    assert budget.main(["--snapshots", str(tmp_path), "--roots", "2", "--episodes", "1", "--out", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "out" / "budget" / "budget.json").read_text())
    assert [(r["shaping"], r["env_steps_budget"]) for r in result["snapshots"]] == [("dense", 1000), ("dense", 4000), ("sparse", 1000)]
    teacher = np.array(result["teacher_per_root"])
    assert result["teacher"] == "edf" and teacher.shape == (2,) and result["episodes"] == 1
    for record in result["snapshots"]:
        assert record["minus_teacher"]["mean"] == pytest.approx(np.mean(np.subtract(record["per_root"], teacher)))
        assert record["minus_teacher"]["n"] == 2
    assert result["verdict"].startswith("dense:") and "sparse:" in result["verdict"]
    assert (tmp_path / "out" / "budget" / "budget.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_several_seeds_of_one_budget_are_averaged_within_each_root_before_pairing(tmp_path, capsys):
    _snapshot(tmp_path, "dense-1000", seed=3)
    _snapshot(tmp_path, "dense-4000", seed=4)
    _snapshot(tmp_path, "dense-4000-s1", seed=5)
    _snapshot(tmp_path, "dense-4000-s2", seed=6)
    assert budget.main(["--snapshots", str(tmp_path), "--roots", "2", "--episodes", "1", "--out", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "out" / "budget" / "budget.json").read_text())
    assert [(r["env_steps_budget"], r["seed"]) for r in result["snapshots"]] == [(1000, 0), (4000, 0), (4000, 1), (4000, 2)]
    [mean] = result["seed_means"]
    assert mean["env_steps_budget"] == 4000 and mean["seeds"] == [0, 1, 2] and mean["minus_teacher"]["n"] == 2  # roots, not seeds x roots
    np.testing.assert_allclose(mean["per_root"], np.mean([r["per_root"] for r in result["snapshots"][1:]], axis=0))
    assert mean["seed_sd"] == pytest.approx(np.std([r["mean"] for r in result["snapshots"][1:]], ddof=1))
    assert "0.004 M (3 seeds)" in result["verdict"] and "mean of 3" in (tmp_path / "out" / "budget" / "budget.md").read_text()
    _snapshot(tmp_path, "dense-8000-s4", manifest_seed=0)
    with pytest.raises(SystemExit) as stop:
        budget.main(["--snapshots", str(tmp_path), "--roots", "2", "--out", str(tmp_path / "out")])
    assert stop.value.code == 2 and "dense-8000-s4.pt" in capsys.readouterr().err


def test_bad_snapshot_directories_exit_2_naming_the_problem(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        budget.main(["--snapshots", str(tmp_path), "--out", str(tmp_path)])
    assert stop.value.code == 2 and "no budget snapshots" in capsys.readouterr().err
    (tmp_path / "half-way.pt").write_bytes(b"x")
    with pytest.raises(SystemExit) as stop:
        budget.main(["--snapshots", str(tmp_path), "--out", str(tmp_path)])
    assert stop.value.code == 2 and "<dense|sparse>-<env steps>[-s<seed>].pt" in capsys.readouterr().err
    (tmp_path / "half-way.pt").unlink()
    _snapshot(tmp_path, "dense-10", teacher="edf")
    _snapshot(tmp_path, "dense-20", teacher="fifo")
    with pytest.raises(SystemExit) as stop:
        budget.main(["--snapshots", str(tmp_path), "--roots", "2", "--out", str(tmp_path)])
    assert stop.value.code == 2 and "one teacher" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        budget.main(["--roots", "1"])
    with pytest.raises(SystemExit) as stop:
        budget.main(["--episodes", "0"])
    assert stop.value.code == 2


def test_results_are_kept_per_snapshot_so_a_rerun_plays_only_what_is_new_or_does_not_verify(tmp_path, monkeypatch):
    _snapshot(tmp_path, "dense-1000", seed=7)
    _snapshot(tmp_path, "dense-2000", seed=8)
    args = ["--snapshots", str(tmp_path), "--roots", "2", "--episodes", "1", "--out", str(tmp_path / "out")]
    assert budget.main(args) == 0
    first = json.loads((tmp_path / "out" / "budget" / "budget.json").read_text())
    cells = sorted((tmp_path / "out" / "budget" / "cells").glob("*.json"))
    assert len(cells) == 3  # two snapshots and the teacher
    played = []
    real = budget.per_root
    monkeypatch.setattr(budget, "per_root", lambda agent, *a: played.append(type(agent).__name__) or real(agent, *a))
    assert budget.main(args) == 0
    assert played == []  # everything read back
    again = json.loads((tmp_path / "out" / "budget" / "budget.json").read_text())
    assert [r["per_root"] for r in again["snapshots"]] == [r["per_root"] for r in first["snapshots"]]
    assert again["teacher_per_root"] == first["teacher_per_root"]
    _snapshot(tmp_path, "dense-4000", seed=9)  # a new snapshot: only it is played
    saved = json.loads(cells[0].read_text())
    cells[0].write_text(json.dumps({**saved, "per_root": [0.0] * len(saved["per_root"])}))  # edited: the checksum fails
    assert budget.main(args) == 0
    assert len(played) == 2 and (tmp_path / "out" / "budget" / "cells").exists()
    assert json.loads(cells[0].read_text())["per_root"] == saved["per_root"]  # recomputed, rewritten
    assert len(list((tmp_path / "out" / "budget" / "cells").glob("*.json"))) == 4


def _record(shaping, steps, seed, per_root, teacher):
    per_root = np.array(per_root, dtype=float)
    return {"shaping": shaping, "env_steps_budget": steps, "seed": seed, "per_root": per_root.tolist(), "mean": float(per_root.mean()),
            "minus_teacher": budget.paired_difference(per_root, np.array(teacher, dtype=float))}


def test_the_verdict_says_whether_the_claim_reproduces_and_what_the_last_doubling_changed():
    teacher = [60.0, 62.0, 61.0]
    records = [_record("dense", 1000, 0, [58.0, 60.0, 59.5], teacher), _record("dense", 1000, 1, [59.0, 61.0, 60.0], teacher),
               _record("dense", 2000, 0, [59.0, 61.1, 60.4], teacher), _record("sparse", 1000, 0, [55.0, 57.0, 56.0], teacher)]
    steps = budget.last_steps(records)
    assert [(s["shaping"], s["seed"], s["from"], s["to"]) for s in steps] == [("dense", 0, 1000, 2000)]  # sparse: one budget only
    assert steps[0]["difference"]["mean"] == pytest.approx(1.0)
    sentence = budget.last_step_sentence(steps)
    assert "dense, seed 0, 0.001 M → 0.002 M env-steps: +1.0 [" in sentence and "(up)" in sentence
    text = budget.verdict(records)
    assert "does not reproduce" in text and f"teacher + {budget.CLAIM_MARGIN:g}" in text
    both = budget.last_steps(records + [_record("dense", 2000, 1, [59.0, 61.0, 60.0], teacher)])  # seed 1 reaches 2000 too
    assert [(s["seed"], s["from"], s["to"]) for s in both] == [(0, 1000, 2000), (1, 1000, 2000)]
    assert both[1]["difference"]["mean"] == pytest.approx(0.0)
    above = [_record("dense", 4000, 0, [63.0, 64.5, 63.2], teacher)]  # +2.57 on average, every root above
    assert "is reached at dense 0.004 M" in budget.verdict(records + above) and "does not reproduce" not in budget.verdict(records + above)
