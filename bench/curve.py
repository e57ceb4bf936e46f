"""One run's learning curve for the committed results: its raw episode returns and their mean over
the last 20 and 100 episodes, against env frames and against wall time, and a table of when each
mean first reached the given levels.

    python bench/curve.py results/ALE_Pong-v5/<run> --levels -20 -15 -10 0 18 --name pong_curve

An Atari agent step is FRAME_SKIP (4) emulator frames; other envs count one frame per env step.
Writes results/<name>.md and results/<name>.png (--out to put them elsewhere), read from the
run's episodes.csv, config.json and checkpoints/best/best.json: nothing is typed by hand.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import best_agent  # noqa: E402
import checkpoints  # noqa: E402
import environments  # noqa: E402
import runlog  # noqa: E402
from console import OneLineParser, UsageError, first_line  # noqa: E402


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` values at each index (NaN until there are that many)."""
    sums = np.cumsum(np.insert(values, 0, 0.0))
    means = np.full(len(values), np.nan)
    means[window - 1:] = (sums[window:] - sums[:-window]) / window
    return means


def first_at(means: np.ndarray, level: float):
    hits = np.nonzero(means >= level)[0]
    return int(hits[0]) if len(hits) else None


def mean_cell(mean: float) -> str:
    """A trailing mean's cell: n/a before there are as many episodes as it averages."""
    return "n/a" if np.isnan(mean) else f"{mean:.1f}"


def settings(cfg, atari: bool) -> str:
    """The run's settings that shape its curve: an Atari run's trunk and game settings, another
    run's networks and rates."""
    common = f"Settings: {cfg.workers} workers x {cfg.envs_per_worker} envs, n_steps {cfg.n_steps}, "
    annealed = " annealed" if cfg.anneal_lr else ""
    if atari:
        return (common + f"cnn {cfg.cnn} ({cfg.trunk_activation}), use_lstm {cfg.use_lstm}, "
                f"shared_lr {cfg.shared_lr:g}{annealed}, sticky actions "
                f"{cfg.repeat_action_probability:g}, pin_threads {cfg.pin_threads}.")
    if cfg.use_lstm:
        return common + f"use_lstm True, shared_lr {cfg.shared_lr:g}{annealed}."
    sizes = {net: "x".join(map(str, getattr(cfg, f"{net}_hidden"))) for net in ("actor", "critic")}
    return (common + f"actor {sizes['actor']} at {cfg.actor_lr:g}, critic {sizes['critic']} at "
            f"{cfg.critic_lr:g}{annealed}.")


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def refuse(why: str) -> int:
    print(f"curve.py: error: {why}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    parser = OneLineParser(prog="bench/curve.py", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("run_dir")
    parser.add_argument("--levels", nargs="+", type=float, default=[-20, -15, -10, 0, 18])
    parser.add_argument("--name", required=True, help="output names: <name>.md and <name>.png")
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    if not args.name.strip() or os.sep in args.name or args.name.startswith("."):
        parser.error(f"--name {args.name!r} is no file name: give a plain one (its files go "
                     f"under --out)")

    path = os.path.join(args.run_dir, "episodes.csv")
    try:
        env_id, cfg = checkpoints.read_run(args.run_dir)
        rows = runlog.read_episodes(path)
    except UsageError as exc:
        return refuse(str(exc))
    except (OSError, ValueError) as exc:
        return refuse(f"cannot read {path} ({first_line(exc)}): {runlog.MEND_EPISODES}")
    if not len(rows["episode"]):
        return refuse(f"{args.run_dir} has no finished episodes yet: nothing to draw")
    per_step = environments.FRAME_SKIP if environments.is_atari(env_id) else 1
    frames, wall, returns = rows["env_steps"] * per_step, rows["wall_s"], rows["return"]
    means = {20: trailing_mean(returns, 20), 100: trailing_mean(returns, 100)}
    tenths = [part for part in np.array_split(np.arange(len(returns)), 10) if len(part)]
    info = checkpoints.read_run_info(args.run_dir)
    best = best_agent.read_best_info(os.path.join(args.run_dir, checkpoints.CHECKPOINT_FOLDER, best_agent.BEST_FOLDER))

    resumes = len(info.get("resumed", []))
    lines = [f"# Learning curve: {env_id}", "",
             f"`python bench/curve.py {' '.join(argv if argv is not None else sys.argv[1:])}`, "
             f"from the run `{os.path.basename(os.path.normpath(args.run_dir))}` "
             f"(`{' '.join(info.get('argv', ['a3c.py']))}`, resumed {resumes} time{'' if resumes == 1 else 's'}); "
             f"versions: {info.get('versions')}.", "",
             settings(cfg, atari=per_step > 1), "",
             "| episodes | frames seen | wall time | frames/s | final mean-20 | final mean-100 | "
             "best mean-100 | best agent (deterministic trial games) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |",
             f"| {len(returns):,} | {frames[-1]:,.0f} | {hours(wall[-1])} | "
             f"{frames[-1] / wall[-1]:,.0f} | {mean_cell(means[20][-1])} | "
             f"{mean_cell(means[100][-1])} | "
             + (f"{np.nanmax(means[100]):.1f} | " if len(returns) >= 100 else "none | ")
             + (("none" if not best or "score" not in best else
                 f"{best['score']:.1f} over {best['trial_episodes']} (episode {best['episode']:,})"
                 if best.get("trial_episodes") else
                 f"no trials: its mean-100 {best['mean_100']:.1f} (episode {best['episode']:,})")
                + " |"), "",
             "Mean policy entropy of the games that ended in each tenth of the run (a uniform "
             "policy's is ln of the number of actions):", "",
             "| up to frames | " + " | ".join(f"{frames[tenth[-1]]:,.0f}" for tenth in tenths) + " |",
             "| --- |" + " --- |" * len(tenths),
             "| entropy | " + " | ".join(f"{rows['entropy'][tenth].mean():.3f}" for tenth in tenths)
             + " |", "",
             "When the mean of the last 20 / 100 games first reached each level:", "",
             "| level | mean-20: frames | mean-20: wall | mean-100: frames | mean-100: wall |",
             "| --- | --- | --- | --- | --- |"]
    for level in args.levels:
        cells = []
        for window in (20, 100):
            i = first_at(means[window], level)
            cells += ["not reached"] * 2 if i is None else [f"{frames[i]:,.0f}", hours(wall[i])]
        lines.append(f"| {level:g} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, x, label in ((axes[0], frames / 1e6, "frames (millions)"), (axes[1], wall / 3600, "wall hours")):
        ax.plot(x, returns, ".", markersize=2, alpha=0.3, color="gray", label="game score")
        ax.plot(x, means[20], color="tab:orange", label="mean of the last 20")
        ax.plot(x, means[100], color="tab:blue", linewidth=2, label="mean of the last 100")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("raw return")
    axes[0].legend(loc="upper left")
    fig.suptitle(f"A3C on {env_id}: {cfg.workers} workers x {cfg.envs_per_worker} envs, "
                 f"{frames[-1] / 1e6:.1f}M frames in {hours(wall[-1])}", fontsize=10)
    fig.tight_layout()
    os.makedirs(args.out, exist_ok=True)
    fig.savefig(os.path.join(args.out, f"{args.name}.png"), dpi=100)
    with open(os.path.join(args.out, f"{args.name}.md"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
