"""The compiled engine against a plain-Python step written from the docs' rules (tests/reference_step.py):
whole random episodes — random configurations, speeds, switching costs, rewards and actions (mostly valid,
often colliding, sometimes choosing empty slots) — give the same slots, reports, statistics, flags, rewards,
episode ends and every node's observation in both, step by step."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from core_env import discrete_core_v1
from reference_step import ReferenceEpisode
from test_properties import PROPERTY_SETTINGS, configs, random_actions

FIELDS = ("arrived", "completed", "failed", "rejected", "switches", "busy_node_steps", "wasted_node_steps", "conflicts", "invalid_actions")


def _same_float(a: float, b: float) -> bool:
    # the dynamics use no SIMD-dependent operation; logs come from the C library, so allow an ulp or two
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


@PROPERTY_SETTINGS
@given(config=configs(), seed=st.integers(0, 2**16), policy_seed=st.integers(0, 2**16), p_valid=st.floats(0, 1))
def test_compiled_engine_matches_the_reference_step_on_whole_random_episodes(config, seed, policy_seed, p_valid):
    env = discrete_core_v1.parallel_env(**config)
    obs, _ = env.reset(seed=seed)
    sim = env.episode.sim
    reference = ReferenceEpisode(sim.config, sim.workloads[0])
    rng = np.random.default_rng(policy_seed)
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
