"""A small shared-parameter actor-critic for core_env and a conflict-free joint action distribution.

:class:`SlotActor` scores every (node, slot) pair with one MLP over the node's context (node and global
features), the slot's features and a "this node served the slot last step" flag, plus an idle logit per
node: logits (B, N, K+1). Every node uses the same weights (the node index is one of its features), so
this is one policy shared by all nodes, and it works for any N and K with the same history H. With
``extra`` = E > 0 the observation ends with E features per slot (slot 0's first), e.g. the K × 3 predictor
features of :class:`mara_agents.predictors.features.GymPredictorFeatures`; they join each slot's row.

:class:`SlotCritic` is a centralized value V(s) over the pooled slot table and the mean node context.

:class:`SequentialMaskedCategorical` turns per-node logits into a joint distribution over (N,) actions
that never breaks the env's rules: node i samples from its logits with the env mask *and* the tasks
already taken by nodes 0..i-1 removed (idle always allowed). Its log-probability of a joint action is
the sum of these conditional log-probabilities, recomputed from the action itself, so PPO's ratio is
exact. No masked action and no conflict can ever be sampled. :class:`SequentialNodeCategorical` is the
same distribution with per-node conditional log-probabilities, for per-agent PPO losses (TorchRL).
"""

from __future__ import annotations

from core_env import features
from core_env.extras import needs
from mara_agents.integrations.common import MASKED_LOGIT

with needs(__name__):
    import torch
    from torch import nn

CONTEXT = features.NODE_FEATURES + features.GLOBAL_FEATURES


def split_observation(obs: torch.Tensor, history: int, extra: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, N, D) observations -> context (B, N, 6), slot table (B, N, K, F+E+1) (the env's F slot features,
    the E appended per-slot features, a served-by-me flag), present (B, K)."""
    if obs.ndim != 3:
        raise ValueError(f"observation must have shape (B, N, D), got {tuple(obs.shape)}")
    width = features.slot_width(history)
    rest = obs.shape[-1] - features.SLOT_TABLE_START
    if rest <= 0 or rest % (width + extra):
        raise ValueError(f"observation length D={obs.shape[-1]} does not fit history H={history} and {extra} appended features "
                         f"per slot (slot width {width} + {extra})")
    B, N, _ = obs.shape
    K = rest // (width + extra)
    context = obs[..., :CONTEXT]
    end = features.SLOT_TABLE_START + K * width
    table = obs[..., features.SLOT_TABLE_START:end].reshape(B, N, K, width)
    if extra:
        table = torch.cat([table, obs[..., end:].reshape(B, N, K, extra)], dim=-1)
    last = torch.round(obs[..., 2] * K).long() - 1  # slot this node served last step, -1 idle
    mine = (last.unsqueeze(-1) == torch.arange(K, device=obs.device)).float().unsqueeze(-1)
    return context, torch.cat([table, mine], dim=-1), table[:, 0, :, features.PRESENT]


def over_leading(net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """A (B, N, D) -> (B, ...) net on (..., N, D) observations of any leading shape (collectors act with batch
    [] or [B] and estimate values on [B, T])."""
    out = net(obs.reshape(-1, *obs.shape[-2:]))
    return out.reshape(tuple(obs.shape[:-2]) + tuple(out.shape[1:]))


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class SlotActor(nn.Module):
    """Per-node logits (B, N, K+1): column 0 idle, column k the task in slot k-1 (masks not applied)."""

    def __init__(self, history: int = 8, hidden: int = 64, extra: int = 0) -> None:
        super().__init__()
        self.history, self.hidden, self.extra = history, hidden, extra
        width = features.slot_width(history) + extra + 1
        self.score = mlp([CONTEXT + width, hidden, hidden, 1])
        self.idle = mlp([CONTEXT, hidden, 1])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        context, table, _ = split_observation(obs, self.history, self.extra)
        K = table.shape[2]
        pairs = torch.cat([context.unsqueeze(2).expand(-1, -1, K, -1), table], dim=-1)
        return torch.cat([self.idle(context), self.score(pairs).squeeze(-1)], dim=-1)


class SlotCritic(nn.Module):
    """Centralized value V(s) (B,) from the slot table (pooled over present slots) and the mean node context."""

    def __init__(self, history: int = 8, hidden: int = 64, extra: int = 0) -> None:
        super().__init__()
        self.history, self.extra = history, extra
        width = features.slot_width(history) + extra
        self.embed = mlp([features.GLOBAL_FEATURES + width, hidden, hidden])
        self.head = mlp([2 * hidden + CONTEXT, hidden, 1])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        context, table, present = split_observation(obs, self.history, self.extra)
        slots = table[:, 0, :, :-1]  # (B, K, F): identical for every node
        glob = context[:, 0, features.NODE_FEATURES:].unsqueeze(1).expand(-1, slots.shape[1], -1)
        e = torch.tanh(self.embed(torch.cat([glob, slots], dim=-1)))
        w = present.unsqueeze(-1)
        mean = (e * w).sum(1) / w.sum(1).clamp(min=1.0)
        top = torch.where(w > 0, e, torch.full_like(e, -1.0)).amax(1)
        return self.head(torch.cat([mean, top, context.mean(1)], dim=-1)).squeeze(-1)


class SequentialMaskedCategorical(torch.distributions.Distribution):
    """Joint distribution over (N,) node actions with env masks and no two nodes on one task.

    Args:
        logits: (B, N, K+1) per-node logits.
        mask: (B, N, K+1) env action mask (nonzero = allowed; column 0, idle, must be allowed).
        path: optional (B, N) actions along which :meth:`entropy` is evaluated (PPO's update passes the
            stored actions); without it the entropy follows the distribution's mode.
    """

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor, path: torch.Tensor | None = None) -> None:
        self.logits, self.mask, self.path = logits, mask.bool(), path
        super().__init__(batch_shape=logits.shape[:1], event_shape=logits.shape[1:2], validate_args=False)

    def _walk(self, act: torch.Tensor | None, how: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Go through the nodes in order; returns (actions, each node's conditional log-prob, each node's
        conditional entropy), all (B, N)."""
        B, N, A = self.logits.shape
        taken = torch.zeros(B, A, dtype=torch.bool, device=self.logits.device)
        actions, logp, ent = [], [], []
        for i in range(N):
            allowed = self.mask[:, i] & ~taken
            allowed[:, 0] = True
            logits = torch.where(allowed, self.logits[:, i], torch.full_like(self.logits[:, i], MASKED_LOGIT))
            log_p = torch.log_softmax(logits, dim=-1)
            if act is not None:
                a = act[:, i].long()
            elif how == "sample":
                a = torch.distributions.Categorical(logits=logits).sample()
            else:
                a = logits.argmax(-1)
            actions.append(a)
            logp.append(log_p.gather(1, a.unsqueeze(1)).squeeze(1))
            ent.append(-(log_p.exp() * log_p).sum(-1))
            taken = taken | (torch.nn.functional.one_hot(a, A).bool() & (a > 0).unsqueeze(1))
        return torch.stack(actions, dim=1), torch.stack(logp, dim=1), torch.stack(ent, dim=1)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        with torch.no_grad():
            return self._walk(None, "sample")[0]

    @property
    def mode(self) -> torch.Tensor:
        with torch.no_grad():
            return self._walk(None, "mode")[0]

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The mode (TensorDict's deterministic interaction reads this name)."""
        return self.mode

    @property
    def variance(self) -> torch.Tensor:
        """Not defined for a categorical joint action; zeros (Tianshou's collector logs a std)."""
        return torch.zeros(self.logits.shape[:2])

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self._walk(value, "")[1].sum(-1)

    def entropy(self) -> torch.Tensor:
        """Sum of the nodes' conditional entropies along ``path`` (or the mode): an estimate of the joint entropy."""
        return self._walk(self.path, "mode")[2].sum(-1)


class SequentialNodeCategorical(SequentialMaskedCategorical):
    """The same joint distribution seen node by node, for libraries whose PPO keeps one ratio per agent
    (TorchRL's multi-agent ``ClipPPOLoss``): batch shape (..., N) for logits and mask (..., N, K+1), any
    leading dimensions. ``sample``/``mode`` give the sequential, conflict-free joint action; ``log_prob`` and
    ``entropy`` give each node's *conditional* term log p(a_i | s, a_<i) (their sum is the joint's), so
    per-node ratios times a shared advantage are the joint policy's gradient split over the nodes."""

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor) -> None:
        self.lead = logits.shape[:-2]
        super().__init__(logits.reshape(-1, *logits.shape[-2:]), mask.reshape(-1, *mask.shape[-2:]))
        torch.distributions.Distribution.__init__(self, batch_shape=logits.shape[:-1], validate_args=False)

    def _shaped(self, value: torch.Tensor) -> torch.Tensor:
        return value.reshape(tuple(self.lead) + (value.shape[-1],))

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        return self._shaped(super().sample())

    @property
    def mode(self) -> torch.Tensor:
        return self._shaped(super().mode)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self._shaped(self._walk(value.reshape(-1, value.shape[-1]), "")[1])

    def entropy(self) -> torch.Tensor:
        return self._shaped(self._walk(None, "mode")[2])
