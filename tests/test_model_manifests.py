"""Predictor manifests verified on read, and training CLIs that never write into the shipped checkpoints (issue 49,
item 4): an edited config or temperature, a zero standard deviation, an unbounded bin layout and bad flags are refused."""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import time
import tracemalloc

import numpy as np
import pytest
import torch

from mara_agents import cli_checks
from mara_agents.checkpoint_files import manifest_digests
from mara_agents.predictors.flow_matching import FlowMatchingPredictor, synthetic_histories
from mara_agents.predictors.pfn import PFNConfig, PFNModel, PFNPredictor

pfn = importlib.import_module("mara_agents.predictors.pfn")  # mara_agents.predictors.pfn is also a factory function
fm = importlib.import_module("mara_agents.predictors.flow_matching")
train_pfn = importlib.import_module("mara_agents.predictors.train_pfn")
train_fm = importlib.import_module("mara_agents.predictors.train_fm")

pytestmark = [pytest.mark.faults, pytest.mark.usefixtures("one_torch_thread")]


def inputs():
    histories, _, _ = synthetic_histories(6, seed=11)
    targets = np.array([h[-1] for h in histories]) * 0.9
    return histories, targets, np.full(6, 20), np.array([len(h) for h in histories]) + 40.0


def test_the_shipped_checkpoints_predict_exactly_as_before_the_digests():
    """Numbers computed with the shipped weights before the manifests held digests (the weights are unchanged)."""
    histories, targets, budgets, windows = inputs()
    p = PFNPredictor.load().predict(histories, targets, budgets, windows=windows)
    np.testing.assert_allclose(p.p_within_budget, [0.99451405, 0.99107266, 0.09265547, 0.7436417, 0.86955071, 0.68407117], rtol=1e-5)
    np.testing.assert_array_equal(p.median, [5, 6, np.inf, 12, 12, 7])
    f = FlowMatchingPredictor.load().predict(histories, targets, budgets)
    np.testing.assert_array_equal(f.p_within_budget, [1.0, 1.0, 0.0, 0.625, 0.1875, 0.78125])
    np.testing.assert_array_equal(f.median, [5, 6, np.inf, 17, 43, 7])


def copy_shipped(kind, tmp_path):
    """A copy of a shipped checkpoint in ``tmp_path``: (weights path, manifest path, manifest)."""
    weights = tmp_path / kind.default.name
    shutil.copyfile(kind.default, weights)
    shutil.copyfile(kind.default.with_suffix(".json"), weights.with_suffix(".json"))
    return weights, weights.with_suffix(".json"), json.loads(weights.with_suffix(".json").read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["config"].update(resolution=0.07), r"pfn\.json: config\.resolution changed since the checkpoint was written"),
    (lambda m: m["config"].update(bin_widths=m["config"]["bin_widths"][::-1]), r"pfn\.json: config\.bin_widths changed"),
    (lambda m: m.update(temperature=0), r"pfn\.json: temperature must be a finite number > 0, got 0"),
    (lambda m: m.update(temperature=-1), r"pfn\.json: temperature must be a finite number > 0, got -1"),
    (lambda m: m.update(temperature=1.1), r"pfn\.json: temperature 1\.1 differs from the weights' temperature buffer"),
    (lambda m: m["config"].update(resolution=0.0), r"pfn\.json: PFNConfig\.resolution must be a number in \[0\.001, 10\.0\]"),
    (lambda m: m["config"].update(layers=10**6), r"pfn\.json: PFNConfig\.layers must be an int in \[1, 32\]"),
    (lambda m: m.pop("digests"), r"pfn\.json has no digests of its fields"),
    (lambda m: m["digests"].pop("config.hidden"), r"pfn\.json: config\.hidden changed"),
])
def test_an_edited_pfn_manifest_is_refused_naming_the_file_and_the_field(tmp_path, edit, message):
    weights, manifest_file, manifest = copy_shipped(pfn.CHECKPOINT, tmp_path)
    edit(manifest)
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=message):
        pfn.load_model(weights)


def test_an_unbounded_bin_layout_is_refused_before_anything_is_allocated(tmp_path):
    weights, manifest_file, manifest = copy_shipped(pfn.CHECKPOINT, tmp_path)
    manifest["config"]["bin_widths"][-1] = 10**9  # was a 7.45 GiB allocation
    manifest_file.write_text(json.dumps(manifest))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=r"pfn\.json: PFNConfig\.bin_widths must be 1 to 256 positive ints summing to at most 4096"):
            pfn.load_model(weights)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20 and time.perf_counter() - started < 10
    with pytest.raises(ValueError, match="bin_widths must be 1 to 256 positive ints"):
        PFNConfig(bin_widths=(1,) * 257)


def rewrite_weights(weights, manifest_file, state) -> None:
    """Write ``state`` over ``weights`` and re-hash it in the manifest (so only the range checks stand in the way)."""
    torch.save(state, weights)
    manifest = json.loads(manifest_file.read_text())
    manifest["sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    manifest_file.write_text(json.dumps(manifest))


@pytest.mark.parametrize("kind, buffer, value", [
    (pfn.CHECKPOINT, "temperature", 0.0), (pfn.CHECKPOINT, "temperature", -1.0), (pfn.CHECKPOINT, "std", 0.0),
    (fm.CHECKPOINT, "summary_std", 0.0), (fm.CHECKPOINT, "future_std", -1.0),
])
def test_a_divisor_set_to_zero_or_below_in_rehashed_weights_is_refused(tmp_path, kind, buffer, value):
    weights, manifest_file, _ = copy_shipped(kind, tmp_path)
    state = torch.load(weights, weights_only=True)
    state[buffer].view(-1)[0] = value
    rewrite_weights(weights, manifest_file, state)
    with pytest.raises(ValueError, match=rf"{kind.default.name}: buffer {buffer} must be > 0 everywhere .*got min {value:g}"):
        kind.load(weights)


@pytest.mark.parametrize("kind", [pfn.CHECKPOINT, fm.CHECKPOINT])
def test_other_valid_weights_under_a_rehashed_manifest_are_refused(tmp_path, kind):
    """The digests cover the weights' sha256: finite weights that fit the config, with the manifest's sha256
    updated to match them, are still not the weights the config and settings were written with."""
    weights, manifest_file, _ = copy_shipped(kind, tmp_path)
    state = torch.load(weights, weights_only=True)
    name = next(key for key, value in state.items() if value.is_floating_point() and key not in kind.divisors)
    state[name] = state[name] * 1.01
    rewrite_weights(weights, manifest_file, state)
    with pytest.raises(ValueError, match=rf"{kind.default.with_suffix('.json').name}: sha256 changed since the checkpoint was written"):
        kind.load(weights)
    assert json.loads(manifest_file.read_text())["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()


@pytest.mark.parametrize("edit, field", [
    (lambda m: m["config"].update(resolution=0.07), "config.resolution"),
    (lambda m: m["config"].update(bin_widths=m["config"]["bin_widths"][::-1]), "config.bin_widths"),
    (lambda m: m["inference"].update(samples=64), "inference.samples"),
    (lambda m: m["inference"].update(reachable=0.9), "inference.reachable"),
    (lambda m: m.pop("inference"), "inference"),
])
def test_an_edited_flow_matching_manifest_is_refused_naming_the_field(tmp_path, edit, field):
    weights, manifest_file, manifest = copy_shipped(fm.CHECKPOINT, tmp_path)
    edit(manifest)
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=rf"flow_matching\.json: .*\b{field}\b.* changed since the checkpoint was written"):
        fm.load_model(weights)


def test_the_writer_records_the_digests_the_loader_checks(tmp_path):
    model = PFNModel(PFNConfig(hidden=8, layers=1))
    model.temperature.fill_(1.05)
    manifest = pfn.save_model(model, tmp_path / "pfn.pt", {"temperature": 1.05})
    assert manifest["digests"] == manifest_digests(manifest, pfn.CHECKPOINT.digested)
    assert set(manifest["digests"]) == {"format", "temperature", "sha256", *(f"config.{k}" for k in manifest["config"])}
    assert pfn.load_model(tmp_path)[1] == manifest  # a directory holding pfn.pt loads too
    shipped = json.loads(fm.DEFAULT_CHECKPOINT.with_suffix(".json").read_text())
    assert shipped["digests"] == manifest_digests(shipped, fm.CHECKPOINT.digested)
    model.temperature.fill_(0.0)
    with pytest.raises(ValueError, match="the PFN model: buffer temperature must be > 0"):
        pfn.save_model(model, tmp_path / "zero.pt")
    assert not (tmp_path / "zero.pt").exists() and not (tmp_path / "zero.json").exists()


# ------------------------------------------------------------------ training command lines


BAD_FLAGS = ["--hidden 0", "--layers 0", "--lr nan", "--lr -1", "--lr inf", "--weight-decay nan", "--seed -1", "--steps 0",
             "--hidden 1000000000", "--batch 0", "--prior-share 1.5", "--families 0", "--threads 0", "--seed 1180591620717411303424", "--lr x",
             "--per-step -1", "--per-step nan", "--budget-loss -0.5", "--budget-loss inf"]


@pytest.mark.parametrize("module, flags", [(train_pfn, f) for f in BAD_FLAGS] + [
    (train_fm, f) for f in ("--lr nan", "--lr -1", "--lr inf", "--weight-decay nan", "--seed -1", "--steps 0", "--resolution 0",
                            "--resolution nan", "--history-steps 65", "--samples 0", "--samples 100000", "--velocity-hidden 0", "--examples 0")
])
def test_a_bad_training_flag_exits_2_naming_the_flag_before_any_work(tmp_path, monkeypatch, capsys, module, flags):
    monkeypatch.chdir(tmp_path)
    flag, value = flags.split()
    with pytest.raises(SystemExit) as stopped:
        module.main([flag, value])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.value.code == 2 and f"error: argument {flag}: must be " in error and "Traceback" not in error
    assert not list(tmp_path.iterdir())  # nothing written


def shipped_digest() -> dict[str, str]:
    files = [*fm.CHECKPOINT_DIR.glob("*.pt"), *fm.CHECKPOINT_DIR.glob("*.json")]
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.mark.parametrize("module, name", [(train_pfn, "pfn.pt"), (train_fm, "flow_matching.pt")])
def test_training_writes_under_build_and_never_into_the_shipped_checkpoints_without_the_flag(tmp_path, monkeypatch, capsys, module, name):
    default = module.build_parser().parse_args([]).out
    assert default == cli_checks.BUILD_DIR / default.parent.name / name and not cli_checks.shipped(default)
    monkeypatch.chdir(tmp_path)
    before = shipped_digest()
    for out in (fm.CHECKPOINT_DIR / name, fm.CHECKPOINT_DIR, fm.CHECKPOINT_DIR / "sub" / name):
        with pytest.raises(SystemExit) as stopped:
            module.main(["--out", str(out)])
        error = capsys.readouterr().err
        assert stopped.value.code == 2 and "is inside the shipped checkpoints" in error and "pass --overwrite-shipped" in error
    with pytest.raises(SystemExit) as stopped:
        module.main(["--out", "/proc/self/nowhere/x.pt"])
    assert stopped.value.code == 2 and "--out /proc/self/nowhere/x.pt cannot be written" in capsys.readouterr().err
    assert shipped_digest() == before and not (fm.CHECKPOINT_DIR / "sub").exists()


def test_a_tiny_pfn_training_writes_its_default_out_whose_manifest_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = shipped_digest()
    assert train_pfn.main(["--families", "2", "--prior-examples", "200", "--id-examples", "200", "--validation-examples", "200",
                           "--steps", "2", "--batch", "16", "--hidden", "8", "--layers", "1", "--threads", "1", "--no-progress"]) == 0
    model, manifest = pfn.load_model(tmp_path / "build" / "pfn")
    assert model.config.hidden == 8 and manifest["temperature"] == pytest.approx(float(model.temperature))
    assert shipped_digest() == before


@pytest.mark.parametrize("flags", [["--parallel", "0"], ["--threads", "0"], ["--minutes", "nan"], ["--minutes", "-1"], ["--seeds", "-1"],
                                   ["--no-publish", "--overwrite-shipped"], ["--runs", str(fm.CHECKPOINT_DIR / "mat")]])
def test_train_all_refuses_bad_flags_and_runs_inside_the_shipped_checkpoints(tmp_path, monkeypatch, capsys, flags):
    from mara_agents.mat import train_all

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        train_all.main(flags)
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.value.code == 2 and flags[0] in error
    assert not list(tmp_path.iterdir())


def test_train_all_passes_its_leave_to_trainers_whose_runs_lie_inside_the_shipped_checkpoints(tmp_path, monkeypatch):
    from mara_agents.mat import train_all

    class Finished:  # a trainer that exits at once, without a policy
        returncode = 1

        def __init__(self, command, **kwargs):
            commands.append(command)

        def poll(self):
            return self.returncode

    commands = []
    monkeypatch.setattr(cli_checks, "SHIPPED_DIR", tmp_path / "shipped")  # stands in for mara_agents/checkpoints
    monkeypatch.setattr(train_all.subprocess, "Popen", Finished)
    monkeypatch.setattr(train_all.time, "sleep", lambda seconds: None)
    for runs, leave in ((tmp_path / "shipped" / "runs", True), (tmp_path / "runs", False)):
        commands.clear()
        assert train_all.main(["--runs", str(runs), "--variants", "mara", "--seeds", "0", "--overwrite-shipped", "--", "--steps", "9"]) == 0
        (command,) = commands
        assert command[command.index("--out") + 1] == str(runs / "mara-seed0")
        tail = ["--steps", "9", *(["--overwrite-shipped"] if leave else [])]
        assert command[-len(tail):] == tail and command.count("--overwrite-shipped") == leave


@pytest.mark.parametrize("flags, published", [([], False), (["--no-publish"], False), (["--overwrite-shipped"], True)])
def test_train_all_publishes_to_the_shipped_checkpoints_only_when_told(tmp_path, monkeypatch, flags, published):
    from mara_agents.mat import train_all

    run = tmp_path / "runs" / "mara-seed0"
    run.mkdir(parents=True)
    (run / "mat.pt").write_bytes(b"weights")  # a run finished earlier
    calls = []
    monkeypatch.setattr(train_all, "publish", lambda run, name: calls.append(name) or run)
    monkeypatch.setattr(train_all.time, "sleep", lambda seconds: None)
    assert train_all.main(["--runs", str(tmp_path / "runs"), "--variants", "mara", "--seeds", "0", *flags]) == 0
    assert calls == (["mara-seed0"] if published else [])
