r"""# `discrete_core_v1`: deadline-constrained discrete-node CoRE-Learning

| | |
|---|---|
| Import | `from core_env import discrete_core_v1` · `gym.make("core_env:core_env/DiscreteCoRE-v1")` |
| Parallel API | yes (`parallel_env()`), AEC via `env()` / `raw_env()` |
| Agents | `node_0 … node_{N-1}` (N = `n_nodes`, default 4), fixed for the episode |
| Action space (per node) | `Discrete(K + 1)`: 0 = idle, k = train the task in slot k − 1 |
| Observation space (per node) | `Dict(observation=Box(float32, (D,)), action_mask=Box(0, 1, (K + 1,), int8))` |
| State space | `Box(float32, (3 + K·F,))` |
| D | 6 + K·F with F = 8 + H (K = 16, H = 8: D = 262) |

CoRE-Learning is *Computational Resource Efficient Learning* (Z.-H. Zhou, "Learnability with Time-Sharing
Computational Resource Concerns", arXiv:2305.02217, 2023; National Science Review, 2024): learning tasks
time-share limited computational resources, and how much they learn depends on how a scheduler allocates
them. This env is its deadline-constrained setting on discrete compute nodes.

Learning tasks arrive over time. Each task must reach a target loss before its deadline; how much
training it needs (its *demand*) is hidden and only revealed through the losses it reports while it is
trained. Each node trains at most one task per step and no task runs on two nodes in one step. The
objective is the fraction of arrived tasks that complete.

This page is the docstring of `core_env.discrete_core_v1` (PettingZoo's convention; a test keeps the two
identical). More: [Workloads](workloads.md) (recipe, suites, your own curves, traces, ceilings, glossary),
[Views and wrappers](views.md) and [Engine](engine.md) (how a step runs, task sources, live training, speed).

## Example

```python
from core_env import discrete_core_v1

env = discrete_core_v1.parallel_env(n_nodes=4, n_slots=16, task_set="id", load="train")
observations, infos = env.reset(seed=0)
while env.agents:
    actions = {a: env.action_space(a).sample(observations[a]["action_mask"]) for a in env.agents}
    observations, rewards, terminations, truncations, infos = env.step(actions)
print(infos["node_0"]["completion_rate"])
```

## A step

1. **Actions.** Each node chooses 0 (idle) or k (the task in slot k − 1). If several nodes choose one
   task, the lowest-index node trains it and the others idle (`conflict` = 1 in their infos). Choosing an
   empty (masked) slot is treated as idle (`invalid_action` = 1), or raises `ValueError` with
   `strict=True`. An action outside `[0, K]`, a non-integer action, or a missing or unknown agent raises
   `ValueError`/`TypeError` naming the agent (AEC: at its own `step()`) and changes nothing.
2. **Service.** A served task trains `batches_per_step × speed` batches (fractions accumulate). With
   switching cost `c`, a task served by another node than at its previous service, or resumed after an
   unserved step, loses the first `c` fraction of them (a first service is no switch). It reports one
   loss: the mean of its hidden curve over the new batches (past the curve's end, its last window's mean).
3. **Completion.** A served task whose reported loss is ≤ its target completes: +1 team reward, slot freed.
4. **Deadline.** A task still active when t + 1 reaches its deadline fails and leaves.
5. **Arrivals.** While t < T_arrive (`arrival_steps`) each node's users submit a task with probability
   `load`. Each takes the lowest free slot; with every slot full it is *rejected* (arrived, not completed).
6. **Episode end.** After the arrival window, once no task is active, the episode **terminates**;
   `max_cycles` **truncates** as a safety net. All nodes end together; `agents` becomes `[]`.

A task with arrival step `a` and deadline `d` is in a slot from the start of step `a` and may be served in
steps `a … d − 1`; its window is `d − a` node-steps.

## Observation (per node)

`observation` is float32 of length D, scaled to roughly unit range and clipped to ±1000:

| part | features |
|---|---|
| node (3) | node index / (N − 1) (0 when N = 1), speed, slot served last step as (k + 1)/K (0 = idle) |
| global (3) | t / T_arrive, arrival window left (max(T_arrive − t, 0) / T_arrive), active tasks / K |
| each slot (F = 8 + H) | present, age / 100, steps to deadline / 100, node-steps received / 100, last reported log loss, log target, log-loss gap (last − target), the last H reported log losses (most recent first, zero-padded), served-last-step flag |

Positions are named in `core_env.features`, and `core_env.observation.parse_observation(observation,
n_slots)` splits observations into named fields (more: [Views and wrappers](views.md)). Empty slots are
zeros; loss features are 0 before a task's first report; nothing hidden (demand, future curve) is
encoded. `action_mask`: `mask[0] = 1`; `mask[k] = 1` iff slot k − 1 holds an active task. `state()` is
the global features plus the slot table.

## Rewards

A team reward, identical for every node (`reward=`). `"sparse"`: tasks completed this step. `"shaped"`
(default): r' = r + Φ(s') − Φ(s) with Φ(s) = κ Σ_active φ_k, φ_k = clip(log(l0_k / l_k) / log(l0_k /
eps_k), 0, 1) (l0 = first reported loss, l = latest, eps = target; φ = 0 before the first report and
after the task leaves), κ = `kappa` (default 0.5). A terminated episode's undiscounted shaped return
equals its completions; a truncated one adds Φ(s_T). Every info reports Φ(s) as `potential`, so the
return so far is `completed` + `potential`.

## Infos

Every node's info has the same keys at reset and every step: `conflict`, `invalid_action` (this node,
this step), `potential` and the running episode statistics `arrived`, `completed`, `failed` (deadline
failures), `rejected`, `completion_rate` (completed / arrived), `active`, `node_utilization`,
`busy_node_steps`, `wasted_node_steps` (node-steps spent on tasks that later failed), `switches`,
`conflicts`, `invalid_actions`, `t`. Invariant: completed + failed + rejected + active = arrived.

## Arguments

The same keyword names in every view, validated by `core_env.config.EnvConfig`:

| argument | default | meaning |
|---|---|---|
| `n_nodes` | 4 | N nodes (agents), 1–256 |
| `n_slots` | 16 | K visible task slots, 1–1024 |
| `arrival_steps` | 500 | arrival window T_arrive |
| `load` | `"train"` | `"train"`, `"x1.25"`, `"x1.5"`, `"x2"` or an arrival intensity per node and step in (0, 1] |
| `task_set` | `"id"` | `"id"`, `"rl_ood"`, `"vit_ood"`, `"stress"`, a custom `CurveBank`, or the path of a bank file of your own curves |
| `curve_source` | `"corpus"` | curves of seeded workloads: `"corpus"` (real training runs) or `"prior"` (parametric prior fitted to the corpus) |
| `recipe` | the v1 recipe | how seeded workloads draw targets, rates and deadlines: a `core_env.recipe.TaskRecipe` or a dict of its fields |
| `reward` | `"shaped"` | `"shaped"` or `"sparse"` |
| `kappa` | 0.5 | potential weight, in [0, 100] |
| `history` | 8 | H losses per slot in the observation |
| `node_speeds` | None | per-node speed multipliers (length N, each in [1e-3, 1e3]) |
| `switch_cost` | 0.0 | fraction of a step's batches lost on a switch, in [0, 1) |
| `strict` | False | raise on invalid (masked) choices instead of idling |
| `max_cycles` | 5000 | truncation cap; assignable (`env.max_cycles = …`) |
| `render_mode` | None | `"ansi"`, `"rgb_array"` (a 640×480 node × step Gantt chart and loss curves, drawn with numpy) or `"human"` (prints ansi) |

## Workloads and seeds

- `reset(seed=s)` draws a workload from `numpy.random.default_rng(s)` on the task set's **train** curves
  by the config's `recipe` (targets, rates and deadlines from how runs of a task's family usually go).
- `reset(options={"suite": "eval", "task_set": "id", "load": "train", "root": r, "episode": e})` replays
  a committed evaluation workload (10 roots × 4 episodes per task set and load, N = 4, **eval** curves;
  only on that N unless `"any_nodes": True`); `"suite_dir": DIR` or `"suite": "file.npz"` replays suites
  you generated, `{"workload": w}` any `core_env.workload.Workload`. An option that would be ignored is
  refused (ValueError naming it); unknown keys give a warning.
- `task_set="stress"`: a constructed scenario where FIFO and EDF complete 0%, clairvoyant 65%.

Same workload + same actions ⇒ identical trajectories, across processes. Recipe, loads, suites,
ceilings, your own curves, traces: [Workloads](workloads.md).

## Vector env

`gym.make("core_env/DiscreteCoRE-v1")` is the centralized Gymnasium view (`MultiDiscrete` action,
`action_masks()`); `gym.make_vec(..., num_envs=B, vectorization_mode="vector_entry_point")` gives
`core_env.vector.DiscreteCoREVectorEnv`, B environments in one object, env i seeded `s` playing what a
single env seeded `s + i` plays. In full: [Views and wrappers](views.md#vector-env).

## Wrappers

`core_env.wrappers` adapts the parallel env to RL libraries: `FlattenObservation`, `MaskToInfo` (the mask
in the infos), `RLlibKeys`, `LongerHistory`, `OracleDemand`, `EpisodeRecorder` with `replay`, `FinalEpisode`
(statistics that survive autoresetting vectorizers). In full: [Views and wrappers](views.md#wrappers).

## Version history

- **v1 (2026-12)**: workloads that hide each task's demand (v0's deadlines gave it away), loads per node,
  a MILP upper bound; spaces and observation layout unchanged. Amended 2026-12-03: a seeded draw covers
  `min(arrival_steps, max_cycles)` steps of arrivals. In full: [Workloads](workloads.md#version-history-in-full).
- v0 (2026-11): initial release, withdrawn; `core_env.discrete_core_v0` and its ids raise an error pointing here.
"""

from __future__ import annotations

from typing import Any

from pettingzoo import AECEnv
from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import parallel_to_aec

from core_env.parallel import DiscreteCoREParallelEnv, scalar_action


class AgentActionCheck(wrappers.BaseWrapper):
    """Checks each agent's action at its own AEC ``step()``, before the action is stored.

    ``parallel_to_aec`` only collects actions and runs the parallel step at the last agent of a round, so
    a bad action of an earlier agent would raise turns later, on another agent, and again at every step
    until reset. Here a live agent's action must be an integer in ``[0, K]`` (``TypeError`` for None or a
    non-integer, ``ValueError`` outside the range, both naming the agent) and, with ``strict=True``, a
    choice the agent's action mask allows; a terminated or truncated agent's action must be None
    (PettingZoo's dead step). A rejected action changes nothing: the same agent steps again.
    """

    def step(self, action: Any) -> None:
        if not self.env.unwrapped.episode.started:
            raise RuntimeError("call reset() before step()")
        agent = self.env.agent_selection
        if self.env.terminations.get(agent, True) or self.env.truncations.get(agent, True):  # a dead step
            if action is not None:
                raise ValueError(f"{agent} is terminated or truncated: its action must be None (a dead step), got {action!r}")
            self.env.step(None)
            return
        config = self.env.unwrapped.config
        if action is None:
            raise TypeError(f"action for {agent} must be an integer in [0, {config.n_slots}], got None "
                            "(None is the action of a terminated or truncated agent only)")
        action = scalar_action(action, agent, config.n_slots)
        if config.strict and not self.env.observe(agent)["action_mask"][action]:
            raise ValueError(f"{agent}: action {action} chose slot {action - 1}, which holds no active task (strict=True)")
        self.env.step(action)

    def __str__(self) -> str:
        return str(self.env)


def parallel_env(**kwargs: Any) -> DiscreteCoREParallelEnv:
    """The ParallelEnv (keyword arguments: see core_env.config.EnvConfig)."""
    return DiscreteCoREParallelEnv(**kwargs)


def raw_env(**kwargs: Any) -> AECEnv:
    """The AEC form: the parallel env converted by ``parallel_to_aec``, each action checked at its own step."""
    return AgentActionCheck(parallel_to_aec(parallel_env(**kwargs)))


def env(**kwargs: Any) -> AECEnv:
    """The AEC form (:func:`raw_env`) with PettingZoo's order-enforcing wrapper."""
    return wrappers.OrderEnforcingWrapper(raw_env(**kwargs))


__all__ = ["AgentActionCheck", "env", "parallel_env", "raw_env"]
