"""A user's own curve bank works everywhere a built-in task set does; the task recipe is configuration.

CSV -> ``import_curves`` / ``write_bank`` -> ``task_set=BANK`` in the PettingZoo and Gymnasium views ->
generated suites replayed by reset options -> ``python -m benchmarks paper --task-set BANK``.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from benchmarks.cells import FORMAT, Cell
from benchmarks.paper import bank_scenarios, specs
from core_env import discrete_core_v1
from core_env.config import EnvConfig
from core_env.curves import bank_file, bank_for
from core_env.curves.importer import import_curves, load_bank, write_bank
from core_env.recipe import DEFAULT_RECIPE, TaskRecipe
from core_env.suites import SUITE_SEED, generate_suite, load_suite, suite_file_meta, suite_rng, write_suite
from core_env.suites.__main__ import main as suites_main
from core_env.workload import draw_workload
from core_env.wrappers import EpisodeRecorder, replay

REPO = Path(__file__).resolve().parents[1]
FIELDS = ("arrival", "deadline", "target", "batches_per_step", "curve", "demand")


def write_csv(path: Path, runs_per_family: int = 6, points: int = 600, families=("mlp_digits", "cnn_mnist1d", "charlm")) -> Path:
    """A long-format CSV of built-in corpus runs (train split), as a user would export their own."""
    bank = bank_for("id", "train")
    with open(path, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["run_id", "step", "loss", "family"])
        for family in families:
            for k, i in enumerate(np.flatnonzero(bank.family == family)[:runs_per_family]):
                for step, loss in enumerate(bank.curve(int(i))[:points]):
                    out.writerow([f"{family}-{k}", 10 * step, f"{loss:.6g}", family])
    return path


@pytest.fixture(scope="module")
def bank(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("bank")
    path = directory / "my_bank.npz"
    write_bank(path, import_curves(write_csv(directory / "my_runs.csv")))
    return path


def same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS) and a.arrival_steps == b.arrival_steps


def edf_actions(env, observations):
    """Serve the active slots in order (enough to run an episode to its end)."""
    mask = observations[env.agents[0]]["action_mask"]
    slots = list(np.flatnonzero(mask[1:]) + 1)
    return {a: int(slots[i]) if i < len(slots) else 0 for i, a in enumerate(env.agents)}


# ------------------------------------------------------------------------------------------ the views
def test_a_bank_file_is_a_task_set_in_the_pettingzoo_view(bank):
    env = discrete_core_v1.parallel_env(task_set=str(bank), arrival_steps=40)
    assert env.config.task_set_name == "my_runs" and env.config.bank_sha256 == hashlib.sha256(bank.read_bytes()).hexdigest()
    observations, _ = env.reset(seed=0)
    train = load_bank(bank, "train")
    workload = env.unwrapped.episode.workload
    assert workload.bank.fingerprint == train.fingerprint  # seeded workloads: the train split
    expected = draw_workload(train, 0.1, 40, np.random.default_rng(0), DEFAULT_RECIPE, 4, train)  # reference: the train split
    assert same(workload, expected)
    steps = 0
    while env.agents:
        observations, rewards, terminations, truncations, infos = env.step(edf_actions(env, observations))
        steps += 1
    info = infos["node_0"]
    assert steps > 40 and info["arrived"] == len(workload) and info["completed"] + info["failed"] + info["rejected"] == info["arrived"]
    assert discrete_core_v1.parallel_env(task_set=bank).config.task_set == str(bank)  # a path-like works too


def test_a_bank_file_is_a_task_set_in_the_gymnasium_view(bank):
    env = gym.make("core_env/DiscreteCoRE-v1", task_set=str(bank), arrival_steps=30)
    observation, info = env.reset(seed=3)
    assert env.unwrapped.episode.workload.bank.name == "my_runs"
    for _ in range(5):
        observation, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert info["t"] == 5
    env.close()


def test_an_episode_on_a_bank_file_records_and_replays(bank):
    env = EpisodeRecorder(discrete_core_v1.parallel_env(task_set=str(bank), arrival_steps=20))
    observations, _ = env.reset(seed=5)
    while env.agents:
        observations, *_ = env.step(edf_actions(env, observations))
    record = json.loads(json.dumps(env.record, allow_nan=False))
    assert record["config"]["task_set"] == str(bank.resolve()) and record["config"]["recipe"] == DEFAULT_RECIPE.as_dict()
    trajectory = replay(record)
    assert len(trajectory["rewards"]) == len(record["actions"])


# ------------------------------------------------------------------------------------ recipes
def test_the_recipe_is_configuration_and_changes_seeded_draws(bank):
    tight = {"slack": (1.0, 1.2), "budget_share": [0.3, 1.0]}
    config = EnvConfig(task_set=str(bank), recipe=tight)
    assert config.recipe == TaskRecipe(slack=(1.0, 1.2), budget_share=(0.3, 1.0))
    a = discrete_core_v1.parallel_env(task_set=str(bank), recipe=tight)
    b = discrete_core_v1.parallel_env(task_set=str(bank), recipe=TaskRecipe(slack=(1.0, 1.2), budget_share=(0.3, 1.0)))
    default = discrete_core_v1.parallel_env(task_set=str(bank))
    a.reset(seed=1), b.reset(seed=1), default.reset(seed=1)
    wa, wb, wd = (e.unwrapped.episode.workload for e in (a, b, default))
    assert same(wa, wb) and not same(wa, wd)
    assert np.all(wa.window <= np.ceil(1.2 * 60.0))  # slack <= 1.2, share <= 1: the recipe was used
    assert EnvConfig().recipe is DEFAULT_RECIPE  # defaults unchanged


@pytest.mark.parametrize("recipe, exc, match", [
    ({"colour": "blue"}, ValueError, r"unknown TaskRecipe field\(s\) \['colour'\]; valid fields"),
    ({"slack": (3.0, 1.0)}, ValueError, r"TaskRecipe.slack must satisfy"),
    ({"budget_share": (0.0, 1.0)}, ValueError, r"TaskRecipe.budget_share"),
    ({"typical_run_steps": "60"}, ValueError, r"TaskRecipe.typical_run_steps must be a number"),
    ({"rate_spread": 2.0}, ValueError, r"TaskRecipe.rate_spread must be a pair of numbers"),
    ({"rate_spread": (1e-6, 1e-6)}, ValueError, r"typical_run_steps / rate_spread\[0\] = 6e\+07 node-steps .* at most 10,000"),  # was 93.9 GiB
    ({"typical_run_steps": 1e6}, ValueError, r"typical_run_steps / rate_spread\[0\] = 2e\+06"),  # was a 162 s reset
    ({"slack": (1.0, 1e6)}, ValueError, r"slack\[1\] \* budget_share\[1\] \* typical_run_steps = 6e\+07 steps of deadline window"),
    ([0.1, 1.0], TypeError, r"recipe must be a TaskRecipe or a dict"),
])
def test_bad_recipes_raise_clear_errors(recipe, exc, match, bank, tmp_path):
    with pytest.raises(exc, match=match):
        EnvConfig(recipe=recipe)
    with pytest.raises(exc, match=match):
        discrete_core_v1.parallel_env(recipe=recipe)
    with pytest.raises(exc, match=match):
        write_suite(str(bank), "train", tmp_path / "suites", roots=1, episodes=1, recipe=recipe)


# ------------------------------------------------------------------------------------ bad task sets
def test_a_bad_task_set_path_gives_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"unknown task_set '.*missing.npz'.*'id', 'rl_ood', 'vit_ood', 'stress'.*no such file.*"
                                         r"python -m core_env.curves import"):
        EnvConfig(task_set=str(tmp_path / "missing.npz"))
    not_a_bank = write_csv(tmp_path / "runs.csv", runs_per_family=2, points=20, families=("charlm",))
    with pytest.raises(ValueError, match=r"not a valid bank file.*python -m core_env.curves import"):
        discrete_core_v1.parallel_env(task_set=str(not_a_bank))
    with pytest.raises(ValueError, match=r"unknown task_set 'nope'"):
        EnvConfig(task_set="nope")
    with pytest.raises(ValueError, match=r"curve_source='prior' is for built-in task sets"):
        EnvConfig(task_set=str(_copy_bank(tmp_path)), curve_source="prior")


def _copy_bank(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_bank.npz"
    write_bank(path, import_curves(write_csv(tmp_path / "tiny.csv", runs_per_family=3, points=50, families=("charlm",))))
    return path


def test_a_bank_file_changed_under_a_config_is_refused(tmp_path):
    path = _copy_bank(tmp_path)
    config = EnvConfig(task_set=str(path))
    config.bank("train")
    write_bank(path, import_curves(tmp_path / "tiny.csv", seed=7, name="other"))
    with pytest.raises(ValueError, match="changed since it was configured"):
        config.bank("eval")
    assert EnvConfig(task_set=str(path)).task_set_name == "other"  # a new config reads the new file


# ------------------------------------------------------------------------------------ generated suites
def test_generated_suites_replay_through_reset_options(bank, tmp_path):
    directory = tmp_path / "suites"
    assert suites_main(["generate", "--task-set", str(bank), "--loads", "train", "0.15", "--roots", "2", "--episodes", "2",
                        "--out", str(directory), "--recipe", '{"slack": [1.0, 2.0]}']) == 0
    path = directory / "my_runs__train.npz"
    assert sorted(json.loads((directory / "manifest.json").read_text())) == ["my_runs__0.15.npz", "my_runs__train.npz"]
    meta = suite_file_meta(path)
    assert meta["bank_file"]["sha256"] == bank_file(bank).sha256 and meta["recipe"]["slack"] == [1.0, 2.0]
    assert (meta["task_set"], meta["load"], meta["roots"], meta["episodes"], meta["seed"]) == ("my_runs", "train", 2, 2, SUITE_SEED)
    env = discrete_core_v1.parallel_env(task_set=str(bank))
    env.reset(options={"suite": "eval", "suite_dir": str(directory), "root": 1, "episode": 0})
    by_dir = env.unwrapped.episode.workload
    env.reset(options={"suite": str(path), "root": 1, "episode": 0})
    assert same(by_dir, env.unwrapped.episode.workload) and same(by_dir, load_suite(str(bank), "train", 1, 0, directory))
    evaluation, train = load_bank(bank, "eval"), load_bank(bank, "train")
    assert by_dir.bank.fingerprint == evaluation.fingerprint  # eval runs, targets from the train runs, the suites' seeding
    assert same(by_dir, draw_workload(evaluation, 0.1, 500, suite_rng("my_runs", "train", 1, 0), TaskRecipe(slack=(1.0, 2.0)), 4, train))
    # a suite file names its own bank: it replays in an env on a built-in task set too
    other = discrete_core_v1.parallel_env()
    other.reset(options={"suite": str(path), "root": 1, "episode": 0})
    assert same(by_dir, other.unwrapped.episode.workload)
    with pytest.raises(ValueError, match="no committed evaluation suite for bank 'my_runs'.*suite_dir"):
        env.reset(options={"suite": "eval"})
    with pytest.raises(ValueError, match="roots 0..1"):
        env.reset(options={"suite": "eval", "suite_dir": str(directory), "root": 2})
    with pytest.raises(FileNotFoundError):
        env.reset(options={"suite": "eval", "suite_dir": str(directory), "load": "x2"})
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch"):
        env.reset(options={"suite": str(path)})


def test_the_committed_suites_are_generate_suite_of_a_built_in_name():
    arrays = generate_suite("id", "train", roots=1, episodes=1)
    assert "bank_file" not in json.loads(arrays["meta"].tobytes())
    assert same(load_suite("id", "train", 0, 0), draw_workload(bank_for("id", "eval"), 0.1, 500, suite_rng("id", "train", 0, 0),
                                                                   DEFAULT_RECIPE, 4, bank_for("id", "train")))


# ------------------------------------------------------------------------------------ benchmarks
def test_bank_cells_draw_the_generated_suite_and_key_on_the_bank_sha(tmp_path, bank):
    directory = tmp_path / "suites"
    write_suite(str(bank), "x1.5", directory, roots=2, episodes=2)
    (scenario,) = [s for s in bank_scenarios(specs()["paper"], str(bank)) if s.load == "x1.5"]
    assert scenario.name == "my_runs/x1.5" and scenario.task_set == str(bank.resolve())
    cell = Cell("edf", scenario.task_set, "x1.5", root=1, episodes=2)
    for e, workload in enumerate(cell.workloads()):
        assert same(workload, load_suite(str(bank), "x1.5", 1, e, directory))
    # the key includes the file's sha256; built-in keys are unchanged
    path = _copy_bank(tmp_path)
    before = Cell("edf", str(path)).key
    write_bank(path, import_curves(tmp_path / "tiny.csv", seed=3))
    assert Cell("edf", str(path)).key != before
    builtin = Cell("edf")
    fields = {name: value for name, value in dataclasses.asdict(builtin).items() if name != "trace"}  # the fields before traces
    assert builtin.key == hashlib.sha256(json.dumps([FORMAT, fields], sort_keys=True, default=list).encode()).hexdigest()[:20]
    with pytest.raises(ValueError, match="suite stress has no scenario on a task set"):
        bank_scenarios(specs()["stress"], str(bank))


def test_the_paper_suite_runs_on_a_bank_file_from_the_command_line(bank, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "benchmarks", "paper", "--task-set", str(bank), "--rows", "edf", "milp", "--roots", "2", "--episodes", "1",
               "--scenarios", "my_runs/train", "--out", "out"]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    table = (tmp_path / "out" / "paper" / "paper.md").read_text()
    assert "| agent | my_runs/train |" in table and "\n| edf |" in table and "\n| milp (slot-relaxed optimum: upper bound) |" in table
    payload = json.loads((tmp_path / "out" / "paper" / "paper.json").read_text())
    assert payload["banks"] == {"my_runs": {"path": str(bank.resolve()), "sha256": bank_file(bank).sha256}}
    assert payload["recipe"]["my_runs/train"] == DEFAULT_RECIPE.as_dict() and payload["suite_sha256"] == {}
    cells = [json.loads(p.read_text()) for p in (tmp_path / "out" / "cells").glob("*.json")]
    assert sorted(c["cell"]["agent"] for c in cells) == ["edf", "edf", "milp", "milp"]
    assert {c["ceiling"] for c in cells if c["cell"]["agent"] == "milp"} == {"solved"}
    edf, milp = (payload["table"][row]["my_runs/train"]["mean"] for row in ("edf", "milp"))
    assert 0 < edf <= milp <= 100
    from benchmarks import quick

    assert quick.main(["--task-set", str(bank), "--rows", "edf", "--roots", "2", "--episodes", "1", "--out", str(tmp_path / "quick")]) == 0
    summary = json.loads((tmp_path / "quick" / "quick.json").read_text())
    assert summary["banks"]["my_runs"]["sha256"] == bank_file(bank).sha256 and set(summary["summary"]["edf"]) == {"my_runs/train", "stress"}
    bad = subprocess.run([sys.executable, "-m", "benchmarks", "stress", "--task-set", str(bank)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "no scenario on a task set" in bad.stderr


# ------------------------------------------------------------------------------------ traces
ARRIVALS = (0, 0, 3, 5, 8, 12, 15, 15, 20, 26)


def write_trace(path: Path, arrivals=ARRIVALS, deadlines=None) -> Path:
    """A generic-layout job trace in steps (``deadlines``: {job index: absolute deadline step})."""
    deadlines = deadlines or {}
    with open(path, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["task_id", "arrival", "deadline"])
        for i, a in enumerate(arrivals):
            out.writerow([f"job{i}", a, deadlines.get(i, "")])
    return path


def test_the_paper_suite_replays_a_trace_on_a_bank_file_from_the_command_line(bank, tmp_path):
    from benchmarks.paper import trace_scenarios

    trace = write_trace(tmp_path / "jobs.csv", deadlines={1: 40})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "benchmarks", "paper", "--task-set", str(bank), "--trace", str(trace), "--rows", "edf", "milp",
               "--roots", "2", "--episodes", "1", "--out", "out"]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    table = (tmp_path / "out" / "paper" / "paper.md").read_text()
    assert "| agent | jobs/my_runs |" in table and "\n| edf |" in table and "\n| milp (slot-relaxed optimum: upper bound) |" in table
    payload = json.loads((tmp_path / "out" / "paper" / "paper.json").read_text())
    sha = hashlib.sha256(trace.read_bytes()).hexdigest()
    assert payload["traces"] == {"jobs/my_runs": {"path": str(trace.resolve()), "sha256": sha, "layout": "generic", "step_seconds": None,
                                                  "max_cycles": 5000}}
    assert payload["banks"]["my_runs"]["sha256"] == bank_file(bank).sha256 and payload["suite_sha256"] == {}
    cells = [json.loads(p.read_text()) for p in (tmp_path / "out" / "cells").glob("*.json")]
    assert sorted(c["cell"]["agent"] for c in cells) == ["edf", "edf", "milp", "milp"]
    assert {c["ceiling"] for c in cells if c["cell"]["agent"] == "milp"} == {"solved"}
    assert all(e["arrived"] == len(ARRIVALS) for c in cells for e in c["episodes"])
    # the replayed arrivals (and the trace's deadline) are the trace's; each root draws the missing fields anew
    (scenario,) = trace_scenarios(specs()["paper"], str(trace), task_set=str(bank))
    first, second = (Cell("edf", scenario.task_set, scenario.load, root=r, episodes=1, trace=scenario.trace).workloads()[0] for r in (0, 1))
    assert first.arrival.tolist() == list(ARRIVALS) == second.arrival.tolist() and first.deadline[1] == 40
    assert not np.array_equal(first.target, second.target)
    assert first.bank.fingerprint == load_bank(bank, "eval").fingerprint
    # the key follows the trace file's content
    cell = Cell("edf", scenario.task_set, scenario.load, episodes=1, trace=scenario.trace)
    before = cell.key
    write_trace(trace, ARRIVALS[:-1] + (27,))
    assert cell.key != before and cell.workloads()[0].arrival[-1] == 27


def test_a_long_trace_raises_max_cycles_to_its_horizon(tmp_path):
    from benchmarks.paper import trace_scenarios
    from core_env.trace import HORIZON_MARGIN, read_trace, trace_horizon

    trace = write_trace(tmp_path / "long.csv", (0, 4000, 9000))
    (scenario,) = trace_scenarios(specs()["paper"], str(trace))
    assert scenario.name == "long/id" and scenario.task_set == "id"
    config = Cell("edf", "id", trace=scenario.trace).config()
    assert config.max_cycles == trace_horizon(read_trace(trace), config.recipe) == 9000 + 180 + HORIZON_MARGIN
    with pytest.raises(ValueError, match="no trace file"):
        trace_scenarios(specs()["paper"], str(tmp_path / "missing.csv"))


# ------------------------------------------------------------------------- leakage, calibration on a bank
def test_the_leakage_audit_runs_on_a_bank_file(bank, tmp_path):
    from benchmarks import leakage

    assert leakage.main(["--task-set", str(bank), "--loads", "train", "--roots", "2", "--episodes", "1", "--fit-episodes", "2",
                          "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "leakage.json").read_text())
    (row,) = result["rows"]
    assert (row["task_set"], row["load"], row["bank"]) == ("my_runs", "train", {"path": str(bank.resolve()), "sha256": bank_file(bank).sha256})
    assert set(result["window_factor"]) == {"my_runs"} and 0 <= row["edf"]["mean"] <= row["milp"]["mean"] <= 100
    assert len(row["per_root"]["edf"]) == 2 and "criteria" not in result  # the criteria are id/train's


def test_the_calibration_table_runs_on_a_bank_file(bank, tmp_path):
    from benchmarks import calibration
    from benchmarks.cells import bank_suite

    rows = calibration.evaluate([str(bank)], ["train"], roots=1, episodes=1)
    assert [(r["task_set"], r["load"]) for r in rows] == [("my_runs", "train"), ("stress", "-")]
    config, workloads, cells = bank_suite(str(bank), "train", 2, 1)
    assert cells == [(0, 0), (1, 0)] and same(workloads[1], Cell("edf", str(bank), "train", root=1, episodes=1).workloads()[0])
    assert rows[0]["bank"]["sha256"] == bank_file(bank).sha256 and rows[0]["edf"]["mean"] <= rows[0]["milp"]["mean"]


def test_evaluate_runs_an_agent_on_a_bank_file(bank, tmp_path):
    from benchmarks import evaluate

    payload = evaluate("edf", suite="paper", out=tmp_path, against=("fifo",), scenarios=["my_runs/train"], roots=1, episodes=1, task_set=str(bank))
    assert set(payload["table"]) == {"edf", "fifo", "milp"} and set(payload["table"]["edf"]) == {"my_runs/train"}
    assert payload["banks"]["my_runs"]["sha256"] == bank_file(bank).sha256 and "--task-set" in payload["command"]


def test_the_prediction_table_runs_on_a_bank_file(bank, tmp_path):
    from benchmarks import prediction

    result = prediction.evaluate(task_sets=[str(bank)], policies=("edf",), rows=("last_slope", "oracle", "probe: constant"), roots=1,
                                 episodes=1, max_points=200, resamples=20, train_episodes=1, timing_runs=1, progress=False)
    name = EnvConfig(task_set=str(bank)).task_set_name
    assert result["task_sets"] == [name] and result["task_set_sources"] == [str(bank)]
    pooled = {c["predictor"]: c for c in result["cells"] if c["task_set"] == name and c["bucket"] == "all" and c["policy"] == "all"}
    assert pooled["oracle"]["mae"] == 0.0 and pooled["last_slope"]["points"] > 0
    assert name in prediction.table(result)
