"""Optional comparison: Stable-Baselines3's A2C with the rl-zoo hyperparameters, same targets.

Needs PyTorch and Stable-Baselines3, which the trainer never does; install them in a separate
environment, e.g. `pip install torch stable-baselines3 gymnasium matplotlib`, then

    python bench/sb3_a2c.py                 # Pendulum-v1 and CartPole-v1, seeds 1 2 3

Each run trains until the mean of the last 100 raw episode returns reaches the target of
bench/learning.py (or the step budget runs out) and reports when, in episodes, env steps and wall
seconds, next to its env steps/s. Writes results/sb3_a2c.md unless --no-save.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import deque

from targets import TARGETS as BENCH_TARGETS  # run as bench/sb3_a2c.py: bench/ is on the path

# appended: the repo's config.py, networks.py, ... must not hide same-named modules torch imports
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from console import OneLineParser  # noqa: E402  (the standard library only)

# the hyperparameters of rl-baselines3-zoo's a2c.yml for these envs (8 envs each)
ZOO = {
    "Pendulum-v1": dict(normalize=True, kwargs=dict(
        n_steps=8, gamma=0.9, gae_lambda=0.9, ent_coef=0.0, vf_coef=0.4, max_grad_norm=0.5,
        use_rms_prop=True, normalize_advantage=False, use_sde=True,
        policy_kwargs=dict(log_std_init=-2, ortho_init=False)),
        lr=7e-4, linear_lr=True, timesteps=1_000_000),
    "CartPole-v1": dict(normalize=False, kwargs=dict(ent_coef=0.0), lr=7e-4, linear_lr=False,
                        timesteps=500_000),
}
# MuJoCo (--mujoco): rl-zoo's a2c.yml gives these envs `normalize: true` and 1M steps, SB3's
# defaults otherwise (one env, n_steps 5, gamma 0.99, lr 7e-4, RMSprop); rl-zoo then scores the
# final model's deterministic policy, with the normaliser's statistics frozen
MUJOCO = {env_id: dict(normalize=True, kwargs=dict(gamma=0.99), lr=7e-4, linear_lr=False,
                       timesteps=1_000_000, n_envs=1)
          for env_id in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")}
EVAL_EPISODES = 20
TARGETS = {env_id: target for env_id, (target, _) in BENCH_TARGETS.items() if env_id in ZOO}


def run(env_id: str, seed: int, budget_steps: int, eval_episodes: int = EVAL_EPISODES) -> dict:
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    zoo = ZOO.get(env_id) or MUJOCO[env_id]
    env = make_vec_env(env_id, n_envs=zoo.get("n_envs", 8), seed=seed)  # Monitor inside: raw returns
    if zoo["normalize"]:
        env = VecNormalize(env, gamma=zoo["kwargs"]["gamma"])
    lr = zoo["lr"]
    schedule = (lambda remaining: remaining * lr) if zoo["linear_lr"] else lr
    model = A2C("MlpPolicy", env, learning_rate=schedule, seed=seed, verbose=0, device="cpu",
                **zoo["kwargs"])
    target = TARGETS.get(env_id, float("inf"))
    # classic control: rl-zoo's schedule over its timesteps, stopped at the target or the budget;
    # MuJoCo: the budget (rl-zoo's 1M unless --steps) is the run
    total_steps = (budget_steps or zoo["timesteps"]) if env_id in MUJOCO else zoo["timesteps"]

    class Watch(BaseCallback):
        def __init__(self):
            super().__init__()
            self.returns = deque(maxlen=100)
            self.episodes = 0
            self.reached = None

        def _on_training_start(self):
            self.start = time.time()

        def _on_step(self):
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.episodes += 1
                    self.returns.append(info["episode"]["r"])
                    if (self.reached is None and len(self.returns) == 100
                            and statistics.mean(self.returns) >= target):
                        self.reached = (self.episodes, self.num_timesteps, time.time() - self.start)
            return self.reached is None and self.num_timesteps < (budget_steps or total_steps)

    watch = Watch()
    model.learn(total_timesteps=total_steps, callback=watch)
    wall = time.time() - watch.start
    result = dict(env=env_id, seed=seed, reached=watch.reached, steps=model.num_timesteps,
                  wall=wall, steps_per_s=model.num_timesteps / wall,
                  last_100=statistics.mean(watch.returns) if watch.returns else float("nan"))
    if env_id in MUJOCO:
        result["eval"] = deterministic_eval(model, env, env_id, seed, eval_episodes)
    return result


def deterministic_eval(model, train_env, env_id: str, seed: int, episodes: int) -> float:
    """rl-zoo's protocol: the final model's deterministic policy over `episodes` episodes,
    through the training run's normaliser with its statistics frozen; the mean raw return."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed + 10_000), training=False,
                       norm_reward=False, gamma=train_env.gamma)
    env.obs_rms = train_env.obs_rms
    returns, obs = [], env.reset()
    while len(returns) < episodes:
        action, _ = model.predict(obs, deterministic=True)
        obs, _, dones, infos = env.step(action)
        if dones[0] and "episode" in infos[0]:
            returns.append(infos[0]["episode"]["r"])
    return statistics.mean(returns)


def main(argv=None) -> int:
    parser = OneLineParser(prog="bench/sb3_a2c.py", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--envs", nargs="+", default=list(ZOO))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--budget-steps", type=int, default=600_000)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "results"))
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--tag", default="", help="--mujoco: suffix of the output names, e.g. "
                        "_halfcheetah_s4_s5 writes sb3_a2c_mujoco_halfcheetah_s4_s5.md and .json")
    parser.add_argument("--steps", type=int, default=0, help="--mujoco: env steps per run "
                        "(default: rl-zoo's 1M)")
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument("--jobs", type=int, default=1, help="--mujoco: runs at once, each in its "
                        "own process pinned to its own core with one torch thread (SB3's A2C on "
                        "one env uses one core); the table says how many ran at once")
    parser.add_argument("--mujoco", action="store_true", help="HalfCheetah, Hopper and Walker2d "
                        "(v5) at rl-zoo's settings, 1M steps each, scored by the final model's "
                        "deterministic eval; writes results/sb3_a2c_mujoco.md and .json (after "
                        "each run), which bench/mujoco_vs_sb3.py puts beside our runs")
    args = parser.parse_args(argv)
    args.command = " ".join(["python bench/sb3_a2c.py"] + (argv if argv is not None else sys.argv[1:]))
    if not args.mujoco and (args.steps or args.jobs != 1 or args.eval_episodes != EVAL_EPISODES
                            or args.tag):
        parser.error("--steps, --jobs, --eval-episodes and --tag are for --mujoco")
    if "/" in args.tag:
        parser.error(f"--tag {args.tag}: a suffix of file names, without '/'")
    if args.eval_episodes < 1 or args.steps < 0:
        parser.error("--eval-episodes must be >= 1 and --steps >= 0 (0: rl-zoo's 1M)")
    if not 1 <= args.jobs <= len(os.sched_getaffinity(0)):
        parser.error(f"--jobs must be from 1 to this machine's {len(os.sched_getaffinity(0))} "
                     f"cores (each run gets a core of its own)")
    if args.mujoco and args.envs == list(ZOO):
        args.envs = list(MUJOCO)
    elif args.mujoco and set(args.envs) - set(MUJOCO):
        parser.error(f"--mujoco runs {', '.join(MUJOCO)}; not {', '.join(set(args.envs) - set(MUJOCO))}")
    try:
        import stable_baselines3
        import torch
    except ImportError:
        print("bench/sb3_a2c.py: error: needs torch and stable-baselines3 "
              "(pip install torch stable-baselines3), an optional comparison", file=sys.stderr)
        return 2

    if args.mujoco:
        return main_mujoco(args, stable_baselines3.__version__, torch)
    lines = ["| env | seed | target (mean-100) | reached at episode | env steps | wall s | env steps/s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for env_id in args.envs:
        for seed in args.seeds:
            r = run(env_id, seed, args.budget_steps)
            episode, steps, wall = r["reached"] or ("never", r["steps"], r["wall"])
            lines.append(f"| {env_id} | {seed} | {TARGETS[env_id]:g} | {episode} | "
                         f"{'never within ' if r['reached'] is None else ''}{steps:,} | "
                         f"{wall:.1f} | {r['steps_per_s']:,.0f} |")
            print(lines[-1], flush=True)
    text = (f"# Stable-Baselines3 A2C, rl-zoo hyperparameters, 8 envs\n\n`python bench/sb3_a2c.py` "
            f"(stable-baselines3 {stable_baselines3.__version__}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} torch threads)\n\n" + "\n".join(lines) + "\n")
    print(text)
    if not args.no_save:
        with open(os.path.join(args.out, "sb3_a2c.md"), "w") as f:
            f.write(text)
    return 0


def _pin_to_own_core(next_core) -> None:
    """Pool initialiser: this process gets the next core of the machine and one torch thread."""
    import torch
    with next_core.get_lock():
        core = sorted(os.sched_getaffinity(0))[next_core.value % len(os.sched_getaffinity(0))]
        next_core.value += 1
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)


def _run_mujoco(job) -> dict:
    env_id, seed, steps, eval_episodes = job
    result = run(env_id, seed, steps, eval_episodes)
    result.pop("reached")
    return result


def main_mujoco(args, sb3_version: str, torch) -> int:
    import multiprocessing
    jobs = [(env_id, seed, args.steps, args.eval_episodes)
            for env_id in args.envs for seed in args.seeds]
    lines = [f"| env | seed | eval of the final model ({args.eval_episodes} episodes, deterministic) | "
             "mean of the last 100 training episodes | env steps | wall s | env steps/s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    results = []
    if args.jobs > 1:
        context = multiprocessing.get_context("spawn")
        pool = context.Pool(args.jobs, _pin_to_own_core, (context.Value("i", 0),))
        outcomes = pool.imap(_run_mujoco, jobs)
        threads = f"{args.jobs} runs at once, each pinned to its own core with 1 torch thread"
    else:
        outcomes = map(_run_mujoco, jobs)
        threads = f"one run at a time, {torch.get_num_threads()} torch threads"
    for r in outcomes:  # the files are written after each run: a failure loses no finished one
        results.append(r)
        lines.append(f"| {r['env']} | {r['seed']} | {r['eval']:,.0f} | {r['last_100']:,.0f} | "
                     f"{r['steps']:,} | {r['wall']:.0f} | {r['steps_per_s']:,.0f} |")
        print(lines[-1], flush=True)
        text = (f"# Stable-Baselines3 A2C on MuJoCo, rl-zoo settings (normalize: true, one env)"
                f"\n\n`{args.command}` (stable-baselines3 {sb3_version}, torch "
                f"{torch.__version__}, {threads})\n\n" + "\n".join(lines) + "\n")
        if not args.no_save:
            with open(os.path.join(args.out, f"sb3_a2c_mujoco{args.tag}.md"), "w") as f:
                f.write(text)
            with open(os.path.join(args.out, f"sb3_a2c_mujoco{args.tag}.json"), "w") as f:
                json.dump(results, f, indent=1)
    if args.jobs > 1:
        pool.close()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
