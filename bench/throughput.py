"""Throughput benchmark: env steps/s of the trainer against a bare environment loop.

    python bench/throughput.py --also-unpinned         # the full grid (~30 minutes on 2 cores)
    python bench/throughput.py --envs Pendulum-v1 --workers 8 --envs-per-worker 1 4 16 --no-save
    python bench/throughput.py --envs ALE/Pong-v5 --workers 2 4 8 --envs-per-worker 8 \
        --variant use_lstm=true --variant pin_threads=true --repeats 1 --tag _atari  # ~15 minutes

For a classic-control env it first times a bare single-thread loop (gym.make, a fixed valid
action, no policy); for an Atari game, each cell's limit is as many games in one ale-py vector env
on as many C++ threads as its workers run (workers x atari_threads), stepped with a fixed action
and no network.
Then it trains for a fixed number of env steps with every (workers, envs per worker) pair, and
again with each --variant's overrides, each in a fresh process (so that its peak RSS is its own),
`--repeats` times. Reported: env steps/s (Atari: env frames/s, 4 per agent step) in the steady
state (after the first 20% of the run, when every worker's session calls are warm; median over
repeats), the ratio to the bare loop or limit measured in this same run, CPU utilisation
(process CPU seconds / wall / cores, whole run) and peak RSS. Writes results/throughput<tag>.md
and .png unless --no-save. Run it alone: on 2 cores, anything else running changes the figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import config as config_module  # noqa: E402  (plain Python: no TensorFlow in the parent)
from console import OneLineParser, UsageError  # noqa: E402
from environments import probe_spec  # noqa: E402

FIXED_ACTIONS = {"Pendulum-v1": [0.0], "CartPole-v1": 0}


def bare_loop(env_id: str, steps: int) -> float:
    """Steps/s of one thread stepping the env with a fixed action, resetting at episode ends."""
    import gymnasium as gym
    import numpy as np

    env = gym.make(env_id)
    action = FIXED_ACTIONS.get(env_id)
    if action is None:
        action = env.action_space.sample()
    action = np.array(action, np.float32) if isinstance(action, list) else action
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def bare_atari(env_id: str, cfg, games: int, threads: int, seconds: float = 4.0) -> float:
    """Agent steps/s of the trainer's own ale-py vector env of `games` games on `threads` C++
    threads (what a cell's workers run in all), made as the cell's cfg makes it (its frame size,
    sticky actions), stepped with a fixed action and no network: the limit the trainer's cell is
    measured against."""
    import numpy as np

    import environments

    envs = environments.make_envs(env_id, dataclasses.replace(cfg, atari_threads=threads), games)
    try:
        envs.reset(np.arange(games))
        actions = np.zeros(games, np.int32)
        for _ in range(20):  # the threads start and the first frames are drawn
            envs.step(actions)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            envs.step(actions)  # the vector env starts ended games anew by itself
            count += 1
        return count * games / (time.perf_counter() - start)
    finally:
        envs.close()


def steady_rate(rows: dict, summary: dict) -> tuple[float, bool]:
    """(env steps/s, steady): the rate from the first episode recorded after 20% of the run to
    the run's end, or, where no episode ended after that point in time for it, the whole run's
    rate, start-up included (steady False)."""
    import numpy as np

    late = np.nonzero(rows["wall_s"] >= 0.2 * summary["wall_s"])[0]
    if len(late) == 0 or summary["wall_s"] - rows["wall_s"][late[0]] < 0.5:
        return summary["steps_per_s"], False
    i = late[0]
    return (summary["env_steps"] - rows["env_steps"][i]) / (summary["wall_s"] - rows["wall_s"][i]), True


def child(env_id: str, workers: int, envs_per_worker: int, steps: int, repeats: int, sets: list) -> None:
    """Runs in a fresh process: train `repeats` times, print one JSON line."""
    import a3c
    import cpus
    import runlog

    overrides = config_module.parse_overrides(sets)
    runs = []
    with tempfile.TemporaryDirectory() as workdir:
        for repeat in range(repeats):
            cfg = dataclasses.replace(config_module.config_for(env_id), workers=workers,
                                      envs_per_worker=envs_per_worker, max_steps=steps,
                                      max_episodes=None, seed=100 + repeat, **overrides)
            summary = a3c.train(env_id, cfg, workdir, show_plot=False, out=io.StringIO())
            rows = runlog.read_episodes(os.path.join(summary["run_dir"], "episodes.csv"))
            rate, steady = steady_rate(rows, summary)
            runs.append(dict(steps_per_s=rate, steady=steady,
                             cpu_utilisation=summary["cpu_utilisation"]))
    print(json.dumps(dict(runs=runs, pinned=cpus.cpu_layout(cfg) is not None,
                          peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))


def measure(env_id, workers, envs_per_worker, steps, repeats, sets) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", env_id, str(workers),
               str(envs_per_worker), str(steps), str(repeats)] + [f"--set={s}" for s in sets]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{env_id} {workers}x{envs_per_worker} failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rates = [r["steps_per_s"] for r in result["runs"]]
    return dict(env=env_id, workers=workers, envs_per_worker=envs_per_worker, sets=list(sets),
                steps_per_s=statistics.median(rates), spread=(min(rates), max(rates)),
                cpu=statistics.median(r["cpu_utilisation"] for r in result["runs"]),
                steady=all(r["steady"] for r in result["runs"]),
                pinned=result["pinned"], rss_mb=result["peak_rss_mb"])


CELL_FIELDS = {"workers", "envs_per_worker", "max_steps", "max_episodes", "seed"}  # child() sets them


def variant_sets(variant: str) -> list:
    """"a=1,b=2,3" -> ["a=1", "b=2,3"]: a comma starts a new setting only before KEY=, so that
    list values (actor_hidden=64,64) stay whole."""
    return [part for part in re.split(r",(?=\s*\w+\s*=)", variant) if part.strip()]


def cell_overrides(env_id: str, sets: list) -> dict:
    """The overrides of `sets` (ValueError if one is bad, is set by the grid itself, or gives
    the env a config that cannot run, as a3c.py would refuse it)."""
    overrides = config_module.parse_overrides(sets)
    clash = sorted(set(overrides) & CELL_FIELDS)
    if clash:
        raise ValueError(f"{clash[0]} is set by the grid itself")
    dataclasses.replace(config_module.config_for(env_id), **overrides).validate()
    return overrides


def steps_for(env_id: str, workers: int, envs_per_worker: int) -> int:
    """Long enough for a steady state: at least 3 episodes per env for Pendulum's 200-step waves."""
    envs = workers * envs_per_worker
    if env_id.startswith("ALE/"):  # past the first games' ends: an untrained Pong game lasts
        return max(60_000, 1_200 * envs)  # 760+ agent steps, and env steps count every game's
    return max(40_000, 3 * 200 * envs) if env_id == "Pendulum-v1" else max(40_000, 150 * envs)


def main(argv=None) -> int:
    parser = OneLineParser(prog="bench/throughput.py", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--envs", nargs="+", default=["Pendulum-v1", "CartPole-v1"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--envs-per-worker", nargs="+", type=int, default=[1, 4, 8, 16, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--also-unpinned", action="store_true",
                        help="also time every cell that pins its threads with pin_threads=false, "
                             "right after it")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="also time every cell with these overrides, right after it "
                             "(--variant use_lstm=true)")
    parser.add_argument("--out", default=os.path.join(ROOT, "results"))
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--tag", default="", help="suffix of the output names: --tag _atari "
                        "writes throughput_atari.md and .png")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        env_id, workers, per_worker, steps, repeats = args.child
        child(env_id, int(workers), int(per_worker), int(steps), int(repeats), args.set)
        return 0

    for flag, values in (("--workers", args.workers), ("--envs-per-worker", args.envs_per_worker),
                         ("--repeats", [args.repeats])):
        if min(values) < 1:
            parser.error(f"{flag} must be >= 1, got {min(values)}")
    overrides = {}  # (env, variant) -> its overrides: a bad one fails now, not after an hour
    for variant in [""] + args.variant:
        for env_id in args.envs:
            try:
                overrides[env_id, variant] = cell_overrides(env_id, args.set + variant_sets(variant))
            except ValueError as exc:
                parser.error(f"{'--variant ' + variant if variant else '--set'}: {exc}")
    for env_id in args.envs:  # an env the trainer cannot use fails now, in one line
        try:
            probe_spec(env_id, config_module.config_for(env_id))
        except UsageError as exc:
            parser.error(str(exc))
    args.commit = git_commit()  # the code about to be timed, before any edit (not in each child)
    if not args.no_save:
        os.makedirs(args.out, exist_ok=True)  # now, not after the measurements
    rows, bare, limits = [], {}, {}
    for env_id in args.envs:
        atari = env_id.startswith("ALE/")
        if not atari:
            bare[env_id] = statistics.median(bare_loop(env_id, 50_000) for _ in range(args.repeats))
            print(f"{env_id}: bare loop {bare[env_id]:,.0f} steps/s", flush=True)
        for workers in args.workers:
            for per_worker in args.envs_per_worker:
                steps = steps_for(env_id, workers, per_worker)
                for variant in [""] + args.variant:
                    sets = args.set + variant_sets(variant)
                    row = measure(env_id, workers, per_worker, steps, args.repeats, sets)
                    cell = [row]
                    pins_itself = "pin_threads" in config_module.parse_overrides(variant_sets(variant))
                    if row["pinned"] and args.also_unpinned and not pins_itself:
                        unpinned = [s for s in sets if s.split("=")[0].strip() != "pin_threads"]
                        cell.append(dict(measure(env_id, workers, per_worker, steps, args.repeats,
                                                 unpinned + ["pin_threads=false"]), comparison=True))
                    for row in cell:
                        row["variant"] = variant
                        if atari:  # as many games on as many env threads, with no network
                            cfg = dataclasses.replace(config_module.config_for(env_id),
                                                      **overrides[env_id, variant])
                            threads = workers * cfg.atari_threads
                            key = (env_id, workers * per_worker, threads, cfg.cnn,
                                   cfg.repeat_action_probability)  # what shapes the frames' cost
                            if key not in limits:  # noisy on a shared host: 3 windows, once
                                limits[key] = statistics.median(
                                    bare_atari(env_id, cfg, workers * per_worker, threads)
                                    for _ in range(max(3, args.repeats)))
                            row["bare"], row["bare_threads"] = limits[key], threads
                        else:
                            row["bare"] = bare[env_id]
                        row["ratio"] = row["steps_per_s"] / row["bare"]
                        rows.append(row)
                        print(f"  {workers:>2} workers x {per_worker:>2} envs"
                              f"{'' if row['pinned'] else ', unpinned'}"
                              f"{' ' + variant if variant else ''}: "
                              f"{row['steps_per_s']:>7,.0f} steps/s ({row['ratio']:.2f} x bare "
                              f"{row['bare']:,.0f}), CPU {row['cpu']:.0%}, "
                              f"peak RSS {row['rss_mb']:,.0f} MB", flush=True)
    text = table(rows, bare, args)
    print(text)
    if not args.no_save:
        with open(os.path.join(args.out, f"throughput{args.tag}.md"), "w") as f:
            f.write(text + "\n")
        plot(rows, bare, os.path.join(args.out, f"throughput{args.tag}.png"))
    return 0


def git_commit() -> str:
    """The checkout's commit, with "+changes" if its Python files have uncommitted edits."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, text=True,
                                capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ":(top)*.py"], cwd=here, text=True, capture_output=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


def save_results(script: str, title: str, commit: str, table: str, setting: str = "",
                 about: str = "") -> None:
    """results/<script>.md: the title, the command line that ran bench/<script>.py, the cores
    (and setting), the versions and the commit, then about and the table."""
    import sessions
    path = os.path.join(ROOT, "results", f"{script}.md")
    with open(path, "w") as f:
        f.write(f"# {title}\n\n`python bench/{script}.py{' '.join([''] + sys.argv[1:])}` on "
                f"{len(os.sched_getaffinity(0))} cores{setting}; versions: {sessions.versions()}; "
                f"code at git commit {commit}.\n\n{about}{table}\n")
    print(f"wrote {os.path.relpath(path, ROOT)}")


def table(rows, bare, args) -> str:
    import sessions
    from environments import FRAME_SKIP

    lines = ["# Throughput benchmark", "",
             f"`python bench/throughput.py{' '.join([''] + sys.argv[1:])}` on "
             f"{os.cpu_count()} cores, {args.repeats} runs per cell "
             f"(median, min..max), overrides: {', '.join(args.set) or 'none'}; versions: "
             f"{sessions.versions()}; code at git commit {args.commit}.", "",
             "Threads pinned: the workers share one CPU and TensorFlow's op pool has the others "
             "(`pin_threads`, from 3 workers; on by default for classic control, off in the Atari "
             "preset); unpinned: threads run anywhere and ops run in the calling thread.", "",
             ]
    if any(not r["steady"] for r in rows):
        lines += ["A rate marked * includes a whole run's rate, start-up included: in at least one "
                  "of its runs no episode ended late enough to time a steady window from.", ""]
    if bare:
        lines += ["| env | workers | envs/worker | threads | env steps/s | min..max | × bare loop "
                  "| CPU | peak RSS MB |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for env_id in bare:
        lines.append(f"| {env_id} | bare loop, 1 thread | | | {bare[env_id]:,.0f} | | 1.00 | | |")
        for r in (r for r in rows if r["env"] == env_id):
            lines.append(f"| {env_id} | {r['workers']} | {r['envs_per_worker']} | "
                         f"{'pinned' if r['pinned'] else 'unpinned'}"
                         f"{', ' + r['variant'] if r['variant'] else ''} | "
                         f"{r['steps_per_s']:,.0f}{'' if r['steady'] else '*'} | "
                         f"{r['spread'][0]:,.0f}..{r['spread'][1]:,.0f} | "
                         f"{r['ratio']:.2f} | {r['cpu']:.0%} | {r['rss_mb']:,.0f} |")
    atari = [r for r in rows if r["env"].startswith("ALE/")]
    if atari:
        if bare:
            lines.append("")
        lines += [f"Atari: env frames/s are agent steps/s x {FRAME_SKIP} (each action is repeated on "
                  f"{FRAME_SKIP} frames). The limit: as many games in one ale-py vector env on as "
                  "many C++ env threads as the cell's workers run (workers x atari_threads), "
                  f"stepped with a fixed action and no network, in this same run (median of "
                  f"{max(3, args.repeats)} windows of 4 s, measured once per games and threads).", "",
                  "| env | workers | envs/worker | settings | threads | env frames/s | min..max "
                  "| agent steps/s | limit: bare vector env frames/s (env threads) | × limit | CPU "
                  "| peak RSS MB |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in atari:
            lines.append(f"| {r['env']} | {r['workers']} | {r['envs_per_worker']} | "
                         f"{', '.join(r['sets']) or 'preset'} | "
                         f"{'pinned' if r['pinned'] else 'unpinned'} | "
                         f"{FRAME_SKIP * r['steps_per_s']:,.0f}{'' if r['steady'] else '*'} | "
                         f"{FRAME_SKIP * r['spread'][0]:,.0f}..{FRAME_SKIP * r['spread'][1]:,.0f} | "
                         f"{r['steps_per_s']:,.0f} | "
                         f"{FRAME_SKIP * r['bare']:,.0f} ({r['bare_threads']}) | "
                         f"{r['ratio']:.2f} | {r['cpu']:.0%} | {r['rss_mb']:,.0f} |")
    return "\n".join(lines)


def plot(rows, bare, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from environments import FRAME_SKIP  # already imported by table()

    atari = list(dict.fromkeys(r["env"] for r in rows if r["env"].startswith("ALE/")))
    panels = list(bare) + atari
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5.5), squeeze=False)
    for ax, env_id in zip(axes[0], panels):
        env_rows = [r for r in rows if r["env"] == env_id]
        scale = FRAME_SKIP if env_id in atari else 1
        default = [r for r in env_rows if not r.get("comparison")]
        unpinned = [r for r in env_rows if not r["pinned"]]  # the comparison and 1-2 workers
        series = sorted({(r["envs_per_worker"], r["variant"]) for r in env_rows})
        plain_limits = {(r["envs_per_worker"], r["workers"]): r["bare"]
                        for r in default if not r["variant"]}
        for colour, (per_worker, variant) in enumerate(series):
            name = (f"{per_worker} env{'s' if per_worker > 1 else ''} per worker"
                    f"{', ' + variant if variant else ''}")
            line = [r for r in default if (r["envs_per_worker"], r["variant"]) == (per_worker, variant)]
            ax.plot([r["workers"] for r in line], [scale * r["steps_per_s"] for r in line],
                    marker="o", color=f"C{colour}", label=name)
            # a variant's own limit only where its frames differ (another frame size, say)
            if env_id in atari and (not variant or any(
                    plain_limits.get((per_worker, r["workers"])) != r["bare"] for r in line)):
                ax.plot([r["workers"] for r in line], [scale * r["bare"] for r in line],
                        color="black" if not variant else f"C{colour}", linestyle=":", alpha=0.6,
                        label=f"{name}: limit (bare vector env)")
            line = [r for r in unpinned if (r["envs_per_worker"], r["variant"]) == (per_worker, variant)]
            if any(r.get("comparison") for r in line):
                ax.plot([r["workers"] for r in line], [scale * r["steps_per_s"] for r in line],
                        color=f"C{colour}", linestyle="--", marker="x", alpha=0.5,
                        label=f"{name}, unpinned")
        if env_id in bare:
            ax.axhline(bare[env_id], color="black", linestyle="--", label="bare env loop, 1 thread")
            ax.axhline(bare[env_id] / 2, color="gray", linestyle=":", label="half the bare loop")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("worker threads")
        ax.set_ylabel("env frames/s (median)" if env_id in atari else "env steps/s (median)")
        ax.set_title(env_id)
        ax.grid(alpha=0.3)
        if env_id in atari:
            ax.legend(fontsize=7)
    if bare:  # one legend for the classic panels, below them, off the data
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
        fig.tight_layout(rect=(0, 0.16, 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
