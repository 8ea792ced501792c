"""The Multi-Agent Transformer (MAT) policy/value network for core_env, pointer-style.

**Tokens.** Each node's observation (the layout of :func:`core_env.features.observations`, optionally
followed by 3 predictor features per slot as in :func:`mara_agents.predictors.features.predictor_observations`)
is parsed into

* one *node token* per node: node index, speed, "was idle last step", and the 3 global features
  (time, arrival window left, active share), plus a pointer to the slot it served last step (the
  embedding of that slot token is added);
* one *slot token* per slot, shared by all nodes: the slot's F = 8 + H env features, followed by its
  3 predictor features when the layout has them.

No weight depends on N or K, so a model trained with N = 4, K = 16 runs on other cluster sizes.

**Encoder.** Pre-LN transformer layers over the N + K tokens (empty slots are not attended to). A
per-node value head reads each node token (values are in the trainer's normalized units).

**Decoder.** Autoregressive over nodes in the fixed order 0..N-1 (MAT): node i's input is its encoder
token plus an embedding of node i-1's action (a start token for node 0; for a task, a projection of
the chosen slot's encoded token; a learned idle vector). Causal self-attention over nodes, then
cross-attention to the encoded slots. Logits are *pointers*: the scaled dot product of node i's
output with each slot token's key and with a learned idle key.

**Masking.** While acting, the env mask is intersected with "not taken by an earlier node" (idle is
always allowed), so no two nodes ever take one task. The masks actually applied are returned, and
:meth:`MATModel.evaluate_actions` (teacher forcing: one decoder pass with the actions shifted by one
node) reproduces the very same masked distributions from them.

**Decoding.** Node-by-node decoding runs N decoder steps, each with the earlier nodes' cached keys and
values. For a single environment, where a decision's latency matters, :meth:`MATModel.act` uses
*fixed-point decoding* instead: because the decoder is causal, node i's logits depend only on the actions
of nodes 0..i-1, so it guesses the joint action (each node keeps the slot it served last step), runs one
teacher-forced pass over all nodes, and chooses node by node from those logits under the autoregressive
masks. If the choices of nodes 0..N-2 equal the guess, every node's logits were computed from its
predecessors' actual choices, so the result is exactly the node-by-node one; otherwise the choices become
the next guess. Each pass fixes at least one more node, so at most N passes are needed (one in most steps
of a deterministic policy: nodes mostly keep their tasks). Sampling draws the Gumbel noise of all nodes
up front (Gumbel-max is an exact sample of each node's categorical distribution), so both decodings give
the same actions for the same generator state.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np

from core_env import features
from core_env.extras import needs
from core_env.observation import parse_observation as parse_env_observation
from mara_agents.functional import linear, norm

with needs(__name__):
    import torch
    import torch.nn.functional as F
    from torch import nn

#: Predictor feature sets a model can be trained on (None: env features only).
PREDICTOR_CHOICES = ("fm", "wls", "pfn", "pfn-post", "fm-post", None)
#: Predictor features per slot appended after the env observation.
PREDICTOR_FEATURES = 3
#: Inputs of a node token: node index, speed, idle last step, then the 3 global features.
NODE_INPUTS = 3 + features.GLOBAL_FEATURES
_LAST_SLOT = features.NODE_FEATURE_NAMES.index("last_slot")  # replaced by the idle flag in a node token
#: How :meth:`MATModel.act` decodes (both give the same actions).
DECODINGS = ("auto", "node-by-node", "fixed-point")
_MASKED = -1e9  # logit of a masked action: exp() underflows to exactly 0 in float32


@dataclasses.dataclass(frozen=True)
class MATConfig:
    """Observation layout and architecture (stored with every checkpoint).

    Attributes:
        history: H, reported log losses per slot in the env observation.
        predictor: ``"fm"``, ``"wls"`` or None: which predictor's 3 per-slot features follow the env
            observation (None: none do).
        d_model, n_heads, enc_layers, dec_layers: transformer sizes.
    """

    history: int = 8
    predictor: str | None = None
    d_model: int = 64
    n_heads: int = 2
    enc_layers: int = 1
    dec_layers: int = 1

    def __post_init__(self) -> None:
        for name in ("history", "d_model", "n_heads", "enc_layers", "dec_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MATConfig.{name} must be an int >= 1, got {value!r}")
        if self.predictor not in PREDICTOR_CHOICES:
            raise ValueError(f"MATConfig.predictor must be one of {list(PREDICTOR_CHOICES)}, got {self.predictor!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"MATConfig.d_model={self.d_model} must be divisible by n_heads={self.n_heads}")

    @property
    def predictor_features(self) -> int:
        """Predictor features per slot: 3, 4 for a ``-post`` set (the index added), 0 without a predictor."""
        if not self.predictor:
            return 0
        from mara_agents.predictors.features import feature_width, split_feature_set

        return feature_width(split_feature_set(self.predictor)[1])

    @property
    def slot_inputs(self) -> int:
        """Features of one slot token: the env's F plus the predictor's 3 (or 4) when present."""
        return features.slot_width(self.history) + self.predictor_features

    def env_obs_dim(self, n_slots: int) -> int:
        """D of the plain env observation with K = ``n_slots`` (no predictor features)."""
        return features.obs_dim(n_slots, self.history)

    def obs_dim(self, n_slots: int) -> int:
        """D of the observation this model reads (env observation plus predictor features, if any)."""
        return self.env_obs_dim(n_slots) + self.predictor_features * n_slots

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> MATConfig:
        """Rebuild a config, raising ValueError on missing or unknown keys and bad values."""
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or set(data) != names:
            found = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"MAT config keys {found} do not match the expected {sorted(names)}")
        return cls(**data)


class Tokens(NamedTuple):
    """A batch of parsed observations (what the rollout buffer stores)."""

    nodes: torch.Tensor  # (B, N, NODE_INPUTS) float32
    slots: torch.Tensor  # (B, K, slot_inputs) float32 (node 0's copy: every node sees the same table)
    last: torch.Tensor  # (B, N) int64 slot served last step, -1 when idle


def observation_tokens(observation: np.ndarray | torch.Tensor, n_slots: int, config: MATConfig,
                      predictions: np.ndarray | None = None) -> Tokens:
    """Split (B, N, D) observations into :class:`Tokens`; ValueError if D does not fit the layout.

    ``predictions``: (B, 3K) predictor features of *plain* env observations, for a model that reads them
    (the acting agent computes them itself); without it, they follow the env part of each observation.
    """
    obs = observation.numpy(force=True) if torch.is_tensor(observation) else observation  # parsed in numpy: cheaper
    obs = np.asarray(obs, dtype=np.float32)
    if obs.ndim != 3:
        raise ValueError(f"observation must have shape (B, N, D), got {tuple(obs.shape)}")
    B, _, D = obs.shape
    expected = config.obs_dim(n_slots) if predictions is None else config.env_obs_dim(n_slots)
    if D != expected:
        what = f"{config.predictor!r} predictor features" if config.predictor and predictions is None else "no predictor features"
        raise ValueError(f"observation length D={D} does not fit this MAT model's layout: K={n_slots} slots, history "
                         f"H={config.history}, {what} -> D={expected}")
    width = config.predictor_features
    if predictions is not None and (not config.predictor or np.shape(predictions) != (B, width * n_slots)):
        raise ValueError(f"predictions must be (B, {width}K) = {(B, width * n_slots)} features for a model that reads them "
                         f"(this one reads {config.predictor!r}), got {np.shape(predictions)}")
    parsed = parse_env_observation(obs, n_slots, config.history)
    if config.predictor:
        extra = parsed.extra if predictions is None else np.asarray(predictions, dtype=np.float32).reshape(B, n_slots, width)
        table = np.concatenate([parsed.slots, extra], axis=2)
    else:
        table = parsed.slots.copy()  # tokens never share memory with the caller's observation
    last = parsed.last_slot
    # Node token: the node features with "slot served last step" replaced by "idle last step", then the global ones.
    nodes = np.concatenate([parsed.nodes, np.broadcast_to(parsed.global_[:, None], (B, parsed.n_nodes, features.GLOBAL_FEATURES))], axis=2)
    nodes[..., _LAST_SLOT] = last < 0
    return Tokens(torch.from_numpy(nodes), torch.from_numpy(table), torch.from_numpy(last))


def autoregressive_masks(env_mask: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """(B, N, K+1) the masks node-by-node decoding applies for ``actions`` (B, N): node i may not take a
    task an earlier node took; idle is always allowed."""
    taken = F.one_hot(actions[:, :-1], env_mask.shape[2]).cumsum(1) > 0  # (B, N-1, K+1) taken by nodes 0..i
    taken[..., 0] = False
    masks = env_mask.clone()
    masks[..., 0] = True
    masks[:, 1:] &= ~taken
    return masks


def take(scores: np.ndarray, allowed: np.ndarray, free: np.ndarray) -> np.ndarray:
    """(B,) the highest-scoring action (scores (B, K+1)) that is allowed and still free (ties: the lowest index, as
    in torch); marks it taken in ``free`` (idle stays free). In numpy: a handful of operations on tiny arrays."""
    a = np.where(allowed & free, scores, -np.inf).argmax(1)
    free[np.arange(a.size), a] = False
    free[:, 0] = True
    return a


def choose_in_order(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """(B, N) int64: node by node, the highest-scoring allowed action (B, N, K+1) that no earlier node took."""
    s, permitted = scores.numpy(force=True), allowed.numpy(force=True)
    free = np.ones(permitted[:, 0].shape, bool)
    actions = np.stack([take(s[:, i], permitted[:, i], free) for i in range(s.shape[1])], axis=1)
    return torch.from_numpy(actions).to(scores.device)


class Attention(nn.Module):
    """Multi-head scaled dot-product attention with separate query and key/value inputs."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.kv, self.out = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        """(B, L, d) -> (B, heads, L, d / heads)."""
        B, L, d = t.shape
        return t.view(B, L, self.heads, d // self.heads).transpose(1, 2)

    def keys_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected, split keys and values of ``memory`` (B, L, d)."""
        B, L, _ = memory.shape
        kv = linear(self.kv, memory).view(B, L, 2, self.heads, -1).permute(2, 0, 3, 1, 4)  # (2, B, heads, L, d / heads)
        return kv[0], kv[1]

    def attend(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x (B, Lq, d) attends to projected keys/values; mask broadcastable to (B, 1, Lq, Lk), True = attend."""
        B, Lq, d = x.shape
        y = F.scaled_dot_product_attention(self.split(linear(self.q, x)), keys, values, attn_mask=mask)
        return linear(self.out, y.transpose(1, 2).reshape(B, Lq, d))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.attend(x, *self.keys_values(memory), mask)


class MLP(nn.Sequential):
    """Linear, ReLU, Linear (an nn.Sequential: the state-dict keys are those of one), applied functionally."""

    def __init__(self, d_in: int, d: int, d_out: int) -> None:
        super().__init__(nn.Linear(d_in, d), nn.ReLU(), nn.Linear(d, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = self._modules
        return linear(layers["2"], torch.relu(linear(layers["0"], x)))


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.mlp = MLP(d, 2 * d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = norm(self.ln1, x)
        x = x + self.attn.forward(y, y, mask)
        return x + self.mlp.forward(norm(self.ln2, x))


class DecoderLayer(nn.Module):
    """Causal self-attention over nodes, cross-attention to the encoded slots, MLP (pre-LN).

    :meth:`forward` runs all nodes at once (teacher forcing); :meth:`step` runs one node with a cache of
    the earlier nodes' keys and values (node-by-node decoding). Both compute the same function.
    """

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn, self.cross_attn = Attention(d, heads), Attention(d, heads)
        self.mlp = MLP(d, 2 * d, d)

    def forward(self, x: torch.Tensor, causal: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor], memory_mask: torch.Tensor) -> torch.Tensor:
        y = norm(self.ln1, x)
        x = x + self.self_attn.forward(y, y, causal)
        x = x + self.cross_attn.attend(norm(self.ln2, x), *memory, memory_mask)
        return x + self.mlp.forward(norm(self.ln3, x))

    def step(self, x: torch.Tensor, cache: list[torch.Tensor | None], memory: tuple[torch.Tensor, torch.Tensor], memory_mask: torch.Tensor) -> torch.Tensor:
        """One node x (B, 1, d); ``cache`` = [keys, values] of the earlier nodes (None at first), extended in place."""
        y = norm(self.ln1, x)
        k, v = self.self_attn.keys_values(y)
        if cache[0] is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        cache[0], cache[1] = k, v
        x = x + self.self_attn.attend(y, k, v, None)
        x = x + self.cross_attn.attend(norm(self.ln2, x), *memory, memory_mask)
        return x + self.mlp.forward(norm(self.ln3, x))


class Encoded(NamedTuple):
    """Encoder outputs reused by every decoder pass of one decision."""

    nodes: torch.Tensor  # (B, N, d) node tokens
    memory: list[tuple[torch.Tensor, torch.Tensor]]  # per decoder layer: cross-attention keys/values of [slots, null]
    memory_mask: torch.Tensor  # (B, 1, 1, K + 1) True = attend (present slots and the null token)
    keys: torch.Tensor  # (B, d, K + 1) pointer keys of [idle, slot 0 .. slot K-1], transposed and scaled by 1/sqrt(d)
    actions: torch.Tensor  # (B, K + 2, d) decoder inputs: [start, idle, slot 0 .. slot K-1]


class MATModel(nn.Module):
    """Encoder, autoregressive pointer decoder and per-node value head (see the module docstring)."""

    def __init__(self, config: MATConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        d, heads = config.d_model, config.n_heads
        with torch.random.fork_rng(devices=[]):  # seeded initialization; the global RNG is left as it was
            torch.manual_seed(seed)
            self.node_in = MLP(NODE_INPUTS, d, d)
            self.slot_in = MLP(config.slot_inputs, d, d)
            self.last_slot = nn.Linear(d, d, bias=False)
            self.type_embedding = nn.Parameter(torch.zeros(2, d))  # node, slot
            self.encoder = nn.ModuleList(EncoderLayer(d, heads) for _ in range(config.enc_layers))
            self.enc_norm = nn.LayerNorm(d)
            self.value_head = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.LayerNorm(d), nn.Linear(d, 1))
            self.start = nn.Parameter(torch.zeros(d))
            self.idle_action = nn.Parameter(torch.zeros(d))
            self.null_slot = nn.Parameter(torch.zeros(d))
            self.action_in = nn.Linear(d, d, bias=False)
            self.decoder = nn.ModuleList(DecoderLayer(d, heads) for _ in range(config.dec_layers))
            self.dec_norm = nn.LayerNorm(d)
            self.query = nn.Linear(d, d, bias=False)
            self.key = nn.Linear(d, d, bias=False)
            self.idle_key = nn.Parameter(torch.zeros(d))  # the pointer key of the idle action
            self._initialize()

    def _initialize(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.orthogonal_(module.weight, gain=math.sqrt(2))
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for p in (self.type_embedding, self.start, self.idle_action, self.null_slot):
            nn.init.normal_(p, std=0.02)
        nn.init.normal_(self.idle_key, std=1.0)
        # Near-uniform initial policy (MAT: gain 0.01 on the action head), unit-gain value output.
        nn.init.orthogonal_(self.query.weight, gain=0.01)
        nn.init.orthogonal_(self.value_head[-1].weight, gain=1.0)

    # ------------------------------------------------------------------ encoder
    def encode(self, tokens: Tokens) -> Encoded:
        nodes, slots, last = tokens
        B, N, _ = nodes.shape
        present = slots[..., features.PRESENT] > 0.5  # (B, K)
        s = self.slot_in.forward(slots) + self.type_embedding[1]
        # Pointer to the slot each node served last step (no weight depends on K).
        served = torch.gather(s, 1, last.clamp(min=0).unsqueeze(-1).expand(B, N, s.shape[2]))
        n = self.node_in.forward(nodes) + self.type_embedding[0] + linear(self.last_slot, served) * (last >= 0).unsqueeze(-1)
        x = torch.cat([n, s], dim=1)
        mask = F.pad(present, (N, 0), value=True)[:, None, None, :]  # keys only: every node, the present slots
        for layer in self.encoder:
            x = layer.forward(x, mask)
        x = norm(self.enc_norm, x)
        node_rep, slot_rep = x[:, :N], x[:, N:]
        slots_and_null = torch.cat([slot_rep, self.null_slot.expand(B, 1, -1)], dim=1)
        memory = [layer.cross_attn.keys_values(slots_and_null) for layer in self.decoder]
        memory_mask = F.pad(present, (0, 1), value=True)[:, None, None, :]
        actions = torch.cat([self.start.expand(B, 1, -1), self.idle_action.expand(B, 1, -1), linear(self.action_in, slot_rep)], dim=1)
        keys = torch.cat([self.idle_key.expand(B, 1, -1), linear(self.key, slot_rep)], dim=1).transpose(1, 2) / math.sqrt(x.shape[2])
        return Encoded(node_rep, memory, memory_mask, keys, actions)

    def _values(self, enc: Encoded) -> torch.Tensor:
        """(B, N) per-node values (normalized units) from the encoded node tokens."""
        head = self.value_head._modules  # Linear, ReLU, LayerNorm, Linear
        return linear(head["3"], norm(head["2"], torch.relu(linear(head["0"], enc.nodes)))).squeeze(-1)

    # ------------------------------------------------------------------ decoder
    def _logits(self, enc: Encoded, x: torch.Tensor) -> torch.Tensor:
        """(B, L, K + 1) pointer logits (idle first) from decoder outputs x (B, L, d)."""
        return torch.matmul(linear(self.query, norm(self.dec_norm, x)), enc.keys)

    def _decode(self, enc: Encoded, inputs: torch.Tensor) -> torch.Tensor:
        """(B, N, K + 1) logits of every node given decoder input indices (B, N) into ``enc.actions``."""
        B, L = inputs.shape
        x = enc.nodes[:, :L] + torch.gather(enc.actions, 1, inputs.unsqueeze(-1).expand(B, L, enc.actions.shape[2]))
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        for layer, memory in zip(self.decoder, enc.memory):
            x = layer.forward(x, causal, memory, enc.memory_mask)
        return self._logits(enc, x)

    @staticmethod
    def _shifted(actions: torch.Tensor) -> torch.Tensor:
        """Decoder input indices: start (0) for node 0, then 1 + previous node's action (1 = idle)."""
        start = torch.zeros(actions.shape[0], 1, dtype=torch.long)
        return torch.cat([start, actions[:, :-1] + 1], dim=1)

    def act(self, tokens: Tokens, env_mask: torch.Tensor, deterministic: bool = False,
            generator: torch.Generator | None = None, decoding: str = "auto") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One joint decision, node by node in the fixed order 0..N-1.

        Args:
            tokens: parsed observations.
            env_mask: (B, N, K + 1) bool env action masks (column 0, idle, is always allowed).
            deterministic: argmax instead of sampling.
            generator: torch generator for sampling (one draw of (B, N, K + 1) uniforms per decision).
            decoding: ``"node-by-node"`` (N decoder steps with cached keys and values; best for batches),
                ``"fixed-point"`` (see the module docstring; best for one environment, where the latency
                matters) or ``"auto"`` (fixed-point when B = 1). Both give the same actions.

        Returns:
            actions (B, N) int64, their log-probs (B, N), the masks applied (B, N, K + 1) bool and the
            per-node values (B, N).
        """
        enc = self.encode(tokens)
        allowed, logits, actions = self._decide(enc, tokens.last, env_mask, deterministic, generator, decoding)
        masks = autoregressive_masks(allowed, actions)
        logp = torch.log_softmax(logits.masked_fill_(~masks, _MASKED), dim=-1).gather(2, actions.unsqueeze(-1)).squeeze(-1)
        return actions, logp, masks, self._values(enc)

    def decide(self, tokens: Tokens, env_mask: torch.Tensor, deterministic: bool = False,
               generator: torch.Generator | None = None, decoding: str = "auto") -> torch.Tensor:
        """The actions (B, N) of :meth:`act` alone (no log-probs, masks or values): the path of an acting agent."""
        return self._decide(self.encode(tokens), tokens.last, env_mask, deterministic, generator, decoding)[2]

    def _decide(self, enc: Encoded, last: torch.Tensor, env_mask: torch.Tensor, deterministic: bool,
                generator: torch.Generator | None, decoding: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The env masks with idle allowed (B, N, K + 1), the logits of the decision (B, N, K + 1) and the actions (B, N)."""
        if decoding not in DECODINGS:
            raise ValueError(f"unknown decoding {decoding!r}; expected one of {list(DECODINGS)}")
        B, N, K1 = env_mask.shape
        allowed = env_mask.clone()
        allowed[..., 0] = True
        noise = None
        if not deterministic:  # Gumbel-max: argmax(logits + Gumbel noise) is an exact categorical sample
            u = torch.rand(B, N, K1, generator=generator).clamp_(min=1e-20)
            noise = -torch.log(-torch.log(u))
        if decoding == "fixed-point" or (decoding == "auto" and B == 1):
            return allowed, *self._fixed_point(enc, allowed, noise, (last + 1).clamp(min=0))
        return allowed, *self._node_by_node(enc, allowed, noise)

    def _node_by_node(self, enc: Encoded, allowed: torch.Tensor, noise: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N, K + 1) logits and (B, N) actions, one decoder step per node (cached keys and values)."""
        B, N, K1 = allowed.shape
        d = enc.nodes.shape[2]
        permitted = allowed.numpy(force=True)
        free = np.ones((B, K1), bool)  # not chosen by an earlier node (idle stays free)
        logits = torch.empty(B, N, K1)
        actions = torch.empty(B, N, dtype=torch.long)
        caches: list[list[torch.Tensor | None]] = [[None, None] for _ in self.decoder]
        previous = torch.zeros(B, 1, 1, dtype=torch.long).expand(B, 1, d)  # decoder input: the start token
        for i in range(N):
            x = enc.nodes[:, i : i + 1] + torch.gather(enc.actions, 1, previous)
            for layer, cache, memory in zip(self.decoder, caches, enc.memory):
                x = layer.step(x, cache, memory, enc.memory_mask)
            logits[:, i] = self._logits(enc, x)[:, 0]
            scores = logits[:, i] if noise is None else logits[:, i] + noise[:, i]
            actions[:, i] = torch.from_numpy(take(scores.numpy(force=True), permitted[:, i], free))
            previous = (actions[:, i] + 1).view(B, 1, 1).expand(B, 1, d)
        return logits, actions

    def _fixed_point(self, enc: Encoded, allowed: torch.Tensor, noise: torch.Tensor | None,
                     guess: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N, K + 1) logits and (B, N) actions by fixed-point decoding from the joint action ``guess``."""
        for _ in range(allowed.shape[1]):
            logits = self._decode(enc, self._shifted(guess))
            actions = choose_in_order(logits if noise is None else logits + noise, allowed)
            if torch.equal(actions[:, :-1], guess[:, :-1]):  # every node was decoded after its predecessors' actual choices
                break
            guess = actions
        return logits, actions

    def evaluate_actions(self, tokens: Tokens, masks: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Teacher-forced pass: log-probs (B, N) of ``actions`` under the applied ``masks``, entropies (B, N), values (B, N)."""
        enc = self.encode(tokens)
        logits = self._decode(enc, self._shifted(actions)).masked_fill(~masks, _MASKED)
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(2, actions.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy, self._values(enc)

    def values(self, tokens: Tokens) -> torch.Tensor:
        """(B, N) per-node values (normalized units)."""
        return self._values(self.encode(tokens))

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())
