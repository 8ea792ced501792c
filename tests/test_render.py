"""Tests of rendering (core_env.render): ansi text, rgb_array images, and the optional matplotlib."""

from __future__ import annotations

import builtins
import subprocess
import sys

import numpy as np
import pytest

from core_env import discrete_core_v1
from core_env.render import MISSING_MATPLOTLIB
from core_env.workload import Workload, stress_bank


def run_masked_random(env, steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    observations, _ = env.reset(seed=seed)
    for _ in range(steps):
        actions = {a: int(rng.choice(np.flatnonzero(observations[a]["action_mask"]))) for a in env.agents}
        observations = env.step(actions)[0]
    return env


def test_ansi_is_a_table_naming_the_nodes_that_served_each_slot():
    env = run_masked_random(discrete_core_v1.parallel_env(render_mode="ansi"), steps=30)
    text = env.render()
    assert isinstance(text, str) and text.startswith("t=30")
    sim = env.unwrapped.episode.sim
    served = [(n, k) for n, k in enumerate(sim.node_slot[0]) if k >= 0 and sim.served_last[0, k] and sim.active[0, k]]
    assert served, "some node should have served a task in the last step"
    rows = {int(line.split()[0]): line for line in text.splitlines()[2:]}
    for node, slot in served:
        assert rows[slot].endswith(f"node_{node}")
    assert set(rows) == set(np.flatnonzero(sim.active[0]))


def test_ansi_does_not_credit_a_refilled_slot_to_the_node_that_served_its_previous_task():
    bank = stress_bank()
    first_report = bank.reported_losses(0, 1.0, steps=1)[0]
    # task 0 completes on its first service; task 1 arrives into the freed slot at the next step
    workload = Workload(bank, [0, 1], [5, 6], [first_report, 1e-3], [1.0, 1.0], [0, 0], [1.0, np.inf], 2)
    env = discrete_core_v1.parallel_env(n_nodes=1, n_slots=1, render_mode="ansi")
    env.reset(options={"workload": workload})
    env.step({"node_0": 1})
    assert env.slot_task(0) == 1
    row = env.render().splitlines()[2]
    assert row.split()[:2] == ["0", "1"] and "node_" not in row


def test_ansi_before_reset_says_so():
    assert discrete_core_v1.parallel_env(render_mode="ansi").render() == "(not reset)"


def test_rgb_array_is_an_hxwx3_uint8_image_mid_episode():
    pytest.importorskip("matplotlib")
    env = discrete_core_v1.parallel_env(render_mode="rgb_array")
    env.reset(seed=0)
    at_reset = env.render()
    image = run_masked_random(env, steps=25).render()
    for img in (at_reset, image):
        assert isinstance(img, np.ndarray) and img.dtype == np.uint8
        assert img.ndim == 3 and img.shape[2] == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert not np.array_equal(at_reset, image)  # the Gantt chart and loss panel have content


def test_pettingzoo_render_test_passes():
    pytest.importorskip("matplotlib")
    from pettingzoo.test import render_test

    render_test(discrete_core_v1.env)


def test_rgb_array_without_matplotlib_names_the_plot_extra(monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    env = discrete_core_v1.parallel_env(render_mode="rgb_array")
    env.reset(seed=0)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match=r"core-learning\[plot\]") as error:
        env.render()
    assert str(error.value) == MISSING_MATPLOTLIB and isinstance(error.value.__cause__, ImportError)


def test_the_env_does_not_import_matplotlib_unless_an_image_is_drawn():
    code = ("import sys; from core_env import discrete_core_v1; "
            "env = discrete_core_v1.parallel_env(render_mode='ansi'); env.reset(seed=0); env.render(); "
            "assert 'matplotlib' not in sys.modules, 'matplotlib was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
