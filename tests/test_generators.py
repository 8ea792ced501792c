"""Workload generators (core_env.generators): the one place an episode's workload is chosen, the only
randomness of an episode; and the import order that keeps config free of workloads."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from core_env import discrete_core_v1
from core_env.config import LOADS, EnvConfig
from core_env.generators import (Drawn, Given, Stress, SuiteEpisode, committed_suite_fits, generator_for, generator_from_options,
                                 is_fixed_scenario, stress_workload, suite_scheme)
from core_env.suites import SUITE_NODES, SUITE_TASK_SETS, load_suite, suite_meta

PACKAGE = Path(__file__).resolve().parents[1] / "core_env"


def _same(a, b) -> bool:
    fields = ("arrival", "deadline", "target", "batches_per_step", "curve", "demand")
    return a.bank is b.bank and a.arrival_steps == b.arrival_steps and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields)


def test_a_configs_own_generator_is_what_a_seeded_reset_draws():
    config = EnvConfig(n_nodes=3, load=0.3, arrival_steps=40)
    generator = generator_for(config)
    assert isinstance(generator, Drawn) and generator.trains and not generator.fixed and generator.horizon == config.max_cycles
    env = discrete_core_v1.parallel_env(n_nodes=3, load=0.3, arrival_steps=40)
    env.reset(seed=11)
    assert _same(env.episode.sim.workloads[0], generator.workload(np.random.default_rng(11)))
    assert _same(generator_from_options(config, None).workload(np.random.default_rng(4)), generator.workload(np.random.default_rng(4)))


def test_the_stress_scenario_is_one_fixed_generator_with_a_known_optimum():
    generator = generator_for(EnvConfig(task_set="stress"))
    assert isinstance(generator, Stress) and generator.fixed and not generator.trains and is_fixed_scenario("stress")
    assert generator.optimum == pytest.approx(0.65) and generator.bank.name == "stress"
    assert _same(generator.workload(np.random.default_rng(1)), stress_workload(4))
    from mara_agents.mat.ppo import training_workloads

    with pytest.raises(ValueError, match="task_set='stress' is evaluation-only"):
        training_workloads(EnvConfig(task_set="stress"))


def test_options_choose_the_generator():
    config = EnvConfig()
    given = stress_workload(4)
    assert isinstance(generator_from_options(config, {"workload": given}), Given)
    assert generator_from_options(config, {"workload": given}).workload() is given
    replay = generator_from_options(config, {"suite": "eval", "root": 2, "episode": 1})
    assert isinstance(replay, SuiteEpisode) and replay.fixed and not replay.trains
    assert _same(replay.workload(), load_suite("id", "train", 2, 1))
    assert isinstance(generator_from_options(config, None), Drawn)


def test_a_suite_episode_is_refused_on_another_node_count_unless_asked_for():
    with pytest.raises(ValueError, match=r"suite id/x2 was generated for n_nodes=4 .* this env has n_nodes=6"):
        SuiteEpisode("id", "x2", 0, 0, n_nodes=6).workload()
    assert _same(SuiteEpisode("id", "x2", 0, 0, n_nodes=6, any_nodes=True).workload(), load_suite("id", "x2", 0, 0))


def test_a_draw_needs_a_numpy_generator():
    drawn = generator_for(EnvConfig())
    with pytest.raises(TypeError, match="a drawn workload needs a numpy Generator, got int"):
        drawn.workload(3)


def test_the_suites_node_count_is_one_constant():
    for task_set in SUITE_TASK_SETS:
        for load in LOADS:
            assert suite_meta(task_set, load)["n_nodes"] == SUITE_NODES
            assert committed_suite_fits(task_set, load, SUITE_NODES) and not committed_suite_fits(task_set, load, SUITE_NODES + 1)
    assert not suite_scheme(0.3, SUITE_NODES) and not committed_suite_fits("stress", "train", SUITE_NODES)


def _imports(path: Path) -> set[str]:
    """Every core_env module ``path`` imports, at any depth (function-level imports included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("core_env"):
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name.startswith("core_env")}
    return out


def test_config_imports_no_workload_and_curves_import_neither():
    config = _imports(PACKAGE / "config.py")
    assert not {m for m in config if m.startswith(("core_env.workload", "core_env.generators"))}, config
    for path in (PACKAGE / "curves").glob("*.py"):
        found = {m for m in _imports(path) if m.startswith(("core_env.config", "core_env.workload", "core_env.generators"))}
        assert not found, (path.name, found)
