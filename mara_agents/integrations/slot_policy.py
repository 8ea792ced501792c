"""The per-slot policy a library trains, as a checkpoint and as an :class:`~mara_agents.protocols.Agent`.

Any integration whose model is :class:`~mara_agents.integrations.nets.SlotActor` (+ :class:`SlotCritic`)
stores it here in one format: ``policy.pt`` (format tag, history H, hidden width, appended features
per slot, actor and critic weights, the run's metadata) and a ``policy.json`` manifest with its sha256,
written atomically. The format tag names the library that trained it (``mara_agents.integrations.
tianshou_ppo/1``, ``mara_agents.integrations.sb3_maskable/1``), so a checkpoint is only loaded by the
loader of its own library. :class:`SlotPolicyAgent` plays any of them in the benchmark: greedy (or
sampled) conflict-free joint actions of :class:`~mara_agents.integrations.nets.SequentialMaskedCategorical`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core_env.extras import needs
from core_env.npz import write_atomic
from mara_agents.checkpoint_files import read_verified
from mara_agents.integrations.common import EpisodeLog, RecordEpisodes, make_gym_env
from mara_agents.integrations.nets import SequentialMaskedCategorical, SlotActor, SlotCritic
from mara_agents.predictors.features import ObservedFeatures, append_to_nodes
from mara_agents.protocols import Agent

with needs(__name__):
    import torch

POLICY_FILE = "policy.pt"
#: The weights after the last finished epoch or update of a run in progress (``--init`` resumes from it).
SNAPSHOT_FILE = "snapshot.pt"


def save_checkpoint(path: Path | str, fmt: str, actor: SlotActor, critic: SlotCritic | None = None,
                    meta: Mapping[str, Any] | None = None) -> Path:
    """Write a ``fmt`` checkpoint (net sizes, weights) and its ``.json`` manifest with the sha256, atomically."""
    path = Path(path)
    buffer = io.BytesIO()
    torch.save({"format": fmt, "history": actor.history, "hidden": actor.hidden, "extra": actor.extra, "actor": actor.state_dict(),
                "critic": None if critic is None else critic.state_dict(), "meta": dict(meta or {})}, buffer)
    data = buffer.getvalue()
    write_atomic(path, data)
    manifest = {"format": fmt, "weights": path.name, "sha256": hashlib.sha256(data).hexdigest(), "torch": torch.__version__,
                "parameters": sum(p.numel() for p in actor.parameters()), **dict(meta or {})}
    write_atomic(path.with_suffix(".json"), (json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n").encode())
    return path


def read_checkpoint(path: Path | str, fmt: str, missing: str) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """(checkpoint dict, manifest, file path) of a verified ``fmt`` checkpoint (``path``: the file or a run
    directory holding ``policy.pt``). ValueError (``missing`` names how to make one) otherwise."""
    path, data, manifest = read_verified(path, POLICY_FILE, missing)
    if manifest.get("format") != fmt:
        raise ValueError(f"{path.with_suffix('.json')}: not a {fmt} manifest (format {manifest.get('format')!r})")
    ckpt = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    if ckpt.get("format") != fmt:
        raise ValueError(f"{path}: not a {fmt} checkpoint (format {ckpt.get('format')!r})")
    return ckpt, manifest, path


def load_weights(path: Path | str, fmt: str, actor: SlotActor, critic: SlotCritic) -> None:
    """Start ``actor`` and ``critic`` from a ``fmt`` checkpoint (a run directory resumes from its snapshot
    when it has one); ValueError when the sizes differ."""
    path = Path(path)
    file = path / SNAPSHOT_FILE if path.is_dir() and (path / SNAPSHOT_FILE).exists() else path
    ckpt = read_checkpoint(file, fmt, f"no {fmt} checkpoint to start from")[0]
    if (ckpt["history"], ckpt["hidden"], ckpt.get("extra", 0)) != (actor.history, actor.hidden, actor.extra):
        raise ValueError(f"{path}: a policy with history {ckpt['history']}, hidden {ckpt['hidden']}, {ckpt.get('extra', 0)} appended features "
                         f"per slot cannot start a run with {actor.history}, {actor.hidden}, {actor.extra}")
    actor.load_state_dict(ckpt["actor"])
    if ckpt.get("critic") is not None:
        critic.load_state_dict(ckpt["critic"])


class SlotPolicyAgent(Agent):
    """A trained :class:`SlotActor` behind the :class:`~mara_agents.protocols.Agent` interface.

    ``act`` returns conflict-free, mask-respecting (B, N) int64 actions: the greedy (``deterministic=True``)
    or sampled joint action of :class:`SequentialMaskedCategorical`. Works for any N and K (same history H).
    With a ``predictor`` (an actor trained on predictor features) it takes the plain env observation and
    rebuilds the features itself (:class:`~mara_agents.predictors.features.ObservedFeatures`): it must then
    see every step of an episode in order, after :meth:`reset`.
    """

    name = "per-slot policy"

    def __init__(self, actor: SlotActor, deterministic: bool = True, seed: int = 0, predictor=None, name: str | None = None) -> None:
        if (predictor is None) != (actor.extra == 0):
            raise ValueError(f"an actor reading {actor.extra} appended features per slot needs a predictor exactly when extra > 0, "
                             f"got predictor={predictor!r}")
        self.actor = actor.eval()
        self.deterministic = deterministic
        self.generator = torch.Generator().manual_seed(seed)
        self._features = None if predictor is None else ObservedFeatures(predictor)
        if name is not None:
            self.name = name

    def reset(self, batch_size: int, n_nodes: int, n_slots: int) -> None:
        if self._features is not None:
            self._features.reset(batch_size, n_slots)

    def with_features(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        """The (B, N, D) plain observation as the actor reads it: with the rebuilt (B, N, 3K) predictor features
        appended when it was trained on them (one call per step, in order), unchanged otherwise."""
        observation = np.asarray(observation)
        if self._features is None:
            return observation
        return append_to_nodes(observation, self._features(observation, n_slots))

    def act(self, observation: np.ndarray, action_mask: np.ndarray, oracle: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        observation = self.with_features(observation, np.asarray(action_mask).shape[-1] - 1)
        with torch.no_grad():
            logits = self.actor(torch.as_tensor(observation, dtype=torch.float32))
            dist = SequentialMaskedCategorical(logits, torch.as_tensor(action_mask))
            if self.deterministic:
                actions = dist.mode
            else:
                state = torch.random.get_rng_state()
                torch.random.set_rng_state(self.generator.get_state())
                actions = dist.sample()
                self.generator.set_state(torch.random.get_rng_state())
                torch.random.set_rng_state(state)
        return actions.numpy().astype(np.int64)


def load_agent(path: Path | str, fmt: str, missing: str, *, deterministic: bool = True, predictor=None,
               name: str | None = None) -> SlotPolicyAgent:
    """The :class:`SlotPolicyAgent` of a ``fmt`` checkpoint. A policy trained on predictor features gets a
    fresh predictor of the kind its manifest names, unless ``predictor`` is given.

    Raises:
        ValueError: missing file or manifest, another format, a checksum that does not match the manifest,
            or (without ``predictor``) features from a shipped predictor checkpoint that has changed since training.
    """
    ckpt, manifest, path = read_checkpoint(path, fmt, missing)
    actor = SlotActor(ckpt["history"], ckpt["hidden"], ckpt.get("extra", 0))
    actor.load_state_dict(ckpt["actor"])
    kind = manifest.get("predictor")
    if kind is not None and predictor is None:
        from mara_agents.mat.agent import check_shipped_predictor, make_predictor

        check_shipped_predictor(f"{fmt} checkpoint {path}", kind, manifest)
        predictor = make_predictor(kind)
    return SlotPolicyAgent(actor, deterministic=deterministic, predictor=predictor, name=name)


def evaluate(agent: Agent, env_kwargs: Mapping[str, Any], seeds: range | list[int]) -> dict[str, float]:
    """Mean completion rate, invalid actions and conflicts of ``agent`` on the Gymnasium view, one episode per seed."""
    log = EpisodeLog()
    env = RecordEpisodes(make_gym_env(**env_kwargs), log)
    for seed in seeds:
        obs, _ = env.reset(seed=int(seed))
        agent.reset(1, obs["action_mask"].shape[0], obs["action_mask"].shape[1] - 1)
        done = False
        while not done:
            action = agent.act(obs["observation"][None], obs["action_mask"][None])[0]
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    env.close()
    return log.summary()


#: First seed of the greedy evaluation episodes a training CLI plays after training.
EVAL_SEED = 10_000


def finish_cli(report: dict[str, Any], *, module: str, argv: list[str] | None, threads: int, out: Path | None,
               env_kwargs: Mapping[str, Any], eval_episodes: int = 0, load: Callable[[Path], Agent] | None = None) -> dict[str, Any]:
    """The end of a training CLI: record its command and machine in ``report``; with ``out``, evaluate the saved
    policy greedily (``load(out)``) on ``eval_episodes`` seeded episodes (seeds :data:`EVAL_SEED` +) and write
    ``out/train.json`` (without an in-memory ``model``)."""
    report["command"] = " ".join([f"python -m {module}", *(argv if argv is not None else sys.argv[1:])])
    report["machine"] = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(), "torch_threads": threads}
    if out is None:
        return report
    if load is not None and eval_episodes:
        report["eval_greedy"] = evaluate(load(out), env_kwargs, range(EVAL_SEED, EVAL_SEED + eval_episodes))
        print(f"greedy eval on {eval_episodes} seeded episodes: {report['eval_greedy']}")
    Path(out).mkdir(parents=True, exist_ok=True)
    write_atomic(Path(out) / "train.json", (json.dumps({k: v for k, v in report.items() if k != "model"}, indent=1, default=float) + "\n").encode())
    return report
