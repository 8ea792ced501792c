"""Tests of rendering (core_env.render): ansi text and rgb_array images, drawn with numpy alone (issue 50)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from core_env import discrete_core_v1
from core_env.render import GANTT, HEIGHT, WIDTH, colour
from core_env.curves.stress import stress_bank
from core_env.workload import Workload


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
    env = discrete_core_v1.parallel_env(render_mode="rgb_array")
    env.reset(seed=0)
    at_reset = env.render()
    image = run_masked_random(env, steps=25).render()
    for img in (at_reset, image):
        assert isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.shape == (HEIGHT, WIDTH, 3)
    assert not np.array_equal(at_reset, image)  # the Gantt chart and loss panel have content


def test_each_gantt_cell_has_the_colour_of_the_task_its_node_served():
    env = run_masked_random(discrete_core_v1.parallel_env(render_mode="rgb_array", n_nodes=4), steps=40)
    image, trace = env.render(), np.array(env.unwrapped.episode.trace)  # (T, N) task per step and node, -1 idle
    top, bottom, left, right = GANTT
    steps, nodes = trace.shape
    for step in (0, steps // 2, steps - 1):
        for node in range(nodes):
            row = top + ((2 * node + 1) * (bottom - top)) // (2 * nodes)  # the middle of the node's row
            column = left + ((2 * step + 1) * (right - left)) // (2 * steps)  # the middle of the step's band
            task = trace[step, node]
            assert tuple(image[row, column]) == (tuple(colour(task)) if task >= 0 else (255, 255, 255)), (step, node, task)


def test_pettingzoo_render_test_passes():
    from pettingzoo.test import render_test

    render_test(discrete_core_v1.env)


def test_rendering_never_imports_matplotlib():
    # rgb_array works on a bare install (no `plot` extra): here matplotlib cannot even be imported
    code = ("import sys; sys.modules['matplotlib'] = None; from core_env import discrete_core_v1; "
            "env = discrete_core_v1.parallel_env(render_mode='rgb_array'); env.reset(seed=0); "
            "env.step({a: 0 for a in env.agents}); image = env.render(); assert image.shape[2] == 3")
    subprocess.run([sys.executable, "-c", code], check=True)
