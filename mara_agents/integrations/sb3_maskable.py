"""sb3-contrib MaskablePPO on the centralized Gymnasium view of core_env (extra ``sb3``).

The env's ``action_masks()`` returns the flat boolean mask of length N·(K+1): for a ``MultiDiscrete``
action space sb3-contrib expects exactly the per-dimension masks concatenated (its
``MaskableMultiCategoricalDistribution`` splits the mask by ``nvec``), so MaskablePPO never samples a
masked action. The nodes are independent dimensions of one ``MultiInputPolicy`` (one network for the whole
joint action); **conflicts** (two nodes on one task) are *not* prevented by the policy: the env resolves
them (the lowest-index node trains the task, the others idle) and counts them in ``conflicts``, which the
report shows.

**The per-slot policy** (``policy="slot"``, ``--policy slot``): SB3's plug-in point, a policy class,
holds the shared per-slot scorer and the conflict-free joint distribution
(:class:`~mara_agents.integrations.sb3_policy.SlotMaskablePolicy`): no conflicts, any N and K. Its
weights are saved as ``policy.pt`` + ``policy.json`` (format :data:`FORMAT`; ``snapshot.pt`` after every
update while training, ``--init`` resumes from it) and :func:`load_agent` returns them as an Agent for
``python -m benchmarks paper --rows ppo-sb3``. The default ``"mlp"`` is SB3's ``MultiInputPolicy``: one
flat MLP over the flattened observation, tied to the N and K it was trained on, conflicts left to the env.

``train`` steps its ``n_envs`` environments as one batch (:class:`mara_agents.integrations.sb3_vec.CoreVecEnv`
over one ``DiscreteCoREVectorEnv``); ``vectorized=False`` (``--dummy``) uses SB3's ``DummyVecEnv`` of
``n_envs`` Gymnasium views instead. Both see the same seeded episodes (env i seeded ``seed + i``), so they
train the same policy; the batched one spends less time in Python per step.

Run::

    python -m mara_agents.integrations.sb3_maskable --timesteps 20000 --out runs/sb3_maskable
    python -m mara_agents.integrations.sb3_maskable --policy slot --timesteps 655360 --n-envs 8 --n-steps 256 \
        --batch-size 512 --out runs/sb3_slot
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core_env.extras import needs
from core_env.npz import write_atomic
from mara_agents.integrations.common import SMALL_ENV, EpisodeLog, RecordEpisodes, cli_env_kwargs, make_gym_env, train_or_exit

FORMAT = "mara_agents.integrations.sb3_maskable/1"
MISSING = "no SB3 MaskablePPO per-slot checkpoint (train one with python -m mara_agents.integrations.sb3_maskable --policy slot --out DIR)"
ROW_NAME = "PPO (SB3 MaskablePPO)"
#: The shipped per-slot policy (its train.json says how it was trained).
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "sb3_maskable" / "policy.pt"
POLICIES = ("mlp", "slot")


def train(env_kwargs: Mapping[str, Any] | None = None, *, timesteps: int = 20_000, n_steps: int = 512, n_envs: int = 2,
          batch_size: int = 128, n_epochs: int = 4, lr: float = 3e-4, ent_coef: float = 0.01, seed: int = 0,
          out: Path | str | None = None, threads: int | None = 1, verbose: bool = True, vectorized: bool = True,
          policy: str = "mlp", hidden: int = 64, init: Path | str | None = None) -> dict[str, Any]:
    """Train MaskablePPO for ``timesteps`` env steps; return a report (losses, episodes, completion, masks).

    ``vectorized``: step the ``n_envs`` envs as one :class:`CoreVecEnv` (default) or as a ``DummyVecEnv``.
    ``policy``: ``"mlp"`` (SB3's ``MultiInputPolicy``, ``net_arch`` [64, 64]) or ``"slot"`` (the per-slot
    policy of width ``hidden``; with ``out``, ``snapshot.pt`` after every update and ``policy.pt`` at the
    end; ``init``: a checkpoint or run directory to start its weights from).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if init is not None and policy != "slot":
        raise ValueError("init (starting weights) needs policy='slot'")
    with needs(__name__, "sb3"):
        import torch
        from sb3_contrib import MaskablePPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.vec_env import DummyVecEnv

    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    env_kwargs = dict(env_kwargs or {})
    log = EpisodeLog()
    if vectorized:
        from mara_agents.integrations.sb3_vec import CoreVecEnv

        venv = CoreVecEnv(n_envs, **env_kwargs)
    else:
        venv = DummyVecEnv([lambda: make_gym_env(**env_kwargs) for _ in range(n_envs)])
    venv.seed(seed)
    losses: list[float] = []
    history = venv.get_attr("config")[0].history if vectorized else venv.envs[0].unwrapped.config.history
    meta = {"env": env_kwargs, "seed": seed, "timesteps": timesteps, "policy": policy, **({"init": str(init)} if init is not None else {})}
    start = time.perf_counter()

    class LossRecorder(BaseCallback):
        """Reads train/loss after each update (the logger is never dumped, so the value stays readable) and
        logs the final statistics of every finished episode (the info of an env whose ``done`` is set)."""

        def _read(self) -> None:
            value = self.model.logger.name_to_value.get("train/loss")
            if value is not None and (not losses or self.model._n_updates != self._seen):
                losses.append(float(value))
                self._seen = self.model._n_updates

        def _on_training_start(self) -> None:
            self._seen = 0

        def _on_rollout_start(self) -> None:
            self._read()
            if policy == "slot" and self.model._n_updates:
                self._snapshot()

        def _snapshot(self) -> None:  # the weights after each update, and one line of progress
            steps = int(self.model.num_timesteps)
            if out is not None:
                save_checkpoint(Path(out) / "snapshot.pt", self.model.policy, {**meta, "env_step": steps})
            if verbose and len(losses) % 10 == 0:
                recent = log.summary(20)
                print(f"{steps} env steps, {len(losses)} updates, {len(log)} episodes, {time.perf_counter() - start:.0f}s; "
                      f"completion of the last {recent['episodes']} training episodes {recent.get('completion_rate', float('nan')):.3f}",
                      flush=True)

        def _on_step(self) -> bool:
            for info, done in zip(self.locals["infos"], self.locals["dones"]):
                if done:
                    log.add(info)
            return True

        def _on_training_end(self) -> None:
            self._read()

    if policy == "slot":
        from mara_agents.integrations.sb3_policy import SlotMaskablePolicy

        policy_class, policy_kwargs = SlotMaskablePolicy, {"history": history, "hidden": hidden}
    else:
        policy_class, policy_kwargs = "MultiInputPolicy", {"net_arch": [64, 64]}
    model = MaskablePPO(policy_class, venv, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs, learning_rate=lr,
                        ent_coef=ent_coef, gamma=0.99, gae_lambda=0.95, seed=seed, verbose=0, policy_kwargs=policy_kwargs)
    if init is not None:
        from mara_agents.integrations import slot_policy

        slot_policy.load_weights(init, FORMAT, model.policy.actor_net, model.policy.critic_net)
    start = time.perf_counter()
    model.learn(total_timesteps=timesteps, callback=LossRecorder(), log_interval=10**9)
    seconds = time.perf_counter() - start
    torch.set_num_threads(previous_threads)
    quarter = max(1, len(log) // 4)
    report = {"library": "sb3-contrib", "algorithm": "MaskablePPO", "vec_env": type(venv).__name__, "env": env_kwargs,
              "env_steps": int(model.num_timesteps),
              "updates": len(losses), "seconds": round(seconds, 2), "loss": losses, "episodes": log.episodes,
              "first": EpisodeLog(log.episodes[:quarter]).summary(), "last": log.summary(quarter), "all": log.summary(),
              "policy": policy,
              "conflict_rule": "sequential: node i cannot pick a task taken by nodes < i (no env conflicts)" if policy == "slot" else
              "independent MultiDiscrete dimensions; env resolves conflicts (lowest index wins) and counts them"}
    if verbose:
        print(f"sb3-contrib MaskablePPO: {report['env_steps']} steps, {len(losses)} updates, {len(log)} episodes in {seconds:.1f}s; "
              f"completion first quarter {report['first'].get('completion_rate', float('nan')):.3f} -> last quarter "
              f"{report['last'].get('completion_rate', float('nan')):.3f}; invalid actions {report['all'].get('invalid_actions')}, "
              f"conflicts {report['all'].get('conflicts')}")
    report["model"] = model
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        model.save(out / "maskable_ppo.zip")
        if policy == "slot":
            report["checkpoint"] = str(save_checkpoint(out / "policy.pt", model.policy, meta))
        write_atomic(out / "train.json", (json.dumps({k: v for k, v in report.items() if k != "model"}, indent=1, default=float) + "\n").encode())
    venv.close()
    return report


def save_checkpoint(path: Path | str, policy: Any, meta: dict[str, Any]) -> Path:
    """Write a :class:`SlotMaskablePolicy`'s nets as ``path`` (format :data:`FORMAT`) + its ``.json`` manifest."""
    from mara_agents.integrations import slot_policy

    return slot_policy.save_checkpoint(path, FORMAT, policy.actor_net, policy.critic_net, meta)


def load_agent(path: Path | str = SHIPPED_CHECKPOINT, deterministic: bool = True):
    """The trained per-slot policy of a checkpoint (``policy.pt`` or its run directory; default the shipped one)
    as a :class:`~mara_agents.integrations.slot_policy.SlotPolicyAgent` (greedy by default), the benchmark row
    ``ppo-sb3``. ValueError for a missing file or manifest, another format or a checksum mismatch."""
    from mara_agents.integrations import slot_policy

    return slot_policy.load_agent(path, FORMAT, MISSING, deterministic=deterministic, name=ROW_NAME)


def evaluate(model: Any, env_kwargs: Mapping[str, Any], seeds: list[int] | range, deterministic: bool = True) -> dict[str, float]:
    """Completion, invalid actions and conflicts of a MaskablePPO model, one episode per seed, masks passed to ``predict``."""
    log = EpisodeLog()
    env = RecordEpisodes(make_gym_env(**env_kwargs), log)
    for seed in seeds:
        obs, _ = env.reset(seed=int(seed))
        done = False
        while not done:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=deterministic)
            obs, _, terminated, truncated, _ = env.step(np.asarray(action, dtype=np.int64))
            done = terminated or truncated
    env.close()
    return log.summary()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.integrations.sb3_maskable", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/sb3_maskable"))
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--n-steps", type=int, default=512, help="steps per env per rollout")
    parser.add_argument("--n-envs", type=int, default=2)
    parser.add_argument("--dummy", action="store_true", help="step the envs through SB3's DummyVecEnv instead of one CoreVecEnv")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help=f"train on the small test config {SMALL_ENV}")
    parser.add_argument("--env", type=json.loads, default=None, help="core_env kwargs as JSON")
    parser.add_argument("--eval-episodes", type=int, default=8)
    parser.add_argument("--policy", choices=POLICIES, default="mlp", help="SB3's flat MultiInputPolicy or the per-slot policy (module docstring)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--n-epochs", type=int, default=4, help="PPO passes over each rollout")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--init", type=Path, default=None, help="--policy slot: start from this checkpoint's weights (e.g. DIR/snapshot.pt)")
    args = parser.parse_args(argv)
    env_kwargs = cli_env_kwargs(args)
    report = train_or_exit(parser, train, env_kwargs, timesteps=args.timesteps, n_steps=args.n_steps, n_envs=args.n_envs, seed=args.seed,
                           out=args.out, vectorized=not args.dummy, policy=args.policy, batch_size=args.batch_size,
                           n_epochs=args.n_epochs, threads=args.threads, init=args.init)
    from mara_agents.integrations.slot_policy import EVAL_SEED, finish_cli

    if args.policy == "mlp" and args.eval_episodes:  # SB3's own model (no Agent adapter) plays the episodes
        report["eval_greedy"] = evaluate(report["model"], env_kwargs, range(EVAL_SEED, EVAL_SEED + args.eval_episodes))
        print(f"greedy eval on {args.eval_episodes} seeded episodes: {report['eval_greedy']}")
    return finish_cli(report, module="mara_agents.integrations.sb3_maskable", argv=argv, threads=args.threads, out=args.out,
                      env_kwargs=env_kwargs, eval_episodes=args.eval_episodes, load=load_agent if args.policy == "slot" else None)


if __name__ == "__main__":
    main()
