r"""# `discrete_core_v0`: deadline-constrained discrete-node CoRE-Learning

| | |
|---|---|
| Import | `from core_env import discrete_core_v0` · `gym.make("core_env:core_env/DiscreteCoRE-v0")` |
| Parallel API | yes (`parallel_env()`), AEC via `env()` / `raw_env()` |
| Agents | `node_0 … node_{N-1}` (N = `n_nodes`, default 4), fixed for the episode |
| Action space (per node) | `Discrete(K + 1)`: 0 = idle, k = train the task in slot k − 1 |
| Observation space (per node) | `Dict(observation=Box(float32, (D,)), action_mask=Box(0, 1, (K + 1,), int8))` |
| State space | `Box(float32, (3 + K·F,))` |
| D | 6 + K·F with F = 8 + H (K = 16, H = 8: D = 262) |

Learning tasks arrive over time. Each task must reach a target loss before its deadline; how much
training it needs (its *demand*) is hidden and only revealed through the losses it reports while it is
trained. Each node trains at most one task per step and no task runs on two nodes in one step. The
objective is the fraction of arrived tasks that complete.

All views (PettingZoo, Gymnasium, batched) run on one simulator, `core_env/sim.py`; randomness comes
only from the seeded workload generator, `core_env/workload.py`.

## Example

```python
from core_env import discrete_core_v0

env = discrete_core_v0.parallel_env(n_nodes=4, n_slots=16, task_set="id", load="train")
observations, infos = env.reset(seed=0)
while env.agents:
    actions = {a: env.action_space(a).sample(observations[a]["action_mask"]) for a in env.agents}
    observations, rewards, terminations, truncations, infos = env.step(actions)
print(infos["node_0"]["completion_rate"])
```

This page is also the docstring of `core_env.discrete_core_v0` (PettingZoo's convention; a test keeps
the two identical).

## A step

1. **Actions.** Each node chooses 0 (idle) or k (the task in slot k − 1). If several nodes choose one
   task, the lowest-index node trains it and the others idle (`conflict` = 1 in their infos). Choosing an
   empty (masked) slot is treated as idle (`invalid_action` = 1), or raises `ValueError` with
   `strict=True`. An action outside `[0, K]`, a non-integer (float, bool) action, or a missing or
   unknown agent raises `ValueError`/`TypeError` naming the agent; the state is left unchanged.
2. **Service.** A served task trains `batches_per_step × speed` batches (node speeds default to 1.0).
   With switching cost `c`, a task served by a different node than at its previous service, or resumed
   after a step without service, loses the first `c` fraction of that step's batches (its first service
   is not a switch). Fractional batches accumulate exactly. The task reports one loss: the mean of its
   hidden curve over the newly trained batches (an interval average). Past the end of its recorded
   curve the loss stays at the mean of the curve's last window (a plateau).
3. **Completion.** A served task whose reported loss is ≤ its target completes: +1 team reward, slot freed.
4. **Deadline.** A task still active when t + 1 reaches its deadline fails and leaves.
5. **Arrivals.** While t < T_arrive (`arrival_steps`, default 500) a task arrives with probability p
   (the load). It takes the lowest free slot; with every slot full it is *rejected* (counted as arrived
   and not completed).
6. **Episode end.** After the arrival window, once no task is active, the episode **terminates** (a
   true terminal state: nothing is left to decide). `max_cycles` (default 5000) **truncates** as a safety
   net only. All nodes terminate/truncate together; `agents` becomes `[]`.

Timing convention: a task with arrival step `a` is in a slot (servable) from the start of step `a`; with
deadline `d` it may be served in steps `a … d − 1`. Its window is `d − a` node-steps; it is
*independently feasible* iff its nominal demand (node-steps at speed 1 served every step) fits its window.

## Observation (per node)

`observation` is float32 of length D, scaled to roughly unit range and clipped to ±1000:

| part | features |
|---|---|
| node (3) | node index / (N − 1) (0 when N = 1), speed, slot served last step as (k + 1)/K (0 = idle) |
| global (3) | t / T_arrive, arrival window left (max(T_arrive − t, 0) / T_arrive), active tasks / K |
| each slot (F = 8 + H) | present, age / 100, steps to deadline / 100, node-steps received / 100, last reported log loss, log target, log-loss gap (last − target), the last H reported log losses (most recent first, zero-padded), served-last-step flag |

Feature positions are named in `core_env.features` (`SLOT_FEATURES`, `AGE`, `STEPS_TO_DEADLINE`,
`LAST_LOG_LOSS`, `HISTORY_START`, `SERVED_LAST`, `SLOT_TABLE_START`, `slot_feature_names(H)`), so agents
never hard-code offsets. Empty slots are all zeros; loss features are 0 before a task's first report. Nothing hidden (demand,
future curve) is encoded. `action_mask` (int8): `mask[0] = 1` always; `mask[k] = 1` iff slot k − 1
holds an active task. `state()` is the global features plus the slot table.

**Full histories.** Fixed-size observations hold only the last H losses. The unwrapped parallel env
exposes `reported_history(slot)` (every loss the slot's task has reported, oldest first, a copy) and
`slot_task(slot)` (the task's index in the episode's workload, -1 if empty) for observation wrappers and
predictors.

## Rewards

Team reward, identical for every node (`reward=`):

- `"sparse"`: tasks completed this step.
- `"shaped"` (default): r' = r + Φ(s') − Φ(s) with Φ(s) = κ Σ_active φ_k,
  φ_k = clip(log(l0_k / l_k) / log(l0_k / eps_k), 0, 1) (l0 = first reported loss, l = latest,
  eps = target; φ = 0 before the first report and after the task leaves). κ = `kappa` (default 0.5).
  Episodes terminate with no active task, so Φ = 0 at both ends and the undiscounted shaped return
  equals the number of completions exactly (tested on many random episodes).

## Infos

Every node's info has the same keys at reset and at every step (numbers, deterministic):
`conflict`, `invalid_action` (this node, this step) and the running episode statistics `arrived`,
`completed`, `failed` (deadline failures), `rejected`, `completion_rate` (completed / arrived),
`active`, `node_utilization`, `busy_node_steps`, `wasted_node_steps` (node-steps spent on tasks that
later failed), `switches`, `conflicts`, `invalid_actions`, `t`. At the final step they are the episode
totals. Invariant: completed + failed + rejected + active = arrived.

## Arguments

The same keyword names in every view (validated by `core_env.config.EnvConfig`, clear errors):

| argument | default | meaning |
|---|---|---|
| `n_nodes` | 4 | N nodes (agents), 1–256 |
| `n_slots` | 16 | K visible task slots, 1–1024 |
| `arrival_steps` | 500 | arrival window T_arrive |
| `load` | `"train"` | `"train"`, `"x1.25"`, `"x1.5"`, `"x2"` or an arrival probability in (0, 1] |
| `task_set` | `"id"` | `"id"`, `"rl_ood"`, `"vit_ood"`, `"stress"` or a custom `CurveBank` |
| `curve_source` | `"corpus"` | curves of seeded workloads: `"corpus"` (real training runs) or `"prior"` (parametric prior fitted to the corpus); suites always replay corpus curves |
| `reward` | `"shaped"` | `"shaped"` or `"sparse"` |
| `kappa` | 0.5 | potential weight |
| `history` | 8 | H losses per slot in the observation |
| `node_speeds` | None | per-node speed multipliers (length N, > 0) |
| `switch_cost` | 0.0 | fraction of a step's batches lost on a switch, in [0, 1) |
| `strict` | False | raise on invalid (masked) choices instead of idling |
| `max_cycles` | 5000 | truncation cap; assignable (`env.max_cycles = …`) |
| `render_mode` | None | `"ansi"`, `"rgb_array"` (needs matplotlib) or `"human"` (prints ansi) |

## Workloads and seeds

- `reset(seed=s)` draws a workload from `numpy.random.default_rng(s)` on the task set's **train** curves.
- `reset(options={"suite": "eval", "task_set": "id", "load": "train", "root": r, "episode": e})` replays
  a pre-generated evaluation workload (5 roots × 4 episodes per task set and load, **eval** curves,
  committed under `core_env/data/suites/` with sha256 checksums; regenerate with
  `python -m core_env.suites`, which reproduces the files byte for byte).
- `reset(options={"workload": w})` replays any `core_env.workload.Workload`.
- Unknown option keys give a warning, not an error (PettingZoo's tests pass `{"options": 1}`).

Same workload + same actions ⇒ identical observations, rewards and infos, across processes.

**Task recipe** (per task, `core_env.workload.TaskRecipe`): a curve drawn from the bank; difficulty
q ~ U(0.25, 0.9) sets the target to the smoothed curve at q of its length; a nominal demand D ~
log-U(6, 40) node-steps sets batches per step to q·L / D; the exact demand n* is computed from the
reported (interval-averaged) losses; the deadline is a + ⌈slack · n*⌉ with slack ~ U(1, 3), except 15%
tight tasks with slack ~ U(0.5, 1) (infeasible by construction). Non-learner curves get a target well
below their level (infeasible by nature).

**Loads.** Bernoulli arrival probabilities: `train` 0.30, `x1.25` 0.375, `x1.5` 0.45, `x2` 0.60.
The training load is calibrated on `id` so that EDF completes far below the independent-feasibility
bound (51.0% vs 83.3%: headroom for learning-aware schedulers); heavier loads lower everyone. The
calibration table is in docs/curves.md (`python -m benchmarks calibration`).

**Curves.** `id`, `rl_ood` and `vit_ood` train on real training curves from the committed corpus
(docs/curves.md): `id` = MLPs on scikit-learn datasets, 1-D CNNs on MNIST-1D and character-level
language models; `vit_ood` = tiny vision transformers; `rl_ood` = actor-critic on CartPole and Acrobot
(loss = 1 − normalized return). Evaluation suites use the eval split, seeded workloads the train split
(disjoint runs). `curve_source="prior"` draws seeded workloads from the parametric prior fitted per
family to the corpus instead.

**Stress.** `task_set="stress"`: a deterministic constructed scenario (N = 4: 13 feasible tasks with
slack exactly 1 and 7 never-finishing decoys that arrive earlier and have earlier deadlines) where FIFO
and EDF complete 0%, while the independent-feasibility bound and a clairvoyant scheduler reach 65%.
See `core_env.workload.stress_workload`.

## Gymnasium view

`gym.make("core_env/DiscreteCoRE-v0", **kwargs)` (registered on `import core_env`;
`gym.make("core_env:core_env/DiscreteCoRE-v0")` needs no import). Centralized: observation
`{"observation": (N, D) float32, "action_mask": (N, K + 1) int8}`, action `MultiDiscrete([K + 1] * N)`,
scalar team reward, info = the statistics above with `conflict`/`invalid_action` as (N,) arrays, and
`action_masks()` returning the flat boolean mask of length N·(K + 1) (sb3-contrib convention).

## Version history

- v0 (2026-11): initial release.
"""

from __future__ import annotations

from typing import Any

from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import parallel_to_aec

from core_env.parallel import DiscreteCoREParallelEnv


def parallel_env(**kwargs: Any) -> DiscreteCoREParallelEnv:
    """The ParallelEnv (keyword arguments: see core_env.config.EnvConfig)."""
    return DiscreteCoREParallelEnv(**kwargs)


def raw_env(**kwargs: Any):
    """The AEC form, converted from the parallel env."""
    return parallel_to_aec(parallel_env(**kwargs))


def env(**kwargs: Any):
    """The AEC form with PettingZoo's order-enforcing wrapper."""
    return wrappers.OrderEnforcingWrapper(raw_env(**kwargs))


__all__ = ["env", "parallel_env", "raw_env"]
