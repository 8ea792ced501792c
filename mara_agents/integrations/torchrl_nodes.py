"""core_env's batched engine as a TorchRL multi-agent env: one group of nodes, B envs in one step.

:class:`NodeBatchEnv` is a TorchRL ``EnvBase`` with batch size ``(B,)`` over one
:class:`core_env.vector.DiscreteCoREVectorEnv` (``autoreset_mode="disabled"``: TorchRL's collectors reset
finished envs through ``"_reset"``), laid out as TorchRL's multi-agent envs (VMAS, PettingZoo) are: the
nodes form the group ``"node"`` with ``("node", "observation")`` (B, N, D), ``("node", "action_mask")``
(B, N, K+1) bool, ``("node", "action")`` (B, N) and ``("node", "reward")`` (B, N, 1) (the team reward,
the same for every node); ``done`` / ``terminated`` / ``truncated`` (B, 1) are the env's; the episode
statistics of :data:`~mara_agents.integrations.common.REPORTED_KEYS` are (B,) float64 entries under
``"stats"`` at every step (read them at the step that ended an episode).

Unlike ``PettingZooWrapper`` over the PettingZoo view (one env step at a time, one env per wrapper), one
call steps all B envs in the compiled engine, so a multi-agent library (BenchMARL, TorchRL's MAPPO)
collects at the suite's size on a few CPU cores. Works with torchrl 0.11 (BenchMARL's pin) and later.

>>> env = NodeBatchEnv(8, seed=0)                   # 8 envs of the default configuration (N = 4, K = 16)
>>> td = env.rollout(3)
>>> td["node", "observation"].shape
torch.Size([8, 3, 4, 262])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from core_env.extras import needs
from core_env.vector import DiscreteCoREVectorEnv
from mara_agents.integrations.common import REPORTED_KEYS

with needs(__name__, "torchrl"):
    import torch
    from tensordict import TensorDict, TensorDictBase
    from torchrl.data import Binary, Categorical, Composite, Unbounded
    from torchrl.envs import EnvBase

GROUP = "node"
ACTION = (GROUP, "action")


class NodeBatchEnv(EnvBase):
    """``num_envs`` envs of core_env (keyword arguments: :class:`core_env.config.EnvConfig`) as one TorchRL env.

    ``seed``: env i draws its workloads from ``default_rng(seed + i)`` (the vector env's rule); a later
    :meth:`set_seed` takes effect at the next reset, which then restarts every env. ``num_envs`` (the batch
    size B) is bounded as the vector env's is (:func:`core_env.memory.check_num_envs`: at most
    :data:`core_env.memory.MAX_NUM_ENVS`, and within this machine's memory by an estimate checked before
    anything is allocated).

    Refused as the vector env refuses them (TypeError / ValueError naming the key): actions ``("node",
    "action")`` that are not integers (a float, a bool, a NaN: never cast) or not (B, N); a ``"_reset"``
    mask that is not a bool tensor of B entries (0.5, NaN, -1 or 2 would each read as True).
    """

    def __init__(self, num_envs: int = 8, env_kwargs: Mapping[str, Any] | None = None, seed: int | None = None,
                 device: str | torch.device = "cpu") -> None:
        if not isinstance(env_kwargs, (Mapping, type(None))):
            raise TypeError(f"env_kwargs must be a mapping of core_env keyword arguments, got {type(env_kwargs).__name__}")
        self.vec = DiscreteCoREVectorEnv(num_envs, autoreset_mode="disabled", **dict(env_kwargs or {}))
        super().__init__(device=device, batch_size=torch.Size([self.vec.num_envs]))
        config = self.vec.config
        B, N, A = self.vec.num_envs, config.n_nodes, config.n_slots + 1
        D = self.vec.single_observation_space["observation"].shape[-1]
        self.n_nodes, self.n_actions = N, A
        self.group_map = {GROUP: [f"node_{i}" for i in range(N)]}
        self.observation_spec = Composite(
            {GROUP: Composite({"observation": Unbounded((B, N, D), dtype=torch.float32, device=self.device),
                               "action_mask": Binary(A, (B, N, A), dtype=torch.bool, device=self.device)}, shape=(B, N), device=self.device),
             "stats": Composite({k: Unbounded((B,), dtype=torch.float64, device=self.device) for k in REPORTED_KEYS}, shape=(B,),
                                device=self.device)}, shape=(B,), device=self.device)
        self.action_spec = Composite({GROUP: Composite({"action": Categorical(A, (B, N), dtype=torch.int64, device=self.device)},
                                                       shape=(B, N), device=self.device)}, shape=(B,), device=self.device)
        self.reward_spec = Composite({GROUP: Composite({"reward": Unbounded((B, N, 1), dtype=torch.float32, device=self.device)},
                                                       shape=(B, N), device=self.device)}, shape=(B,), device=self.device)
        self.done_spec = Composite({k: Categorical(2, (B, 1), dtype=torch.bool, device=self.device) for k in ("done", "terminated", "truncated")},
                                   shape=(B,), device=self.device)
        self._seed = seed
        self._started = False

    def _set_seed(self, seed: int | None) -> None:
        self._seed = seed

    def _observe(self, obs: Mapping[str, np.ndarray], infos: Mapping[str, np.ndarray]) -> TensorDict:
        B, N = self.batch_size[0], self.n_nodes
        node = TensorDict({"observation": torch.as_tensor(obs["observation"], device=self.device),
                           "action_mask": torch.as_tensor(obs["action_mask"], device=self.device).bool()}, batch_size=(B, N), device=self.device)
        stats = TensorDict({k: torch.as_tensor(np.asarray(infos[k], np.float64).reshape(B, -1).sum(-1), device=self.device)
                            for k in REPORTED_KEYS}, batch_size=(B,), device=self.device)
        return TensorDict({GROUP: node, "stats": stats}, batch_size=(B,), device=self.device)

    def _reset_mask(self, tensordict: TensorDictBase | None) -> np.ndarray | None:
        """The (B,) bool ``"_reset"`` entry of ``tensordict`` (None without one), checked before it is read."""
        if tensordict is None or "_reset" not in tensordict.keys():
            return None
        mask, B = tensordict.get("_reset"), self.batch_size[0]
        if mask.dtype != torch.bool:
            raise TypeError(f"'_reset' must be a bool mask of shape ({B}, 1), got dtype {mask.dtype}")
        if mask.numel() != B:
            raise ValueError(f"'_reset' must be a bool mask of shape ({B}, 1), got shape {tuple(mask.shape)}")
        return mask.reshape(-1).cpu().numpy()

    def _actions(self, tensordict: TensorDictBase) -> np.ndarray:
        """The (B, N) integer actions, never cast (the vector env's check, naming the key)."""
        action = tensordict.get(ACTION)
        if action.dtype.is_floating_point or action.dtype.is_complex or action.dtype == torch.bool:
            raise TypeError(f"{ACTION} must be integers in [0, {self.n_actions - 1}], got dtype {action.dtype}")
        try:
            return self.vec.checked_actions(action.cpu().numpy())
        except ValueError as error:
            raise ValueError(f"{ACTION}: {error}") from None

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        mask = self._reset_mask(tensordict)
        if not self._started or self._seed is not None:  # the first reset and a new seed restart every env
            mask = None
        seed, self._seed = self._seed, None
        obs, infos = self.vec.reset(seed=seed, options=None if mask is None else {"reset_mask": mask})
        self._started = True
        out = self._observe(obs, infos)
        B = self.batch_size[0]
        for key in ("done", "terminated", "truncated"):
            out.set(key, torch.zeros((B, 1), dtype=torch.bool, device=self.device))
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        obs, rewards, terminated, truncated, infos = self.vec.step(self._actions(tensordict))
        out = self._observe(obs, infos)
        B, N = self.batch_size[0], self.n_nodes
        reward = torch.as_tensor(rewards, dtype=torch.float32, device=self.device).reshape(B, 1, 1).expand(B, N, 1).clone()
        out.get(GROUP).set("reward", reward)
        term = torch.as_tensor(terminated, device=self.device).reshape(B, 1)
        trunc = torch.as_tensor(truncated, device=self.device).reshape(B, 1)
        out.set("terminated", term)
        out.set("truncated", trunc)
        out.set("done", term | trunc)
        return out

    def close(self, *, raise_if_closed: bool = True) -> None:  # noqa: D102
        self.vec.close()
        try:
            super().close(raise_if_closed=raise_if_closed)
        except TypeError:  # torchrl 0.11's close() takes no keyword
            super().close()
