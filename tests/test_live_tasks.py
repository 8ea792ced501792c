"""The corpus's other families as live tasks (core_env.live.tasks): the 1-D CNN, the character LM, the tiny
ViT and the actor-critic RL runs, trained in pieces, give their corpus runs' losses bit for bit and resume
exactly on a freshly built task from their state (short runs: a few seconds each on 2 cores)."""

from __future__ import annotations

import functools
import importlib
import pickle

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from core_env.curves.bank import plateau_window  # noqa: E402
from core_env.curves.runs import FAMILIES  # noqa: E402
from core_env.live.tasks import (  # noqa: E402
    LIVE_FAMILIES,
    CorpusCharLMTask,
    CorpusCNN1DTask,
    CorpusMLPTask,
    CorpusRLTask,
    CorpusViTTask,
    TaskSpec,
    build_task,
)

#: family -> (class, run index, steps). ViT run 115 diverges at step 55 (its loss passes the cap); the
#: Acrobot run's first episode ends in its second update, so its first update is trained ahead.
CASES = {
    "cnn_mnist1d": (CorpusCNN1DTask, 0, 40),
    "charlm": (CorpusCharLMTask, 0, 30),
    "vit_digits": (CorpusViTTask, 115, 58),
    "rl_cartpole": (CorpusRLTask, 0, 10),
    "rl_acrobot": (CorpusRLTask, 1, 8),
}


@functools.lru_cache(maxsize=None)
def corpus(family: str, run_index: int, steps: int) -> tuple[np.ndarray, bool]:
    """The corpus run's losses (as the curve generator records them) and whether it diverged."""
    from core_env.curves.runs import common as C

    if family == "cnn_mnist1d":
        pytest.importorskip("mnist1d")
    result = importlib.import_module(f"core_env.curves.runs.{FAMILIES[family].module}").run(family, C.RunSeeds(family, run_index), steps)
    return np.asarray(result["losses"], dtype=np.float64), bool(result["diverged"])


def _check_tail(task, losses: np.ndarray, expected: np.ndarray) -> None:
    """Past the run (or its divergence) a task reports its plateau, the mean of the corpus's last losses."""
    plateau = float(np.mean(expected[-plateau_window(expected.size):]))
    assert task.finished and task.plateau() == plateau
    np.testing.assert_array_equal(losses[expected.size:], np.full(losses.size - expected.size, plateau))
    np.testing.assert_array_equal(task.train(3), [plateau] * 3)  # no training: the plateau


@pytest.mark.parametrize("family", CASES)
def test_a_live_task_trains_its_corpus_runs_losses(family):
    cls, run_index, steps = CASES[family]
    expected, diverged = corpus(family, run_index, steps)
    assert diverged == (family == "vit_digits") and expected.size == (55 + 1 if diverged else steps)
    task = cls(family, run_index, steps=steps)
    losses = task.train(steps)
    assert losses.dtype == np.float64 and losses.shape == (steps,)
    np.testing.assert_array_equal(losses[: expected.size], expected)  # bit for bit: seeds, data, schedule, envs
    _check_tail(task, losses, expected)


@pytest.mark.parametrize("family", CASES)
def test_a_live_task_resumes_exactly_on_a_fresh_task_from_its_state(family):
    cls, run_index, steps = CASES[family]
    expected, _ = corpus(family, run_index, steps)
    task, losses = cls(family, run_index, steps=steps), []
    for piece in (1, 3, 0, 2, steps):
        losses += task.train(piece).tolist()
        state = task.state_dict()
        task.train(1)  # the task it came from trains on: the state is a snapshot
        task = build_task(TaskSpec(family, run_index))  # another node builds it as a worker does
        assert type(task) is cls
        task.steps = steps
        task.load_state_dict(pickle.loads(pickle.dumps(state)))  # the bytes that move between processes
    losses = np.asarray(losses[:steps])
    np.testing.assert_array_equal(losses[: expected.size], expected)
    _check_tail(task, losses, expected)


def test_an_rl_run_over_before_any_episode_finished_reports_one():
    expected, _ = corpus("rl_acrobot", 1, 1)
    assert expected.tolist() == [1.0]  # its first episode ends in update 1 (0.726 in the longer run)
    task = CorpusRLTask("rl_acrobot", 1, steps=1)
    assert task.train(2).tolist() == [1.0, 1.0] and task.finished


def test_an_rl_run_that_fails_stops_where_the_corpus_run_stops(monkeypatch):
    from core_env.curves.runs import common as C
    from core_env.curves.runs import rl

    update = rl.ActorCriticRun.update

    def failing(self, index, steps):  # no corpus RL run diverged: make update 3 fail, as a non-finite policy would
        if index == 3:
            raise FloatingPointError("non-finite policy")
        return update(self, index, steps)

    monkeypatch.setattr(rl.ActorCriticRun, "update", failing)
    result = rl.run("rl_cartpole", C.RunSeeds("rl_cartpole", 0), 10)
    expected = np.asarray(result["losses"])
    assert result["diverged"] and expected.size == 3
    task = CorpusRLTask("rl_cartpole", 0, steps=10)
    losses = task.train(2)
    assert not task.finished and task.log.reason == ""
    losses = np.concatenate([losses, task.train(5)])
    np.testing.assert_array_equal(losses[:3], expected)
    assert losses[3] == expected[-1] and task.finished and task.log.reason == "FloatingPointError: non-finite policy"
    np.testing.assert_array_equal(losses[4:], [task.plateau()] * 3)


def test_every_corpus_family_is_live_and_bad_input_is_named():
    assert set(LIVE_FAMILIES) == set(FAMILIES)
    with pytest.raises(ValueError, match=r"CorpusViTTask runs the families \['vit_digits'\], got family 'charlm'"):
        CorpusViTTask("charlm", 0)
    with pytest.raises(ValueError, match=r"steps must be None \(the family's length\) or an int >= 1, got 0"):
        CorpusMLPTask("mlp_wine", 0, steps=0)
    with pytest.raises(ValueError, match="batches must be an int >= 0, got -2"):
        CorpusMLPTask("mlp_wine", 0, steps=5).train(-2)
    with pytest.raises(ValueError, match="unknown live task family 'no_such_family'"):
        build_task(TaskSpec("no_such_family", 0))
