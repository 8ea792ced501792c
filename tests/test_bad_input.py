"""Bad input gets a clear exception naming the problem, and the environment stays usable (docs/env.md, Arguments)."""

from __future__ import annotations

import shutil

import gymnasium as gym
import numpy as np
import pytest
from conftest import FLAT, LINEAR, tiny_bank, tiny_workload, trajectory_digest

import core_env
from core_env import discrete_core_v1
from core_env import suites as workload  # the suite files' reader (it was core_env.workload's)
from core_env.gym_env import DiscreteCoREEnv
from core_env.workload import Workload, draw_workload

CONFIG = {"n_nodes": 3, "n_slots": 4, "arrival_steps": 30}
VALID = {"node_0": 1, "node_1": 1, "node_2": 0}


def fresh_parallel(**overrides):
    env = discrete_core_v1.parallel_env(**CONFIG, **overrides)
    env.reset(seed=3)
    return env


def fresh_gym():
    env = DiscreteCoREEnv(**CONFIG)
    env.reset(seed=3)
    return env


def assert_next_step_is_unaffected(env, make, action):
    """A valid step on ``env`` (which saw a bad call) gives what it gives on an env that never saw one."""
    reference = make()
    assert trajectory_digest(env.state()) == trajectory_digest(reference.state())
    assert trajectory_digest(env.step(action)) == trajectory_digest(reference.step(action))


# ---------------------------------------------------------------- actions, PettingZoo view


@pytest.mark.parametrize("bad, exc, match", [
    ({**VALID, "node_1": 5}, ValueError, r"5 for node_1 is outside the action space \[0, 4\]"),
    ({**VALID, "node_2": -1}, ValueError, r"-1 for node_2 is outside"),
    ({**VALID, "node_0": 1.0}, TypeError, r"action for node_0 must be an integer.*float"),
    ({**VALID, "node_0": np.float32(1)}, TypeError, r"action for node_0 must be an integer"),
    ({**VALID, "node_1": True}, TypeError, r"action for node_1 must be an integer.*bool"),
    ({**VALID, "node_1": np.array([1])}, TypeError, r"action for node_1 must be an integer"),
    ({**VALID, "node_1": "1"}, TypeError, r"action for node_1 must be an integer.*str"),
    ({"node_0": 2**63, "node_1": 1, "node_2": 0}, ValueError, r"action 9223372036854775808 for node_0 is outside"),  # beyond int64
    ({"node_0": 1, "node_1": -2**70, "node_2": 0}, ValueError, r"for node_1 is outside the action space"),
    ({"node_0": 1, "node_1": 1}, ValueError, r"missing action for agent\(s\) \['node_2'\]"),
    ({**VALID, "node_7": 0}, ValueError, r"unknown or finished agent\(s\) \['node_7'\]"),
    ([1, 1, 0], TypeError, r"actions must be a dict"),
])
def test_bad_parallel_action_raises_and_leaves_the_env_usable(bad, exc, match):
    env = fresh_parallel()
    with pytest.raises(exc, match=match):
        env.step(bad)
    assert_next_step_is_unaffected(env, fresh_parallel, VALID)


@pytest.mark.parametrize("view", ["parallel", "gym", "vector"])
@pytest.mark.parametrize(("seed", "exc"), [(True, TypeError), (-1, ValueError), (1.5, TypeError), ("7", TypeError)])
def test_a_seed_that_is_not_an_int_at_least_0_raises_naming_it(view, seed, exc):
    if view == "parallel":
        env = discrete_core_v1.parallel_env()
    elif view == "gym":
        env = gym.make(core_env.GYM_ID)
    else:
        env = gym.make_vec(core_env.GYM_ID, num_envs=2, vectorization_mode="vector_entry_point")
    with pytest.raises(exc, match="seed must be"):
        env.reset(seed=seed)
    env.reset(seed=0)  # still usable


def test_the_largest_kappa_keeps_the_shaped_return_equal_to_completions():
    env = discrete_core_v1.parallel_env(kappa=100.0)
    observations, _ = env.reset(seed=3)
    rng, total, infos = np.random.default_rng(0), 0.0, {}
    while env.agents:
        actions = {a: int(rng.choice(np.flatnonzero(observations[a]["action_mask"]))) for a in env.agents}
        observations, rewards, _, _, infos = env.step(actions)
        total += rewards["node_0"]
    assert np.isfinite(total) and total == pytest.approx(infos["node_0"]["completed"], abs=1e-6)


def test_numpy_integer_actions_are_accepted_like_python_ints():
    actions = {"node_0": np.int32(1), "node_1": np.uint8(1), "node_2": np.array(0)}
    assert trajectory_digest(fresh_parallel().step(actions)) == trajectory_digest(fresh_parallel().step(VALID))


def test_strict_mode_rejects_a_masked_slot_and_leaves_the_env_usable():
    env = discrete_core_v1.parallel_env(**CONFIG, strict=True)
    obs, _ = env.reset(seed=3)
    empty = int(np.flatnonzero(obs["node_0"]["action_mask"] == 0)[0])
    with pytest.raises(ValueError, match=f"node_2: node 2 .*chose slot {empty - 1}, which holds no active task"):
        env.step({**VALID, "node_2": empty})
    assert_next_step_is_unaffected(env, lambda: fresh_parallel(strict=True), VALID)


def test_stepping_before_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        discrete_core_v1.parallel_env(**CONFIG).step(VALID)
    with pytest.raises(RuntimeError, match="reset"):
        DiscreteCoREEnv(**CONFIG).step(np.zeros(3, np.int64))


@pytest.mark.parametrize("call", ["state", "action_masks"])
def test_gym_accessors_before_reset_raise_a_clear_error(call):
    with pytest.raises(RuntimeError, match="reset"):
        getattr(DiscreteCoREEnv(**CONFIG), call)()


@pytest.mark.parametrize("call", [lambda e: e.state(), lambda e: e.reported_history(0), lambda e: e.slot_task(0)],
                         ids=["state", "reported_history", "slot_task"])
def test_parallel_accessors_before_reset_raise_a_clear_error(call):
    with pytest.raises(RuntimeError, match="reset"):
        call(discrete_core_v1.parallel_env(**CONFIG))


@pytest.mark.parametrize("slot", [-1, 4, 1.0, "0"])
def test_slot_accessors_reject_a_bad_slot(slot):
    env = fresh_parallel()
    for call in (env.reported_history, env.slot_task):
        with pytest.raises(ValueError, match=r"slot must be an int in \[0, 4\)"):
            call(slot)


# ---------------------------------------------------------------- actions, Gymnasium view


@pytest.mark.parametrize("bad, exc, match", [
    (np.array([1, 1]), ValueError, r"action must have shape \(3,\), one entry per node, got shape \(2,\)"),
    (np.array([[1, 1, 0]]), ValueError, r"got shape \(1, 3\)"),
    (np.array([1.0, 1.0, 0.0]), TypeError, r"integer array, got dtype float64"),
    (np.array([True, False, False]), TypeError, r"integer array, got dtype bool"),
    (np.array([1, 9, 0]), ValueError, r"node_1: action 9 of node 1 .*outside \[0, 4\]"),
    (np.array([1, 0, -2]), ValueError, r"node_2: action -2"),
])
def test_bad_gym_action_raises_and_leaves_the_env_usable(bad, exc, match):
    env = fresh_gym()
    with pytest.raises(exc, match=match):
        env.step(bad)
    assert_next_step_is_unaffected(env, fresh_gym, np.array([1, 1, 0]))


def test_gym_make_passes_bad_actions_through_its_wrappers_as_the_same_error():
    env = gym.make(core_env.GYM_ID, **CONFIG)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="node_0"):
        env.step(np.array([5, 0, 0]))
    env.step(np.array([0, 0, 0]))


# ---------------------------------------------------------------- configuration


BAD_CONFIGS = [
    ({"n_nodes": 0}, ValueError, r"n_nodes must be in \[1, 256\], got 0"),
    ({"n_nodes": 2.0}, TypeError, r"n_nodes must be an int"),
    ({"n_slots": 2000}, ValueError, r"n_slots must be in \[1, 1024\], got 2000"),
    ({"load": 1.5}, ValueError, r"load must be a name in .* or an intensity per node in \(0, 1\], got 1.5"),
    ({"load": 0.0}, ValueError, r"intensity per node in \(0, 1\]"),
    ({"load": "heavy"}, ValueError, r"unknown load 'heavy'"),
    ({"load": True}, ValueError, r"load must be"),
    ({"task_set": "nope"}, ValueError, r"unknown task_set 'nope'"),
    ({"task_set": 3}, TypeError, r"task_set must be a name or a CurveBank"),
    ({"reward": "dense"}, ValueError, r"unknown reward 'dense'"),
    ({"switch_cost": 1.0}, ValueError, r"switch_cost must be a fraction in \[0, 1\), got 1.0"),
    ({"switch_cost": -0.1}, ValueError, r"switch_cost"),
    ({"kappa": float("nan")}, ValueError, r"kappa must be a number in \[0, 100\]"),
    ({"kappa": 1e308}, ValueError, r"kappa must be a number in \[0, 100\], got 1e\+308"),
    ({"kappa": -0.5}, ValueError, r"kappa must be a number in \[0, 100\]"),
    ({"history": 0}, ValueError, r"history must be in"),
    ({"max_cycles": 0}, ValueError, r"max_cycles must be in"),
    ({"strict": "yes"}, TypeError, r"strict must be a bool"),
    ({"render_mode": "video"}, ValueError, r"unknown render_mode 'video'"),
    ({"n_nodes": 3, "node_speeds": (1.0, 2.0)}, ValueError, r"node_speeds must have length n_nodes=3"),
    ({"n_nodes": 2, "node_speeds": (1.0, -2.0)}, ValueError, r"node_speeds must be finite and > 0"),
    ({"n_nodes": 2, "node_speeds": (1.0, float("inf"))}, ValueError, r"node_speeds must be finite and > 0"),
    ({"n_nodes": 2, "node_speeds": ("fast", "slow")}, ValueError, r"node_speeds must be numbers"),
    ({"n_nodes": 2, "node_speeds": (1.0, None)}, ValueError, r"node_speeds must be finite and > 0"),
    ({"n_nodes": 2, "node_speeds": "12"}, ValueError, r"node_speeds must have length"),
    ({"n_nodes": 2, "node_speeds": [True, True]}, TypeError, r"node_speeds must be numbers, not bools"),
    ({"nodes": 4}, TypeError, r"unknown environment argument\(s\) \['nodes'\]"),
]


@pytest.mark.filterwarnings("ignore:.*not in the possible render_modes")  # gym.make's own warning
@pytest.mark.parametrize("make", [discrete_core_v1.parallel_env, DiscreteCoREEnv, discrete_core_v1.env,
                                  lambda **kw: gym.make(core_env.GYM_ID, **kw)],
                         ids=["parallel", "gym", "aec", "gym.make"])
@pytest.mark.parametrize("kwargs, exc, match", BAD_CONFIGS, ids=[str(c[0]) for c in BAD_CONFIGS])
def test_invalid_config_raises_a_clear_error_in_every_view(make, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make(**kwargs)


@pytest.mark.parametrize("value, exc", [(0, ValueError), ("many", TypeError), (2.5, TypeError)])
def test_assigning_an_invalid_max_cycles_raises_and_keeps_the_old_value(value, exc):
    env = fresh_parallel()
    with pytest.raises(exc, match="max_cycles"):
        env.max_cycles = value
    assert env.max_cycles == 5000


# ---------------------------------------------------------------- reset options and suites


def test_unknown_reset_options_warn_instead_of_failing():
    env = discrete_core_v1.parallel_env(**CONFIG)
    with pytest.warns(UserWarning, match=r"ignoring unknown reset option\(s\) \['options'\]"):
        env.reset(seed=0, options={"options": 1})
    reference = discrete_core_v1.parallel_env(**CONFIG)
    reference.reset(seed=0)
    assert trajectory_digest(env.step(VALID)) == trajectory_digest(reference.step(VALID))
    with pytest.warns(UserWarning, match="colour"):
        DiscreteCoREEnv(**CONFIG).reset(seed=0, options={"colour": "red"})


@pytest.mark.parametrize("options, exc, match", [
    ({"suite": "eval", "root": 10}, ValueError, r"roots 0..9 .*got root=10"),
    ({"suite": "eval", "root": -1}, ValueError, r"got root=-1"),
    ({"suite": "eval", "episode": 99}, ValueError, r"episode=99"),
    ({"suite": "eval", "root": "1"}, TypeError, r"options\['root'\] must be an int"),
    ({"suite": "eval", "episode": True}, TypeError, r"options\['episode'\] must be an int"),
    ({"suite": "eval", "task_set": "nope"}, ValueError, r"no evaluation suite for task set 'nope'"),
    ({"suite": "eval", "task_set": "stress"}, ValueError, r"no evaluation suite for task set 'stress'"),
    ({"suite": "eval", "load": "heavy"}, ValueError, r"no evaluation suite for load 'heavy'"),
    ({"suite": "eval", "load": 0.3}, ValueError, r"named loads"),
    ({"suite": "eval", "any_nodes": 1}, TypeError, r"options\['any_nodes'\] must be a bool"),
    ({"suite": "test"}, ValueError, r"unknown suite 'test'"),
    ({"workload": "w"}, TypeError, r"options\['workload'\] must be a Workload"),
])
def test_bad_suite_options_raise_and_a_later_reset_works(options, exc, match):
    env = discrete_core_v1.parallel_env(**CONFIG)
    with pytest.raises(exc, match=match):
        env.reset(seed=1, options=options)
    assert env.agents == []
    good = {"suite": "eval", "root": 4, "episode": 3, "any_nodes": True}  # CONFIG has 3 nodes, the suites 4
    reference = discrete_core_v1.parallel_env(**CONFIG)
    assert trajectory_digest(env.reset(options=good)) == trajectory_digest(reference.reset(options=good))


def _view(name):
    if name == "parallel":
        return discrete_core_v1.parallel_env(**CONFIG)
    if name == "gym":
        return DiscreteCoREEnv(**CONFIG)
    if name == "gym.make":
        return gym.make(core_env.GYM_ID, **CONFIG)
    return gym.make_vec(core_env.GYM_ID, num_envs=2, vectorization_mode="vector_entry_point", autoreset_mode="disabled", **CONFIG)


@pytest.mark.faults
@pytest.mark.parametrize("view", ["parallel", "gym", "gym.make", "vector"])
@pytest.mark.parametrize("options, exc, match", [
    # an option that would be ignored: root without suite drew a seeded workload
    ({"root": 3}, ValueError, r"options \['root'\] choose an episode of an evaluation suite and need options\['suite'\].*would ignore"),
    ({"episode": 1, "load": "x2", "suite_dir": "d"}, ValueError, r"options \['episode', 'load', 'suite_dir'\] choose an episode"),
    ({"any_nodes": True}, ValueError, r"\['any_nodes'\] choose an episode .*need options\['suite'\]"),
    ({"workload": "w", "root": 1}, ValueError, r"options\['workload'\] replays that workload, so \['root'\] would be ignored"),
    ({"suite": "eval", "workload": "w"}, ValueError, r"so \['suite'\] would be ignored"),
    ({"suite": "my_suite.npz", "load": "x2", "root": 0}, ValueError, r"options \['load'\] are read only with options\['suite'\] == 'eval'"),
    ({"suite": "my_suite.npz", "suite_dir": "d"}, ValueError, r"\['suite_dir'\] are read only with options\['suite'\] == 'eval'"),
    # types, each naming the option: these gave TypeErrors that named no option
    (1, TypeError, r"options must be a mapping of reset option names to values \(or None\), got int 1"),
    ("eval", TypeError, r"options must be a mapping .*got str 'eval'"),
    ({"suite": "eval", "suite_dir": 5}, TypeError, r"options\['suite_dir'\] must be a directory's path \(str or os.PathLike\), got int 5"),
    ({"suite": 5}, TypeError, r"options\['suite'\] must be 'eval' or a suite file's path \(str or os.PathLike\), got int 5"),
    ({1: "eval"}, TypeError, r"options must have option names \(str\) as keys, got \[1\]"),
])
def test_reset_options_that_would_be_ignored_or_mistyped_are_refused_in_every_view(view, options, exc, match):
    env = _view(view)
    with pytest.raises(exc, match=match):
        env.reset(seed=1, options=options)
    reference = _view(view)
    assert trajectory_digest(env.reset(seed=1)) == trajectory_digest(reference.reset(seed=1))  # still usable, as if never asked


@pytest.mark.faults
@pytest.mark.parametrize("view", ["parallel", "gym"])
def test_a_single_view_takes_one_options_mapping_not_a_sequence(view):
    with pytest.raises(TypeError, match=r"options must be a mapping .*got list"):
        _view(view).reset(options=[{"suite": "eval", "root": 0, "episode": 0, "any_nodes": True}])


@pytest.mark.faults
def test_a_bad_entry_of_per_env_options_is_named_by_its_index():
    envs = _view("vector")
    with pytest.raises(ValueError, match=r"options\[1\] \['root'\] choose an episode"):
        envs.reset(options=[{"suite": "eval", "root": 0, "any_nodes": True}, {"root": 0}])
    with pytest.raises(TypeError, match=r"options\[0\] must be a mapping .*got int 3"):
        envs.reset(options=[3, None])


@pytest.fixture
def suite_copy(tmp_path, monkeypatch):
    """A private copy of the committed suites that the loader reads instead (and an empty cache)."""
    directory = tmp_path / "suites"
    shutil.copytree(workload.SUITE_DIR, directory)
    monkeypatch.setattr(workload, "SUITE_DIR", directory)
    monkeypatch.setattr(workload, "SUITE_MANIFEST", directory / workload.SUITE_MANIFEST.name)
    monkeypatch.setattr(workload, "_SUITE_CACHE", {})
    return directory


def test_corrupted_suite_file_fails_with_a_checksum_mismatch(suite_copy):
    path = suite_copy / "id__train.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch for evaluation suite file id__train.npz"):
        workload.load_suite("id", "train", 0, 0)
    env = discrete_core_v1.parallel_env(**CONFIG)
    with pytest.raises(ValueError, match="checksum mismatch"):
        env.reset(options={"suite": "eval", "task_set": "id", "load": "train"})
    env.reset(options={"suite": "eval", "task_set": "id", "load": "x2", "any_nodes": True})  # intact files still load (on 3 nodes: asked)


def test_truncated_suite_file_fails_with_a_checksum_mismatch(suite_copy):
    path = suite_copy / "vit_ood__x1.5.npz"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match="checksum mismatch"):
        workload.load_suite("vit_ood", "x1.5", 0, 0)


def test_suite_file_missing_from_disk_or_manifest_is_reported(suite_copy):
    (suite_copy / "rl_ood__x2.npz").unlink()
    with pytest.raises(FileNotFoundError, match="rl_ood__x2.npz is missing"):
        workload.load_suite("rl_ood", "x2", 0, 0)
    (suite_copy / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="id__x2.npz is not listed"):
        workload.load_suite("id", "x2", 0, 0)


# ---------------------------------------------------------------- hand-made workloads


@pytest.mark.parametrize("tasks, arrival_steps, match", [
    ([(3, 9, 1.0, 1.0), (1, 9, 1.0, 1.0)], 5, "arrivals must be sorted"),
    ([(2, 2, 1.0, 1.0)], 5, "deadline must be later than its task's arrival"),
    ([(2, 1, 1.0, 1.0)], 5, "deadline must be later"),
    ([(5, 9, 1.0, 1.0)], 5, r"arrivals must lie in \[0, 5\)"),
    ([(0, 9, 0.0, 1.0)], 5, "targets must be finite and > 0"),
    ([(0, 9, 1.0, 0.0)], 5, "batches_per_step must be finite, > 0"),
    ([(0, 9, 1.0, 1e306)], 5, r"batches_per_step must be finite, > 0 and <= 1e\+18"),
    ([(0, 9, 1.0, 1.0, 2)], 5, r"curve indices must lie in \[0, 2\)"),
    ([], 0, "arrival_steps must be an int >= 1"),
    ([(0, 9, 1.0, 1.0)], 1.5, "arrival_steps must be an int >= 1"),
])
def test_invalid_workload_is_rejected(tasks, arrival_steps, match):
    bank = tiny_bank(LINEAR, FLAT)
    rows = [t + (0,) * (5 - len(t)) for t in tasks]
    columns = [np.array(c) for c in zip(*rows)] if rows else [np.array([])] * 5
    arrival, deadline, target, bps, curve = columns
    with pytest.raises(ValueError, match=match):
        Workload(bank, arrival, deadline, target, bps, curve, np.zeros(len(tasks)), arrival_steps)


def test_workload_fields_of_different_lengths_are_rejected():
    bank = tiny_bank()
    with pytest.raises(ValueError, match="workload field 'deadline' must have shape"):
        Workload(bank, [0, 1], [5], [1.0, 1.0], [1.0, 1.0], [0, 0], [1.0, 1.0], 3)


def test_workloads_are_read_only():
    w = tiny_workload([(0, 5, 1.0, 1.0)])
    with pytest.raises(ValueError, match="read-only"):
        w.deadline[0] = 99


def test_a_suite_replays_only_on_the_nodes_it_was_generated_for_unless_asked():
    env = discrete_core_v1.parallel_env(n_nodes=8)
    with pytest.raises(ValueError, match=r"suite id/train was generated for n_nodes=4 .* this env has n_nodes=8.*any_nodes"):
        env.reset(options={"suite": "eval", "root": 0, "episode": 0})
    env.reset(options={"suite": "eval", "root": 0, "episode": 0, "any_nodes": True})  # on purpose
    assert env.agents == [f"node_{i}" for i in range(8)]


def test_an_arrival_window_longer_than_the_episode_draws_only_what_an_episode_can_play():
    from core_env.config import EnvConfig
    from core_env.generators import generator_for

    long = generator_for(EnvConfig(arrival_steps=10**7, max_cycles=300)).workload(np.random.default_rng(5))
    assert long.arrival.max() < 300 and long.arrival_steps == 10**7 and len(long) < 1000  # ~4 x 0.1 x 300 arrivals, not 4e6
    default = EnvConfig()
    assert default.arrival_steps <= default.max_cycles  # the default draw is unchanged (the digests pin it)
    same = generator_for(default).workload(np.random.default_rng(5))
    plain = draw_workload(default.bank("train"), default.arrival_intensity, default.arrival_steps, np.random.default_rng(5), default.recipe, n_nodes=4)
    assert np.array_equal(same.arrival, plain.arrival) and np.array_equal(same.curve, plain.curve)
