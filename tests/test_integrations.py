"""Each MARL library trains a few iterations on a small core_env and never breaks the env's masks.

For every library: the losses are finite, the env's ``invalid_actions`` statistic is 0 over all training
episodes, and the completion rate is reported (printed; run ``pytest -s`` to see it). Tianshou's masked
PPO also resolves conflicts itself, so its ``conflicts`` must be 0 too; the other libraries act
independently per node and the env resolves (and counts) their conflicts.

Optional libraries are skipped with a reason when they are not installed (``make setup`` installs the
``sb3`` and ``torchrl`` extras). RLlib and BenchMARL pin versions that conflict with the main venv
(gymnasium==1.2.2, torchrl<0.12), so they run in a subprocess of their own venv, ``build/rllib-venv``
(``make rllib-venv``, which ``make test`` runs first), or of ``$CORE_RLLIB_PYTHON``. The venv counts only once
its install finished (``build/rllib-venv/.installed``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mara_agents.integrations.common import SMALL_ENV

ROOT = Path(__file__).resolve().parent.parent


def _check_report(report: dict, *, conflicts_allowed: bool) -> None:
    losses = report["loss"]
    assert losses and all(math.isfinite(x) for x in losses), f"non-finite or missing losses: {losses}"
    episodes = report["episodes"] if isinstance(report["episodes"], list) else None
    if episodes is not None:
        assert episodes, "no training episode finished"
        assert sum(e["invalid_actions"] for e in episodes) == 0
        if not conflicts_allowed:
            assert sum(e["conflicts"] for e in episodes) == 0
        rates = [e["completion_rate"] for e in episodes]
        assert all(0.0 <= r <= 1.0 for r in rates)
        print(f"\n{report['library']}: {len(episodes)} episodes, completion first {report['first']} -> last {report['last']}, "
              f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, {report['seconds']}s")


# --------------------------------------------------------------------------------------------------
# The conflict-free masked distribution behind the Tianshou policy


def test_sequential_masked_categorical_is_a_conflict_free_distribution():
    torch = pytest.importorskip("torch")
    from mara_agents.integrations.nets import SequentialMaskedCategorical

    g = torch.Generator().manual_seed(0)
    B, N, A = 3, 3, 4
    logits = torch.randn(B, N, A, generator=g)
    mask = torch.ones(B, N, A, dtype=torch.int8)
    mask[0, :, 2] = 0  # slot 1 empty in env 0
    mask[1, :, 1:] = 0  # nothing to do in env 1
    dist = SequentialMaskedCategorical(logits, mask)
    # The probabilities of all joint actions sum to 1, and every one with mass is legal and conflict-free.
    joint = torch.tensor(list(itertools.product(range(A), repeat=N)))
    for b in range(B):
        p = SequentialMaskedCategorical(logits[b:b + 1].expand(len(joint), -1, -1), mask[b:b + 1].expand(len(joint), -1, -1)).log_prob(joint).exp()
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-5)
        for a, pa in zip(joint.tolist(), p.tolist()):
            legal = all(mask[b, i, x] for i, x in enumerate(a)) and len([x for x in a if x]) == len({x for x in a if x})
            assert legal or pa < 1e-6, (b, a, pa)
    for _ in range(20):
        a = dist.sample()
        assert a.shape == (B, N) and a.dtype == torch.int64
        for b in range(B):
            chosen = [x for x in a[b].tolist() if x]
            assert len(chosen) == len(set(chosen))
            assert all(mask[b, i, x] for i, x in enumerate(a[b].tolist()))
    assert torch.isfinite(dist.entropy()).all() and torch.isfinite(dist.log_prob(dist.mode)).all()


# --------------------------------------------------------------------------------------------------
# Tianshou (core dependency)


def test_tianshou_masked_ppo_trains_and_loads_as_agent(tmp_path):
    pytest.importorskip("tianshou", reason="Tianshou is in the 'agents' extra: pip install -e '.[agents]'")
    from mara_agents.integrations import tianshou_ppo
    from mara_agents.protocols import Agent

    report = tianshou_ppo.train(SMALL_ENV, epochs=2, steps_per_epoch=512, collect_steps=256, n_envs=2, batch_size=64, repeat=2,
                                seed=0, out=tmp_path)
    _check_report(report, conflicts_allowed=False)
    assert report["updates"] == 4 and report["env_steps"] >= 1024
    assert (tmp_path / "policy.pt").exists() and json.loads((tmp_path / "policy.json").read_text())["format"] == tianshou_ppo.FORMAT

    agent = tianshou_ppo.load_agent(tmp_path)
    assert isinstance(agent, Agent)
    # The Agent interface: (B, N, D) + (B, N, K+1) -> (B, N) int64, legal and conflict-free, any N and K.
    from core_env.config import EnvConfig
    from core_env.sim import Simulator
    from core_env import features
    from core_env.generators import generator_for

    config = EnvConfig(n_nodes=3, n_slots=6, arrival_steps=40)
    sim = Simulator(config, 2)
    sim.reset([generator_for(config).workload(np.random.default_rng(s)) for s in (1, 2)])
    agent.reset(sim.B, sim.N, sim.K)
    while not sim.done.all():
        obs, mask = features.observations(sim, config.history)
        actions = agent.act(obs, mask)
        assert actions.shape == (2, 3) and actions.dtype == np.int64
        assert np.take_along_axis(mask, actions[..., None], axis=2).all()
        for row in actions:
            busy = row[row > 0]
            assert len(busy) == len(set(busy.tolist()))
        sim.step(actions)
    stats = sim.episode_statistics()
    assert (stats["invalid_actions"] == 0).all() and (stats["conflicts"] == 0).all()

    evaluation = tianshou_ppo.evaluate(agent, SMALL_ENV, range(2))
    assert evaluation["invalid_actions"] == 0 and evaluation["conflicts"] == 0 and 0.0 <= evaluation["completion_rate"] <= 1.0
    print(f"tianshou greedy agent on 2 episodes: {evaluation}")


def test_shipped_tianshou_policy_acts_legally_on_the_default_config():
    pytest.importorskip("torch")
    from core_env import features
    from core_env.config import EnvConfig
    from core_env.sim import Simulator
    from core_env.workload import load_suite
    from mara_agents.integrations import tianshou_ppo

    agent = tianshou_ppo.load_agent()  # the shipped checkpoint (benchmark row "PPO (Tianshou)")
    config = EnvConfig()
    sim = Simulator(config, 2)
    sim.reset([load_suite("id", "train", 0, e) for e in (0, 1)])
    agent.reset(sim.B, sim.N, sim.K)
    for _ in range(60):
        obs, mask = features.observations(sim, config.history)
        actions = agent.act(obs, mask)
        assert actions.shape == (2, config.n_nodes) and np.take_along_axis(mask, actions[..., None], axis=2).all()
        sim.step(actions)
    stats = sim.episode_statistics()
    assert (stats["invalid_actions"] == 0).all() and (stats["conflicts"] == 0).all() and (stats["busy_node_steps"] > 0).all()


def test_tianshou_load_agent_rejects_a_tampered_checkpoint(tmp_path):
    pytest.importorskip("tianshou", reason="Tianshou is in the 'agents' extra")
    from mara_agents.integrations import tianshou_ppo
    from mara_agents.integrations.nets import SlotActor

    tianshou_ppo.save_checkpoint(tmp_path / "policy.pt", SlotActor(8, 16))
    tianshou_ppo.load_agent(tmp_path)
    (tmp_path / "policy.pt").write_bytes((tmp_path / "policy.pt").read_bytes() + b"x")
    with pytest.raises(ValueError, match="checksum"):
        tianshou_ppo.load_agent(tmp_path)
    with pytest.raises(ValueError, match="no Tianshou PPO checkpoint"):
        tianshou_ppo.load_agent(tmp_path / "missing")
    stale = tmp_path / "stale"
    stale.mkdir()
    tianshou_ppo.save_checkpoint(stale / "policy.pt", SlotActor(8, 16, extra=3), meta={"predictor": "fm", "fm_sha256": "0000"})
    with pytest.raises(ValueError, match="trained on features of the fm checkpoint with sha256 0000"):
        tianshou_ppo.load_agent(stale)


def test_tianshou_policy_on_predictor_features_acts_on_what_it_was_trained_on(tmp_path):
    """A policy trained with --predictor wls: the agent, fed plain observations, rebuilds the features the
    training env appended (same logits), resumes from its per-epoch snapshot, and refuses a mismatch."""
    pytest.importorskip("tianshou", reason="Tianshou is in the 'agents' extra")
    import torch

    from mara_agents.integrations import tianshou_ppo
    from mara_agents.integrations.common import make_gym_env
    from mara_agents.integrations.nets import SequentialMaskedCategorical
    from mara_agents.predictors.features import GymPredictorFeatures
    from mara_agents.predictors.wls import WLS

    report = tianshou_ppo.train(SMALL_ENV, epochs=2, steps_per_epoch=256, collect_steps=128, n_envs=2, batch_size=64, repeat=1,
                                seed=0, out=tmp_path, predictor="wls", verbose=False)
    assert report["predictor"] == "wls" and json.loads((tmp_path / "policy.json").read_text())["predictor"] == "wls"
    snapshot = json.loads((tmp_path / tianshou_ppo.SNAPSHOT_FILE.replace(".pt", ".json")).read_text())
    assert snapshot["epoch"] == 1 and snapshot["predictor"] == "wls"
    agent = tianshou_ppo.load_agent(tmp_path)
    wrapped = GymPredictorFeatures(make_gym_env(**SMALL_ENV), WLS())
    obs, _ = wrapped.reset(seed=3)
    agent.reset(1, obs["action_mask"].shape[0], obs["action_mask"].shape[1] - 1)
    n_slots = obs["action_mask"].shape[1] - 1
    plain_width = obs["observation"].shape[1] - 3 * n_slots
    for step in range(60):
        seen = agent.with_features(obs["observation"][None, :, :plain_width], n_slots)  # from plain observations only
        np.testing.assert_allclose(seen[0], obs["observation"], atol=2e-4)
        with torch.no_grad():
            logits = agent.actor(torch.as_tensor(seen))
            np.testing.assert_allclose(logits, agent.actor(torch.as_tensor(obs["observation"][None])), atol=1e-3)
        obs, _, terminated, truncated, _ = wrapped.step(SequentialMaskedCategorical(logits, torch.as_tensor(obs["action_mask"][None])).mode[0].numpy())
        if terminated or truncated:
            break
    assert step > 30 and agent._features._cache.recomputed > 0
    resumed = tianshou_ppo.train(SMALL_ENV, epochs=1, steps_per_epoch=128, collect_steps=128, n_envs=2, batch_size=64, repeat=1,
                                 seed=1, out=tmp_path / "resumed", predictor="wls", init=tmp_path, verbose=False)
    assert resumed["env_steps"] >= 128
    with pytest.raises(ValueError, match="appended features per slot cannot start a run"):
        tianshou_ppo.train(SMALL_ENV, epochs=1, steps_per_epoch=128, collect_steps=128, n_envs=2, init=tmp_path, verbose=False)
    with pytest.raises(ValueError, match="predictor must be one of"):
        tianshou_ppo.train(SMALL_ENV, epochs=1, predictor="oracle", verbose=False)
    with pytest.raises(SystemExit) as exit_info:
        tianshou_ppo.main(["--small", "--epochs", "1", "--init", str(tmp_path), "--out", str(tmp_path / "cli")])
    assert exit_info.value.code == 2


# --------------------------------------------------------------------------------------------------
# sb3-contrib


def test_sb3_maskable_ppo_trains_with_masks():
    pytest.importorskip("sb3_contrib", reason="sb3-contrib is the 'sb3' extra: pip install -e '.[sb3]'")
    from mara_agents.integrations import sb3_maskable

    report = sb3_maskable.train(SMALL_ENV, timesteps=1024, n_steps=256, n_envs=2, batch_size=64, n_epochs=2, seed=0)
    _check_report(report, conflicts_allowed=True)
    evaluation = sb3_maskable.evaluate(report["model"], SMALL_ENV, range(1))
    assert evaluation["invalid_actions"] == 0
    print(f"sb3 greedy on 1 episode: {evaluation}")


def test_sb3_slot_policy_trains_conflict_free_and_loads_as_agent(tmp_path):
    """MaskablePPO with the per-slot policy: its rollouts never send a conflict or a masked action, its
    update scores the stored joint actions with the sampling distribution, its checkpoint plays any N and K
    as an Agent (the same greedy actions as SB3's predict), and only the SB3 loader reads it."""
    pytest.importorskip("sb3_contrib", reason="sb3-contrib is the 'sb3' extra: pip install -e '.[sb3]'")
    import torch

    from mara_agents.integrations import sb3_maskable, slot_policy, tianshou_ppo
    from mara_agents.integrations.common import make_gym_env

    report = sb3_maskable.train(SMALL_ENV, timesteps=1024, n_steps=128, n_envs=4, batch_size=128, n_epochs=2, seed=0, policy="slot",
                                hidden=16, out=tmp_path)
    _check_report(report, conflicts_allowed=False)
    assert {"policy.pt", "policy.json", "snapshot.pt", "train.json"} <= {p.name for p in tmp_path.iterdir()}
    model = report["model"]
    env = make_gym_env(**SMALL_ENV)
    obs, _ = env.reset(seed=3)
    tensors = model.policy.obs_to_tensor(obs)[0]
    actions, _, log_prob = model.policy(tensors)
    values, again, entropy = model.policy.evaluate_actions(tensors, actions)
    assert torch.allclose(log_prob, again) and entropy.item() > 0 and values.shape == (1, 1)
    agent = sb3_maskable.load_agent(tmp_path)
    greedy, _ = model.predict(obs, action_masks=env.unwrapped.action_masks(), deterministic=True)
    assert np.array_equal(agent.act(obs["observation"][None], obs["action_mask"][None])[0], greedy)
    other = slot_policy.evaluate(agent, {"n_nodes": 3, "n_slots": 6, "arrival_steps": 30}, range(2))
    assert other["episodes"] == 2 and other["invalid_actions"] == 0 and other["conflicts"] == 0
    with pytest.raises(ValueError, match="not a mara_agents.integrations.tianshou_ppo/1 manifest"):
        tianshou_ppo.load_agent(tmp_path)
    with pytest.raises(ValueError, match="cannot start a run with 8, 32, 0"):
        sb3_maskable.train(SMALL_ENV, timesteps=128, n_steps=64, n_envs=2, policy="slot", hidden=32, init=tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        sb3_maskable.main(["--small", "--timesteps", "128", "--init", str(tmp_path), "--out", str(tmp_path / "cli")])
    assert exit_info.value.code == 2  # --init needs --policy slot


# --------------------------------------------------------------------------------------------------
# TorchRL


def test_torchrl_mappo_trains_with_action_mask_key():
    pytest.importorskip("torchrl", reason="TorchRL is the 'torchrl' extra: pip install torch==2.13.0 -e '.[torchrl]'")
    from mara_agents.integrations import torchrl_ppo

    env = torchrl_ppo.make_env(SMALL_ENV)
    assert (torchrl_ppo.GROUP, "action_mask") in env.observation_spec.keys(True)
    env.close()
    report = torchrl_ppo.train(SMALL_ENV, iterations=2, frames_per_batch=256, epochs=2, minibatch_size=64, seed=0)
    _check_report(report, conflicts_allowed=True)


def test_torchrl_per_slot_policy_trains_conflict_free_on_both_views_and_loads_as_agent(tmp_path):
    """The per-slot policy under TorchRL: on the vector view (batched env, joint distribution) and on the
    PettingZoo view (per-node conditional log-probs for MAPPO's per-agent ratio) no conflict and no masked
    action reaches the env; the finished episodes' statistics are read; the vector run's checkpoint plays
    another N and K as an Agent whose greedy actions are the TorchRL actor's deterministic ones."""
    pytest.importorskip("torchrl", reason="TorchRL is the 'torchrl' extra: pip install torch==2.13.0 -e '.[torchrl]'")
    import torch
    from tensordict.nn import InteractionType, set_interaction_type

    from mara_agents.integrations import slot_policy, torchrl_ppo

    report = torchrl_ppo.train(SMALL_ENV, iterations=3, frames_per_batch=512, epochs=2, minibatch_size=128, seed=0, view="vector",
                               policy="slot", n_envs=4, hidden=16, out=tmp_path)
    _check_report(report, conflicts_allowed=False)
    assert all(e["t"] > 0 and e["arrived"] > 0 for e in report["episodes"])  # the ended episode's statistics, not a reset's
    assert {"policy.pt", "policy.json", "snapshot.pt", "train.json"} <= {p.name for p in tmp_path.iterdir()}
    agent = torchrl_ppo.load_agent(tmp_path)
    env = torchrl_ppo.make_vector_env(SMALL_ENV, n_envs=2, seed=5)
    actor, critic = torchrl_ppo.build(env, hidden=16, policy="slot", view="vector")
    slot_policy.load_weights(tmp_path, torchrl_ppo.FORMAT, *torchrl_ppo.slot_nets(actor, critic))
    td = env.reset()
    with set_interaction_type(InteractionType.DETERMINISTIC), torch.no_grad():
        greedy = actor(td)["action"].numpy()
    assert np.array_equal(agent.act(td["observation"].numpy(), td["action_mask"].numpy()), greedy)
    other = slot_policy.evaluate(agent, {"n_nodes": 3, "n_slots": 6, "arrival_steps": 30}, range(2))
    assert other["invalid_actions"] == 0 and other["conflicts"] == 0
    mappo = torchrl_ppo.train(SMALL_ENV, iterations=2, frames_per_batch=256, epochs=2, minibatch_size=64, seed=0, policy="slot", hidden=16)
    _check_report(mappo, conflicts_allowed=False)
    with pytest.raises(ValueError, match="need policy='slot'"):
        torchrl_ppo.train(SMALL_ENV, iterations=1, view="vector")
    with pytest.raises(SystemExit) as exit_info:
        torchrl_ppo.main(["--small", "--view", "vector", "--iterations", "1"])
    assert exit_info.value.code == 2


# --------------------------------------------------------------------------------------------------
# RLlib and BenchMARL: their own venv


def _extra_python() -> Path | None:
    if os.environ.get("CORE_RLLIB_PYTHON"):
        return Path(os.environ["CORE_RLLIB_PYTHON"])
    venv = ROOT / "build" / "rllib-venv"
    return venv / "bin" / "python" if (venv / ".installed").exists() else None


def _run_in_extra_venv(module: str, args: list[str], out: Path, probe: str, report: str | None = None) -> dict:
    """Run ``module`` in the extra venv with ``--out out``; its JSON report (``out``, or ``out/report``)."""
    python = _extra_python()
    if python is None:
        pytest.skip("no RLlib/BenchMARL venv: ray[rllib] pins gymnasium==1.2.2 and BenchMARL torchrl<0.12, so they live in "
                    "build/rllib-venv (`make rllib-venv`, run by `make test`; see its output for why the install failed) or $CORE_RLLIB_PYTHON")
    found = subprocess.run([str(python), "-c", f"import {probe}"], capture_output=True, text=True, cwd=ROOT)
    if found.returncode:
        pytest.skip(f"{python} cannot import {probe}: {found.stderr.strip().splitlines()[-1] if found.stderr.strip() else '?'}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run([str(python), "-m", module, *args, "--out", str(out)], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=900)
    print(done.stdout[-2000:])
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / report if report else out).read_text())


def test_rllib_ppo_shared_masked_policy_trains(tmp_path):
    report = _run_in_extra_venv("mara_agents.integrations.rllib_ppo",
                                ["--small", "--iterations", "2", "--train-batch-size", "256", "--minibatch-size", "64", "--epochs", "2"],
                                tmp_path / "rllib", "ray.rllib", report="train.json")
    assert report["loss"] and all(math.isfinite(x) for x in report["loss"])
    assert report["episodes"] > 0 and report["invalid_actions"] == 0
    assert all(0.0 <= h["completion_rate"] <= 1.0 for h in report["history"] if "completion_rate" in h)


def test_rllib_per_slot_policy_trains_conflict_free_and_loads_as_agent_without_ray(tmp_path):
    """RLlib's PPO with SlotRLModule on the central view: no conflict or masked action in training or in the
    greedy evaluation; its checkpoint loads in the main venv (no Ray) as an Agent that plays another N and K."""
    from mara_agents.integrations import rllib_ppo, slot_policy

    out = tmp_path / "rllib_slot"
    report = _run_in_extra_venv("mara_agents.integrations.rllib_ppo",
                                ["--policy", "slot", "--small", "--iterations", "2", "--train-batch-size", "512", "--minibatch-size", "128",
                                 "--epochs", "2", "--n-envs", "4", "--eval-episodes", "2"], out, "ray.rllib", report="train.json")
    assert report["loss"] and all(math.isfinite(x) for x in report["loss"])
    assert report["episodes"] > 0 and report["invalid_actions"] == 0 and report["conflicts"] == 0
    assert report["eval_greedy"]["episodes"] == 2 and report["eval_greedy"]["conflicts"] == 0
    assert {"policy.pt", "policy.json", "snapshot.pt"} <= {p.name for p in out.iterdir()}
    other = slot_policy.evaluate(rllib_ppo.load_agent(out), {"n_nodes": 3, "n_slots": 6, "arrival_steps": 30}, range(2))
    assert other["invalid_actions"] == 0 and other["conflicts"] == 0


def test_benchmarl_task_runs_mappo(tmp_path):
    # the PettingZoo route with BenchMARL's own MLP policy (independent picks: the env resolves conflicts)
    report = _run_in_extra_venv("mara_agents.integrations.benchmarl_task", ["--small", "--route", "pettingzoo", "--iterations", "2",
                                 "--frames-per-batch", "256", "--minibatch-size", "128", "--minibatch-iters", "2"],
                                tmp_path / "benchmarl", "benchmarl", report="train.json")
    assert report["loss"] and all(math.isfinite(x) for x in report["loss"])
    assert report["route"] == "pettingzoo" and report["invalid_actions"] == 0
    assert not (tmp_path / "benchmarl" / "policy.pt").exists()


def test_benchmarl_per_slot_mappo_on_the_batched_env_is_conflict_free_and_loads_as_agent_without_benchmarl(tmp_path):
    """BenchMARL's MAPPO with the per-slot BenchMARL model on the batched TorchRL env: episodes finish, no
    conflict or masked action in training or in the greedy evaluation, a snapshot per iteration; the checkpoint
    loads in the main venv (no BenchMARL) as the mappo-benchmarl Agent and plays another N and K; --init resumes."""
    from mara_agents.integrations import benchmarl_ppo, slot_policy

    out = tmp_path / "benchmarl_slot"
    args = ["--small", "--route", "batched", "--policy", "slot", "--n-envs", "4", "--iterations", "3", "--frames-per-batch", "512",
            "--minibatch-size", "128", "--minibatch-iters", "2", "--eval-episodes", "2"]
    report = _run_in_extra_venv("mara_agents.integrations.benchmarl_task", args, out, "benchmarl", report="train.json")
    assert report["loss"] and all(math.isfinite(x) for x in report["loss"]) and len(report["loss"]) == 3
    assert len(report["episodes"]) > 0 and report["invalid_actions"] == 0 and report["conflicts"] == 0
    assert all(0.0 <= e["completion_rate"] <= 1.0 for e in report["episodes"])
    assert report["eval_greedy"]["episodes"] == 2 and report["eval_greedy"]["conflicts"] == 0
    assert {"policy.pt", "policy.json", "snapshot.pt"} <= {p.name for p in out.iterdir()}
    agent = benchmarl_ppo.load_agent(out)
    other = slot_policy.evaluate(agent, {"n_nodes": 3, "n_slots": 6, "arrival_steps": 30}, range(2))
    assert other["invalid_actions"] == 0 and other["conflicts"] == 0
    with pytest.raises(ValueError, match="benchmarl_task/1"):  # another library's format is refused
        slot_policy.read_checkpoint(out / "policy.pt", "mara_agents.integrations.torchrl_ppo/1", "missing")
    resumed = _run_in_extra_venv("mara_agents.integrations.benchmarl_task", [*args[:-2], "--eval-episodes", "0", "--iterations", "1",
                                 "--init", str(out / "policy.pt")], tmp_path / "resumed", "benchmarl", report="train.json")
    assert resumed["loss"] and resumed["conflicts"] == 0
    assert json.loads((tmp_path / "resumed" / "policy.json").read_text())["init"] == str(out / "policy.pt")
