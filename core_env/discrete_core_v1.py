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

All views (PettingZoo, Gymnasium, and the vector env of B environments) run on one `EnvBatch`
(`core_env/vector.py`): the rules of a step are written once, top to bottom in the order of "A step"
below, as small functions compiled by numba (`core_env/rules.py`), on a state whose tables and fields
are declared once by name (`core_env/state.py`) and owned by the simulator (`core_env/sim.py`); the
engine that runs the rules over B environments writes no rule (`core_env/dynamics.py`). Where a served
task's loss comes from is one seam (`core_env/task_source.py`): the curve bank by default, or any
`TaskSource` passed to `Simulator.step`. Randomness comes only from the workload generators
(`core_env/generators.py`: seeded draws, suite replays, the stress scenario, given workloads), the one
place an episode's workload is chosen; every view, trainer and benchmark asks them.

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

This page is also the docstring of `core_env.discrete_core_v1` (PettingZoo's convention; a test keeps
the two identical).

## A step

1. **Actions.** Each node chooses 0 (idle) or k (the task in slot k − 1). If several nodes choose one
   task, the lowest-index node trains it and the others idle (`conflict` = 1 in their infos). Choosing an
   empty (masked) slot is treated as idle (`invalid_action` = 1), or raises `ValueError` with
   `strict=True`. An action outside `[0, K]`, a non-integer (float, bool) action, or a missing or
   unknown agent raises `ValueError`/`TypeError` naming the agent (in the AEC form, at that agent's own
   `step()`; None is only a terminated or truncated agent's action); the state is left unchanged.
2. **Service.** A served task trains `batches_per_step × speed` batches (node speeds default to 1.0).
   With switching cost `c`, a task served by a different node than at its previous service, or resumed
   after a step without service, loses the first `c` fraction of that step's batches (its first service
   is not a switch). Fractional batches accumulate exactly. The task reports one loss: the mean of its
   hidden curve over the newly trained batches (an interval average; see Task sources for other
   sources of the report). Past the end of its recorded
   curve the loss stays at the mean of the curve's last window (a plateau).
3. **Completion.** A served task whose reported loss is ≤ its target completes: +1 team reward, slot freed.
4. **Deadline.** A task still active when t + 1 reaches its deadline fails and leaves.
5. **Arrivals.** While t < T_arrive (`arrival_steps`, default 500) each node's users submit a task
   with probability `load` (an intensity per node), so Binomial(N, load) tasks arrive in a step. Each
   takes the lowest free slot; with every slot full it is *rejected* (counted as arrived and not
   completed).
6. **Episode end.** After the arrival window, once no task is active, the episode **terminates** (a
   true terminal state: nothing is left to decide). `max_cycles` (default 5000) **truncates** as a safety
   net only; a truncated episode may end with tasks in progress (see Rewards for its shaped return). All
   nodes terminate/truncate together; `agents` becomes `[]`.

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

**Parsing observations.** `core_env.observation.parse_observation(observation, n_slots, history=None)`
splits a (B, N, D) or (N, D) observation into a `ParsedObservation` of named fields (views, no copies):
`node_index`, `speed`, `last_slot` (−1 idle) per node; `time`, `arrival_window_left`, `active_share`; the
slot table `slots` (B, K, F) with `present`, `age`, `steps_to_deadline`, `node_steps` (integer steps),
`target`, `log_gap`, `log_losses` (B, K, H), `served_last`, …; `extra` holds columns appended per slot (e.g.
predictor features; pass `history` to separate them). H is inferred from D; a D that does not fit raises
ValueError. `ParsedObservation.from_parts(nodes, global_, slots)` builds the same from the three parts.

```python
obs, _ = env.reset(seed=0)
rows = np.stack([obs[a]["observation"] for a in env.agents])     # (N, D)
parsed = parse_observation(rows, env.unwrapped.config.n_slots)
urgent = parsed.present & (parsed.steps_to_deadline < 10)         # (K,) bool
print(parsed.history, parsed.log_losses[urgent])                  # H, their last H log losses
```

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
  The shaping terms telescope: the undiscounted shaped return is completions + Φ(s_T) − Φ(s_0), and
  Φ(s_0) = 0 (no task has reported at reset). A **terminated** episode ends with no active task, so
  Φ(s_T) = 0 and the return equals the number of completions exactly (tested on many random episodes).
  A **truncated** episode (`max_cycles`) may end with tasks in progress: its return is completions +
  Φ(s_T), the potential those tasks still hold (in [0, κ·K]). Every info reports the current Φ(s) as
  `potential` (0 with `"sparse"`), so the return so far always equals `completed` + `potential` (up to
  float rounding).

## Infos

Every node's info has the same keys at reset and at every step (numbers, deterministic):
`conflict`, `invalid_action` (this node, this step), `potential` (the shaped reward's Φ(s) after the
step, the same for every node; 0 at reset and with `reward="sparse"`) and the running episode
statistics `arrived`, `completed`, `failed` (deadline failures), `rejected`, `completion_rate`
(completed / arrived), `active`, `node_utilization`, `busy_node_steps`, `wasted_node_steps` (node-steps
spent on tasks that later failed), `switches`, `conflicts`, `invalid_actions`, `t`. At the final step
they are the episode totals. Invariant: completed + failed + rejected + active = arrived.

## Arguments

The same keyword names in every view (validated by `core_env.config.EnvConfig`, clear errors):

| argument | default | meaning |
|---|---|---|
| `n_nodes` | 4 | N nodes (agents), 1–256 |
| `n_slots` | 16 | K visible task slots, 1–1024 |
| `arrival_steps` | 500 | arrival window T_arrive |
| `load` | `"train"` | `"train"`, `"x1.25"`, `"x1.5"`, `"x2"` or an arrival intensity per node and step in (0, 1] |
| `task_set` | `"id"` | `"id"`, `"rl_ood"`, `"vit_ood"`, `"stress"`, a custom `CurveBank`, or the path of a bank file of your own curves (Custom curve banks, below) |
| `curve_source` | `"corpus"` | curves of seeded workloads: `"corpus"` (real training runs) or `"prior"` (parametric prior fitted to the corpus); suites always replay corpus curves; a bank file is its own source (`"prior"` is refused) |
| `recipe` | the v1 recipe | the task recipe of seeded workloads: a `core_env.recipe.TaskRecipe` or a dict of its fields (Task recipes, below) |
| `reward` | `"shaped"` | `"shaped"` or `"sparse"` |
| `kappa` | 0.5 | potential weight, in [0, 100] |
| `history` | 8 | H losses per slot in the observation |
| `node_speeds` | None | per-node speed multipliers (length N, each in [1e-3, 1e3]) |
| `switch_cost` | 0.0 | fraction of a step's batches lost on a switch, in [0, 1) |
| `strict` | False | raise on invalid (masked) choices instead of idling |
| `max_cycles` | 5000 | truncation cap; assignable (`env.max_cycles = …`) |
| `render_mode` | None | `"ansi"`, `"rgb_array"` (a 640×480 image drawn with numpy: node × step Gantt chart and loss curves; no extra needed) or `"human"` (prints ansi) |

## Workloads and seeds

- `reset(seed=s)` draws a workload from `numpy.random.default_rng(s)` on the task set's **train** curves,
  by the config's `recipe`.
- `reset(options={"suite": "eval", "task_set": "id", "load": "train", "root": r, "episode": e})` replays
  a pre-generated evaluation workload (10 evaluation roots × 4 episodes per task set and load, for
  N = 4 nodes, on **eval** curves with targets set from the train curves, committed under
  `core_env/data/suites/` with sha256 checksums; regenerate with `python -m core_env.suites`, which
  reproduces the same decoded task tables on any machine).
- `reset(options={"suite": "eval", "suite_dir": DIR, "root": r, "episode": e})` replays a suite you
  generated (`DIR/{task set name}__{load}.npz`, Generated suites below); `reset(options={"suite":
  "path/to/file.npz", "root": r, "episode": e})` replays one suite file. A suite's load is per node,
  so it replays only on the N it was generated for (a ValueError says so); add `"any_nodes": True` to
  replay it on another N on purpose.
- `reset(options={"workload": w})` replays any `core_env.workload.Workload`.
- Unknown option keys give a warning, not an error (PettingZoo's tests pass `{"options": 1}`).
- An option that would be ignored is refused (ValueError naming it), by one check behind every view
  (`core_env.generators.reset_options`): `"workload"` goes alone; `"root"`, `"episode"`, `"task_set"`,
  `"load"`, `"suite_dir"` and `"any_nodes"` need `"suite"` (without it, reset draws a seeded workload);
  `"load"` and `"suite_dir"` need `"suite": "eval"` (a suite file carries its own load). `options` that
  is not a mapping, or a `"suite"` / `"suite_dir"` that is not a path (str or path-like), is a TypeError
  naming it.

Same workload + same actions ⇒ identical observations, rewards and infos, across processes.

**Task recipe (v1)** (per task, `core_env.recipe.TaskRecipe`, documented in `core_env.recipe`). A task
is a training run submitted with a target and a deadline by someone who has not seen this run's curve
but knows how runs of its **family** usually go (the *reference runs*: the task set's train split; for a
custom bank, the bank itself):

1. **curve**: uniform over the bank;
2. **target**: the submitter budgets a share u ~ log-U(0.15, 1) of a typical run and asks for a loss
   that a share q ~ U(0.4, 0.95) of the family's reference runs had reported by then (the q-quantile,
   over reference runs, of the best loss reported within u · 60 node-steps at the reference rate). A
   particular run may never reach it: its demand is then infinite, and reachability is itself
   something to predict;
3. **compute rate** (batches per node-step): the family's reference rate (a typical run takes 60
   node-steps) times a multiplier ~ log-U(0.5, 2), independent of the curve and the target;
4. **deadline**: arrival + ⌈slack · u · 60⌉ with slack ~ U(1, 3): family-level knowledge only, never the
   task's own curve, demand or rate;
5. **demand** (hidden) *emerges* from curve × target × rate: the nominal node-steps until the run's
   reported loss first reaches the target. On the `id` evaluation suite at the training load: 17% of
   tasks can never reach their target; finite demands have median 10 node-steps, 90th percentile 35,
   maximum 118; windows run from 10 to 179 (median 45).

Every float that passes through `exp` (the log-uniform draws) and every target is **quantized** to 12
significant bits (`core_env.recipe.quantize`, exact `frexp`/`ldexp`), so no SIMD code path can change a
workload: `reset(seed=s)` draws the same workload on every machine and the suites regenerate to the
same decoded task tables (a test compares them field by field).

**Loads.** `load` is an **arrival intensity per node**: in each step of the arrival window each node's
users submit a task with that probability, so a step brings Binomial(N, intensity) tasks (several may
arrive at once) and a load means the same pressure at N = 4 and at N = 256. `train` = 0.1 per node and
step (0.4 tasks per step at N = 4), `x1.25` = 0.125, `x1.5` = 0.15, `x2` = 0.2; a float in (0, 1] is an
intensity. The training load and the recipe are calibrated on `id` so that EDF sits well below the MILP
ceiling (the paper's regime: heuristics in the 50s, ceiling near 80); heavier loads lower everyone
(docs/curves.md, `python -m benchmarks calibration`).

**Leak audit.** The deadline window no longer gives the demand away: on the committed suites at the
training load, Spearman(demand, window) over tasks with finite demand is 0.21 / 0.25 / 0.39 (id /
rl_ood / vit_ood; Pearson 0.16 / 0.20 / 0.31, against 0.76 / 0.79 / 0.76 on v0), and the median
demand/window 0.24 (v0: 0.54); the leak probe `window-edf` (EDF with admission
guessing demand as c · window − k, c fitted on train workloads, no curve values) scores no better than
EDF on `id` and `rl_ood` (−1.2 and −0.2 points) and +2.1 on `vit_ood`, while EDF with the exact demand
scores 17–23 points more than the probe. `python -m benchmarks leakage` prints the audit (full table in
docs/curves.md).

**Ceilings.** Two offline optima per committed episode, both knowing every hidden demand, both stored
with the suites and recomputed resumably by `python -m benchmarks ceilings`. `milp-slots` keeps the
env's own rules (an arrival while all K slots are full is rejected; a task holds its slot until it
completes or its deadline passes): `mara_agents.slot_ceiling.slot_ceiling` solves it as a
time-indexed MILP of those rules (`mara_agents.slot_milp`, HiGHS) from the clairvoyant schedule and a
parking rule (`mara_agents.slot_hints`: each last service held back until a chosen arrival needs the
slot, so slots stay full when hopeless tasks arrive), then with OR-Tools CP-SAT where no proof came;
it replays the best schedule found in the env (its value is achieved, not claimed) and records a proven
bound; where optimality was not proven (`status` `interval`) the K-slot optimum lies between the two (`core_env/data/suites/slot_ceilings.json`, the
schedules in `slot_schedules.npz`; a longer `--slot-time-limit` only improves them). `milp`
(`mara_agents.bounds.milp_ceiling`, a MILP solved exactly by scipy's HiGHS) drops the slot limit, so it
bounds every K from above (`ceilings.json`, keyed by each suite file's sha256). Both assume unit-speed
nodes and no switching cost. `clairvoyant` (EDF among the tasks that can still finish, knowing
the demand) is a strong heuristic, not a bound; the independent-feasibility number is a relaxation that
ignores contention (with node speeds it grants each task the fastest node).

**Curves.** `id`, `rl_ood` and `vit_ood` train on real training curves from the committed corpus
(docs/curves.md): `id` = MLPs on scikit-learn datasets, 1-D CNNs on MNIST-1D and character-level
language models; `vit_ood` = tiny vision transformers; `rl_ood` = actor-critic on CartPole and Acrobot
(loss = 1 − normalized return). Evaluation suites use the eval split, seeded workloads the train split
(disjoint runs). `curve_source="prior"` draws seeded workloads from the parametric prior fitted per
family to the corpus instead.

**Stress.** `task_set="stress"`: a deterministic constructed scenario (N = 4: 13 feasible tasks with
slack exactly 1 and 7 never-finishing decoys that arrive earlier and have earlier deadlines) where FIFO
and EDF complete 0%, while the slot-relaxed MILP and a clairvoyant scheduler reach 65%.
See `core_env.workload.stress_workload`.

## Custom curve banks

`task_set` may be the path of a **bank file**: your own training curves, imported from CSV, `.npz` or
TensorBoard logs with `python -m core_env.curves import CURVES.csv --out BANK.npz` (a versioned,
checksummed file with a family label, flags and a fixed train/eval split per run; walkthrough in
docs/tutorials/bring-your-own-curves.md). It works wherever a built-in name does:

```python
env = discrete_core_v1.parallel_env(task_set="my_bank.npz")      # also gym.make(..., task_set=...) and EnvConfig
env.config.task_set_name   # the bank manifest's name, e.g. "my_runs"
env.config.bank("eval")    # CurveBank of a split ("train", "eval", "all"); bank_for("my_bank.npz", "eval") too
```

- The file is verified against its checksums when the config is made; a string that is neither a
  built-in name nor a readable bank file raises `ValueError` naming the built-in task sets and the
  import command. Banks are cached per (resolved path, file sha256, split); a config refuses a file
  that changed after it was made (make a new env).
- `reset(seed=s)` draws on the bank's **train** split, which is also the recipe's family reference
  (targets and deadlines come from how the train runs of each family went), exactly as for a built-in
  task set. Evaluation uses the **eval** split (generate suites, below).
- A `CurveBank` object still works as `task_set`; it is its own reference and has no splits.
- Benchmarks: `python -m benchmarks paper --task-set BANK.npz` (any cell-based suite but `stress`) runs
  the suite's rows on `NAME/train` and, where the suite has them, the heavier loads `NAME/x1.25` …
  `NAME/x2`; episodes are drawn on the eval split by the suites' seeding scheme, so root r episode e is
  episode (r, e) of `python -m core_env.suites generate --task-set BANK.npz`. The `milp` upper bound is
  solved per cell (there are no stored optima for your bank). Cell keys include the bank file's sha256,
  and the results JSON records the bank (`banks`: path, sha256) and each scenario's `recipe`.
  `python -m benchmarks quick --task-set BANK.npz` replaces id/train with `NAME/train` the same way.

## Generated suites

`python -m core_env.suites generate --task-set BANK.npz --loads train x2 --out DIR` (or a built-in
name, or intensities such as `0.15`) writes evaluation suites by the committed suites' recipe and
seeding: `DIR/{name}__{load}.npz` (10 evaluation roots × 4 episodes, N = 4, on the eval split with
targets from the train split) and `DIR/manifest.json` with their sha256, which is checked on every
read. Options `--roots`, `--episodes`, `--seed`, `--n-nodes`, `--arrival-steps` and `--recipe` (a JSON
object of `TaskRecipe` fields, or a JSON file). In Python:
`core_env.workload.write_suite(task_set, load, directory, roots=10, episodes=4, seed=SUITE_SEED,
recipe=...) -> Path` (`generate_suite` returns the arrays; `load_suite(task_set, load, r, e,
suite_dir=DIR)` and `load_suite_file(path, r, e)` read them back). Episode (r, e) is drawn from
`core_env.workload.suite_rng(name, load, r, e, seed)` =
`default_rng([seed, crc32(name), crc32(load), r, e])`, the scheme of the committed suites. Each file's
meta records the task set, load, intensity, seed, N, roots, episodes, the banks' fingerprints, the
recipe and, for a bank file, its name, sha256 and path (`bank_file`), so a suite file replays in any
env as long as that bank file is found (`task_set=` it if it has moved). `python -m core_env.suites`
without arguments regenerates the committed suites, byte for byte.

## Task recipes as configuration

`EnvConfig(recipe=TaskRecipe(slack=(1.0, 2.0)))`, or a dict `recipe={"slack": [1.0, 2.0]}` (missing
fields keep the v1 defaults), sets how seeded workloads draw targets, rates and deadlines (`budget_share`,
`target_quantile`, `typical_run_steps`, `rate_spread`, `slack`; meanings in Workloads and seeds above
and in `core_env.recipe`). A recipe may ask at most 10,000 node-steps of one task: a whole typical run at
the slowest rate (`typical_run_steps / rate_spread[0]`) and the longest deadline window
(`slack[1] * budget_share[1] * typical_run_steps`), so that a reset's memory and time stay bounded.
Unknown fields and out-of-range values raise `ValueError` naming the field;
anything but a recipe or a dict raises `TypeError`. The default is the v1 recipe (`DEFAULT_RECIPE`),
the one the committed suites were generated with (recorded in their meta as `recipe`). The same
recipes drive `python -m core_env.suites generate --recipe`, and benchmark results files record the
recipe of every scenario.

## Trace workloads

`core_env.trace` replays the arrivals of a CSV job trace (ElasticFlow, Blox or a generic layout), and its
deadlines, targets and compute rates where the trace has them; the recipe draws the rest from a seeded
generator: `w = trace_workload(read_trace("jobs.csv", layout="elasticflow"), bank, rng, recipe)`, then
`env.reset(options={"workload": w})`. Any bank works (`EnvConfig(task_set="my_bank.npz").bank("train")`,
`bank_for("id", "eval")`). Walkthrough: docs/tutorials/replay-a-job-trace.md; the module docstring is
the reference (layouts, time-to-step mapping, errors).

## Wrappers

`core_env.wrappers` adapts the parallel env to RL libraries. Each returns fresh arrays and the same
space object for an agent on every call, forwards `max_cycles`, and lets unknown attributes
(`reported_history`, `slot_task`, `config`, `state`, ...) reach the wrapped env:

| wrapper | observation per agent / what it adds |
|---|---|
| `FlattenObservation(env)` | one float32 Box `[observation (D,), action_mask (K+1,) as 0/1]` (SuperSuit, Stable-Baselines3, MLP policies); the int8 mask is also in `infos[a]["action_mask"]` |
| `MaskToInfo(env)` | the Box `observation`; the mask moves to `infos[a]["action_mask"]` (TorchRL, BenchMARL, SuperSuit, any library that reads masks from the infos) |
| `RLlibKeys(env)` | Dict `{"observations", "action_mask"}` (RLlib's action-masking RLModule) |
| `LongerHistory(env, H)` | the canonical Dict with H reported log losses per slot, exactly what `history=H` observes; `state()` follows |
| `OracleDemand(env)` | unchanged observations; adds the HIDDEN remaining demand (K,) to `infos[a]["remaining_demand"]` (oracle rows only) |
| `EpisodeRecorder(env)` | unchanged; `.record` is a JSON-ready record of the episode (config, workload, every action) |
| `FinalEpisode(env)` | unchanged; `infos[a]["final_episode"]`: the finished episode's statistics, in the step that ends it and the reset after it (they survive autoreset) |

`replay(record, env_fn=None)` replays an `EpisodeRecorder` record on a fresh env and returns the
trajectory (observations, rewards, terminations, truncations, infos), bit-identical on any machine; a
record made on a bank file names its path and replays while the file is there; one made on a
`CurveBank` object needs `env_fn`. Order matters: `LongerHistory` wraps an env whose observations are
still `{"observation", "action_mask"}`, and the reshaping wrappers go last, e.g.
`MaskToInfo(LongerHistory(parallel_env(), 32))`.

### Libraries that read the mask from the infos, and autoresetting vectorizers

Some libraries take a Box observation per agent and look for the action mask in the infos (TorchRL's
`PettingZooWrapper`, BenchMARL, hand-written loops over SuperSuit's vectorizers). `MaskToInfo` gives
them exactly that: `observations[a]` is the (D,) float32 observation and `infos[a]["action_mask"]` the
(K+1,) int8 mask, from the first reset on.

Vectorizers that reset an env inside the step that ends its episode (SuperSuit's
`pettingzoo_env_to_vec_env_v1` and `concat_vec_envs_v1`, and others alike) merge the reset's infos over
that step's, so the episode's `completion_rate`, `completed`, ... read as the new episode's zeros.
`FinalEpisode` keeps them: `infos[a]["final_episode"]` is a dict of the finished episode's statistics
(the keys of "Infos" above that describe the episode, plus `return`, the agent's summed reward, and
`index`, 0, 1, 2, ... per finished episode), present in the step that ends the episode and in the reset
after it, absent otherwise; count an episode once per `index`. Put it inside the reshaping wrappers:

```python
import supersuit
from core_env import discrete_core_v1
from core_env.wrappers import FinalEpisode, MaskToInfo

env = MaskToInfo(FinalEpisode(discrete_core_v1.parallel_env()))
venv = supersuit.concat_vec_envs_v1(supersuit.pettingzoo_env_to_vec_env_v1(env), 4, num_cpus=0, base_class="gymnasium")
observations, infos = venv.reset(seed=0)             # infos: one dict per (env, node) row
# ... after venv.step(actions): for info in infos: if "final_episode" in info: log(info["final_episode"])
```

tests/test_final_episode.py checks this with SuperSuit: without the wrapper the finished episode's
`completion_rate` reads 0.0 after autoreset; with it, `final_episode` equals the statistics the episode
ended with. SuperSuit passes infos through but not masks to its learners (see
docs/tutorials/sb3-vectorized-maskable-ppo.md), so a learner on it must read `infos[i]["action_mask"]`
itself or it will pick masked actions.

## Glossary

| term | meaning |
|---|---|
| load (`load="train"`) | an **arrival intensity per node and step**: each node's users submit a task with this probability in each step of the arrival window. `train` = 0.1 (the training load), `x1.25`, `x1.5`, `x2` scale it; a float in (0, 1] is an intensity |
| task set (`task_set="id"`) | where tasks' curves come from: `id` = the in-distribution families (MLPs, 1-D CNNs, character LMs), `rl_ood` / `vit_ood` = out-of-distribution families (actor-critic RL, vision transformers), `stress` = the constructed scenario, or your bank file |
| family | runs of the same model and data; targets, rates and deadlines are set from a family's reference runs |
| split | every run is in `train` (seeded workloads, reference runs) or `eval` (evaluation suites), never both |
| reference runs | the runs a submitter knows: the train split (a `CurveBank` object: itself) |
| bank file | your curves as a checksummed `.npz` (`python -m core_env.curves import`); its manifest `name` is the task set's name |
| suite | pre-generated evaluation workloads of one task set and load: roots × episodes, on eval curves |
| evaluation root | one independent group of suite episodes; tables report mean ± sd over roots (episodes are averaged within a root) |
| episode | one workload: arrivals over `arrival_steps` steps, then the drain until no task is active |
| scenario | a benchmark column: task set, load and env overrides (e.g. `id/train`, `rl_ood/x2`, `id, N=8`, `my_runs/train`) |
| demand | the hidden node-steps a task needs to reach its target (inf if never); windows are observed, demands are not |
| ceiling (`milp-slots`) | the offline optimum of an episode under the env's own K-slot rules: the best schedule found (replayed) and a proven bound |
| upper bound (`milp`) | the offline optimum of an episode with the K-slot limit dropped (MILP); the independent-feasibility bound is a looser relaxation |

## Gymnasium view

`gym.make("core_env/DiscreteCoRE-v1", **kwargs)` (registered on `import core_env`;
`gym.make("core_env:core_env/DiscreteCoRE-v1")` needs no import). Centralized: observation
`{"observation": (N, D) float32, "action_mask": (N, K + 1) int8}`, action `MultiDiscrete([K + 1] * N)`,
scalar team reward, info = the statistics above with `conflict`/`invalid_action` as (N,) arrays, and
`action_masks()` returning the flat boolean mask of length N·(K + 1) (sb3-contrib convention).

`gym.make` returns the env itself (registered with `order_enforce=False, disable_env_checker=True`), so
`env.action_masks()` is reachable; the env refuses `step()` before `reset()` on its own, and
`gym.make(..., disable_env_checker=False)` adds Gymnasium's checker.

## Vector env

B environments in one object, `core_env.vector.DiscreteCoREVectorEnv`, a `gymnasium.vector.VectorEnv`:

```python
import gymnasium as gym, numpy as np, core_env

envs = gym.make_vec("core_env/DiscreteCoRE-v1", num_envs=256, vectorization_mode="vector_entry_point",
                    autoreset_mode="next_step", observation="per_node", n_nodes=4)
obs, infos = envs.reset(seed=0)                          # env i: default_rng(0 + i)
actions = np.argmax(np.random.default_rng(0).random(obs["action_mask"].shape) * obs["action_mask"], axis=-1)
obs, rewards, terminated, truncated, infos = envs.step(actions)   # actions (B, N); rewards (B,)
```

- **One implementation.** The PettingZoo and Gymnasium views are B = 1 of the same `EnvBatch`
  (simulator + team reward + observation features); env i of a vector env seeded `s` plays exactly what
  a single env reset with seed `s + i` plays (tested step for step).
- **Reset.** `reset(seed=s)` seeds env i with `s + i` (or `seed=[s0, s1, …]`); `options` is one mapping
  for every env (the single views' options: `suite`, `root`, `episode`, `workload`, …) or a sequence of
  B mappings, e.g. `[{"suite": "eval", "root": r, "episode": e} for …]` (with `autoreset_mode="disabled"`:
  the envs of one vector env play on one curve bank, and autoresets draw on the train curves, so suite
  episodes or your own workloads on another bank are refused in the autoreset modes with a message
  saying so); `options={"reset_mask": mask, …}` resets only the masked envs (and with `seed`, reseeds
  only those, as Gymnasium's vector envs do); the mask must be a (B,) bool array (any other dtype is a
  TypeError: 0.5, NaN, −1 or 2 would each read as True).
- **Bounds.** `num_envs` is an int in [1, 65536] (`core_env.memory.MAX_NUM_ENVS`; more envs belong in
  more processes), and its memory, estimated from below before anything is allocated
  (`core_env.memory.bytes_per_env`: three copies of an env's observation, its slot rows, the tasks a
  seeded draw brings on average; ~47 KiB per env at the defaults, 51 MiB at N = 256, K = 1024), must fit
  this machine's memory; otherwise a ValueError names `num_envs` (as it does for `gym.make_vec` and the
  TorchRL `NodeBatchEnv`, whose batch size is its `num_envs`). Actions must be integers: a float, bool
  or NaN action is a TypeError, never cast (`NodeBatchEnv` names `("node", "action")` and refuses a
  `"_reset"` mask that is not bool the same way).
- **Autoreset** (`autoreset_mode`, declared in `metadata["autoreset_mode"]`): `"next_step"` (default,
  Gymnasium's): the step after an env ends resets it, its action ignored (not even checked), reward 0; `"same_step"`: the
  env is reset within the step that ends it and `infos["final_obs"]` (object array, the final
  observation of each ended env), `infos["final_info"]` (its final statistics) and the masks
  `infos["_final_obs"]`, `infos["_final_info"]` hold what it ended with; `"disabled"`: a finished env is
  frozen (reward 0, flags stay set) until `reset(options={"reset_mask": …})`, the mode for evaluating
  fixed workloads. Autoresets draw a seeded workload from the env's rng (on the task set's train curves).
  A step refused for a bad action changes nothing, the last step's outcome (infos) included.
- **Infos.** Every key of the single views as a (B,) array (`conflict`, `invalid_action`: (B, N); an env
  reset at this step reads zeros there), each with Gymnasium's all-True `_key` mask (one read-only array).
  `infos["final_info"]` (same_step) holds every env's final statistics as (B,) arrays; `_final_info` says
  which envs ended.
- **Masks.** `envs.action_masks()` (B, N, K + 1) bool; `obs["action_mask"]` the same as int8.
- **Oracle access** (for oracle rows and bounds only): `remaining_demand()` (B, K); also
  `reported_history(env, slot)`, `slot_task(env, slot)`, `workloads`, `state()` (B, 3 + K·F).
- **Observers.** Objects with `on_reset(batch, envs)` and `on_step(batch, outcome)` appended to
  `envs.batch.observers` are told after every reset and step (the Gantt trace and predictor caches use
  this); the simulator imports no observation code.
- **SB3.** `mara_agents.integrations.sb3_vec.CoreVecEnv` is a Stable-Baselines3 `VecEnv` over one
  vector env with `action_masks()`, so MaskablePPO trains on B envs at once
  ([tutorial](tutorials/sb3-vectorized-maskable-ppo.md)). The PettingZoo → SuperSuit → SB3 route ignores
  the action mask and overwrites final episode statistics: use `CoreVecEnv` instead.

**Compact central observation** (`observation="compact"`): the slot table once per env instead of one
copy per node, `{"nodes": (B, N, 3), "global": (B, 3), "slots": (B, K, F), "action_mask": (B, N, K + 1)}`.
The numbers are the per-node observation's: node n of env b observes
`nodes[b, n] ++ global[b] ++ slots[b].ravel()`. At N = 256, K = 1024 a per-node step writes N copies of
the slot table (16.8 MB per env); the compact one writes it once (66 KB).
`core_env.observation.ParsedObservation.from_parts(nodes, global_, slots)` reads it by name.

**The compiled step.** The rules of "A step" are written once, as small functions in
`core_env/rules.py` (`choose`, `plan_service`, the task source's `curve_report`, `record_reports`,
`complete`, `expire`, `admit_arrivals`, `update_done`, `team_reward`) that numba compiles (`cache=True`:
the first process compiles them, ~18 s here, and writes the cache next to the modules; later processes
load it in ~2 s (the whole import)). They read every field by name: the tables' columns and rows are
`IntEnum`s declared once in `core_env/state.py` (numba compiles a member to its constant), and the arrays
come as a named tuple (`state.Arrays`). The state is a struct of arrays packed in three arenas (int64,
float64, bool), so a compiled call takes a handful of arguments. The rules applied to each environment
(and the observation rows) are inlined into the loop over environments (`inline="always"`), and that loop is
compiled without numba's reference counting (`_nrt=False`: it allocates nothing and every array it
indexes is owned by its caller): a compiled call with array arguments otherwise increments and decrements
each array's reference count with atomic instructions, which cost a third of a B = 256 step when each rule
was a call per environment. The vector env computes each environment's observation right after its own
step, while its state is in cache (`core_env.vector.step_observing`; the same numbers as observing after
the whole step). Numba keys its cache on each function's own source file, which would leave
`vector.py`'s inlined copies of edited rules stale; `core_env.compiled_cache` keys the whole cache on every
source the compiled code is built from and drops it when any of them changes (the next import recompiles). The compiled code uses no operation whose result depends on a SIMD path (the dynamics:
additions, products, divisions and comparisons in a fixed order), so trajectories are the same on every
x86-64 CPU; observations take logarithms from the C library (within an ulp across CPUs).

**Task sources.** Rule 2's report is the one input the rules take from outside: by default the task's
learning curve in the curve bank, inside the compiled step. `Simulator.step(actions, source=S)` takes the
reports from any object with `report(sim, served) -> losses` (`core_env.task_source.TaskSource`;
`served` names each serving node's env, slot, task, batches and prior progress): the step then runs in
two compiled halves around `S.report` with the same rule functions, so a live source (real training
runs) needs no second copy of the rules. `CurveSource` is the curve bank behind this seam, and gives
the compiled step's episodes bit for bit (tests/test_task_source.py); a source that raises, or reports a
non-finite loss, leaves the state as it was before the step. A source may also say how many batches
each task really trained (`Reports(loss, batches)`); those become the tasks' progress. Every view takes
a source as `task_source=` (`parallel_env(task_source=S)`, `DiscreteCoREEnv`, the vector env), so any
agent runs on it unchanged.

`core_env.live.LiveSource` is the live source (docs/fidelity.md): each served task is a real training
run (`core_env.live.TaskSpec`: a corpus family and run, or your own `"module:factory"`) on the worker of
the node serving it (`core_env.live.workers.make_nodes(N, backend)`: `"process"`, one process per node;
`"ray"`, one Ray actor per node, `address=` a cluster's; `"inprocess"`). With `slice_s=None` a service
trains the whole batches the rules planned (deterministic: the episode equals its simulation on
`core_env.live.record_bank`, the same runs recorded offline as a curve bank); with `slice_s=seconds` a
step is a wall-clock slice and each task trains what its node manages, less the time to move its state
from the node that last held it. A dead worker fails the step with `NodeFailure` and changes nothing.

**Performance**: `python -m benchmarks perf` measures every view's env-steps/s, their ratios to a minimal
ParallelEnv that only builds the same dicts (paired round by round; targets: PettingZoo ≥ 0.5×, the batched
step at B = 256 ≥ 10× without observations and ≥ 7× with them), the per-step cost at N = 4–256, compile
time and memory; the figures of the last run are in docs/benchmarks.md ("Throughput"), generated from
docs/results/perf.json. Past N = 16 the per-node observation (N copies of the slot table) dominates the
step: use the compact one. A seeded `reset()` draws a workload, which costs more than many steps; replay
suite or pre-drawn workloads (`reset(options=[{"workload": w}, …])`) where resets are frequent.

## Version history

- **v1 (2026-12)**: workloads that hide each task's demand, loads per node, a MILP upper bound (slot limit relaxed).
  - *Why.* v0 set each deadline to `arrival + ceil(slack · n*)` from the task's **hidden demand** n*, and
    solved batches per step so that every learner's demand landed on a drawn nominal value in [6, 40].
    The deadline window, which every agent observes (age + steps to deadline), gave the demand away:
    on the v0 suites corr(n*, window) was 0.76 / 0.79 / 0.76 (id / rl_ood / vit_ood) and the median
    n*/window 0.54. A rule with no learning-curve model — EDF with admission, remaining demand guessed
    as `0.5 · window − k`, demoted tasks on spare nodes — completed 64.1% on id/train (MARA 64.7, LARA
    58.6, EDF 51.0), 68.7% on rl_ood and 57.9% on vit_ood, beating MARA in 8 of 9 task-set × load
    scenarios; `window/2 − k` beat the flow-matching predictor in 8 of 9 cells of Table 1. v0's suites
    also failed to regenerate on another CPU (133 of 3,038 `batches_per_step` values differed by one
    ulp: numpy's `exp`/`log` take another SIMD path there), and its "clairvoyant" row was not an upper
    bound (a MILP offline schedule beat it on 20 of 20 id/train episodes, 78.0 vs 76.0).
  - *What changed.* The task recipe (targets from the family's reference runs, compute rates drawn
    independently, deadlines from family-level knowledge; demand emerges and is sometimes infinite);
    `load` is an arrival intensity per node (Binomial(N, ·) arrivals per step) with `train` = 0.1;
    suites regenerated with 10 evaluation roots × 4 episodes, floats quantized so they regenerate on
    any CPU; the MILP offline optimum stored per committed episode; node speeds validated to
    [1e-3, 1e3] and a step is all-or-nothing; the shaped reward exposes its potential in infos; the AEC
    view validates each agent's action at its own `step`. Spaces and observation layout are unchanged.
  - `core_env.discrete_core_v0` and the ids `core_env/DiscreteCoRE-v0` / `core_env/discrete_core-v0`
    raise an error pointing here.
  - *Amendment (2026-12-03, issue 29).* A seeded draw covers `min(arrival_steps, max_cycles)` steps of
    arrivals: configs whose arrival window outlasts `max_cycles` (only those) draw different workloads
    than before, and cost what an episode can play. Committed suites, default configs and checkpoints are
    unaffected. The K-slot ceiling (`milp-slots`) joins the stored slot-relaxed MILP (issue 28).
- v0 (2026-11): initial release (withdrawn: see v1).
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
