"""The MAT trainer refuses bad input and never writes a diverged or unreadable state (issue 17, item 5)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mara_agents.mat.agent import MATAgent, load_policy, save_policy
from mara_agents.mat.model import MATConfig, MATModel
from mara_agents.mat.ppo import METRICS_FILE, STATE_FILE, PPOConfig, Trainer, TrainingDiverged, parse_args
from test_mat import TOY_CONFIG, toy_ppo, toy_workload


@pytest.mark.parametrize("flags, message", [
    (["--gamma", "nan"], "gamma must be"),
    (["--minutes", "nan"], "minutes must be"),
    (["--minutes", "inf"], "minutes must be"),
    (["--env-groups", "0"], "env_groups must be"),
    (["--steps", "-5"], "steps must be"),
    (["--lr", "-1"], "lr must be"),
    (["--lr", "inf"], "lr must be"),
    (["--clip", "0"], "clip must be"),
    (["--gae-lambda", "1.5"], "gae_lambda must be"),
    (["--value-norm-decay", "1"], "value_norm_decay must be"),
    (["--n-heads", "3"], "multiple of n_heads"),
    (["--bc-until", "-1"], "bc_until must be"),
    (["--seed", str(2**70)], "seed must be an integer >= 0 and <= 4294967295"),  # was an OverflowError traceback
    (["--num-envs", "1000000000"], "num_envs must be an integer >= 1 and <= 4096"),  # was a MemoryError
])
def test_invalid_hyperparameters_are_refused_before_training(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--out", str(tmp_path / "run"), "--steps", "100", *flags])
    assert stopped.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_an_output_directory_that_cannot_be_written_exits_2_before_training(capsys):
    from mara_agents.mat.ppo import main

    with pytest.raises(SystemExit) as stopped:
        main(["--out", "/proc/self/run", "--steps", "10"])
    assert stopped.value.code == 2 and "--out /proc/self/run cannot be written" in capsys.readouterr().err


def test_an_output_directory_inside_the_shipped_checkpoints_exits_2_unless_overwrite_shipped(tmp_path, monkeypatch, capsys):
    from mara_agents import cli_checks
    from mara_agents.checkpoint_files import SHIPPED_DIR
    from mara_agents.mat import ppo

    for out in (SHIPPED_DIR / "mat", SHIPPED_DIR / "run-that-must-not-exist"):
        with pytest.raises(SystemExit) as stopped:
            ppo.main(["--out", str(out), "--steps", "10"])
        error = capsys.readouterr().err
        assert stopped.value.code == 2 and f"--out {out} is inside the shipped checkpoints" in error and "pass --overwrite-shipped" in error
    assert not (SHIPPED_DIR / "run-that-must-not-exist").exists()
    monkeypatch.setattr(cli_checks, "SHIPPED_DIR", tmp_path)  # stands in for mara_agents/checkpoints: the flag lets a run write there
    cfg, out, _ = ppo.parse_command(["--out", str(tmp_path / "run"), "--steps", "10", "--overwrite-shipped"])
    assert out == tmp_path / "run" and cfg.steps == 10
    with pytest.raises(SystemExit):
        ppo.parse_command(["--out", str(tmp_path / "run"), "--steps", "10"])


def test_valid_edges_are_accepted():
    cfg = PPOConfig(steps=1, gamma=1.0, gae_lambda=0.0, ent_coef=0.0, bc_until=0, value_norm_decay=0.0)
    assert cfg.gamma == 1.0 and cfg.minutes is None
    with pytest.raises(ValueError, match="epochs must be an integer"):
        PPOConfig(steps=1, epochs=1.5)


def _trainer(tmp_path, **overrides) -> Trainer:
    return Trainer(toy_ppo(**overrides), tmp_path / "run", env_config=TOY_CONFIG, workload_fn=toy_workload, quiet=True)


def test_a_non_finite_loss_stops_training_without_a_checkpoint(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, steps=4 * 32 * 32)
    evaluate = trainer.model.evaluate_actions

    def nan_values(*args):
        logp, entropy, values = evaluate(*args)
        return logp, entropy, values * float("nan")

    monkeypatch.setattr(trainer.model, "evaluate_actions", nan_values)
    with pytest.raises(TrainingDiverged, match="PPO update 1: the loss is nan"):
        trainer.run()
    assert not (tmp_path / "run" / STATE_FILE).exists() and not (tmp_path / "run" / "mat.pt").exists()


def test_a_non_finite_parameter_stops_training_without_a_checkpoint(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, steps=4 * 32 * 32)
    step, calls = trainer.optimizer.step, []
    per_update = trainer.cfg.epochs * trainer.cfg.minibatches

    def poisoned_step(*args, **kwargs):
        result = step(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2 * per_update:  # the last optimizer step of the second update writes an infinity
            with torch.no_grad():
                trainer.model.query.weight[0, 0] = float("inf")
        return result

    monkeypatch.setattr(trainer.optimizer, "step", poisoned_step)
    with pytest.raises(TrainingDiverged, match="after PPO update 2 the parameters query.weight"):
        trainer.run()
    assert trainer.updates == 1
    assert not (tmp_path / "run" / STATE_FILE).exists() and not (tmp_path / "run" / "mat.pt").exists()
    with pytest.raises(TrainingDiverged):  # and a direct save refuses too
        trainer.save()


def test_non_finite_weights_are_never_written_nor_loaded(tmp_path):
    model = MATModel(MATConfig())
    with torch.no_grad():
        model.query.weight[1, 2] = float("nan")
    with pytest.raises(ValueError, match="non-finite values .* in query.weight"):
        save_policy(model, tmp_path / "mat.pt", {})
    assert not (tmp_path / "mat.pt").exists()
    # A checkpoint made by hand (right format and checksum) with a NaN weight is refused on load.
    import hashlib
    import io

    from mara_agents.mat.agent import POLICY_FORMAT

    buffer = io.BytesIO()
    torch.save({"format": POLICY_FORMAT, "config": model.config.to_dict(), "model": model.state_dict()}, buffer)
    (tmp_path / "mat.pt").write_bytes(buffer.getvalue())
    manifest = {"format": POLICY_FORMAT, "sha256": hashlib.sha256(buffer.getvalue()).hexdigest(), "model_config": model.config.to_dict()}
    (tmp_path / "mat.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="mat.pt holds non-finite values"):
        load_policy(tmp_path)
    with pytest.raises(ValueError, match="non-finite"):
        MATAgent.load(tmp_path)


def test_a_truncated_flipped_foreign_or_non_finite_training_state_raises_naming_the_file(tmp_path):
    from mara_agents.checkpoint_files import read_checked, write_checked

    trainer = _trainer(tmp_path, steps=1)
    (tmp_path / "run").mkdir()
    trainer.save()
    path = tmp_path / "run" / STATE_FILE
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=f"checksum mismatch for a MAT training state .*{STATE_FILE}"):
        _trainer(tmp_path, steps=1).load()
    rng = np.random.default_rng(29)
    for _ in range(20):  # any single flipped bit of the payload: refused, never resumed with altered weights
        flipped = bytearray(data)
        at = int(rng.integers(data.index(b"\n") + 1, len(data)))
        flipped[at] ^= 1 << int(rng.integers(0, 8))
        path.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match="checksum mismatch"):
            _trainer(tmp_path, steps=1).load()
    path.write_bytes(data[data.index(b"\n") + 1:])  # a bare torch file (no checksum header)
    with pytest.raises(ValueError, match="no checksum header"):
        _trainer(tmp_path, steps=1).load()
    path.write_bytes(data)
    state = read_checked(path, "a MAT training state")
    state["model"]["query.weight"][0, 0] = float("nan")
    write_checked(path, state)
    with pytest.raises(ValueError, match=f"training state .*{STATE_FILE} holds non-finite"):
        _trainer(tmp_path, steps=1).load()


def test_a_damaged_demonstrations_file_is_refused(tmp_path):
    from mara_agents.mat.imitation import Demonstrations

    demos = Demonstrations({"actions": torch.zeros(3, 2, dtype=torch.int64)}, {"teacher": "edf"})
    demos.save(tmp_path / "demonstrations.pt")
    assert Demonstrations.load(tmp_path / "demonstrations.pt").info == {"teacher": "edf"}
    data = bytearray((tmp_path / "demonstrations.pt").read_bytes())
    data[-5] ^= 0x10
    (tmp_path / "demonstrations.pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch for a demonstrations file"):
        Demonstrations.load(tmp_path / "demonstrations.pt")


def test_a_resume_after_a_kill_keeps_the_metrics_monotone(tmp_path):
    class Killed(BaseException):
        """Stands for SIGKILL: the process ends at once, nothing after it runs (no final save)."""

    cfg = dict(steps=8 * 32 * 32)
    saved_at = []

    def kill_after_four(trainer: Trainer) -> None:
        if trainer.updates == 2:
            trainer.save()  # the last save before the kill ...
            saved_at.append(trainer.updates)
        if trainer.updates == 4:  # ... then two more updates are logged, and the process dies
            raise Killed

    first = _trainer(tmp_path, **cfg)
    first.callback = kill_after_four
    with pytest.raises(Killed):
        first.run()
    metrics = tmp_path / "run" / METRICS_FILE
    with open(metrics, "a") as handle:
        handle.write('{"updates": 5, "env_ste')  # a row the kill cut short
    assert [json.loads(line)["updates"] for line in metrics.read_text().splitlines()[:-1]] == [1, 2, 3, 4]

    second = _trainer(tmp_path, **cfg)
    second.run()
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    updates = [row["updates"] for row in rows]
    assert saved_at == [2] and updates == list(range(1, second.updates + 1)) and second.updates > 4
    assert all(b["env_steps"] > a["env_steps"] for a, b in zip(rows, rows[1:]))


def test_the_command_line_sets_the_training_environment(tmp_path, capsys, monkeypatch):
    from core_env.config import EnvConfig
    from mara_agents.mat import ppo

    cfg, out, env = ppo.parse_command(["--out", str(tmp_path), "--steps", "10", "--n-nodes", "8", "--n-slots", "32", "--load", "x1.5",
                                       "--task-set", "rl_ood"])
    assert (env.n_nodes, env.n_slots, env.load, env.task_set_name) == (8, 32, "x1.5", "rl_ood") and cfg.steps == 10
    assert ppo.parse_command(["--out", str(tmp_path), "--steps", "10", "--load", "0.3"])[2].load == 0.3
    assert ppo.parse_command(["--out", str(tmp_path), "--steps", "10"])[2] == EnvConfig()  # the defaults keep old runs resumable
    for flags, message in ((["--load", "heavy"], "--load must be one of"), (["--load", "3"], "load must be"),
                           (["--task-set", "nope"], "nope"), (["--n-nodes", "0"], "n_nodes")):
        with pytest.raises(SystemExit) as stopped:
            ppo.parse_command(["--out", str(tmp_path), "--steps", "10", *flags])
        assert stopped.value.code == 2 and message in capsys.readouterr().err, flags
    seen = {}

    class Capture:
        def __init__(self, cfg, out, env_config=None):
            seen["env"] = env_config
            self.env_steps, self.elapsed, self.baselines = 0, 0.0, {}

        def run(self):
            return None

    monkeypatch.setattr(ppo, "Trainer", Capture)
    ppo.main(["--out", str(tmp_path / "run"), "--steps", "10", "--n-nodes", "2"])
    assert seen["env"].n_nodes == 2


def test_env_json_sets_any_environment_field_like_the_integration_trainers(tmp_path, capsys):
    import dataclasses

    from core_env.config import EnvConfig
    from mara_agents.mat import ppo

    base = ["--out", str(tmp_path), "--steps", "10"]
    fields = '{"node_speeds": [1, 1, 2, 2], "switch_cost": 0.1, "history": 4, "arrival_steps": 60, "load": 0.3}'
    env = ppo.parse_command([*base, "--env", fields, "--n-slots", "8"])[2]
    assert env == EnvConfig(node_speeds=(1.0, 1.0, 2.0, 2.0), switch_cost=0.1, history=4, arrival_steps=60, load=0.3, n_slots=8)
    assert ppo.parse_command([*base, "--variant", "mara-sparse", "--env", '{"reward": "sparse"}'])[2].reward == "sparse"
    for flags, message in ((["--env", "[1]"], "a JSON object"), (["--env", "{bad"], "not JSON"),
                           (["--env", '{"bogus": 1}'], "unknown environment argument(s) ['bogus']"),
                           (["--env", '{"n_nodes": 2}', "--n-nodes", "2"], "n_nodes is given twice"),
                           (["--env", '{"reward": "sparse"}'], "the reward is the variant's"),
                           (["--env", '{"node_speeds": [1, 2]}'], "node_speeds must have length"),
                           (["--env", '{"switch_cost": 1.5}'], "switch_cost must be")):
        with pytest.raises(SystemExit) as stopped:
            ppo.parse_command([*base, *flags])
        assert stopped.value.code == 2 and message in capsys.readouterr().err, flags
    three = Trainer(toy_ppo(), tmp_path / "h3", env_config=dataclasses.replace(TOY_CONFIG, history=3), workload_fn=toy_workload, quiet=True)
    assert three.model_config.history == 3  # the model sees the environment's history
