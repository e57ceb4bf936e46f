"""Learning benchmark: several seeds per environment with the default presets.

    python bench/learning.py                          # Pendulum, CartPole, Acrobot; seeds 1-9
    python bench/learning.py --envs Pendulum-v1 --seeds 11 12 13 --set n_steps=10 --no-save
    python bench/learning.py --envs Pendulum-v1 --versus envs_per_worker=1 --tag _vs_envs1
    python bench/learning.py --envs ALE/Pong-v5 --seeds 1 --frames 20e6 --tag _pong

For each run it reports when the mean of the last 100 raw episode returns first reached the
target (episode, env steps, wall seconds), the final and best mean-100, the mean return of the
deterministic policy of the run's best checkpoint over 20 episodes (Atari: 5 games; what
`a3c.py --eval RUN` plays) and the throughput; then the median over seeds, and on how many seeds each column is at
or above the target. Writes results/learning.md and results/learning_<env>.png (mean and
min..max band of the mean-100 curve over seeds), unless --no-save. Runs one training at a time:
on a 2-core machine two benchmarks side by side measure each other. With --versus, every seed
also runs with those overrides right next to the plain run (which of the two goes first
alternates by seed, so a drift in the host's speed hits both), and the ratios of the medians
are measured in this one run.
"""
from __future__ import annotations

import dataclasses
import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import a3c  # noqa: E402
import best_agent  # noqa: E402
import checkpoints  # noqa: E402
import environments  # noqa: E402
import runlog  # noqa: E402
import sessions  # noqa: E402
from console import OneLineParser, UsageError  # noqa: E402
import config as config_module  # noqa: E402
from targets import (ATARI_TARGETS, CLEANRL_PPO_LAST_100, MUJOCO_STEPS, MUJOCO_TARGETS,  # noqa: E402
                     TARGETS)


def first_reach(rows: dict, target: float):
    """Index of the first episode whose mean-100 (over a full window) reached the target, or None."""
    full = np.arange(len(rows["episode"])) >= runlog.RUNNING_WINDOW - 1
    hits = np.nonzero(full & (rows["running_return"] >= target))[0]
    return int(hits[0]) if len(hits) else None


def target_of(env_id: str) -> float:
    if environments.is_atari(env_id):
        return ATARI_TARGETS.get(env_id, np.inf)
    if env_id in MUJOCO_TARGETS:
        return MUJOCO_TARGETS[env_id][0]
    return TARGETS.get(env_id, (np.inf,))[0]


def bare_loop_steps_per_s(env_id: str, seconds: float = 5.0) -> float:
    """Env steps/s of one env stepped with random actions in a plain loop, nothing else: the
    ceiling a run is measured against, taken right before it (hosts drift by the hour)."""
    import gymnasium as gym
    environments.quiet_mujoco_warnings()
    env = gym.make(env_id)
    env.reset(seed=0)
    env.action_space.seed(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        steps += 100
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def run_config(env_id: str, seed: int, overrides: dict, frames: int):
    """A run's config: the env's preset, the benchmark's budget, then the overrides."""
    atari, mujoco = environments.is_atari(env_id), env_id in MUJOCO_TARGETS
    budget = (dict(max_episodes=None, max_steps=frames // environments.FRAME_SKIP) if atari  # frames
              else dict(max_episodes=None, max_steps=MUJOCO_STEPS) if mujoco
              else dict(max_episodes=TARGETS.get(env_id, (np.inf, 1000))[1]))
    preset = config_module.config_for(env_id, sync=overrides.get("sync_updates", False))
    cfg = dataclasses.replace(preset, seed=seed, **budget)
    return dataclasses.replace(cfg, **overrides)  # --set max_episodes=... may extend the budget


def check_runs(envs: list, seeds: list, sides: dict, frames: int) -> None:
    """Every run's env and config, before the first one trains: a bad one would otherwise end
    the benchmark after hours of the others, and take their table with it (UsageError)."""
    if not (np.isfinite(frames) and frames >= 4):
        raise UsageError(f"--frames must be a number >= 4, got {frames:g}")
    for env_id in envs:
        for overrides in sides.values():
            for seed in seeds:
                try:
                    cfg = run_config(env_id, seed, overrides, int(frames))
                    cfg.validate()
                except ValueError as exc:
                    raise UsageError(f"{env_id} seed {seed}: {exc}") from None
            a3c.probe_spec(env_id, cfg)


def run_one(env_id: str, seed: int, overrides: dict, workdir: str, frames: int) -> dict:
    target, atari = target_of(env_id), environments.is_atari(env_id)
    mujoco = env_id in MUJOCO_TARGETS
    bare = bare_loop_steps_per_s(env_id) if mujoco else None
    cfg = run_config(env_id, seed, overrides, frames)
    budget_text = (f"{cfg.max_steps * environments.FRAME_SKIP / 1e6:g}M frames" if atari and cfg.max_steps
                   else f"{cfg.max_steps / 1e6:g}M steps" if mujoco else f"{cfg.max_episodes} ep")
    summary = a3c.train(env_id, cfg, workdir, show_plot=False, out=io.StringIO())
    rows = runlog.read_episodes(os.path.join(summary["run_dir"], "episodes.csv"))
    evaluation = a3c.evaluate(summary["run_dir"], episodes=ATARI_EVAL_GAMES if atari else EVAL_EPISODES,
                              out=io.StringIO())
    if os.sep + best_agent.BEST_FOLDER + os.sep not in evaluation["checkpoint"]:  # it played the latest
        evaluation["mean"] = float("nan")
    hit = first_reach(rows, target)
    return dict(env=env_id, seed=seed, budget=budget_text, rows=rows, bare_steps_per_s=bare,
                steps_per_s=summary["steps_per_s"],
                wall_s=summary["wall_s"], env_steps=summary["env_steps"],
                final=float(rows["running_return"][-1]),
                best=float(np.max(rows["running_return"][runlog.RUNNING_WINDOW - 1:], initial=-np.inf)),
                eval_best=evaluation["mean"],
                hit_episode=None if hit is None else int(rows["episode"][hit]),
                hit_steps=None if hit is None else int(rows["env_steps"][hit]),
                hit_wall=None if hit is None else float(rows["wall_s"][hit]))


EVAL_EPISODES = 20
ATARI_EVAL_GAMES = 5  # a whole game lasts thousands of steps


def fmt(value, spec="{:,.0f}"):
    return "never" if value is None else spec.format(value)


def median_or_never(values):
    """Median over seeds, where a seed that never reached the target counts as infinitely late."""
    ranked = sorted(np.inf if v is None else v for v in values)
    m = float(np.median(ranked))
    return None if not np.isfinite(m) else m


def table(results: list[dict]) -> str:
    lines = ["| env | seed | target (mean-100) | reached at episode | env steps | wall s | "
             f"final mean-100 | best mean-100 | eval of the best checkpoint ({EVAL_EPISODES} "
             f"episodes, Atari {ATARI_EVAL_GAMES} games) | "
             "env steps/s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for env_id in dict.fromkeys(r["env"] for r in results):
        runs = [r for r in results if r["env"] == env_id]
        target = target_of(env_id)
        for r in runs:
            lines.append(f"| {env_id} | {r['seed']} | {target:g} in {r['budget']} | "
                         f"{fmt(r['hit_episode'])} | {fmt(r['hit_steps'])} | "
                         f"{fmt(r['hit_wall'], '{:.1f}')} | {r['final']:.1f} | {r['best']:.1f} | "
                         f"{r['eval_best']:.1f} | {r['steps_per_s']:,.0f} |")
        lines.append(f"| **{env_id}** | **median** | | "
                     f"**{fmt(median_or_never([r['hit_episode'] for r in runs]))}** | "
                     f"**{fmt(median_or_never([r['hit_steps'] for r in runs]))}** | "
                     f"**{fmt(median_or_never([r['hit_wall'] for r in runs]), '{:.1f}')}** | "
                     f"{np.median([r['final'] for r in runs]):.1f} | "
                     f"{np.median([r['best'] for r in runs]):.1f} | "
                     f"{np.median([r['eval_best'] for r in runs]):.1f} | "
                     f"{np.median([r['steps_per_s'] for r in runs]):,.0f} |")

        def at_target(key):
            return f"{sum(r[key] is not None and r[key] >= target for r in runs)} of {len(runs)}"
        lines.append(f"| **{env_id}** | **seeds at/above target** | | "
                     f"**{sum(r['hit_episode'] is not None for r in runs)} of {len(runs)}** | | | "
                     f"**{at_target('final')}** | {at_target('best')} | "
                     f"**{at_target('eval_best')}** | |")
    return "\n".join(lines)


def mujoco_table(results: list[dict]) -> str:
    """MuJoCo's protocols side by side: the deterministic eval of the best checkpoint over 20
    episodes against rl-baselines3-zoo's A2C (must) and tuned PPO (goal) at 1M steps, and the
    mean of the last 100 training episodes against CleanRL's PPO; speed against a bare loop."""
    lines = ["| env | seed | eval of the best (20 episodes, deterministic) | must: rl-zoo A2C | "
             "goal: rl-zoo PPO | final mean-100 (last 100 training episodes) | CleanRL PPO, "
             "same protocol | best mean-100 | wall s | env steps/s | bare env loop steps/s | "
             "run / bare |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for env_id in dict.fromkeys(r["env"] for r in results):
        runs = [r for r in results if r["env"] == env_id]
        must, goal = MUJOCO_TARGETS[env_id]
        cleanrl = CLEANRL_PPO_LAST_100[env_id]
        for r in runs:
            lines.append(f"| {env_id} | {r['seed']} | {r['eval_best']:,.0f} | {must:,.0f} | "
                         f"{goal:,.0f} | {r['final']:,.0f} | {cleanrl:,.0f} | {r['best']:,.0f} | "
                         f"{r['wall_s']:.0f} | {r['steps_per_s']:,.0f} | "
                         f"{r['bare_steps_per_s']:,.0f} | "
                         f"{r['steps_per_s'] / r['bare_steps_per_s']:.2f} |")
        median = {key: float(np.median([r[key] for r in runs]))
                  for key in ("eval_best", "final", "best", "wall_s", "steps_per_s",
                              "bare_steps_per_s")}
        lines.append(f"| **{env_id}** | **median** | **{median['eval_best']:,.0f}** | | | "
                     f"**{median['final']:,.0f}** | | {median['best']:,.0f} | "
                     f"{median['wall_s']:.0f} | {median['steps_per_s']:,.0f} | "
                     f"{median['bare_steps_per_s']:,.0f} | "
                     f"{median['steps_per_s'] / median['bare_steps_per_s']:.2f} |")
        lines.append(f"| **{env_id}** | **seeds at/above** | "
                     f"**must: {sum(r['eval_best'] >= must for r in runs)} of {len(runs)}, goal: "
                     f"{sum(r['eval_best'] >= goal for r in runs)} of {len(runs)}** | | | "
                     f"**{sum(r['final'] >= cleanrl for r in runs)} of {len(runs)} at CleanRL's** "
                     f"| | | | | | |")
    return "\n".join(lines)


def versus_table(base: list[dict], variant: list[dict], versus: str) -> str:
    """Per env, both sides' medians and variant / plain: wall time to the target (a run that never
    reached it counts as infinitely late, and, for a lower bound, as late as its whole run), env
    steps to the target and speed."""
    def ratio(a, b):
        return "n/a" if a is None or b is None else f"{b / a:.2f}x"

    lines = ["| env | seeds that reached the target | median wall s to target | ratio | "
             "the same, a never counted at its run's wall (lower bound) | ratio | "
             "median env steps to target | ratio | env steps/s | ratio |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for env_id in dict.fromkeys(r["env"] for r in base):
        sides = [[r for r in runs if r["env"] == env_id] for runs in (base, variant)]
        reached = [f"{sum(r['hit_wall'] is not None for r in runs)} of {len(runs)}" for runs in sides]
        wall = [median_or_never([r["hit_wall"] for r in runs]) for runs in sides]
        bound = [median_or_never([r["wall_s"] if r["hit_wall"] is None else r["hit_wall"]
                                  for r in runs]) for runs in sides]
        steps = [median_or_never([r["hit_steps"] for r in runs]) for runs in sides]
        speed = [float(np.median([r["steps_per_s"] for r in runs])) for runs in sides]
        lines.append(f"| {env_id} | {' / '.join(reached)} | "
                     f"{' / '.join(fmt(w, '{:.1f}') for w in wall)} | {ratio(*wall)} | "
                     f"{' / '.join(fmt(w, '{:.1f}') for w in bound)} | {ratio(*bound)} | "
                     f"{' / '.join(fmt(n) for n in steps)} | {ratio(*steps)} | "
                     f"{' / '.join(f'{v:,.0f}' for v in speed)} | {ratio(*speed)} |")
    return "\n".join(lines)


def plot(results: list[dict], env_id: str, path: str, settings: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in results if r["env"] == env_id]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if env_id in MUJOCO_TARGETS:  # episodes of different lengths (a fall ends one): env steps
        grid = np.linspace(0, min(r["rows"]["env_steps"][-1] for r in runs), 200)
        def on_grid(rows):
            known = np.isfinite(rows["running_return"])
            return np.interp(grid, rows["env_steps"][known], rows["running_return"][known])
        curves = np.stack([on_grid(r["rows"]) for r in runs])
        x, x_of = grid, (lambda r: r["rows"]["env_steps"])
        ax.set_xlabel("env steps")
    else:
        length = min(len(r["rows"]["running_return"]) for r in runs)
        curves = np.stack([r["rows"]["running_return"][:length] for r in runs])
        x, x_of = np.arange(1, length + 1), (lambda r: r["rows"]["episode"])
        ax.set_xlabel("episode")
    for r in runs:
        ax.plot(x_of(r), r["rows"]["return"], alpha=0.12, linewidth=0.6)
    ax.fill_between(x, curves.min(0), curves.max(0), alpha=0.3, color="tab:blue",
                    label=f"min..max over {len(runs)} seeds")
    ax.plot(x, curves.mean(0), color="tab:blue", linewidth=2, label="mean of the mean-100")
    target = target_of(env_id)
    if np.isfinite(target):
        ax.axhline(target, color="tab:red", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_ylabel("raw return (thin: episodes; band: mean-100)")
    preset = "default preset" + (f" + {settings}" if settings != "none" else "")
    ax.set_title(f"A3C on {env_id}, {preset}, seeds {', '.join(str(r['seed']) for r in runs)}",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = OneLineParser(prog="bench/learning.py", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--envs", nargs="+", default=list(TARGETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(1, 10)))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field for every run (tuning)")
    parser.add_argument("--versus", action="append", default=[], metavar="KEY=VALUE",
                        help="also run every seed with these overrides (on top of --set), next "
                             "to the plain run, and report the ratios")
    parser.add_argument("--frames", type=float, default=10e6,
                        help="Atari ids: the budget in emulator frames (agent steps x 4)")
    parser.add_argument("--out", default="results", help="where learning.md and the plots go")
    parser.add_argument("--keep-runs", metavar="DIR", help="write the run folders there and keep "
                        "them (default: a temporary folder, deleted at the end)")
    parser.add_argument("--tag", default="", help="suffix of the output names, e.g. _vs_envs1 writes "
                        "learning_vs_envs1.md and learning_vs_envs1_<env>.png")
    parser.add_argument("--name", default="learning", help="the output names' stem: --name mujoco "
                        "writes results/mujoco.md and mujoco_<env>.png")
    parser.add_argument("--no-save", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    versus = ", ".join(args.versus)  # the variant's name in the tables
    try:
        args.envs = [environments.canonical_env_id(env_id) for env_id in args.envs]  # as a3c.py's
        overrides = config_module.parse_overrides(args.set)
        sides = {"plain": overrides}
        if args.versus:
            sides[versus] = {**overrides, **config_module.parse_overrides(args.versus)}
        check_runs(args.envs, args.seeds, sides, args.frames)
    except (ValueError, UsageError) as exc:
        print(f"bench/learning.py: error: {exc}", file=sys.stderr)
        return 2

    results = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.keep_runs or scratch
        for env_id in args.envs:
            for i, seed in enumerate(args.seeds):
                for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
                    r = run_one(env_id, seed, sides[side], workdir, int(args.frames))
                    results[side].append(r)
                    print(f"{env_id} seed {seed}" + (f" ({side})" if args.versus else "") +
                          f": reached at episode {fmt(r['hit_episode'])}, final mean-100 "
                          f"{r['final']:.1f}, eval of the best {r['eval_best']:.1f}, "
                          f"{r['steps_per_s']:,.0f} steps/s, "
                          f"{r['wall_s']:.0f} s", flush=True)
    text = table(results["plain"])
    if any(r["env"] in MUJOCO_TARGETS for r in results["plain"]):
        text = (f"{mujoco_table([r for r in results['plain'] if r['env'] in MUJOCO_TARGETS])}"
                f"\n\nThe table every env gets (target: the must-reach value, as mean-100):"
                f"\n\n{text}")
    if args.versus:
        text += (f"\n\nThe same seeds with {versus}, each run next to the plain one:\n\n"
                 f"{table(results[versus])}\n\nSide by side (each cell: plain / {versus}; "
                 f"medians over seeds; ratio = {versus} / plain):\n\n"
                 f"{versus_table(results['plain'], results[versus], versus)}")
    print(text)
    if not args.no_save:
        os.makedirs(args.out, exist_ok=True)
        settings = ", ".join(args.set) or "none"
        command = " ".join(["python bench/learning.py"] + (argv if argv is not None else sys.argv[1:]))
        with open(os.path.join(args.out, f"{args.name}{args.tag}.md"), "w") as f:
            f.write(f"# Learning benchmark\n\n`{command}` (overrides: {settings}); "
                    f"versions: {sessions.versions()}.\n\n{text}\n")
        for env_id in args.envs:
            plot(results["plain"], env_id,
                 os.path.join(args.out, f"{args.name}{args.tag}_{checkpoints.file_name(env_id)}.png"), settings)
            if args.versus:
                plot(results[versus], env_id,
                     os.path.join(args.out, f"{args.name}{args.tag}_versus_{checkpoints.file_name(env_id)}.png"),
                     ", ".join(args.set + args.versus))
    return 0


if __name__ == "__main__":
    sys.exit(main())
