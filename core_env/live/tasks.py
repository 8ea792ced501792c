"""Live tasks: real training runs that train a few batches at a time and move between nodes by their state.

A live task follows a small protocol (:class:`LiveTask`): ``train(n)`` runs ``n`` optimizer steps and
returns their ``n`` mini-batch losses; ``state_dict()`` / ``load_state_dict()`` carry everything the
run needs to continue exactly (model, optimizer, data order, step), so a task preempted on one node and
resumed on another reports the same losses as one trained without a pause. A run has a fixed length (its
family's optimizer steps, as in the corpus); past it, or after it diverged, it trains no more and
reports the mean of its last losses, as the curve bank's plateau does.

:class:`TaskSpec` names a run: a corpus family (:data:`core_env.curves.runs.FAMILIES`, all of them:
:data:`LIVE_FAMILIES`) and a run index, the same seeds as the corpus's curve of that run, so a live run's
losses equal its recorded curve bit for bit (tests/test_live.py, tests/test_live_tasks.py). :func:`build_task`
builds one; a user's own task is a ``"module:factory"`` family whose factory takes the run index.

One class per corpus module re-implements its ``run`` in pieces: :class:`CorpusMLPTask`,
:class:`CorpusCNN1DTask`, :class:`CorpusCharLMTask`, :class:`CorpusViTTask` (one optimizer step per batch)
and :class:`CorpusRLTask` (actor-critic: one batch is one update, i.e. a rollout of the 8 gymnasium envs
and its minibatch steps). The RL task's state holds its envs too (their attributes pickled, which carry
the envs' own generators, physics state and time limits) with the last observation, the open episodes'
returns and the autoreset flags. An update's loss is known only once an episode finished, and the
corpus gives the updates before a run's first finished episode that episode's value: so a fresh RL task
trains ahead until one finishes (Acrobot: about 4 updates, its first episodes run to the 500-step limit)
and reports the updates it trained ahead from its log in the next batches, at no cost.

Needs torch and scikit-learn (the ``curves`` extra; the 1-D CNN also mnist1d).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import pickle
from typing import Any, Protocol

import numpy as np

from core_env.extras import needs
from core_env.curves.bank import plateau_window
from core_env.curves.runs import FAMILIES


class LiveTask(Protocol):
    """A training run that trains in pieces (module docstring)."""

    def train(self, batches: int) -> np.ndarray:
        """(batches,) float64: the loss of each of the next ``batches`` optimizer steps."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A run: ``family`` (a corpus family, or ``"module:factory"``) and its ``run_index``.

    Raises:
        TypeError: ``family`` not a str, or ``run_index`` not an int (a bool is not one).
        ValueError: an empty ``family``, or ``run_index`` < 0.
    """

    family: str
    run_index: int

    def __post_init__(self) -> None:
        if not isinstance(self.family, str):
            raise TypeError(f"TaskSpec.family must be a str (a corpus family or 'module:factory'), got {type(self.family).__name__} {self.family!r}")
        if not self.family:
            raise ValueError("TaskSpec.family must name a family, got ''")
        if isinstance(self.run_index, bool) or not isinstance(self.run_index, (int, np.integer)):
            raise TypeError(f"TaskSpec.run_index must be an int, got {type(self.run_index).__name__} {self.run_index!r}")
        if self.run_index < 0:
            raise ValueError(f"run_index must be an int >= 0, got {self.run_index!r}")
        object.__setattr__(self, "run_index", int(self.run_index))  # a numpy int pickles and compares as the int it is

    def __str__(self) -> str:
        return f"{self.family!r} #{self.run_index}"


def checked_losses(spec: TaskSpec, batches: int, losses: Any) -> np.ndarray:
    """What ``train(batches)`` of run ``spec`` returned, as the (batches,) float64 losses the protocol promises
    (the values are not checked: a non-finite loss is the task source's to refuse).

    Raises:
        TypeError: not numbers.
        ValueError: not one loss per batch.
    """
    try:
        out = np.asarray(losses, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"task {spec}: train({batches}) returned {type(losses).__name__}, not losses (numbers): {error}") from None
    if out.shape != (batches,):
        raise ValueError(f"task {spec}: train({batches}) returned {out.size} losses (shape {out.shape}), expected {batches}: one per batch")
    return out


#: The corpus families a live task can run: all of them (each corpus module's ``run`` re-implemented in
#: pieces by one class below).
LIVE_FAMILIES = tuple(FAMILIES)


def build_task(spec: TaskSpec) -> LiveTask:
    """The live task of ``spec``.

    Raises:
        ValueError: an unknown family.
        TypeError: ``spec`` not a TaskSpec, or a ``"module:factory"`` whose factory does not return a LiveTask.
    """
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"spec must be a TaskSpec, got {type(spec).__name__}")
    if spec.family in LIVE_FAMILIES:
        return _CLASSES[FAMILIES[spec.family].module](spec.family, int(spec.run_index))
    if ":" in spec.family:
        module, _, name = spec.family.partition(":")
        task = getattr(importlib.import_module(module), name)(int(spec.run_index))
        if not all(callable(getattr(task, method, None)) for method in ("train", "state_dict", "load_state_dict")):
            raise TypeError(f"{spec.family} returned {type(task).__name__}, not a LiveTask (train, state_dict, load_state_dict)")
        return task
    raise ValueError(f"unknown live task family {spec.family!r}; choose from {list(LIVE_FAMILIES)} or give 'module:factory'")


class _CorpusTask:
    """What every corpus run trained in pieces shares: its seeds (:class:`~core_env.curves.runs.common.RunSeeds`)
    and length, its loss log (divergence as the corpus trainer detects it), ``finished`` / ``plateau()`` and
    the state of model, optimizer, data generator, step and log. A subclass builds the run (``_build``: the
    corpus module's hyperparameters, model and optimizer, in its order) and makes one batch (``_advance``)."""

    module = ""  #: the corpus module (core_env.curves.runs.<module>) whose ``run`` the class trains in pieces

    def __init__(self, family: str, run_index: int, steps: int | None = None) -> None:
        from core_env.curves.runs import common

        if family not in FAMILIES or FAMILIES[family].module != self.module:
            names = [name for name, f in FAMILIES.items() if f.module == self.module]
            raise ValueError(f"{type(self).__name__} runs the families {names}, got family {family!r}")
        if steps is not None and (not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1):
            raise ValueError(f"steps must be None (the family's length) or an int >= 1, got {steps!r}")
        self.family, self._common = family, common
        self._run = importlib.import_module(f"core_env.curves.runs.{self.module}")
        self.steps = FAMILIES[family].steps if steps is None else int(steps)
        seeds = common.RunSeeds(family, int(run_index))
        self.step, self.log, self.rng = 0, common.LossLog(), seeds.data
        self._build(seeds)

    def _setup(self, seeds: Any, hp: dict[str, Any], make_model: Any) -> None:
        """The corpus order: seed torch, build the model, then its optimizer."""
        self.hp = hp
        self._common.torch_setup(seeds.torch_seed)
        self.model = make_model()
        self.params = list(self.model.parameters())
        self.optimizer = self._common.make_optimizer(self.params, hp)

    @property
    def finished(self) -> bool:
        """Trained its length, or stopped by divergence."""
        return self.step >= self.steps or self.log.diverged

    def plateau(self) -> float:
        """The loss it reports once finished: the mean of its last losses (the curve bank's plateau)."""
        losses = self.log.losses
        return float(np.mean(losses[-plateau_window(len(losses)):])) if losses else float("nan")

    def train(self, batches: int) -> np.ndarray:
        n = int(batches)
        if n != batches or n < 0:
            raise ValueError(f"batches must be an int >= 0, got {batches!r}")
        return np.asarray([self.plateau() if self.finished else self._advance() for _ in range(n)], dtype=np.float64)

    def _advance(self) -> float:
        """One optimizer step (the corpus trainer's own: ``common.optimizer_step``); its reported loss."""
        self._common.optimizer_step(self.optimizer, self.hp, self.step, self.steps, lambda _: self._loss(), self.log,
                                    self.params, self.hp.get("grad_clip"))
        self.step += 1
        return self.log.losses[-1] if self.log.losses else self.plateau()

    def state_dict(self) -> dict[str, Any]:
        """A snapshot: training on afterwards does not change it."""
        return {"model": copy.deepcopy(self.model.state_dict()), "optimizer": copy.deepcopy(self.optimizer.state_dict()),
                "step": self.step, "rng": self.rng.bit_generator.state, "log": dataclasses.asdict(self.log), **self._extra_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.rng.bit_generator.state = state["rng"]
        self.log = self._common.LossLog(**{**state["log"], "losses": list(state["log"]["losses"])})
        self._load_extra(state)

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra(self, state: dict[str, Any]) -> None:
        pass


class _ClassifierTask(_CorpusTask):
    """A classifier on an in-memory training set, mini-batches from the corpus's :class:`EpochSampler`."""

    def _classify(self, seeds: Any, hp: dict[str, Any], make_model: Any, X: np.ndarray, y: np.ndarray) -> None:
        with needs(__name__):
            import torch

        self._setup(seeds, hp, make_model)
        self.X, self.y = torch.from_numpy(X), torch.from_numpy(y)
        self.sampler = self._common.EpochSampler(len(y), hp["batch_size"], self.rng)

    def _loss(self) -> Any:
        with needs(__name__):
            import torch.nn.functional as F

        index = self.sampler.next()
        return F.cross_entropy(self.model(self.X[index]), self.y[index])

    def _extra_state(self) -> dict[str, Any]:
        return {"sampler": {"perm": self.sampler.perm.copy(), "pos": self.sampler.pos}}  # its generator is self.rng

    def _load_extra(self, state: dict[str, Any]) -> None:
        self.sampler.perm, self.sampler.pos = np.array(state["sampler"]["perm"]), int(state["sampler"]["pos"])


class CorpusMLPTask(_ClassifierTask):
    """A corpus MLP run (:func:`core_env.curves.runs.mlp.run`) trained in pieces: the same seeds,
    hyperparameters, data order and learning-rate schedule, one optimizer step per batch."""

    module = "mlp"

    def _build(self, seeds: Any) -> None:
        from core_env.curves.runs import data as D

        mlp = self._run
        Xtr, ytr, _, _, n_classes = D.tabular(mlp.DATASETS[self.family])
        hp = mlp.sample_hp(seeds.hp)
        hp["batch_size"] = min(hp["batch_size"], len(ytr))
        self._classify(seeds, hp, lambda: mlp.build(Xtr.shape[1], n_classes, hp), Xtr, ytr)


class CorpusCNN1DTask(_ClassifierTask):
    """The corpus 1-D CNN on MNIST-1D (:func:`core_env.curves.runs.cnn1d.run`) trained in pieces."""

    module = "cnn1d"

    def _build(self, seeds: Any) -> None:
        from core_env.curves.runs import data as D

        Xtr, ytr, _, _ = D.mnist1d()
        Xtr, hp = Xtr[:, None, :], self._run.sample_hp(seeds.hp)
        self._classify(seeds, hp, lambda: self._run.build(Xtr.shape[-1], 10, hp), Xtr, ytr)


class CorpusViTTask(_ClassifierTask):
    """The corpus tiny ViT on digits patches (:func:`core_env.curves.runs.vit.run`) trained in pieces."""

    module = "vit"

    def _build(self, seeds: Any) -> None:
        from core_env.curves.runs import data as D

        Xtr, ytr, _, _ = D.digits_images()
        Ptr, hp = self._run.patches(Xtr), self._run.sample_hp(seeds.hp)
        self._classify(seeds, hp, lambda: self._run.build(hp, Ptr.shape[1], Ptr.shape[2], 10), Ptr, ytr)


class CorpusCharLMTask(_CorpusTask):
    """The corpus character LM on stdlib sources (:func:`core_env.curves.runs.charlm.run`) trained in
    pieces: random windows from the data generator, gradient clipping as sampled."""

    module = "charlm"

    def _build(self, seeds: Any) -> None:
        from core_env.curves.runs import data as D

        self.text, hp = D.stdlib_text()[0], self._run.sample_hp(seeds.hp)
        self._setup(seeds, hp, lambda: self._run.build(hp))

    def _loss(self) -> Any:
        with needs(__name__):
            import torch.nn.functional as F

        lm = self._run
        x, y = lm.windows(self.text, self.rng.integers(0, len(self.text) - lm.CTX - 1, size=self.hp["batch_size"]))
        return F.cross_entropy(self.model(x).reshape(-1, lm.VOCAB), y.reshape(-1))


class CorpusRLTask(_CorpusTask):
    """A corpus actor-critic run (:func:`core_env.curves.runs.rl.run`) trained in pieces, one update per
    batch: its envs travel in its state, and a fresh run trains ahead to its first finished episode
    (module docstring). ``step`` counts the updates reported, ``updates`` those trained."""

    module = "rl"

    def _build(self, seeds: Any) -> None:
        self.ac = ac = self._run.ActorCriticRun(self.family, seeds)  # the corpus order; ac.rng is self.rng
        self.hp, self.model, self.params, self.optimizer = ac.hp, ac.model, ac.params, ac.opt
        self.updates, self.pending = 0, 0  # pending: leading updates before the first finished episode

    @property
    def finished(self) -> bool:
        """Reported its length, or the update it diverged in (after the losses it had trained ahead)."""
        return self.step >= self.steps or (self.log.diverged and self.step > len(self.log.losses))

    def _advance(self) -> float:
        losses = self.log.losses
        while self.step >= len(losses) and self.updates < self.steps and not self.log.diverged:
            self._update()
        if self.step >= len(losses) and self.pending:  # over before any episode finished: the corpus's 1.0
            losses += [1.0] * self.pending
            self.pending = 0
        self.step += 1
        return losses[self.step - 1] if self.step <= len(losses) else (losses[-1] if losses else self.plateau())

    def _update(self) -> None:
        """One corpus update; its loss carried forward when no episode finished (the corpus's rule)."""
        try:
            loss = self.ac.loss(self.ac.update(self.updates, self.steps))
        except (FloatingPointError, ValueError, RuntimeError) as exc:  # as the corpus run stops
            self.log.diverged, self.log.reason = True, f"{type(exc).__name__}: {exc}"
            return
        self.updates += 1
        if loss is None and self.log.losses:
            loss = self.log.losses[-1]
        if loss is None:
            self.pending += 1
        else:
            self.log.losses += [loss] * (self.pending + 1)
            self.pending = 0

    def _extra_state(self) -> dict[str, Any]:
        ac = self.ac
        envs = {k: v for k, v in vars(ac.envs).items() if k != "env_fns"}  # env_fns: local factories, made anew by a build
        return {"updates": self.updates, "pending": self.pending, "obs": ac.obs.copy(), "ep_ret": ac.ep_ret.copy(),
                "prev_done": ac.prev_done.copy(), "envs": pickle.dumps(envs, protocol=pickle.HIGHEST_PROTOCOL)}

    def _load_extra(self, state: dict[str, Any]) -> None:
        ac = self.ac
        self.updates, self.pending = int(state["updates"]), int(state["pending"])
        ac.obs, ac.ep_ret, ac.prev_done = np.array(state["obs"]), np.array(state["ep_ret"]), np.array(state["prev_done"])
        vars(ac.envs).update(pickle.loads(state["envs"]))


_CLASSES = {"mlp": CorpusMLPTask, "cnn1d": CorpusCNN1DTask, "charlm": CorpusCharLMTask, "vit": CorpusViTTask, "rl": CorpusRLTask}
