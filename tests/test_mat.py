"""MAT allocator: autoregressive masking, teacher forcing, the Agent interface, PPO learning, checkpoints."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from core_env import features
from core_env.config import EnvConfig
from core_env.curves import CurveBank, bank_for
from core_env.sim import Simulator
from core_env.workload import Workload, draw_workload
from mara_agents.heuristics import EDF, RandomAgent
from mara_agents.mat.agent import MATAgent, load_policy, save_policy
from mara_agents.mat.imitation import DEMONSTRATIONS_FILE, Demonstrations
from mara_agents.mat.model import _MASKED, MATConfig, MATModel, Tokens, autoregressive_masks, observation_tokens
from mara_agents.mat.ppo import STATE_FILE, PPOConfig, Trainer
from mara_agents.predictors import WLS
from mara_agents.predictors.features import SlotPredictions, predictor_observations


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------------------------------
# A toy scenario with a known good policy: learners (reach their target after exactly 3 node-steps,
# window 3: they must be served on every step from arrival) and decoys (flat curves that never reach
# their targets). Serving learners first completes about 45% of all tasks, random serving about 22%.

LEARNER = 1.0 / (1.0 + np.arange(64) / 4.0)
TOY_BANK = CurveBank("toy", [LEARNER, np.ones(64)], ["learner", "decoy"], [0, 2])
TOY_CONFIG = EnvConfig(n_nodes=2, n_slots=4, arrival_steps=40, history=4, task_set=TOY_BANK)


def toy_workload(rng: np.random.Generator, steps: int = 40, p: float = 0.5) -> Workload:
    arrival = np.flatnonzero(rng.random(steps) < p)
    decoy = rng.random(arrival.size) < 0.5
    curve = decoy.astype(np.int64)
    target = np.where(decoy, 0.05, 0.48)
    bps = np.where(decoy, 1.0, 2.0)
    deadline = arrival + np.where(decoy, 8, 3)
    demand = np.array([TOY_BANK.demand(int(c), float(t), float(b)) for c, t, b in zip(curve, target, bps)])
    return Workload(TOY_BANK, arrival, deadline, target, bps, curve, demand, steps)


def toy_ppo(**overrides) -> PPOConfig:
    settings = {"variant": "mat", "seed": 0, "steps": 40_000, "num_envs": 32, "env_groups": 2, "rollout": 32, "epochs": 4,
                "minibatches": 2, "lr": 1e-3, "d_model": 32, "eval_episodes": 4, "eval_minutes": 1e9, "save_minutes": 1e9}
    return PPOConfig(**{**settings, **overrides})


def completion(agent, workloads: list[Workload], config: EnvConfig) -> float:
    sim = Simulator(config, len(workloads))
    sim.reset(workloads)
    agent.reset(sim.B, sim.N, sim.K)
    while not sim.done.all():
        sim.step(agent.act(*features.observations(sim, config.history)))
    return float(sim.episode_statistics()["completion_rate"].mean())


# --------------------------------------------------------------------------------------------------
# Masking and teacher forcing


def random_tokens(rng: np.random.Generator, B: int, N: int, K: int, config: MATConfig) -> tuple[Tokens, torch.Tensor]:
    """Random parsed observations and env masks (slots present at random; nodes restricted at random)."""
    present = rng.random((B, K)) < rng.uniform(0.2, 1.0)
    slots = rng.normal(size=(B, K, config.slot_inputs)).astype(np.float32)
    slots[..., features.PRESENT] = present
    nodes = rng.normal(size=(B, N, 6)).astype(np.float32)
    last = np.where(rng.random((B, N)) < 0.5, rng.integers(0, K, (B, N)), -1)
    mask = np.concatenate([np.ones((B, N, 1), bool), present[:, None, :] & (rng.random((B, N, K)) < 0.8)], axis=2)
    return Tokens(torch.from_numpy(nodes), torch.from_numpy(slots), torch.from_numpy(last)), torch.from_numpy(mask)


def node_by_node(model: MATModel, tokens: Tokens, env_mask: torch.Tensor, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference decoding, one node at a time: node i's logits come from a decoder given only nodes 0..i
    and the actions already chosen; Gumbel noise as :meth:`MATModel.act` draws it (None: argmax)."""
    enc = model.encode(tokens)
    B, N, K1 = env_mask.shape
    noise = None
    if seed is not None:
        u = torch.rand(B, N, K1, generator=torch.Generator().manual_seed(seed)).clamp_(min=1e-20)
        noise = -torch.log(-torch.log(u))
    actions, logps = torch.zeros(B, 0, dtype=torch.long), []
    free = torch.ones(B, K1, dtype=torch.bool)
    for i in range(N):
        logits = model._decode(enc, model._shifted(torch.cat([actions, torch.zeros(B, 1, dtype=torch.long)], 1)))[:, i]
        mask = env_mask[:, i] & free
        mask[:, 0] = True
        logp = torch.log_softmax(logits.masked_fill(~mask, _MASKED), -1)
        a = (logp if noise is None else logp + noise[:, i]).argmax(-1, keepdim=True)
        actions, free = torch.cat([actions, a], 1), free.scatter(1, a, False)
        logps.append(logp.gather(1, a))
    return actions, torch.cat(logps, 1)


@pytest.mark.parametrize("predictor", [None, "fm"])
def test_autoregressive_masks_and_teacher_forcing(predictor):
    config = MATConfig(predictor=predictor)
    model = MATModel(config, seed=1)
    with torch.no_grad():  # sharper than the near-uniform initial policy, so that choices vary
        model.query.weight.mul_(300.0)
    rng = np.random.default_rng(0)
    for N, K in [(1, 3), (2, 1), (4, 16), (6, 5), (8, 24)]:  # one model for every N and K
        tokens, env_mask = random_tokens(rng, 64, N, K, config)
        for deterministic in (False, True):
            seed = int(rng.integers(1 << 30))
            with torch.no_grad():
                reference, reference_logp = node_by_node(model, tokens, env_mask, None if deterministic else seed)
                for decoding in ("node-by-node", "fixed-point"):  # both are exact, for every row of the batch
                    generator = torch.Generator().manual_seed(seed)
                    actions, logp, masks, values = model.act(tokens, env_mask, deterministic, generator, decoding)
                    assert torch.equal(actions, reference), decoding
                    same = model.decide(tokens, env_mask, deterministic, torch.Generator().manual_seed(seed), decoding)
                    assert torch.equal(same, actions)  # the acting agent's path: the actions alone
                    assert torch.allclose(logp, reference_logp, atol=1e-5), (decoding, (logp - reference_logp).abs().max())
                one = model.act(Tokens(*(t[:1] for t in tokens)), env_mask[:1], deterministic, torch.Generator().manual_seed(seed))[0]
                assert one.shape == (1, N)  # B = 1: fixed-point decoding under "auto"
                if deterministic:
                    assert torch.equal(one, reference[:1])
            a = actions.numpy()
            assert a.shape == (64, N) and a.min() >= 0 and a.max() <= K
            assert np.take_along_axis(env_mask.numpy(), a[..., None], axis=2).all(), "an action outside the env mask"
            for row in a:
                chosen = row[row > 0]
                assert len(set(chosen.tolist())) == chosen.size, f"two nodes took one task: {row}"
            # The applied masks are the env masks minus the tasks taken by earlier nodes (idle always allowed).
            taken = np.zeros((64, N, K + 1), bool)
            for i in range(1, N):
                taken[:, i] = taken[:, i - 1]
                taken[np.arange(64), i, a[:, i - 1]] = True
            taken[..., 0] = False
            expected = env_mask.numpy().copy()
            expected[..., 0] = True
            assert np.array_equal(masks.numpy(), expected & ~taken)
            assert torch.equal(autoregressive_masks(env_mask, actions), masks)  # what demonstrations store
            assert np.take_along_axis(masks.numpy(), a[..., None], axis=2).all()
            with torch.no_grad():
                logp2, entropy, values2 = model.evaluate_actions(tokens, masks, actions)
            assert torch.allclose(logp2, logp, atol=1e-5), (logp2 - logp).abs().max()
            assert torch.allclose(values2, values, atol=1e-6)
            assert torch.all(entropy >= -1e-6) and torch.all(logp <= 1e-6)
            forced = masks.sum(-1) == 1  # only idle left: probability one
            assert torch.allclose(logp[forced], torch.zeros(()), atol=1e-6)
        assert (a > 0).any()
    with pytest.raises(ValueError, match="unknown decoding"):
        model.act(tokens, env_mask, decoding="beam")


# --------------------------------------------------------------------------------------------------
# The Agent interface on real simulator states


def real_workloads(config: EnvConfig, count: int, seed: int) -> list[Workload]:
    bank = bank_for("id", "train")
    return [draw_workload(bank, config.arrival_intensity, config.arrival_steps, np.random.default_rng([seed, i]), n_nodes=config.n_nodes) for i in range(count)]


@pytest.mark.parametrize("predictor", [None, "wls"])
def test_agent_actions_valid_on_simulator(predictor):
    config = EnvConfig(n_nodes=3, n_slots=6, arrival_steps=60, load=0.5, strict=True)  # strict: invalid choices raise
    model = MATModel(MATConfig(history=config.history, predictor=predictor), seed=2)
    with torch.no_grad():
        model.query.weight.mul_(100.0)
    agent = MATAgent(model, deterministic=False, seed=3)
    workloads = real_workloads(config, 4, seed=11)
    sim = Simulator(config, len(workloads))
    sim.reset(workloads)
    agent.reset(sim.B, sim.N, sim.K)
    served = 0
    while not sim.done.all():
        obs, mask = features.observations(sim, config.history)
        actions = agent.act(obs, mask)
        assert actions.dtype == np.int64 and actions.shape == (sim.B, sim.N)
        assert np.take_along_axis(mask, actions[..., None], axis=2).all()
        for row in actions:
            assert len(set(row[row > 0].tolist())) == np.count_nonzero(row)
        outcome = sim.step(actions)
        assert not outcome.conflicts.any() and not outcome.invalid.any()
        served += int(np.count_nonzero(actions))
    assert served > 0
    stats = sim.episode_statistics()
    assert stats["conflicts"].sum() == 0 and stats["invalid_actions"].sum() == 0


def test_agent_rebuilds_training_predictor_features():
    """The agent's features (from observations only) equal SlotPredictions' (from the simulator)."""
    config = EnvConfig(n_nodes=4, n_slots=8, arrival_steps=80, load=0.5)
    workloads = real_workloads(config, 3, seed=5)
    sim = Simulator(config, len(workloads))
    sim.reset(workloads)
    reference = SlotPredictions(WLS())
    agent = MATAgent(MATModel(MATConfig(predictor="wls")), predictor=WLS())
    agent.reset(sim.B, sim.N, sim.K)
    rng = np.random.default_rng(0)
    steps = 0
    while not sim.done.all():
        obs, mask = features.observations(sim, config.history)
        full = predictor_observations(sim, reference)[0]
        got = agent._features(obs, sim.K)  # an ObservedFeatures
        np.testing.assert_allclose(got, full[:, 0, obs.shape[2]:], atol=2e-4)
        # Tokens from plain observations plus predictions are those of the observations that carry them.
        tokens = observation_tokens(obs, sim.K, agent.config, got)
        expected = observation_tokens(np.concatenate([obs, np.broadcast_to(got[:, None], (sim.B, sim.N, got.shape[1]))], 2), sim.K, agent.config)
        assert all(torch.equal(a, b) for a, b in zip(tokens, expected))
        sim.step(RandomAgent(seed=int(rng.integers(1 << 30))).act(obs, mask))
        steps += 1
    assert steps > 80
    with pytest.raises(ValueError, match="predictions must be"):
        observation_tokens(obs, sim.K, agent.config, got[:, :-1])
    with pytest.raises(ValueError, match="predictions must be"):
        observation_tokens(obs, sim.K, MATConfig(), got)


# --------------------------------------------------------------------------------------------------
# PPO learns the toy scenario


def test_ppo_learns_toy_scenario(tmp_path):
    cfg = toy_ppo(steps=24_000)
    trainer = Trainer(cfg, tmp_path / "toy", env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True)
    manifest = trainer.run()
    evaluation = [toy_workload(np.random.default_rng([99, i])) for i in range(32)]
    agent = MATAgent.load(tmp_path / "toy")
    learned = completion(agent, evaluation, TOY_CONFIG)
    random = completion(RandomAgent(seed=0), evaluation, TOY_CONFIG)
    untrained = completion(MATAgent(MATModel(trainer.model_config, seed=0)), evaluation, TOY_CONFIG)
    assert learned >= random + 0.12, (learned, random, untrained)
    assert learned >= untrained + 0.1, (learned, random, untrained)
    assert manifest["env_steps"] >= cfg.steps and manifest["variant"] == "mat"


def test_teacher_warm_start_clones_the_teacher_and_resumes_without_it(tmp_path):
    # EDF is the toy's good policy (learners have the earlier deadlines): cloning it must get close to it.
    cfg = toy_ppo(steps=1, teacher="edf", demo_episodes=32, bc_epochs=30, bc_batch=256)
    trainer = Trainer(cfg, tmp_path / "warm", env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True)
    manifest = trainer.run()
    evaluation = [toy_workload(np.random.default_rng([99, i])) for i in range(32)]
    cloned = completion(MATAgent.load(tmp_path / "warm"), evaluation, TOY_CONFIG)
    teacher = completion(EDF(), evaluation, TOY_CONFIG)
    random = completion(RandomAgent(seed=0), evaluation, TOY_CONFIG)
    assert cloned >= teacher - 0.05 and cloned >= random + 0.12, (cloned, teacher, random)
    report = manifest["pretraining"]
    assert report["episodes"] == 32 and report["bc_loss_last"] < report["bc_loss_first"]
    assert report["teacher_completion"] > random + 0.1
    first, cloned = manifest["eval"]["history"][:2]  # the random initialisation, then the cloned policy
    assert first["elapsed"] == 0.0 and first["env_steps"] == 0
    assert manifest["eval"]["baselines"]["edf"] == pytest.approx(cloned["completion_rate"], abs=0.1)
    assert cloned["completion_rate"] > first["completion_rate"] + 0.05
    demos = Demonstrations.load(tmp_path / "warm" / DEMONSTRATIONS_FILE)
    assert len(demos) == report["samples"] and torch.all(demos.data["masks"].gather(2, demos.data["actions"][..., None]))
    # A longer budget resumes from the state: no new demonstrations, no second cloning.
    longer = Trainer(dataclasses.replace(cfg, steps=2048), tmp_path / "warm", env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True)
    assert longer.load() and longer.pretrained
    mtime = (tmp_path / "warm" / DEMONSTRATIONS_FILE).stat().st_mtime_ns
    assert longer.run()["pretraining"] == report
    assert (tmp_path / "warm" / DEMONSTRATIONS_FILE).stat().st_mtime_ns == mtime
    with pytest.raises(ValueError, match="unknown teacher"):
        toy_ppo(teacher="clairvoyant")  # oracle agents cannot teach a policy that acts on observations


def test_teacher_specs():
    from mara_agents.allocators import EDFAdmission
    from mara_agents.mat.imitation import make_teacher
    from mara_agents.predictors import WLS

    teacher = make_teacher("edf-admission:wls,min_reports=5")
    assert isinstance(teacher, EDFAdmission) and isinstance(teacher.predictor, WLS)
    assert isinstance(make_teacher("edf"), EDF)
    for spec, message in [("lara:oracle", "unknown teacher"), ("edf:wls", "unknown teacher"), ("lara,explore_steps=x", "KEY=INT"),
                          ("lara,bogus=1", "bogus"), ("edf,min_reports=1", "unknown teacher")]:
        with pytest.raises(ValueError, match=message):
            make_teacher(spec)


# --------------------------------------------------------------------------------------------------
# Checkpoints


def test_checkpoint_round_trip_gives_identical_actions(tmp_path):
    config = EnvConfig(n_nodes=4, n_slots=16, arrival_steps=60)
    model = MATModel(MATConfig(), seed=4)
    with torch.no_grad():
        model.query.weight.mul_(100.0)
    manifest = save_policy(model, tmp_path / "mat.pt", {"variant": "mat"})
    assert json.loads((tmp_path / "mat.json").read_text())["sha256"] == manifest["sha256"]
    workloads = real_workloads(config, 2, seed=3)
    for deterministic in (True, False):
        runs = []
        for agent in (MATAgent(model, deterministic=deterministic, seed=9), MATAgent.load(tmp_path, deterministic=deterministic, seed=9)):
            sim = Simulator(config, 2)
            sim.reset(workloads)
            agent.reset(2, 4, 16)
            trace = []
            while not sim.done.all():
                trace.append(agent.act(*features.observations(sim, config.history)))
                sim.step(trace[-1])
            runs.append(np.stack(trace))
        assert np.array_equal(*runs)
    # Zero-shot on another cluster size with the same checkpoint.
    other = EnvConfig(n_nodes=6, n_slots=24, arrival_steps=30, load=0.6)
    assert 0.0 <= completion(MATAgent.load(tmp_path / "mat.pt"), real_workloads(other, 2, seed=1), other) <= 1.0


def _write_manifest(path, model_config):
    """A valid manifest beside a hand-made checkpoint file, so loading reaches the checks after the manifest's."""
    import hashlib

    from mara_agents.mat.agent import POLICY_FORMAT

    manifest = {"format": POLICY_FORMAT, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "model_config": model_config}
    path.with_suffix(".json").write_text(json.dumps(manifest))


def test_checkpoint_mismatches_raise_clear_errors(tmp_path):
    model = MATModel(MATConfig(history=8, predictor=None))
    save_policy(model, tmp_path / "mat.pt", {})
    agent = MATAgent.load(tmp_path / "mat.pt")
    for history in (4, 12):  # another observation layout
        config = EnvConfig(n_nodes=2, n_slots=4, arrival_steps=20, history=history)
        sim = Simulator(config, 1)
        sim.reset(real_workloads(config, 1, seed=0))
        with pytest.raises(ValueError, match="history H=8"):
            agent.act(*features.observations(sim, history))
        with pytest.raises(ValueError, match="history"):
            MATAgent.load(tmp_path / "mat.pt", env_config=config)
    wls_agent = MATAgent(MATModel(MATConfig(predictor="wls")), predictor=WLS())
    config = EnvConfig(n_nodes=2, n_slots=4, arrival_steps=20)
    sim = Simulator(config, 1)
    sim.reset(real_workloads(config, 1, seed=0))
    with pytest.raises(ValueError, match="already carry predictor features"):
        wls_agent.act(*predictor_observations(sim, SlotPredictions(WLS())))
    # A feature set mismatch between weights and config, a corrupted file, a foreign file.
    state = torch.load(tmp_path / "mat.pt", weights_only=True)
    state["config"]["predictor"] = "wls"
    torch.save(state, tmp_path / "wrong.pt")
    _write_manifest(tmp_path / "wrong.pt", state["config"])
    with pytest.raises(ValueError, match="does not fit its configuration"):
        load_policy(tmp_path / "wrong.pt")
    (tmp_path / "mat.pt").write_bytes((tmp_path / "mat.pt").read_bytes()[:-10])
    with pytest.raises(ValueError, match="checksum mismatch"):
        MATAgent.load(tmp_path)
    torch.save({"weights": 1}, tmp_path / "other.pt")
    _write_manifest(tmp_path / "other.pt", None)
    with pytest.raises(ValueError, match="not a MAT policy checkpoint"):
        load_policy(tmp_path / "other.pt")
    with pytest.raises(ValueError, match="keys"):
        MATConfig.from_dict({"history": 8})
    with pytest.raises(ValueError, match="missing"):
        load_policy(tmp_path / "absent.pt")


def test_resume_after_interruption(tmp_path):
    out = tmp_path / "run"
    cfg = toy_ppo(steps=4 * 32 * 32, rollout=32)

    def stop_after_two(trainer: Trainer) -> None:
        if trainer.updates == 2:
            trainer.request_stop()  # what Ctrl-C and SIGTERM do

    first = Trainer(cfg, out, env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True, callback=stop_after_two)
    assert first.run() == {}  # interrupted: no final policy yet
    assert (out / STATE_FILE).exists() and not (out / "mat.pt").exists()
    steps_before = first.env_steps
    adam_steps = [s["step"] for s in first.optimizer.state_dict()["state"].values()]
    weights = {k: v.clone() for k, v in first.model.state_dict().items()}
    rng_state = first.workload_rng.bit_generator.state

    second = Trainer(cfg, out, env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True,
                     callback=lambda t: resumed.append((t.updates, t.env_steps)))
    resumed: list[tuple[int, int]] = []
    assert second.load()
    assert (second.updates, second.env_steps) == (2, steps_before) and second.elapsed > 0
    assert [s["step"] for s in second.optimizer.state_dict()["state"].values()] == adam_steps
    assert all(torch.equal(weights[k], v) for k, v in second.model.state_dict().items())
    assert second.workload_rng.bit_generator.state == rng_state
    manifest = second.run()
    assert resumed[0][0] == 3 and resumed[0][1] > steps_before  # counters continue
    assert manifest["updates"] == second.updates > 2 and manifest["env_steps"] >= cfg.steps
    saved = json.loads((out / "mat.json").read_text())
    for key in ("variant", "seed", "env_steps", "wall_seconds", "eval", "sha256", "torch", "ppo_config", "env_config"):
        assert key in saved
    assert saved["eval"]["history"][-1]["env_steps"] == second.env_steps
    # Rerunning a finished run changes nothing; another configuration is refused.
    assert Trainer(cfg, out, env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True).run()["updates"] == second.updates
    with pytest.raises(ValueError, match="ppo.lr"):
        Trainer(dataclasses.replace(cfg, lr=0.1), out, env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True).run()


def test_train_all_publishes_a_finished_run_under_its_benchmark_name(tmp_path):
    from mara_agents.mat.train_all import publish

    run = tmp_path / "run"
    run.mkdir()
    (run / "mat.pt").write_bytes(b"weights")
    (run / "mat.json").write_text('{"sha256": "x"}')
    target = publish(run, "mara-seed1", tmp_path / "checkpoints")
    assert target == tmp_path / "checkpoints" / "mara-seed1.pt"
    assert target.read_bytes() == b"weights" and target.with_suffix(".json").read_text() == '{"sha256": "x"}'


def test_training_workloads_honour_the_recipe():
    from core_env.recipe import TaskRecipe
    from mara_agents.mat.ppo import training_workloads

    tight = TaskRecipe(slack=(1.0, 1.2))
    drawn = training_workloads(EnvConfig(arrival_steps=60, recipe=tight))(np.random.default_rng(4))
    expected = draw_workload(bank_for("id", "train"), 0.1, 60, np.random.default_rng(4), tight, n_nodes=4)
    assert np.array_equal(drawn.deadline, expected.deadline) and np.array_equal(drawn.target, expected.target)
    default = training_workloads(EnvConfig(arrival_steps=60))(np.random.default_rng(4))
    assert not np.array_equal(drawn.deadline, default.deadline)


def test_resuming_a_state_saved_before_the_recipe_field_means_the_default_recipe(tmp_path):
    from core_env.recipe import TaskRecipe

    out = tmp_path / "run"
    cfg = toy_ppo(steps=4 * 32 * 32, rollout=32)
    first = Trainer(cfg, out, env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True)
    first.save()
    from mara_agents.checkpoint_files import read_checked, write_checked

    state = read_checked(out / STATE_FILE, "a MAT training state")
    del state["identity"]["env"]["recipe"]  # as saved before EnvConfig had a recipe
    write_checked(out / STATE_FILE, state)
    assert Trainer(cfg, out, env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True).load()
    other = dataclasses.replace(TOY_CONFIG, recipe=TaskRecipe(slack=(1.0, 1.2)))
    with pytest.raises(ValueError, match="env.recipe="):
        Trainer(cfg, out, env_config=other, workload_fn=toy_workload, quiet=True).load()


def test_a_checkpoint_is_refused_when_its_predictor_checkpoint_changed(tmp_path):
    import json
    import shutil

    from benchmarks.agents import checkpoint_path
    from mara_agents.mat.agent import MATAgent
    from mara_agents.predictors.pfn import PFNPredictor

    source = checkpoint_path("mara-pfn", 0)
    target = tmp_path / "mat.pt"
    shutil.copy(source, target)
    manifest = json.loads(source.with_suffix(".json").read_text())
    assert MATAgent.load(source).predictor is not None  # the shipped pair matches
    manifest["pfn_sha256"] = "0" * 64  # trained on another PFN checkpoint than the one shipped now
    target.with_suffix(".json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="trained on features of the pfn checkpoint with sha256 0000"):
        MATAgent.load(target)
    assert MATAgent.load(target, predictor=PFNPredictor.load()).predictor is not None  # on purpose: allowed


def test_a_fresh_process_loads_a_shipped_pfn_checkpoint():
    # the predictor check must not depend on which predictor modules an earlier import happened to load
    import subprocess
    import sys

    code = "from benchmarks.agents import make_agent; print(type(make_agent('mara-pfn', 0)).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "MATAgent", out.stderr[-2000:]


def test_a_policy_manifest_lists_every_committed_evaluation_suite_of_its_task_set():
    from core_env.config import LOADS, EnvConfig
    from core_env.workload import suite_sha256
    from mara_agents.mat.ppo import PPOConfig, provenance

    suites = provenance(EnvConfig(task_set="rl_ood"), PPOConfig(steps=1))["evaluation_suites_sha256"]
    assert suites == {f"rl_ood/{load}": suite_sha256("rl_ood", load) for load in LOADS}
