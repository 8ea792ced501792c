"""A trained MAT policy behind the :class:`mara_agents.protocols.Agent` interface.

Like every agent, :class:`MATAgent` sees only the env observation (B, N, D) and the action mask. A
policy trained on predictor features (``mara``: flow matching, ``mara-wls``: WLS) needs those features
too, so the agent rebuilds them itself: :class:`mara_agents.observed.ObservedTasks`
reconstructs each task's full reported-loss history from consecutive observations (the predictive
baselines use the same reconstruction), a :class:`mara_agents.predictors.cache.PredictionCache`
predicts the tasks whose history changed, and the three per-slot features are formed exactly as
:class:`mara_agents.predictors.features.SlotPredictions` forms them during training (losses pass
through the float32 observation, so they agree to float32 precision). Consequently the agent must see
every step of an episode in order, and :meth:`reset` must be called before each new batch of episodes
(the rollout helpers and :class:`~mara_agents.protocols.PettingZooPolicy` do).

Latency: for one environment (B = 1) the model decides by fixed-point decoding (see
:mod:`mara_agents.mat.model`) and only the tasks served since the last step are predicted again. Run
torch with one thread (``torch.set_num_threads(1)``): on tensors this small, intra-op threads add only
synchronisation. ``python -m benchmarks perf`` reports the decision time, split into policy and
predictor features (:attr:`MATAgent.feature_seconds`).

Example::

    agent = MATAgent.load("runs/mara_s0/mat.pt")       # or the run directory
    stats = benchmarks.rollout.run_agent(agent, workloads)
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core_env.config import EnvConfig
from core_env.extras import needs
from core_env.npz import write_atomic
from mara_agents.checkpoint_files import read_verified, refuse_non_finite
from mara_agents.mat.model import (
    MATConfig,
    MATModel,
    observation_tokens,
)
from mara_agents.predictors.features import ObservedFeatures, split_feature_set
from mara_agents.protocols import Agent

with needs(__name__):
    import torch

POLICY_FORMAT = "mara_agents.mat/1"
POLICY_FILE = "mat.pt"


def make_predictor(name: str | None):
    """The predictor behind a feature set (``"fm"``, ``"wls"``, ``"pfn"``, ``"pfn-post"``: PFN; None: no predictor features)."""
    if name is None:
        return None
    from mara_agents.predictors import PREDICTORS
    from mara_agents.predictors.features import split_feature_set

    return PREDICTORS[split_feature_set(name)[0]]()


def shipped_predictor_sha256(name: str) -> str | None:
    """The sha256 (from its manifest) of the shipped checkpoint behind predictor ``name``, None for
    predictors without one (WLS and the other numpy predictors)."""
    import importlib

    from mara_agents.predictors.features import split_feature_set

    module = {"fm": "flow_matching", "pfn": "pfn"}.get(split_feature_set(name)[0])
    if module is None:
        return None
    checkpoint = importlib.import_module(f"mara_agents.predictors.{module}").DEFAULT_CHECKPOINT
    try:
        return json.loads(Path(checkpoint).with_suffix(".json").read_text()).get("sha256")
    except (OSError, ValueError):
        return None  # the predictor's own loader reports a missing or broken manifest


def check_shipped_predictor(what: str, name: str | None, manifest: Mapping[str, Any]) -> None:
    """Refuse a policy trained on a shipped predictor's features (``<name>_sha256`` in its ``manifest``) when
    that predictor's shipped checkpoint has changed since: its features would differ from training.

    Raises:
        ValueError: naming ``what`` (the checkpoint), both sha256 and the way out (``predictor=``).
    """
    from mara_agents.predictors.features import split_feature_set

    recorded = manifest.get(f"{split_feature_set(name)[0]}_sha256") if name else None
    if recorded is not None and recorded != shipped_predictor_sha256(name):
        raise ValueError(f"{what} was trained on features of the {name} checkpoint with sha256 {recorded}, "
                         f"but the shipped {name} checkpoint has sha256 {shipped_predictor_sha256(name)}: its features would "
                         "differ from training (pass predictor= to use another on purpose)")


def save_policy(model: MATModel, path: Path | str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Write the policy checkpoint ``path`` and its manifest (``path`` with .json) atomically; return the manifest.

    The checkpoint holds the format tag, the :class:`MATConfig` and the weights; the manifest adds the
    sha256 of the checkpoint bytes, the torch version, the parameter count and ``manifest``'s entries.
    Raises ValueError (writing nothing) when a weight is NaN or infinite.
    """
    path = Path(path)
    refuse_non_finite(model.state_dict(), f"the policy to be written to {path}")  # never write a diverged policy
    buffer = io.BytesIO()
    torch.save({"format": POLICY_FORMAT, "config": model.config.to_dict(), "model": model.state_dict()}, buffer)
    data = buffer.getvalue()
    write_atomic(path, data)
    manifest = {"format": POLICY_FORMAT, "weights": path.name, "sha256": hashlib.sha256(data).hexdigest(), "torch": torch.__version__,
                "model_config": model.config.to_dict(), "parameters": model.parameter_count(), **manifest}
    write_atomic(path.with_suffix(".json"), (json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n").encode())
    return manifest


def load_policy(path: Path | str, device: str = "cpu", expect: Mapping[str, Any] | None = None) -> tuple[MATModel, dict[str, Any]]:
    """Load a policy checkpoint (``mat.pt``, or a run directory holding one) and its manifest
    (``mat.json`` beside it, required; see :mod:`mara_agents.checkpoint_files`).

    Args:
        expect: manifest entries the checkpoint must have, e.g. ``{"variant": "mara", "seed": 0}``
            (``seed``: the training seed the manifest records).

    Raises:
        ValueError: a missing file or manifest, another format, a checksum that does not match the
            manifest, a manifest ``model_config`` other than the checkpoint's configuration, a manifest
            entry other than ``expect``'s (naming the entry), weights holding a NaN or an infinity, or
            weights that do not fit the stored configuration.
    """
    path, data, manifest = read_verified(path, POLICY_FILE, "MAT checkpoint is missing")
    if manifest.get("format") != POLICY_FORMAT:
        raise ValueError(f"manifest {path.with_suffix('.json')} is not a MAT policy manifest (format {manifest.get('format')!r}, "
                         f"expected {POLICY_FORMAT!r})")
    for name, value in (expect or {}).items():
        if name not in manifest:
            raise ValueError(f"MAT checkpoint {path}: its manifest has no {name!r} (expected {value!r})")
        if manifest[name] != value:
            raise ValueError(f"MAT checkpoint {path}: manifest {name} is {manifest[name]!r}, expected {value!r}")
    try:
        state = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except Exception as error:  # truncated or foreign files raise various torch/pickle errors
        raise ValueError(f"MAT checkpoint {path} could not be read: {error}") from error
    if not isinstance(state, dict) or state.get("format") != POLICY_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{path} is not a MAT policy checkpoint (format {found!r}, expected {POLICY_FORMAT!r})")
    config = MATConfig.from_dict(state.get("config"))
    if manifest.get("model_config") != config.to_dict():
        raise ValueError(f"MAT checkpoint {path}: manifest model_config {manifest.get('model_config')!r} differs from the "
                         f"checkpoint's configuration {config.to_dict()!r}")
    refuse_non_finite(state["model"], f"MAT checkpoint {path}")
    model = MATModel(config)
    try:
        model.load_state_dict(state["model"], strict=True)
    except RuntimeError as error:
        raise ValueError(f"MAT checkpoint {path} does not fit its configuration {config.to_dict()}: {error}") from error
    return model.to(device).eval(), manifest


class MATAgent(Agent):
    """A MAT policy as a batched scheduler (any N and K; the env's history H must match training).

    Args:
        model: the policy network (its config says which predictor features it expects).
        deterministic: argmax per node under the autoregressive masks; else sample with a seeded
            torch generator.
        seed: seed of that generator.
        predictor: the predictor behind the features (default: a fresh one of the configured kind;
            ``"fm"`` loads the shipped flow-matching checkpoint).
        device: torch device of the model.
        manifest: the checkpoint's manifest (kept for reference as :attr:`manifest`).
    """

    def __init__(self, model: MATModel, deterministic: bool = True, seed: int = 0, predictor=None,
                 device: str = "cpu", manifest: dict[str, Any] | None = None) -> None:
        self.model = model.to(device).eval()
        self.config: MATConfig = model.config
        self.deterministic, self.device = deterministic, torch.device(device)
        self.manifest = manifest or {}
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.predictor = predictor
        if self.config.predictor is not None and predictor is None:
            self.predictor = make_predictor(self.config.predictor)
        index = bool(self.config.predictor) and split_feature_set(self.config.predictor)[1]
        self._features = None if self.predictor is None else ObservedFeatures(self.predictor, index=index)

    @property
    def feature_seconds(self) -> float:
        """Wall seconds spent rebuilding predictor features (benchmarks split decision time with it)."""
        return 0.0 if self._features is None else self._features.seconds

    @classmethod
    def load(cls, path: Path | str, deterministic: bool = True, device: str = "cpu", seed: int = 0,
             env_config: EnvConfig | None = None, predictor=None, expect: Mapping[str, Any] | None = None) -> MATAgent:
        """The agent of a checkpoint written by the trainer (``mat.pt`` or its run directory), verified
        against its manifest (required; see :func:`load_policy`).

        With ``env_config``, the checkpoint is checked against that environment up front (ValueError
        naming the mismatch); otherwise :meth:`act` checks each observation's layout. With ``expect``
        (e.g. ``{"variant": "mara", "seed": 0}``: the manifest's variant and *training* seed; ``seed``
        above only seeds sampling), a manifest entry other than expected is a ValueError naming it. A
        checkpoint trained on a shipped predictor's features (``fm_sha256`` / ``pfn_sha256`` in its
        manifest) is refused when that predictor's shipped checkpoint has changed since, unless
        ``predictor`` is given.
        """
        model, manifest = load_policy(path, device, expect=expect)
        if predictor is None:
            check_shipped_predictor(f"MAT checkpoint {path}", model.config.predictor, manifest)
        if env_config is not None and env_config.history != model.config.history:
            raise ValueError(f"MAT checkpoint {path} was trained with history H={model.config.history} reported losses per slot, "
                             f"the environment has history={env_config.history}")
        return cls(model, deterministic=deterministic, seed=seed, predictor=predictor, device=device, manifest=manifest)

    def reset(self, batch_size: int, n_nodes: int, n_slots: int) -> None:
        if self._features is not None:
            self._features.reset(batch_size, n_slots)

    def act(self, observation: np.ndarray, action_mask: np.ndarray, oracle: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        observation, action_mask = np.asarray(observation), np.asarray(action_mask)
        if observation.ndim != 3 or action_mask.ndim != 3 or observation.shape[:2] != action_mask.shape[:2]:
            raise ValueError(f"expected observation (B, N, D) and action_mask (B, N, K+1), got {observation.shape} and {action_mask.shape}")
        B, N, D = observation.shape
        K = action_mask.shape[2] - 1
        expected = self.config.env_obs_dim(K)
        if D != expected:
            hint = (" (these observations already carry predictor features: pass the plain env observation, the agent adds them)"
                    if D == expected + self.config.predictor_features * K else "")
            raise ValueError(f"observation length D={D} does not fit this MAT checkpoint: it reads env observations with history "
                             f"H={self.config.history}, i.e. D={expected} for K={K} slots{hint}")
        extra = None if self._features is None else self._features(observation, K)
        tokens = observation_tokens(observation, K, self.config, extra)
        if self.device.type != "cpu":
            tokens = type(tokens)(*(t.to(self.device) for t in tokens))
        mask = torch.as_tensor(action_mask.astype(bool), device=self.device)
        with torch.inference_mode():
            actions = self.model.decide(tokens, mask, self.deterministic, self.generator)
        return actions.cpu().numpy().astype(np.int64, copy=False)
