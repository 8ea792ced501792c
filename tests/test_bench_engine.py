"""The cell engine and the cell-based suites: caching, resume, corrupt cells, outputs, Ray backend."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import report
from benchmarks.cells import Cell, CellStore, run_cell, run_cells
from benchmarks.paper import Scenario, SuiteSpec, specs, summarize

TINY = SuiteSpec("paper", ("edf", "lara"), (Scenario("id/train"), Scenario("rl_ood/train", "rl_ood")), roots=2, episodes=1)


class CountingRunner:
    """run_cell that counts its calls and can fail after ``fail_after`` cells (an interruption)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.calls, self.fail_after = 0, fail_after

    def __call__(self, cell: Cell):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("interrupted")
        self.calls += 1
        return run_cell(cell)


def test_a_cell_replays_the_committed_suite_and_caches_its_result(tmp_path):
    cell = Cell("edf", "id", "train", root=1, episodes=2)
    store = CellStore(tmp_path)
    runner = CountingRunner()
    first = run_cells([cell, cell], store, runner=runner, progress=False)
    assert runner.calls == 1 and first[0] == first[1]
    assert len(first[0]["episodes"]) == 2 and 0 < first[0]["mean"]["completion_rate"] < 1
    again = run_cells([cell], store, runner=runner, progress=False)
    assert runner.calls == 1 and again[0] == first[0]


@pytest.mark.parametrize(("name", "value"), [("completion_rate", 7.5), ("completion_rate", float("nan")), ("completed", -1),
                                              ("busy_node_steps", float("inf")), ("completed", 10_000)])
def test_a_cell_with_an_impossible_value_is_recomputed_even_with_a_valid_checksum(tmp_path, name, value):
    from benchmarks.cells import checksum

    cell = Cell("edf", root=0, episodes=1)
    store = CellStore(tmp_path)
    run_cells([cell], store, progress=False)
    saved = json.loads(store.path(cell).read_text())
    saved["episodes"][0][name] = value
    saved["mean"][name] = value  # the mean agrees with its episode, and the checksum is recomputed
    body = {k: v for k, v in saved.items() if k != "checksum"}
    store.path(cell).write_text(json.dumps({**body, "checksum": checksum(body)}))
    assert store.load(cell) is None
    runner = CountingRunner()
    assert run_cells([cell], store, runner=runner, progress=False)[0]["episodes"][0][name] != value and runner.calls == 1


def test_corrupt_or_foreign_cells_are_recomputed(tmp_path):
    cell, other = Cell("edf", root=0, episodes=1), Cell("fifo", root=0, episodes=1)
    store = CellStore(tmp_path)
    run_cells([cell, other], store, progress=False)
    store.path(cell).write_text("{ not json")
    foreign = json.loads(store.path(other).read_text())
    store.path(other).write_text(json.dumps({**foreign, "key": "someone-else"}))
    runner = CountingRunner()
    run_cells([cell, other], store, runner=runner, progress=False)
    assert runner.calls == 2


def test_an_interrupted_run_resumes_to_the_same_tables_without_redoing_finished_cells(tmp_path):
    cells = TINY.cells()
    with pytest.raises(KeyboardInterrupt):
        run_cells(cells, CellStore(tmp_path / "resumed"), runner=CountingRunner(fail_after=3), progress=False)
    resumed_runner = CountingRunner()
    resumed = run_cells(cells, CellStore(tmp_path / "resumed"), runner=resumed_runner, progress=False)
    assert resumed_runner.calls == len(cells) - 3
    straight = run_cells(cells, CellStore(tmp_path / "straight"), progress=False)
    strip = lambda results: [{k: v for k, v in r.items() if k != "wall_s" and k != "decision_ms"} for r in results]  # noqa: E731
    assert strip(resumed) == strip(straight)
    assert summarize(TINY, resumed, TINY.rows)["table"] == summarize(TINY, straight, TINY.rows)["table"]


def test_parallel_workers_give_the_serial_results(tmp_path):
    cells = TINY.cells()[:4]
    serial = run_cells(cells, CellStore(tmp_path / "a"), progress=False)
    parallel = run_cells(cells, CellStore(tmp_path / "b"), workers=2, progress=False)
    assert [r["episodes"] for r in serial] == [r["episodes"] for r in parallel]


def test_a_tiny_suite_writes_every_output(tmp_path):
    payload = report.run_suite(TINY, tmp_path, progress=False)
    out = tmp_path / "paper"
    for name in ("paper.json", "paper.csv", "paper.md", "paper_completion.png", "paper_gantt.png"):
        assert (out / name).stat().st_size > 0, name
    saved = json.loads((out / "paper.json").read_text())
    assert saved["rows"] == ["edf", "lara"] and set(saved["table"]["edf"]) == {"id/train", "rl_ood/train"}
    assert saved["table"]["edf"]["id/train"]["n"] == 2
    assert [d["a"] + "-" + d["b"] for d in saved["differences"]] == ["lara-edf", "lara-edf"]
    csv_lines = (out / "paper.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 2 * 2 * 2  # rows × scenarios × roots × 1 episode
    assert "| edf |" in (out / "paper.md").read_text() and payload["missing"] == []


def test_learned_rows_without_checkpoints_are_listed_not_fatal(tmp_path, monkeypatch):
    from benchmarks import agents, paper

    monkeypatch.setattr(agents, "CHECKPOINT_DIR", tmp_path / "none")
    spec = SuiteSpec("stress", ("edf", "mara"), (Scenario("stress", "stress"),))
    rows, missing = paper.rows_to_run(spec)
    assert rows == ["edf"] and missing == ["mara"]


def test_every_suite_defines_cells_for_its_rows():
    every = specs()
    assert set(every) == {"paper", "stress", "diagnostics", "shaping", "falsifier", "scale"}
    paper = every["paper"]
    assert len({(c.task_set, c.load) for c in paper.cells(["edf"])}) == 12
    assert {c.seed for c in paper.cells(["mara"])} == {0, 1, 2}
    scale = [c for c in every["scale"].cells(["edf"]) if dict(c.env).get("n_nodes") == 8]
    assert scale and scale[0].config().n_slots == 32 and len(scale[0].workloads()) == 4


def test_bad_engine_arguments_raise(tmp_path):
    with pytest.raises(ValueError, match="backend"):
        run_cells([], CellStore(tmp_path), backend="spark")
    with pytest.raises(ValueError, match="workers"):
        run_cells([], CellStore(tmp_path), workers=0)


def test_ray_backend_runs_cells_on_a_local_instance(tmp_path):
    pytest.importorskip("ray", reason="the ray extra is not installed")
    cells = [Cell("edf", root=r, episodes=1) for r in range(2)]
    via_ray = run_cells(cells, CellStore(tmp_path / "ray"), backend="ray", progress=False)
    local = run_cells(cells, CellStore(tmp_path / "local"), progress=False)
    assert [r["episodes"] for r in via_ray] == [r["episodes"] for r in local]
    assert np.isfinite(via_ray[0]["mean"]["completion_rate"])


def test_training_curves_come_from_the_manifests(tmp_path):
    from benchmarks import training

    history = [{"completion_rate": 0.4, "elapsed": 5.0, "env_steps": 4096, "updates": 1},
               {"completion_rate": 0.55, "elapsed": 300.0, "env_steps": 200000, "updates": 50}]
    for seed in (0, 1):
        manifest = {"variant": "mara", "seed": seed, "env_steps": 200000, "updates": 50, "wall_seconds": 300.0,
                    "eval": {"history": history, "final_completion_rate": 0.55}}
        (tmp_path / f"mara-seed{seed}.json").write_text(json.dumps(manifest))
    runs = training.manifests(tmp_path)
    assert [r["seed"] for r in runs] == [0, 1]
    assert training.figure(runs, {"edf": 0.5, "lara": 0.6})[:8] == b"\x89PNG\r\n\x1a\n"
    assert training.minutes_to_beat(runs[0], 0.5) == "5.0" and training.minutes_to_beat(runs[0], 0.3) == "0.1"
    assert training.minutes_to_beat(runs[0], 0.6) == "never"


def test_a_group_of_roots_in_one_batch_gives_each_cells_own_results():
    from benchmarks.cells import run_group

    cells = [Cell("lara", root=r, episodes=2) for r in (0, 3)]
    grouped = run_group(cells)
    for cell, result in zip(cells, grouped):
        alone = run_cell(cell)
        assert result["key"] == cell.key and result["episodes"] == alone["episodes"]
    with pytest.raises(ValueError, match="differ only"):
        run_group([Cell("edf"), Cell("fifo")])


def test_cached_only_summarises_what_is_cached_and_lists_the_rest(tmp_path):
    first = SuiteSpec("paper", ("edf",), TINY.scenarios, roots=2, episodes=1)
    with pytest.raises(ValueError, match="no cached cell"):
        report.run_suite(first, tmp_path, progress=False, cached_only=True)
    report.run_suite(first, tmp_path, progress=False)
    payload = report.run_suite(TINY, tmp_path, progress=False, cached_only=True)
    assert payload["cells"] == 4 and payload["table"]["lara"] == {}
    assert len(payload["not_computed"]) == 2 and all(entry.startswith("lara on") for entry in payload["not_computed"])
    assert "Not computed" in (tmp_path / "paper" / "paper.md").read_text()


def test_a_retrained_checkpoint_gets_new_cells(tmp_path, monkeypatch):
    from benchmarks import agents

    monkeypatch.setattr(agents, "CHECKPOINT_DIR", tmp_path)
    learned, heuristic = Cell("mara-wls", root=1, seed=0), Cell("edf", root=1)
    keys = []
    for digest in ("a" * 64, "b" * 64):
        (tmp_path / "mara-wls-seed0.json").write_text(json.dumps({"sha256": digest}))
        assert agents.weights_id("mara-wls", 0) == digest[:16]
        keys.append((learned.key, heuristic.key))
    assert keys[0][0] != keys[1][0], "cells of other weights must not share a cached result"
    assert keys[0][1] == keys[1][1] and agents.weights_id("edf") is None
    (tmp_path / "mara-wls-seed0.json").unlink()
    assert agents.weights_id("mara-wls", 0) is None


def test_a_retrained_flow_matching_checkpoint_gets_new_cells_for_every_row_that_uses_it(tmp_path, monkeypatch):
    from benchmarks import agents

    monkeypatch.setattr(agents, "CHECKPOINT_DIR", tmp_path)
    monkeypatch.setattr(agents, "FM_MANIFEST", tmp_path / "flow_matching.json")
    (tmp_path / "mara-seed0.json").write_text(json.dumps({"sha256": "c" * 64}))
    rows = ("lara-fm", "edf-admission:fm,min_reports=5", "mara", "lara", "edf", "mara-wls", "laira")
    keys = []
    for digest in ("a" * 64, "b" * 64):
        (tmp_path / "flow_matching.json").write_text(json.dumps({"sha256": digest}))
        keys.append({row: Cell(row, root=1, seed=0).key for row in rows})
    changed = {row for row in rows if keys[0][row] != keys[1][row]}
    assert changed == {"lara-fm", "edf-admission:fm,min_reports=5", "mara"}
    assert agents.weights_id("mara", 0) == "c" * 16 + "+fm:" + "b" * 16 and agents.weights_id("lara-fm") == "fm:" + "b" * 16


def _result(agent: str, root: int, rate: float, seed: int = 0, task_set: str = "id", env=()) -> dict:
    """A synthetic cell result (what summarize reads)."""
    cell = Cell(agent, task_set, "train", root, seed, tuple(env), episodes=1)
    keys = ("completion_rate", "node_utilization", "wasted_node_steps", "switches", "conflicts", "invalid_actions")
    return {"cell": {**cell.__dict__}, "mean": {k: (rate if k == "completion_rate" else 0.0) for k in keys}, "feasibility_bound": 0.9,
            "decision_ms": 0.0}


def test_summaries_are_at_the_level_of_the_evaluation_root():
    spec = SuiteSpec("paper", ("edf", "lara", "mara", "milp-slots", "milp"), (Scenario("id/train"),), roots=4, seeds=(0, 1))
    edf, lara, milp = [0.40, 0.50, 0.45, 0.55], [0.50, 0.52, 0.50, 0.60], [0.80, 0.80, 0.80, 0.80]
    slots = [0.70, 0.72, 0.70, 0.74]
    mara = {0: [0.50, 0.60, 0.56, 0.64], 1: [0.54, 0.60, 0.60, 0.68]}
    results = [_result("edf", r, v) for r, v in enumerate(edf)] + [_result("lara", r, v) for r, v in enumerate(lara)] \
        + [_result("milp", r, v) for r, v in enumerate(milp)] + [_result("milp-slots", r, v) for r, v in enumerate(slots)] \
        + [_result("mara", r, v, seed) for seed, vs in mara.items() for r, v in enumerate(vs)]
    summary = summarize(spec, results, spec.rows)
    per_root = 100 * np.mean([mara[0], mara[1]], axis=0)  # seeds averaged within each root: 52, 60, 58, 66
    entry = summary["table"]["mara"]["id/train"]
    assert entry["n"] == 4 and entry["mean"] == pytest.approx(per_root.mean()) and entry["sd"] == pytest.approx(per_root.std(ddof=1))
    assert entry["seeds"]["n"] == 2 and entry["seeds"]["sd"] == pytest.approx(np.std([57.5, 60.5], ddof=1))
    pairs = {(d["a"], d["b"]): d for d in summary["differences"]}
    against_lara = pairs[("mara", "lara")]  # LARA is the best fixed row (EDF is lower; milp knows the demand)
    assert against_lara["n"] == 4 and against_lara["best_fixed"]  # one pair per root, never per (seed, root)
    assert against_lara["mean"] == pytest.approx(np.mean(per_root - 100 * np.array(lara)))
    assert against_lara["p_value"] == pytest.approx(2 / 16)  # every root positive: 2 of the 2^4 sign patterns
    gap, upper = summary["gap_closed"], summary["gap_closed_bound"]  # against milp-slots (71.5), against the slot-relaxed milp (80)
    assert gap["edf"]["id/train"] == pytest.approx(0.0) and gap["milp-slots"]["id/train"] == pytest.approx(100.0)
    assert gap["lara"]["id/train"] == pytest.approx(100 * (53.0 - 47.5) / (71.5 - 47.5))
    assert upper["milp"]["id/train"] == pytest.approx(100.0) and upper["lara"]["id/train"] == pytest.approx(100 * (53.0 - 47.5) / (80.0 - 47.5))
    assert "milp" not in summary["diagnostics"] and "milp-slots" not in summary["diagnostics"]
    assert not any(d["b"] in ("milp", "milp-slots") and d["best_fixed"] for d in summary["differences"])  # ceilings are never the best fixed row


def test_the_milp_row_runs_only_where_it_is_exact_and_reads_the_stored_optimum(tmp_path):
    from benchmarks.paper import FALSIFIER_ENV
    from core_env.workload import suite_ceilings

    spec = SuiteSpec("falsifier", ("milp",), (Scenario("id/train"), Scenario("speeds", env=FALSIFIER_ENV)), roots=2, episodes=2)
    cells = spec.cells()
    assert {c.env for c in cells} == {()}  # not run with node speeds and a switching cost
    results = run_cells(cells, CellStore(tmp_path), progress=False)
    stored = suite_ceilings("id", "train")
    for cell, result in zip(cells, results):
        assert [e["completed"] for e in result["episodes"]] == [stored[(cell.root, e)]["completed"] for e in range(2)]
        assert result["ceiling"] == "stored"
    with pytest.raises(ValueError, match="not an agent"):
        from benchmarks.agents import make_agent
        make_agent("milp")


def test_a_failed_report_leaves_the_previous_outputs_as_they_were(tmp_path, monkeypatch):
    report.run_suite(TINY, tmp_path, progress=False)
    out = tmp_path / "paper"
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*args, **kwargs):
        raise RuntimeError("rendering failed")

    monkeypatch.setattr(report, "tables", broken)
    with pytest.raises(RuntimeError, match="rendering failed"):
        report.run_suite(TINY, tmp_path, progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no output replaced, no temporary left


def test_curve_aware_rows_are_paired_with_the_better_probe_and_trained_rows_are_never_the_best_fixed_row():
    spec = SuiteSpec("paper", ("edf", "window-edf", "target-edf", "lara-fm", "ppo-tianshou", "milp"), (Scenario("id/train"),), roots=3)
    rates = {"edf": [0.50, 0.52, 0.48], "window-edf": [0.49, 0.50, 0.47], "target-edf": [0.55, 0.56, 0.54],
             "lara-fm": [0.60, 0.63, 0.62], "ppo-tianshou": [0.70, 0.71, 0.69], "milp": [0.80, 0.80, 0.80]}
    results = [_result(row, r, v) for row, vs in rates.items() for r, v in enumerate(vs)]
    summary = summarize(spec, results, spec.rows)
    pairs = {(d["a"], d["b"]): d for d in summary["differences"]}
    assert pairs[("lara-fm", "target-edf")]["best_probe"]  # the better of the two probes here
    assert pairs[("lara-fm", "target-edf")]["mean"] == pytest.approx(100 * (np.mean(rates["lara-fm"]) - np.mean(rates["target-edf"])))
    assert pairs[("ppo-tianshou", "lara-fm")]["best_fixed"]  # a trained policy is compared with, never taken as, the best fixed row
    # the gap closed uses the roots the row, EDF and milp all ran: drop lara-fm's root 2 and the share follows
    partial = summarize(spec, [r for r in results if not (r["cell"]["agent"] == "lara-fm" and r["cell"]["root"] == 2)], spec.rows)
    expected = 100 * (np.mean([0.60, 0.63]) - np.mean([0.50, 0.52])) / (0.80 - np.mean([0.50, 0.52]))
    assert partial["gap_closed_bound"]["lara-fm"]["id/train"] == pytest.approx(expected)
    assert "lara-fm" not in partial["gap_closed"]  # no milp-slots row here: no share against it


def test_a_probe_that_is_also_the_best_fixed_row_gives_one_difference_per_trained_row():
    spec = SuiteSpec("shaping", ("edf", "window-edf", "target-edf", "ppo-tianshou"), (Scenario("id/train"),), roots=3)
    rates = {"edf": [0.50, 0.52, 0.48], "window-edf": [0.49, 0.50, 0.47], "target-edf": [0.55, 0.56, 0.54], "ppo-tianshou": [0.70, 0.71, 0.69]}
    summary = summarize(spec, [_result(row, r, v) for row, vs in rates.items() for r, v in enumerate(vs)], spec.rows)
    pairs = [(d["a"], d["b"]) for d in summary["differences"]]
    assert len(pairs) == len(set(pairs))  # target-edf is both the best fixed row and the better probe: listed once
    only = next(d for d in summary["differences"] if (d["a"], d["b"]) == ("ppo-tianshou", "target-edf"))
    assert only["best_fixed"] and only["best_probe"]


def test_a_teacher_free_row_loads_only_a_teacher_free_checkpoint_of_its_variant(tmp_path, monkeypatch):
    from benchmarks import agents
    from mara_agents.mat.agent import save_policy
    from mara_agents.mat.model import MATConfig, MATModel

    monkeypatch.setattr(agents, "CHECKPOINT_DIR", tmp_path)
    model = MATModel(MATConfig(predictor="fm"))
    save_policy(model, tmp_path / "mara-pure-seed0.pt", {"variant": "mara", "seed": 0, "teacher": None})
    assert agents.make_agent("mara-pure", 0) is not None and agents.teacher_of("mara-pure", 0) == agents.REFERENCE_TEACHER
    save_policy(model, tmp_path / "mara-pure-seed1.pt", {"variant": "mara", "seed": 1, "teacher": "edf"})  # warm-started: refused
    with pytest.raises(ValueError, match="teacher"):
        agents.make_agent("mara-pure", 1)
    save_policy(model, tmp_path / "mara-sparse-pure-seed0.pt", {"variant": "mara", "seed": 0, "teacher": None})  # another variant
    with pytest.raises(ValueError, match="variant"):
        agents.make_agent("mara-sparse-pure", 0)
    assert agents.uses_fm("mara-pure") and not agents.available("mara-pure")  # seeds 1 and 2 are missing or refused


def test_the_probe_margin_says_where_a_task_set_does_not_measure_curve_reading():
    spec = SuiteSpec("paper", ("edf", "prior-edf", "lara:pfn", "clairvoyant", "milp"), (Scenario("id/train"), Scenario("vit_ood/train", "vit_ood")), roots=3)
    rates = {("edf", "id"): 0.50, ("prior-edf", "id"): 0.55, ("lara:pfn", "id"): 0.62, ("clairvoyant", "id"): 0.90, ("milp", "id"): 0.95,
             ("edf", "vit_ood"): 0.40, ("prior-edf", "vit_ood"): 0.47, ("lara:pfn", "vit_ood"): 0.50, ("clairvoyant", "vit_ood"): 0.90,
             ("milp", "vit_ood"): 0.95}
    results = [_result(row, r, v + 0.01 * r, task_set=task_set) for (row, task_set), v in rates.items() for r in range(3)]
    margins = summarize(spec, results, spec.rows)["probe_margins"]
    # clairvoyant and milp know the demand: the best curve-aware row is lara:pfn, never them
    assert margins["id/train"]["probe"] == "prior-edf" and margins["id/train"]["curve_aware"] == "lara:pfn"
    assert margins["id/train"]["margin"] == pytest.approx(7.0) and margins["id/train"]["measures_curve_reading"]
    assert margins["vit_ood/train"]["margin"] == pytest.approx(3.0) and not margins["vit_ood/train"]["measures_curve_reading"]
    text = report.tables({"table": summarize(spec, results, spec.rows)["table"], "bound": {}, "scenarios": ["id/train", "vit_ood/train"],
                          "roots": 3, "command": "test", "commit": "x", "suite": "paper", "differences": [], "missing": [], "cells": 30,
                          "wall_s": 0.0, "machine": {"cpus": 2, "processor": "x"}, "probe_margins": margins})
    assert "| vit_ood/train | prior-edf 48.0 | lara:pfn 51.0 | +3.0 | **no**" in text


def test_pfn_targets_pair_each_pfn_row_with_each_reference_and_say_which_are_met():
    from benchmarks.paper import PFN_TEACHER, TEACHER, TASK_SETS

    scenarios = tuple(Scenario(f"{t}/train", t) for t in TASK_SETS)
    spec = SuiteSpec("paper", (TEACHER, "lara-fm", PFN_TEACHER, "lara:pfn"), scenarios, roots=4)
    noise = (0.0, 0.004, -0.003, 0.001)  # per root, shared by the rows: the paired differences are exact
    base = {"id": 0.60, "rl_ood": 0.70, "vit_ood": 0.45}
    shift = {TEACHER: 0.0, "lara-fm": 0.01, PFN_TEACHER: 0.05, "lara:pfn": -0.01}
    results = [_result(row, r, base[t] + shift[row] + noise[r] + (0.02 if (row == PFN_TEACHER and t == "id") else 0.0), task_set=t)
               for row in spec.rows for t in TASK_SETS for r in range(4)]
    payload = summarize(spec, results, spec.rows)
    targets = {(t["row"], t["reference"], t["scenario"]): t for t in payload["pfn_targets"]}
    assert set(targets) == {(row, ref, col) for row in (PFN_TEACHER, "lara:pfn")
                            for ref, col in ((TEACHER, "average/train"), ("lara-fm", "vit_ood/train"), (TEACHER, "id/train"))}
    teacher_avg = targets[(PFN_TEACHER, TEACHER, "average/train")]
    assert teacher_avg["mean"] == pytest.approx(100 * (0.05 + 0.02 / 3)) and teacher_avg["met"]
    assert targets[(PFN_TEACHER, "lara-fm", "vit_ood/train")]["mean"] == pytest.approx(4.0) and targets[(PFN_TEACHER, "lara-fm", "vit_ood/train")]["met"]
    assert not targets[("lara:pfn", TEACHER, "id/train")]["met"]  # −1 point: below the FM rule on id
    assert not targets[("lara:pfn", TEACHER, "average/train")]["met"]
    text = report.pfn_targets_table(payload)
    assert f"| lara:pfn − {TEACHER} | id/train | -1.0 |" in text and "MISSED" in text and "≥ +3, CI above 0" in text


def test_posterior_targets_hold_every_posterior_row_against_the_best_realizable_row_before_them():
    from benchmarks.paper import POSTERIOR_ROWS, TASK_SETS

    index = POSTERIOR_ROWS[0]
    scenarios = tuple(Scenario(f"{t}/train", t) for t in TASK_SETS)
    spec = SuiteSpec("paper", ("ppo-tianshou-fm", index, "lara-fm"), scenarios, roots=4)
    noise = (0.0, 0.004, -0.003, 0.001)  # per root, shared by the rows: the paired differences are exact
    base = {"id": 0.60, "rl_ood": 0.70, "vit_ood": 0.45}
    shift = {"ppo-tianshou-fm": 0.0, index: 0.035, "lara-fm": -0.01}
    results = [_result(row, r, base[t] + shift[row] + noise[r] - (0.045 if (row == index and t == "vit_ood") else 0.0), task_set=t)
               for row in spec.rows for t in TASK_SETS for r in range(4)]
    targets = {(t["row"], t["scenario"]): t for t in summarize(spec, results, spec.rows)["posterior_targets"]}
    assert set(targets) == {(index, c) for c in ("average/train", "id/train", "rl_ood/train", "vit_ood/train")}  # no heavy loads ran
    assert targets[(index, "average/train")]["mean"] == pytest.approx(100 * (0.035 - 0.015)) and not targets[(index, "average/train")]["met"]
    assert targets[(index, "id/train")]["met"] and not targets[(index, "vit_ood/train")]["met"]  # −1 point on vit_ood
    assert all(t["reference"] == "ppo-tianshou-fm" for t in targets.values())
