"""The per-slot policy as an sb3-contrib ``MaskableActorCriticPolicy`` (extra ``sb3``).

SB3 lets a user plug in a policy class; :class:`SlotMaskablePolicy` is one. It reads the Gymnasium view's
``Dict`` observation as it is ((B, N, D) ``"observation"``, (B, N, K+1) ``"action_mask"``; no flattening),
scores every (node, slot) pair with the shared :class:`~mara_agents.integrations.nets.SlotActor` (one set
of weights for all nodes and slots, so the model is permutation-invariant over slots and works for any N
and K), values the state with :class:`~mara_agents.integrations.nets.SlotCritic`, and samples the joint
action from :class:`~mara_agents.integrations.nets.SequentialMaskedCategorical`: node i never picks a
masked action or a task nodes 0..i-1 picked, and the log-probability PPO uses is that of the joint action
under this rule. MaskablePPO's own rollout, GAE and clipped update run unchanged (it only calls
``forward``, ``evaluate_actions``, ``predict_values`` and ``_predict``); the masks it passes are the env's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core_env.extras import needs
from mara_agents.integrations.nets import SequentialMaskedCategorical, SlotActor, SlotCritic

with needs(__name__, "sb3"):
    import torch
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy


class SlotMaskablePolicy(MaskableActorCriticPolicy):
    """MaskableActorCriticPolicy whose actor and critic are :class:`SlotActor` and :class:`SlotCritic`.

    Args (``policy_kwargs``):
        history: the env's history H (``env.unwrapped.config.history``).
        hidden: hidden width of both nets.
        extra: features appended per slot to each node's observation (0: the plain observation).
    """

    def __init__(self, observation_space, action_space, lr_schedule, history: int = 8, hidden: int = 64, extra: int = 0,
                 **kwargs: Any) -> None:
        self.slot_sizes = (history, hidden, extra)  # read by _build, which the base __init__ calls
        super().__init__(observation_space, action_space, lr_schedule, net_arch=[], ortho_init=False, **kwargs)

    def _build(self, lr_schedule) -> None:
        history, hidden, extra = self.slot_sizes
        self.actor_net = SlotActor(history, hidden, extra)
        self.critic_net = SlotCritic(history, hidden, extra)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        history, hidden, extra = self.slot_sizes
        data.update(history=history, hidden=hidden, extra=extra)
        for key in ("net_arch", "ortho_init"):
            data.pop(key, None)
        return data

    def _distribution(self, obs: dict[str, torch.Tensor], action_masks: Any = None,
                      path: torch.Tensor | None = None) -> SequentialMaskedCategorical:
        observation = obs["observation"].float()
        mask = obs["action_mask"] if action_masks is None else torch.as_tensor(action_masks, device=observation.device)
        mask = mask.reshape(observation.shape[0], observation.shape[1], -1)
        return SequentialMaskedCategorical(self.actor_net(observation), mask, path)

    def forward(self, obs, deterministic: bool = False, action_masks: np.ndarray | None = None):
        dist = self._distribution(obs, action_masks)
        actions = dist.mode if deterministic else dist.sample()
        return actions, self.predict_values(obs), dist.log_prob(actions)

    def evaluate_actions(self, obs, actions: torch.Tensor, action_masks: torch.Tensor | None = None):
        actions = actions.long()
        dist = self._distribution(obs, action_masks, path=actions)
        return self.predict_values(obs), dist.log_prob(actions), dist.entropy()

    def predict_values(self, obs) -> torch.Tensor:
        return self.critic_net(obs["observation"].float()).unsqueeze(-1)

    def _predict(self, observation, deterministic: bool = False, action_masks: np.ndarray | None = None) -> torch.Tensor:
        dist = self._distribution(observation, action_masks)
        return dist.mode if deterministic else dist.sample()
