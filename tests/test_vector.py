"""The public vector env: make_vec, per-env seeds and workloads, autoreset modes, compact observations,
observers, and agreement with B single environments."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import core_env
from core_env import discrete_core_v1, features
from core_env.vector import EPISODE_KEYS, DiscreteCoREVectorEnv
from core_env.workload import load_suite

SMALL = {"n_nodes": 2, "n_slots": 4, "arrival_steps": 40}


def masked(rng, mask):
    return np.argmax(rng.random(mask.shape) * mask, axis=-1)


def test_make_vec_returns_the_vector_env_with_batched_spaces():
    envs = gym.make_vec(core_env.GYM_ID, num_envs=3, vectorization_mode="vector_entry_point", n_slots=8)
    assert isinstance(envs, DiscreteCoREVectorEnv) and envs.num_envs == 3
    obs, infos = envs.reset(seed=0)
    assert obs["observation"].shape == (3, 4, features.obs_dim(8, 8)) and obs["action_mask"].shape == (3, 4, 9)
    assert envs.observation_space.contains(obs) and envs.action_space.shape == (3, 4)
    assert envs.action_masks().shape == (3, 4, 9) and envs.action_masks().dtype == bool
    assert set(EPISODE_KEYS) <= set(infos) and infos["_completed"].all() and infos["conflict"].shape == (3, 4)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match="num_envs"):
        DiscreteCoREVectorEnv(0)
    with pytest.raises(ValueError, match="autoreset_mode"):
        DiscreteCoREVectorEnv(2, "sometimes")
    with pytest.raises(ValueError, match="observation"):
        DiscreteCoREVectorEnv(2, observation="pixels")
    with pytest.raises(TypeError, match="unknown environment argument"):
        DiscreteCoREVectorEnv(2, n_nodez=3)
    envs = DiscreteCoREVectorEnv(2, **SMALL)
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(np.zeros((2, 2), np.int64))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match="env 1, node_0"):
        envs.step(np.array([[0, 0], [9, 0]]))


def test_the_vector_env_equals_b_single_envs_step_for_step():
    """Env i seeded seed + i plays exactly what a PettingZoo env reset with that seed plays."""
    B, rng = 3, np.random.default_rng(1)
    envs = DiscreteCoREVectorEnv(B, "disabled", **SMALL)
    singles = [discrete_core_v1.parallel_env(**SMALL) for _ in range(B)]
    obs, _ = envs.reset(seed=10)
    single_obs = [env.reset(seed=10 + i)[0] for i, env in enumerate(singles)]
    steps = 0
    while not (envs.batch.sim.done.all()):
        for i, env in enumerate(singles):
            if env.agents:
                np.testing.assert_array_equal(obs["observation"][i], np.stack([single_obs[i][a]["observation"] for a in env.possible_agents]))
        actions = masked(rng, obs["action_mask"])
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        for i, env in enumerate(singles):
            if env.agents:
                single_obs[i], r, term, _, info = env.step({a: int(actions[i, n]) for n, a in enumerate(env.agents)})
                assert rewards[i] == r["node_0"] and terminated[i] == term["node_0"]
                assert all(infos[k][i] == info["node_0"][k] for k in EPISODE_KEYS)
            else:
                assert rewards[i] == 0.0 and terminated[i]  # frozen until reset
        steps += 1
    assert steps > 40 and all(not env.agents for env in singles)


def test_per_env_options_replay_suites_and_workloads():
    envs = DiscreteCoREVectorEnv(3, "disabled")
    options = [{"suite": "eval", "root": 0, "episode": 0}, {"suite": "eval", "root": 1, "episode": 2}, {"workload": load_suite("id", "train", 4, 3)}]
    envs.reset(options=options)
    expected = [load_suite("id", "train", 0, 0), load_suite("id", "train", 1, 2), load_suite("id", "train", 4, 3)]
    for got, want in zip(envs.workloads, expected):
        np.testing.assert_array_equal(got.arrival, want.arrival)
        np.testing.assert_array_equal(got.target, want.target)
    with pytest.raises(ValueError, match="one options mapping per environment"):
        envs.reset(options=options[:2])


def idle_steps(envs, steps: int):
    """Step every node idle ``steps`` times; the last step's five results."""
    zeros = np.zeros((envs.num_envs, envs.batch.N), np.int64)
    for _ in range(steps):
        result = envs.step(zeros)
    return result


def test_next_step_autoreset_resets_on_the_following_step_with_zero_reward():
    envs = DiscreteCoREVectorEnv(2, "next_step", **{**SMALL, "max_cycles": 25})
    envs.reset(seed=0)
    obs, rewards, terminated, truncated, infos = idle_steps(envs, 25)
    assert truncated.all() and (infos["t"] == 25).all()
    obs, rewards, terminated, truncated, infos = envs.step(np.ones((2, 2), np.int64))  # ignored: both reset
    assert (rewards == 0).all() and not (terminated | truncated).any() and (infos["t"] == 0).all()
    assert (infos["busy_node_steps"] == 0).all()


def test_same_step_autoreset_hands_out_the_final_observation_and_statistics():
    envs = DiscreteCoREVectorEnv(2, "same_step", **{**SMALL, "max_cycles": 25})
    envs.reset(seed=0)
    for _ in range(24):
        obs, rewards, terminated, truncated, infos = idle_steps(envs, 1)
        assert "final_obs" not in infos
    before = infos["arrived"].copy()
    obs, rewards, terminated, truncated, infos = idle_steps(envs, 1)
    assert truncated.all() and infos["_final_obs"].all() and (infos["t"] == 0).all()
    assert (infos["final_info"]["t"] == 25).all() and (infos["final_info"]["arrived"] >= before).all()
    assert infos["final_obs"][0]["observation"].shape == obs["observation"][0].shape


def test_disabled_autoreset_freezes_finished_envs_until_a_masked_reset():
    envs = DiscreteCoREVectorEnv(2, "disabled", **{**SMALL, "max_cycles": 10})
    envs.reset(seed=0)
    obs, rewards, terminated, truncated, infos = idle_steps(envs, 12)
    assert truncated.all() and (infos["t"] == 10).all() and (rewards == 0).all()
    obs, infos = envs.reset(seed=5, options={"reset_mask": np.array([False, True])})
    assert list(infos["t"]) == [10, 0] and envs.batch.sim.truncated.tolist() == [True, False]


def test_compact_observation_holds_the_same_numbers_as_the_per_node_one():
    per_node, compact = DiscreteCoREVectorEnv(2, "disabled"), DiscreteCoREVectorEnv(2, "disabled", observation="compact")
    a, _ = per_node.reset(seed=3)
    c, _ = compact.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(30):
        actions = masked(rng, a["action_mask"])
        a, *_ = per_node.step(actions)
        c, *_ = compact.step(actions)
    assert compact.observation_space.contains(c)
    rebuilt = np.concatenate([c["nodes"], np.broadcast_to(c["global"][:, None], (2, 4, 3)),
                              np.broadcast_to(c["slots"].reshape(2, 1, -1), (2, 4, c["slots"][0].size))], axis=2)
    np.testing.assert_array_equal(rebuilt, a["observation"])
    np.testing.assert_array_equal(c["action_mask"], a["action_mask"])
    assert c["slots"][..., features.PRESENT].sum() > 0


def test_observers_are_told_of_resets_and_steps():
    class Count:
        def __init__(self):
            self.resets, self.steps, self.served = [], 0, 0

        def on_reset(self, batch, envs):
            self.resets.append(list(envs))

        def on_step(self, batch, outcome):
            self.steps += 1
            self.served += int(outcome.served.sum())

    envs = DiscreteCoREVectorEnv(2, "next_step", **{**SMALL, "max_cycles": 5})
    counter = Count()
    envs.batch.observers.append(counter)
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(6):
        obs, *_ = envs.step(masked(rng, obs["action_mask"]))
    assert counter.resets == [[0, 1], [0, 1]] and counter.steps == 6 and counter.served > 0


def test_resetting_one_env_onto_a_larger_workload_leaves_the_others_untouched():
    envs = DiscreteCoREVectorEnv(2, "disabled")
    envs.reset(options=[{"workload": load_suite("id", "train", 0, 0)}] * 2)
    rng = np.random.default_rng(0)
    for _ in range(20):
        envs.step(masked(rng, envs.action_masks()))
    sim = envs.batch.sim
    kept = {name: getattr(sim, name)[1].copy() for name in ("task", "steps", "progress", "t", "history")}
    big = load_suite("id", "x2", 0, 0)
    assert len(big) + 1 > sim._task_stride  # forces the arrays to grow
    envs.reset(options={"reset_mask": np.array([True, False]), "workload": big})
    for name, value in kept.items():
        np.testing.assert_array_equal(getattr(sim, name)[1][..., : value.shape[-1]] if name == "history" else getattr(sim, name)[1], value)
    assert sim.t[0] == 0 and sim.workloads[0] is big


def test_the_gymnasium_view_offers_the_compact_observation_too():
    from gymnasium.utils.env_checker import check_env

    per_node = gym.make(core_env.GYM_ID)
    compact = gym.make(core_env.GYM_ID, observation="compact")
    check_env(compact, skip_render_check=True)
    a, _ = per_node.reset(seed=4)
    c, _ = compact.reset(seed=4)
    for _ in range(10):
        actions = np.argmax(a["action_mask"], axis=-1)
        a, *_ = per_node.step(actions)
        c, *_ = compact.step(actions)
    assert compact.observation_space.contains(c)
    np.testing.assert_array_equal(a["observation"][1], np.concatenate([c["nodes"][1], c["global"], c["slots"].ravel()]))
    assert per_node.action_masks().shape == (4 * 17,)  # reachable through gym.make (sb3-contrib's convention)
    with pytest.raises(ValueError, match="observation"):
        gym.make(core_env.GYM_ID, observation="dense")


def test_autoreset_modes_refuse_workloads_they_cannot_continue_and_mixed_banks():
    suite = {"suite": "eval", "root": 0, "episode": 0}
    for mode in ("next_step", "same_step"):
        with pytest.raises(ValueError, match="autoreset_mode='disabled'"):
            DiscreteCoREVectorEnv(2, mode).reset(options=suite)
    envs = DiscreteCoREVectorEnv(2, "disabled")
    with pytest.raises(ValueError, match="one curve bank"):
        envs.reset(options=[suite, {}])  # eval curves beside a seeded draw on train curves
    envs.reset(options=suite)
    with pytest.raises(ValueError, match="one curve bank"):
        envs.reset(seed=1, options={"reset_mask": np.array([True, False])})  # a seeded draw beside a suite episode
    assert envs.batch.sim.t.tolist() == [0, 0]


def test_per_node_flags_match_single_envs_across_autoresets():
    """An env that resets at a step reads zero flags; the others keep theirs (against B PettingZoo envs)."""
    B, kwargs = 3, {**SMALL, "max_cycles": 30}
    rng = np.random.default_rng(2)
    for mode in ("next_step", "same_step"):
        envs = DiscreteCoREVectorEnv(B, mode, **kwargs)
        singles = [discrete_core_v1.parallel_env(**kwargs) for _ in range(B)]
        envs.reset(seed=7)
        for i, env in enumerate(singles):
            env.reset(seed=7 + i)
        resets = 0
        for _ in range(100):
            actions = rng.integers(0, 5, (B, 2))  # invalid choices and conflicts included
            _, _, terminated, truncated, infos = envs.step(actions)
            for i, env in enumerate(singles):
                if not env.agents:  # next_step: this step is env i's reset
                    _, single = env.reset()
                    resets += 1
                else:
                    _, _, _, _, single = env.step({a: int(actions[i, n]) for n, a in enumerate(env.possible_agents)})
                    if mode == "same_step" and not env.agents:
                        _, single = env.reset()
                        resets += 1
                assert [single[a]["conflict"] for a in env.possible_agents] == infos["conflict"][i].tolist()
                assert [single[a]["invalid_action"] for a in env.possible_agents] == infos["invalid_action"][i].tolist()
                assert single["node_0"]["t"] == infos["t"][i]
        assert resets >= 6


def test_a_seed_with_a_reset_mask_reseeds_only_the_masked_envs():
    envs = DiscreteCoREVectorEnv(3, "disabled", **SMALL)
    envs.reset(seed=0)
    before = [rng.bit_generator.state for rng in envs.batch.rngs]
    envs.reset(seed=100, options={"reset_mask": np.array([False, True, False])})
    after = [rng.bit_generator.state for rng in envs.batch.rngs]
    assert after[0] == before[0] and after[2] == before[2] and after[1] != before[1]
    single = discrete_core_v1.parallel_env(**SMALL)
    single.reset(seed=101)  # env 1 of a reset seeded 100 plays what a single env seeded 101 plays
    np.testing.assert_array_equal(envs.workloads[1].arrival, single.episode.workload.arrival)
    np.testing.assert_array_equal(envs.workloads[1].target, single.episode.workload.target)


def test_a_refused_step_keeps_the_last_outcome_and_clear_errors():
    envs = DiscreteCoREVectorEnv(1, "disabled", n_nodes=2, n_slots=4, strict=True)
    obs, _ = envs.reset(seed=0)
    for _ in range(5):
        active = np.flatnonzero(obs["action_mask"][0, 0])
        obs, _, _, _, infos = envs.step(np.array([[active[-1], active[-1]]]))  # node 1 always loses: a conflict
    assert infos["conflict"].tolist() == [[0, 1]]
    with pytest.raises(ValueError, match="outside"):
        envs.step(np.array([[0, 9]]))
    assert envs._infos()["conflict"].tolist() == [[0, 1]]
    with pytest.raises(ValueError, match="action 18446744073709551615"):
        envs.step(np.array([[0, 2**64 - 1]], np.uint64))
    with pytest.raises(ValueError, match="read-only"):
        infos["_t"][0] = False
    with pytest.raises(RuntimeError, match="first reset"):
        DiscreteCoREVectorEnv(2).reset(options={"reset_mask": np.array([True, False])})


def test_the_compiled_rules_read_each_array_by_its_own_name():
    """dynamics.arrays_of builds the named tuple the rules take from the StructRef by position: every field
    must hold the simulator's array of that name (a shifted position would read another array of the
    same type)."""
    from core_env import dynamics
    from core_env.state import ARRAYS, Arrays

    from numba import njit

    assert Arrays._fields == tuple(name for name, _, _ in ARRAYS) + ("cum", "slope")
    envs = DiscreteCoREVectorEnv(2, "disabled")
    envs.reset(seed=0)
    sim = envs.batch.sim
    arrays = njit(lambda s: dynamics.arrays_of(s))(sim.engine_state)
    for field in Arrays._fields:
        owner = getattr(sim.arrays, field)
        assert getattr(arrays, field).shape == owner.shape and np.shares_memory(getattr(arrays, field), owner), field
    assert np.shares_memory(sim.arrays.cum, sim.bank.cum) and np.shares_memory(sim.arrays.slope, sim.bank.slope)


# ---------------------------------------------------------------- issue 51: the batch, the simulator and the statistics


def test_the_views_reach_the_engine_only_through_the_simulator():
    """The Simulator is the only caller of the compiled engine: the batch, the views and the task source
    import no dynamics and hold no handle on the simulator's compiled state."""
    import ast
    from pathlib import Path

    from core_env import batch, vector

    assert vector.EnvBatch is batch.EnvBatch  # the old import path still works
    package = Path(core_env.__file__).parent
    for name in ("batch", "vector", "episode", "parallel", "gym_env", "task_source"):
        tree = ast.parse((package / f"{name}.py").read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "core_env" for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert not {"dynamics", "rules", "core_env.dynamics", "core_env.rules"} & imported, name
        assert not [node for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "_state"], name


def test_one_statistics_builder_behind_every_view():
    """The vector env's infos, the simulator's episode statistics, the single views' infos and the batch's
    lists all read one builder (sim.fill_statistics): the same values, the single views' as plain numbers."""
    B, rng = 3, np.random.default_rng(4)
    envs = DiscreteCoREVectorEnv(B, "disabled", **SMALL)
    singles = [discrete_core_v1.parallel_env(**SMALL) for _ in range(B)]
    envs.reset(seed=2)
    for i, env in enumerate(singles):
        env.reset(seed=2 + i)
    for _ in range(30):
        actions = masked(rng, envs.action_masks())
        _, _, _, _, infos = envs.step(actions)
        statistics = envs.batch.sim.episode_statistics()
        for b, env in enumerate(singles):
            single = env.step({agent: int(actions[b, n]) for n, agent in enumerate(env.possible_agents)})[-1] if env.agents else None
            stats = envs.batch.sim.statistics_of(b)
            assert list(stats) == list(EPISODE_KEYS) and list(statistics) == list(EPISODE_KEYS)
            for key in EPISODE_KEYS:
                assert stats[key] == statistics[key][b] == infos[key][b] and type(stats[key]) in (int, float), key
            if single is not None:
                for n, agent in enumerate(env.possible_agents):
                    assert single[agent] == {**stats, "potential": infos["potential"][b], "conflict": infos["conflict"][b, n],
                                             "invalid_action": infos["invalid_action"][b, n]}


def test_infos_and_observations_handed_out_stay_the_callers():
    """What a step fills is handed out once: writing into returned infos or observations changes neither
    the next ones nor the state, and reading them twice gives equal, separate arrays."""
    envs = DiscreteCoREVectorEnv(2, "disabled", **SMALL)
    envs.reset(seed=0)
    obs, _, _, _, infos = envs.step(np.ones((2, 2), np.int64))
    again = envs.batch.infos()
    assert all(np.array_equal(infos[key], again[key]) and not np.shares_memory(infos[key], again[key]) for key in again)
    expected = {key: value.copy() for key, value in again.items()}
    infos["completed"][:] = 99
    infos["conflict"][:] = 7
    obs["observation"][:] = 5.0
    assert all(np.array_equal(envs.batch.infos()[key], expected[key]) for key in expected)
    assert not np.array_equal(envs.batch.observe()[0], obs["observation"])
    assert envs.batch.sim.statistics_of(0)["completed"] == int(expected["completed"][0])


# ---------------------------------------------------------------- issue 49: bounds and masks (faults)


@pytest.mark.faults
@pytest.mark.parametrize("make", [lambda n, **kw: gym.make_vec(core_env.GYM_ID, num_envs=n, vectorization_mode="vector_entry_point", **kw),
                                  lambda n, **kw: gym.make_vec(core_env.GYM_ID, num_envs=n, **kw), DiscreteCoREVectorEnv],
                         ids=["make_vec", "make_vec_default_mode", "constructor"])
def test_num_envs_beyond_the_bound_or_the_memory_is_refused_before_allocation(make):
    from core_env.memory import MAX_NUM_ENVS

    with pytest.raises(ValueError, match=rf"num_envs must be in \[1, {MAX_NUM_ENVS}\].*got 1000000"):  # was a MemoryError
        make(10**6)
    with pytest.raises(ValueError, match=r"num_envs=60000 needs at least .* GiB .*n_nodes=256, n_slots=1024.*more than this machine's"):
        make(60000, n_nodes=256, n_slots=1024)  # ~51 MiB per env: terabytes
    with pytest.raises(TypeError, match=r"num_envs must be an int .*got float 2.0"):
        make(2.0)


@pytest.mark.faults
def test_the_memory_check_reads_the_estimate_against_this_machine(monkeypatch):
    from core_env import memory
    from core_env.config import EnvConfig

    per_env = memory.bytes_per_env(EnvConfig())
    monkeypatch.setattr(memory, "physical_memory", lambda: 100 * per_env)
    assert DiscreteCoREVectorEnv(100).num_envs == 100
    with pytest.raises(ValueError, match=r"num_envs=101 needs at least"):
        DiscreteCoREVectorEnv(101)


@pytest.mark.faults
@pytest.mark.parametrize("kwargs", [{}, {"n_nodes": 16, "n_slots": 64, "load": "x2"}, {"n_nodes": 1, "n_slots": 1, "arrival_steps": 1}])
@pytest.mark.parametrize("observation", ["per_node", "compact"])
def test_the_memory_estimate_is_a_lower_bound_close_to_what_an_env_holds(kwargs, observation):
    from core_env.memory import bytes_per_env

    B = 8
    envs = DiscreteCoREVectorEnv(B, "disabled", observation, **kwargs)
    obs, _ = envs.reset(seed=0)
    held = sum(a.nbytes for a in envs.batch.sim._arenas.values()) + sum(v.nbytes for v in obs.values())
    held += sum(s.low.nbytes + s.high.nbytes for s in envs.observation_space.values())
    held = held / B + 1024  # and an rng
    estimate = bytes_per_env(envs.config, observation)
    assert 0.5 * held <= estimate <= held, (estimate, held)


@pytest.mark.faults
@pytest.mark.parametrize("mask", [[0.5, 0.0], [np.nan, 0.0], [-1, 0], [2, 0], [1, 0], "ab", [[True], [False, True]]])
def test_a_reset_mask_that_is_not_bool_is_refused_and_resets_nothing(mask):
    envs = DiscreteCoREVectorEnv(2, "disabled", **SMALL)
    envs.reset(seed=0)
    envs.step(np.zeros((2, 2), np.int64))
    with pytest.raises(TypeError, match=r"reset_mask must be a \(2,\) array of bools"):
        envs.reset(options={"reset_mask": mask})  # 0.5, NaN, -1 and 2 each read as True: every env reset
    assert envs.batch.sim.t.tolist() == [1, 1]
    with pytest.raises(ValueError, match="reset_mask goes in one options mapping"):
        envs.reset(options=[{"reset_mask": np.array([True, False])}, {}])  # was an ignored unknown option
    envs.reset(options={"reset_mask": np.array([True, False])})
    assert envs.batch.sim.t.tolist() == [0, 1]


@pytest.mark.faults
@pytest.mark.parametrize("actions", [np.full((2, 2), 1.9), np.full((2, 2), 0.9), np.ones((2, 2), bool), np.full((2, 2), np.nan)])
def test_actions_that_are_not_integers_are_refused_never_cast(actions):
    envs = DiscreteCoREVectorEnv(2, "disabled", **SMALL)
    envs.reset(seed=0)
    with pytest.raises(TypeError, match=rf"actions must be integers, got dtype {actions.dtype}"):
        envs.step(actions)
    assert envs.batch.sim.t.tolist() == [0, 0]


@pytest.mark.faults
def test_an_unknown_reset_option_warns_once_per_reset_in_the_vector_env():
    envs = DiscreteCoREVectorEnv(3, **SMALL)
    with pytest.warns(UserWarning, match=r"ignoring unknown reset option\(s\) \['colour'\]") as record:
        envs.reset(seed=0, options={"colour": "red"})
    assert len([w for w in record if "unknown reset option" in str(w.message)]) == 1
