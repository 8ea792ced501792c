"""The per-slot policy as an RLlib (new API stack) RLModule and action distribution (extra ``rllib``).

RLlib lets a user plug in an RLModule and the action-distribution classes it returns. On the central
Gymnasium view (one agent whose action is every node's choice, ``MultiDiscrete([K+1] * N)``):

* :class:`SlotRLModule` reads the Dict observation as it is ((B, N, D) ``"observation"``, (B, N, K+1)
  ``"action_mask"``), scores every (node, slot) pair with the shared
  :class:`~mara_agents.integrations.nets.SlotActor` and writes the masked logits, flattened to
  (B, N·(K+1)), as the action-distribution inputs; its value function is the pooled
  :class:`~mara_agents.integrations.nets.SlotCritic`.
* :class:`SlotDistribution` is the joint :class:`~mara_agents.integrations.nets.SequentialMaskedCategorical`
  behind RLlib's ``Distribution`` interface: the nodes choose in order, never a masked action or a task an
  earlier node took, and ``logp`` is the joint action's log-probability, so PPO's ratio is exact. It has no
  closed-form KL: train with ``use_kl_loss=False`` (the clipped objective alone).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from core_env.extras import needs
from mara_agents.integrations.common import MASKED_LOGIT, masked_logits
from mara_agents.integrations.nets import SequentialMaskedCategorical, SlotActor, SlotCritic

with needs(__name__, "rllib"):
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.distribution.distribution import Distribution
    from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule


class SlotDistribution(Distribution):
    """The conflict-free joint distribution over (B, N) actions from (B, N·(K+1)) masked logits (masked
    entries at or below ``MASKED_LOGIT / 2``); ``n_nodes`` N is fixed by :meth:`get_partial_dist_cls`."""

    def __init__(self, logits: torch.Tensor, n_nodes: int) -> None:
        table = logits.reshape(logits.shape[0], n_nodes, -1)
        self.joint = SequentialMaskedCategorical(table, table > MASKED_LOGIT / 2)

    def sample(self, *, sample_shape=None, **kwargs) -> torch.Tensor:
        return self.joint.sample()

    def rsample(self, *, sample_shape=None, **kwargs) -> torch.Tensor:
        raise NotImplementedError("SlotDistribution is discrete: no reparameterised sample")

    def logp(self, value: torch.Tensor, **kwargs) -> torch.Tensor:
        return self.joint.log_prob(value)

    def entropy(self, **kwargs) -> torch.Tensor:
        return self.joint.entropy()

    def kl(self, other: Distribution, **kwargs) -> torch.Tensor:
        raise NotImplementedError("SlotDistribution has no closed-form KL: configure PPO with use_kl_loss=False")

    @staticmethod
    def required_input_dim(space: gym.Space, **kwargs) -> int:
        return int(space.nvec.sum())

    @classmethod
    def from_logits(cls, logits: torch.Tensor, n_nodes: int = 1, **kwargs: Any) -> SlotDistribution:
        return cls(logits, n_nodes)

    def to_deterministic(self) -> _Mode:
        return _Mode(self.joint.mode)


class _Mode(Distribution):
    """The greedy joint action (the mode of :class:`SlotDistribution`), for RLlib's inference path."""

    def __init__(self, actions: torch.Tensor) -> None:
        self.actions = actions

    def sample(self, *, sample_shape=None, **kwargs) -> torch.Tensor:
        return self.actions

    def rsample(self, *, sample_shape=None, **kwargs) -> torch.Tensor:
        return self.actions

    def logp(self, value: torch.Tensor, **kwargs) -> torch.Tensor:
        return torch.zeros(value.shape[0])

    def entropy(self, **kwargs) -> torch.Tensor:
        return torch.zeros(self.actions.shape[0])

    def kl(self, other: Distribution, **kwargs) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def required_input_dim(space: gym.Space, **kwargs) -> int:
        return int(space.nvec.sum())


class SlotRLModule(TorchRLModule, ValueFunctionAPI):
    """The per-slot actor and critic as an RLModule (``model_config``: ``history`` H and ``hidden`` width)."""

    def setup(self) -> None:
        config = dict(self.model_config or {})
        self.actor_net = SlotActor(config.get("history", 8), config.get("hidden", 64))
        self.critic_net = SlotCritic(config.get("history", 8), config.get("hidden", 64))
        self.n_nodes = int(self.action_space.nvec.shape[0])

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        logits = masked_logits(self.actor_net(obs["observation"].float()), obs["action_mask"])
        return {Columns.ACTION_DIST_INPUTS: logits.reshape(logits.shape[0], -1)}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.critic_net(batch[Columns.OBS]["observation"].float())

    def _distribution(self):
        return SlotDistribution.get_partial_dist_cls(n_nodes=self.n_nodes)

    def get_inference_action_dist_cls(self):
        return self._distribution()

    def get_exploration_action_dist_cls(self):
        return self._distribution()

    def get_train_action_dist_cls(self):
        return self._distribution()
