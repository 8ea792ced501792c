"""The PFN predictor: its bins, its summary contract, the window it reads, and checkpoint verification."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core_env.config import EnvConfig
from core_env.vector import DiscreteCoREVectorEnv
from mara_agents.allocators import EDFAdmission
from mara_agents.predictors import PREDICTORS
from mara_agents.predictors.cache import SlotTasks
from mara_agents.predictors.pfn import (BIN_WIDTHS, DEFAULT_CHECKPOINT, HORIZON, PFNConfig, PFNModel, PFNPredictor, cdf_matrix,
                                        demand_bins, features, load_model, save_model)
from mara_agents.protocols import Predictor


def tiny_predictor(seed: int = 0) -> PFNPredictor:
    model = PFNModel(PFNConfig(hidden=16, layers=1), seed=seed)
    with torch.no_grad():
        model.net[-1].bias.copy_(torch.linspace(-1, 1, len(BIN_WIDTHS) + 1))  # a spread-out distribution
    return PFNPredictor(model)


def histories(count: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = [2.0 * (1 + np.arange(n) / 5.0) ** -0.5 * np.exp(rng.normal(0, 0.05, n)) for n in rng.integers(1, 90, size=count)]
    targets = np.array([h.min() for h in out]) * rng.uniform(0.2, 0.99, size=count)
    windows = np.array([len(h) for h in out]) + rng.integers(1, 100, size=count)
    return out, targets, windows.astype(float)


def test_bins_cover_the_longest_recipe_window_and_censor_beyond():
    assert HORIZON == 184 >= 180  # slack 3 x share 1 x 60 typical steps
    assert demand_bins(np.array([1, 8, 9, 10, 184, 185, np.inf])).tolist() == [0, 7, 8, 8, len(BIN_WIDTHS) - 1, len(BIN_WIDTHS), len(BIN_WIDTHS)]
    c = cdf_matrix()
    assert c.shape == (len(BIN_WIDTHS) + 1, HORIZON + 1)
    assert np.all(c[:, 0] == 0) and np.all(c[:-1, -1] == 1) and np.all(c[-1] == 0)
    assert np.all(np.diff(c, axis=1) >= 0)
    assert c[8, 9] == pytest.approx(0.5) and c[8, 10] == 1.0  # the bin of 9-10: half its mass at 9


def test_predictor_follows_the_predictor_protocol():
    predictor = tiny_predictor()
    assert isinstance(predictor, Predictor) and predictor.uses_window and predictor.name == "pfn"
    h, targets, windows = histories(64)
    budgets = np.random.default_rng(1).integers(0, 200, size=64)
    s = predictor.predict(h, targets, budgets, windows=windows)
    assert s.median.shape == (64,) and s.quantiles.shape == (64, 5) and s.p_within_budget.shape == (64,)
    finite = np.where(np.isinf(s.quantiles), 1e9, s.quantiles)
    assert np.all(np.diff(finite, axis=1) >= 0)
    assert np.all(s.median >= 1)
    assert np.all((s.p_within_budget >= 0) & (s.p_within_budget <= 1))


def test_p_within_budget_is_the_cdf_read_at_each_budget():
    predictor = tiny_predictor()
    h, targets, windows = histories(16)
    grid = np.broadcast_to(np.arange(HORIZON + 1), (16, HORIZON + 1))
    p = predictor.predict(h, targets, grid, windows=windows).p_within_budget
    assert np.all(p[:, 0] == 0) and np.all(np.diff(p, axis=1) >= -1e-12)
    one = predictor.predict(h, targets, np.full(16, 30), windows=windows).p_within_budget
    np.testing.assert_allclose(one, p[:, 30])
    beyond = predictor.predict(h, targets, np.full(16, 10_000), windows=windows).p_within_budget
    np.testing.assert_allclose(beyond, p[:, HORIZON])  # budgets beyond the horizon count as the horizon
    median = predictor.predict(h, targets, np.full(16, 30), windows=windows).median
    for row in range(16):  # the median is the first budget whose probability reaches 1/2
        reached = np.flatnonzero(p[row] >= 0.5 - 1e-12)
        assert median[row] == (reached[0] if reached.size else np.inf)


def test_a_task_without_reports_is_censored():
    predictor = tiny_predictor()
    s = predictor.predict([np.array([]), np.array([1.0, 0.9])], np.array([0.5, 0.5]), np.array([50, 50]), windows=np.array([60.0, 60.0]))
    assert np.isinf(s.median[0]) and np.all(np.isinf(s.quantiles[0])) and s.p_within_budget[0] == 0
    assert np.isfinite(s.p_within_budget[1])


def test_predictions_do_not_depend_on_the_batch_or_call_order():
    predictor = tiny_predictor()
    h, targets, windows = histories(40, seed=3)
    budgets = np.full(40, 40)
    whole = predictor.predict(h, targets, budgets, windows=windows)
    order = np.random.default_rng(0).permutation(40)
    shuffled = predictor.predict([h[i] for i in order], targets[order], budgets[order], windows=windows[order])
    np.testing.assert_allclose(shuffled.p_within_budget, whole.p_within_budget[order], atol=1e-6)
    np.testing.assert_array_equal(shuffled.median, whole.median[order])
    single = [predictor.predict([h[i]], targets[i:i + 1], budgets[i:i + 1], windows=windows[i:i + 1]).p_within_budget[0] for i in range(5)]
    np.testing.assert_allclose(single, whole.p_within_budget[:5], atol=1e-6)


def test_the_prediction_reads_the_declared_target_and_window():
    predictor = tiny_predictor()
    h, targets, windows = histories(8)
    x = features(h, targets, windows, predictor.model.config)
    assert not np.allclose(x, features(h, targets * 0.5, windows, predictor.model.config))
    assert not np.allclose(x, features(h, targets, windows * 2, predictor.model.config))
    assert x.dtype == np.float32 and x.shape == (8, predictor.model.config.inputs) and np.all(np.isfinite(x))


@pytest.mark.parametrize("windows, match", [(None, "deadline window"), (np.ones(3), r"shape \(M,\)"), (np.array([5.0, 0.0]), ">= 1"),
                                            (np.array([5.0, np.nan]), ">= 1")])
def test_windows_are_required_and_checked(windows, match):
    predictor = tiny_predictor()
    h, targets, _ = histories(2)
    with pytest.raises(ValueError, match=match):
        predictor.predict(h, targets, np.array([3, 3]), windows=windows)


def test_predictors_without_a_window_ignore_it():
    h, targets, windows = histories(4)
    wls = PREDICTORS["wls"]()
    a = wls.predict(h, targets, np.full(4, 20))
    b = wls.predict(h, targets, np.full(4, 20), windows=windows)
    np.testing.assert_array_equal(a.p_within_budget, b.p_within_budget)


def test_allocators_see_the_same_window_as_the_simulator():
    agent = EDFAdmission(tiny_predictor(), min_reports=2)
    envs = DiscreteCoREVectorEnv(2, config=EnvConfig(n_nodes=2, n_slots=6, arrival_steps=30))
    obs, _ = envs.reset(seed=0)
    agent.reset(2, 2, 6)
    for _ in range(25):
        actions = agent.act(obs["observation"], obs["action_mask"])
        observed, truth = agent.tasks.slot_tasks(), SlotTasks.of_simulator(envs.batch.sim)
        active = observed.active
        np.testing.assert_array_equal(active, truth.active)
        np.testing.assert_array_equal(observed.window[active], truth.window[active])
        obs, *_ = envs.step(actions)
    assert agent.cache.recomputed > 0


def test_a_checkpoint_round_trips_and_any_damage_is_refused(tmp_path):
    predictor = tiny_predictor(seed=4)
    path = tmp_path / "pfn.pt"
    manifest = save_model(predictor.model, path, {"note": "test"})
    assert manifest["format"] == "mara_agents.pfn/1" and json.loads(path.with_suffix(".json").read_text())["note"] == "test"
    h, targets, windows = histories(10)
    loaded = PFNPredictor.load(path)
    np.testing.assert_array_equal(loaded.predict(h, targets, np.full(10, 9), windows=windows).p_within_budget,
                                  predictor.predict(h, targets, np.full(10, 9), windows=windows).p_within_budget)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_model(path)
    path.with_suffix(".json").unlink()
    with pytest.raises(ValueError, match="manifest .* is missing"):
        load_model(path)
    with pytest.raises(ValueError, match="PFN checkpoint is missing"):
        load_model(tmp_path / "absent.pt")


def test_non_finite_weights_are_refused_on_save_and_load(tmp_path):
    predictor = tiny_predictor()
    with torch.no_grad():
        predictor.model.net[0].weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        save_model(predictor.model, tmp_path / "bad.pt")
    # a NaN saved behind a matching sha256 is still refused at load
    import hashlib
    import io

    buffer = io.BytesIO()
    torch.save(predictor.model.state_dict(), buffer)
    (tmp_path / "bad.pt").write_bytes(buffer.getvalue())
    (tmp_path / "bad.json").write_text(json.dumps({"format": "mara_agents.pfn/1", "config": predictor.model.config.to_dict(),
                                                  "sha256": hashlib.sha256(buffer.getvalue()).hexdigest()}))
    with pytest.raises(ValueError, match="non-finite"):
        load_model(tmp_path / "bad.pt")


def test_a_manifest_of_another_format_or_config_is_refused(tmp_path):
    predictor = tiny_predictor()
    path = tmp_path / "pfn.pt"
    save_model(predictor.model, path)
    manifest = json.loads(path.with_suffix(".json").read_text())
    path.with_suffix(".json").write_text(json.dumps({**manifest, "format": "mara_agents.flow_matching/1"}))
    with pytest.raises(ValueError, match="not a PFN checkpoint manifest"):
        load_model(path)
    path.with_suffix(".json").write_text(json.dumps({**manifest, "config": {**manifest["config"], "hidden": 32}}))
    with pytest.raises(ValueError, match="does not match its config"):
        load_model(path)
    path.with_suffix(".json").write_text(json.dumps({**manifest, "config": {**manifest["config"], "extra": 1}}))
    with pytest.raises(ValueError, match="do not match the expected"):
        load_model(path)


@pytest.mark.skipif(not DEFAULT_CHECKPOINT.exists(), reason="no shipped PFN checkpoint")
def test_the_shipped_checkpoint_loads_and_never_read_the_held_out_sets():
    predictor = PREDICTORS["pfn"]()
    manifest = json.loads(DEFAULT_CHECKPOINT.with_suffix(".json").read_text())
    assert {"rl_ood", "vit_ood"} <= set(manifest["data"]["never_read"])
    assert manifest["data"]["task_set"] == "id" and manifest["data"]["split"] == "train"
    lo, hi = manifest["data"]["prior_validation_families"]
    assert lo >= manifest["data"]["prior_families"] and hi > lo  # the validation families never trained
    h, targets, windows = histories(32)
    s = predictor.predict(h, targets, np.full(32, 40), windows=windows)
    assert np.all((s.p_within_budget >= 0) & (s.p_within_budget <= 1))


def test_the_budget_loss_reads_the_cdf_at_each_budget():
    """budget_bce: P(demand <= budget) from the bins' softmax, against whether the true bin lies within the budget."""
    from mara_agents.predictors.train_pfn import budget_bce

    cdf = torch.from_numpy(cdf_matrix(BIN_WIDTHS)).float()
    logits = torch.full((3, len(BIN_WIDTHS) + 1), -30.0)
    logits[:, 4] = 30.0  # all mass on demand 5
    y = torch.tensor([4, 4, len(BIN_WIDTHS)])  # demand 5, 5, never
    right = budget_bce(logits[:2], y[:2], torch.tensor([5, 4]), cdf)  # within 5: yes (p≈1); within 4: no (p≈0)
    assert float(right) < 1e-4
    wrong = budget_bce(logits[2:], y[2:], torch.tensor([10]), cdf)  # predicted within 10, never finishes
    assert float(wrong) == pytest.approx(-np.log(1e-6), rel=1e-3)
    spread = torch.zeros(1, len(BIN_WIDTHS) + 1)  # uniform over bins: P(demand <= 8) = 8 / 37
    expected = -np.log(8 / (len(BIN_WIDTHS) + 1))
    assert float(budget_bce(spread, torch.tensor([2]), torch.tensor([8]), cdf)) == pytest.approx(expected, rel=1e-5)
