"""The compiled engine against a plain-Python step written from the docs' rules (tests/reference_step.py):
whole random episodes — random configurations, speeds, switching costs, rewards and actions (mostly valid,
often colliding, sometimes choosing empty slots) — give the same slots, reports, statistics, flags, rewards,
episode ends and every node's observation in both, step by step; and hand-made episodes that train past the
end of a curve, far past 2**63 batches, and by steps too small to move a position."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LINEAR, parallel_on, tiny_bank, tiny_workload
from hypothesis import given
from hypothesis import strategies as st

from core_env import discrete_core_v1
from reference_step import ReferenceEpisode
from test_properties import PROPERTY_SETTINGS, configs, random_actions

ALMOST_ALL = 1.0 - 2.0**-53  # the largest valid switch_cost: a switch keeps 1.1e-16 of a step's batches
FIELDS = ("arrived", "completed", "failed", "rejected", "switches", "busy_node_steps", "wasted_node_steps", "conflicts", "invalid_actions")


def _same_float(a: float, b: float) -> bool:
    # the dynamics use no SIMD-dependent operation; logs come from the C library, so allow an ulp or two
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


def _play_against_the_reference(env, obs, config, rng, p_valid=1.0) -> None:
    """Step ``env`` (just reset, its first observations ``obs``) to its end with random actions, checking every
    step against a :class:`ReferenceEpisode` of the same configuration and workload."""
    sim = env.episode.sim
    reference = ReferenceEpisode(sim.config, sim.workloads[0])
    n, k = config["n_nodes"], config["n_slots"]
    steps = 0
    while env.agents:
        actions = random_actions(rng, n, k, obs["node_0"]["action_mask"], p_valid)
        obs, _, _, _, infos = env.step({f"node_{i}": int(a) for i, a in enumerate(actions)})
        expected = reference.step(actions)
        steps += 1
        where = f"step {steps}, actions {actions.tolist()}"
        assert sim.task[0].tolist() == reference.slot_tasks(), where
        stats = sim.statistics_of(0)
        assert {f: int(stats[f]) for f in FIELDS} == {f: getattr(reference.stats, f) for f in FIELDS}, where
        assert int(sim.t[0]) == reference.t and bool(sim.terminated[0]) == reference.terminated and bool(sim.truncated[0]) == reference.truncated
        assert [infos[f"node_{i}"]["conflict"] for i in range(n)] == expected["conflict"], where
        assert [infos[f"node_{i}"]["invalid_action"] for i in range(n)] == expected["invalid"], where
        assert _same_float(float(sim.reward[0]), expected["reward"]), (where, float(sim.reward[0]), expected["reward"])
        reported = (sim.task[0] >= 0) & (sim.steps[0] > 0)  # a freed slot keeps its last task's fields
        assert all(_same_float(a, b) for a, b in zip(sim.last_loss[0][reported], reference.last_losses()[reported])), where
        if env.agents:  # the observations of every node (float32: equal up to an ulp of the logs)
            for i in range(n):
                np.testing.assert_allclose(obs[f"node_{i}"]["observation"], reference.observation(i, config["history"]), rtol=1e-6, atol=1e-6,
                                           err_msg=where)
    assert reference.done and steps > 0


@PROPERTY_SETTINGS
@given(config=configs(), seed=st.integers(0, 2**16), policy_seed=st.integers(0, 2**16), p_valid=st.floats(0, 1))
def test_compiled_engine_matches_the_reference_step_on_whole_random_episodes(config, seed, policy_seed, p_valid):
    env = discrete_core_v1.parallel_env(**config)
    obs, _ = env.reset(seed=seed)
    _play_against_the_reference(env, obs, config, np.random.default_rng(policy_seed), p_valid)


#: 300 falling, wiggling losses: the plateau (the mean of the last 15) differs from the last loss and from the
#: mean of any other tail window, so a wrong plateau rule shows in the reports past the end.
WIGGLY = 1.0 + 4.0 * np.exp(-np.arange(300) / 60.0) + 0.2 * np.sin(np.arange(300) * 0.7)


#: (tasks, node speeds, switch_cost): tasks (arrival, deadline, target, batches per step, curve) with targets
#: below every loss, so that they train on to their deadlines.
PAST_THE_END = {
    # one passes the end of its curve after ~40 node-steps, one at 1e18 batches per step passes 2**62 (from
    # where the engine integrates the plateau by itself) and 2**63 (where an int64 batch index overflows)
    "past the end": ([(0, 400, 0.5, 7.3, 0), (0, 400, 0.5, 1e18, 0), (3, 400, 0.5, 2.5, 1), (10, 400, 0.5, 1e9, 0)], (1.0, 1e-3), 0.25),
    # a switch keeps 2**-53 of a step's batches, which positions (whole multiples of a power-of-two rate, at
    # least one rate along) round away: the step reports the loss at the position. (Rates and speeds that
    # leave a switch an ulp or two of progress report the mean over that ulp as a difference of integrals,
    # which cancellation can make anything, 0 included; such steps are kept out of these episodes.)
    "steps too small to move": ([(0, 400, 0.5, 32.0, 0), (0, 400, 0.5, 2.0, 1), (5, 400, 0.5, 0.5, 0)], (1.0, 1.0), ALMOST_ALL),
}


@pytest.mark.parametrize("case", sorted(PAST_THE_END))
@pytest.mark.parametrize("policy_seed", [0, 1, 2])
def test_compiled_engine_matches_the_reference_step_past_the_curve_end(case, policy_seed):
    tasks, speeds, switch_cost = PAST_THE_END[case]
    config = {"n_nodes": 2, "n_slots": 3, "history": 3, "max_cycles": 160, "node_speeds": speeds, "switch_cost": switch_cost,
              "reward": "shaped"}
    env, obs, _ = parallel_on(tiny_workload(tasks, arrival_steps=20, bank=tiny_bank(WIGGLY, LINEAR)), **config)
    _play_against_the_reference(env, obs, config, np.random.default_rng(policy_seed))
    sim = env.episode.sim
    assert sim.progress[0].max() > (2.0**63 if case == "past the end" else len(WIGGLY))
    assert sim.statistics_of(0)["switches"] > 0
