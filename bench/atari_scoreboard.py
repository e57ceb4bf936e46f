"""Atari scoreboard: Pong on seeds 1-3, Breakout and SpaceInvaders at 40M frames, beside the
published anchors at equal frames.

    python bench/atari_scoreboard.py run --runs RUNS      # trains what is missing, one at a time
    python bench/atari_scoreboard.py report --runs RUNS   # results/atari.md, curves and GIFs

`run` trains each game and seed of SCOREBOARD with its preset (8 workers) under RUNS, one run at
a time: each for the preset's 40M frames, Pong until the mean of the last 100 games reaches +18
or 2 hours of training if either comes first (it stops such a run as Ctrl-C does: the checkpoint
is saved first). A run stopped part-way (Ctrl-C, SIGTERM, a session's end) is continued with
`a3c.py --resume` the next time, so the scoreboard carries across sessions; a finished one is
left alone.

`report` reads the run folders: frames, wall hours, frames/s, the mean-100 at 10M, 20M and 40M
frames, the frames and hours at which the mean-100 first reached 0 and +18, and the deterministic
eval of the best checkpoint over 10 games (what `a3c.py --eval RUN --episodes 10` plays), beside
the anchors; one curve per game (mean-100 against frames and against wall hours) and a GIF of
each game's best agent (its first seconds, the colour screen). Writes results/atari.md,
results/atari_<game>.png and .gif unless --no-save.
"""
from __future__ import annotations

import argparse
import glob
import io
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import runlog  # noqa: E402
from checkpoints import file_name, latest_checkpoint, read_run  # noqa: E402
from console import UsageError  # noqa: E402
from environments import FRAME_SKIP  # noqa: E402

PONG_GOAL, PONG_HOURS = 18.0, 2.0
# (game, seed, stop): stop at this mean-100 or after these hours; None: the preset's budget
SCOREBOARD = [("ALE/Pong-v5", seed, (PONG_GOAL, PONG_HOURS)) for seed in (1, 2, 3)] + [
    ("ALE/Breakout-v5", 1, None), ("ALE/SpaceInvaders-v5", 1, None)]
WORKERS = 8
MILESTONES = (10e6, 20e6, 40e6)  # frames
EVAL_GAMES = 10
GIF_STEPS = 450  # 30 seconds of play at the console's pace
# Published scores at 10M agent steps (40M frames), each with its protocol:
# rl-baselines3-zoo's benchmark (mean return of the final model's evaluation episodes, its
# Atari wrappers, sticky actions off) and CleanRL's PPO (mean return of its last training episodes).
ANCHORS = {
    "ALE/Pong-v5": {"rl-zoo A2C": 17.3, "rl-zoo PPO": 21.0, "CleanRL PPO": 20.4},
    "ALE/Breakout-v5": {"rl-zoo A2C": 279.8, "rl-zoo PPO": 398.0, "CleanRL PPO": 414.7},
    "ALE/SpaceInvaders-v5": {"rl-zoo A2C": 627.2, "rl-zoo PPO": 960.3},
}


def short_name(game: str) -> str:
    """ALE/Pong-v5 -> Pong: the name of the game's files under results/."""
    return game.split("/")[-1].rsplit("-v", 1)[0]


def run_folder(runs: str, game: str, seed: int):
    """The newest run folder of game and seed under runs, or None."""
    found = sorted(glob.glob(os.path.join(runs, file_name(game), f"*-s{seed}")))
    return found[-1] if found else None


def steps_done(folder: str, rows) -> int:
    """The env steps a run has trained: its newest checkpoint's (they name it) or its last
    game's, whichever is later (no game may end in a run's last rollouts)."""
    last_game = int(rows["env_steps"][-1]) if rows is not None and len(rows["episode"]) else 0
    try:
        checkpoint = latest_checkpoint(os.path.join(folder, "checkpoints"))
    except UsageError:
        return last_game
    return max(last_game, int(checkpoint.rsplit("-", 1)[1]))


def progress(folder: str) -> dict:
    path = os.path.join(folder, "episodes.csv")
    rows = runlog.read_episodes(path) if os.path.exists(path) else None
    frames = steps_done(folder, rows) * FRAME_SKIP
    if rows is None or not len(rows["episode"]):
        return dict(rows=rows, frames=frames, hours=0.0, mean_100=float("nan"))
    full = len(rows["episode"]) >= runlog.RUNNING_WINDOW
    return dict(rows=rows, frames=frames, hours=float(rows["wall_s"][-1]) / 3600,
                mean_100=float(rows["running_return"][-1]) if full else float("nan"))


def stop_reached(folder: str, stop) -> bool:
    """Whether a run reached its stop (mean-100, hours) before its budget: at any game, as the
    games that end while a stopped run saves can take its last mean-100 back below the goal."""
    done = progress(folder)
    return stop is not None and done["rows"] is not None and (
        reached(done["rows"], stop[0]) is not None or done["hours"] >= stop[1])


def finished(folder: str, stop) -> bool:
    _, cfg = read_run(folder)
    return stop_reached(folder, stop) or progress(folder)["frames"] >= cfg.max_steps * FRAME_SKIP


class Terminated(Exception):
    """SIGTERM reached the scoreboard (a session's end, a kill): its run is stopped as by Ctrl-C."""


def on_sigterm(signum, frame):
    raise Terminated


def train(runs: str, game: str, seed: int, stop, workers: int = WORKERS) -> None:
    """Start or continue one run, and stop it (as Ctrl-C does) once it reaches its stop; a run
    that ends on its budget ends by itself (its final checkpoint and trials are not cut)."""
    folder = run_folder(runs, game, seed)
    if folder is not None and not os.path.exists(os.path.join(folder, "checkpoints", "checkpoint")):
        folder = None  # stopped before its first checkpoint: nothing to resume, start afresh
    if folder is not None and finished(folder, stop):
        print(f"{game} seed {seed}: finished ({folder})", flush=True)
        return
    command = [sys.executable, os.path.join(ROOT, "a3c.py"), "--no-plot"] + (
        ["--resume", folder] if folder is not None else
        ["--env", game, "--seed", str(seed), "--workers", str(workers), "--results-dir", runs])
    print(f"{game} seed {seed}: {' '.join(command[1:])}", flush=True)
    child = subprocess.Popen(command)
    stopped = False

    def stop_child():  # SIGTERM, which a3c.py takes as Ctrl-C: a background start ignores SIGINT
        nonlocal stopped
        if not stopped and child.poll() is None:
            stopped = True
            child.send_signal(signal.SIGTERM)

    try:
        try:
            while child.poll() is None:
                time.sleep(10)
                current = run_folder(runs, game, seed)
                if current is not None and stop_reached(current, stop):
                    stop_child()
                    child.wait()
        except Terminated:  # pass it on, once, and let the run save
            stop_child()
            child.wait()
            raise SystemExit(f"{game} seed {seed}: terminated; `run` again continues it")
    except KeyboardInterrupt:  # the child got the Ctrl-C too: let it save and stop
        child.wait()
        raise
    if child.returncode not in (0, 130):
        raise SystemExit(f"{game} seed {seed}: a3c.py ended with status {child.returncode}")


def reached(rows: dict, level: float):
    """(frames, hours) when the mean-100 over a full window first reached level, or None."""
    from learning import first_reach  # bench/ is on the path
    hit = first_reach(rows, level)
    if hit is None:
        return None
    return int(rows["env_steps"][hit]) * FRAME_SKIP, float(rows["wall_s"][hit]) / 3600


def mean_100_at(rows: dict, frames: float, frames_done: int):
    """The mean-100 of the last episode that ended by `frames`, if the run got that far."""
    steps = rows["env_steps"] * FRAME_SKIP
    if not len(steps) or frames_done < frames:
        return None
    return float(rows["running_return"][np.searchsorted(steps, frames, side="right") - 1])


def evaluate_best(folder: str, gif_path) -> str:
    """The eval of a run's best checkpoint (or of its latest, where it has none: said so), and
    the first seconds of its first game as a GIF at gif_path."""
    import a3c
    result = a3c.evaluate(folder, episodes=EVAL_GAMES, record=gif_path is not None,
                          out=io.StringIO())
    if gif_path is not None and "animation" in result:
        from PIL import Image
        with Image.open(result["animation"]) as gif:  # the first seconds are enough here
            frames, durations = [], []
            for index in range(gif.n_frames):
                gif.seek(index)
                frames.append(gif.convert("RGB"))
                durations.append(gif.info["duration"])
                if sum(durations) >= GIF_STEPS * 1000 / 15:
                    break
        frames[0].save(gif_path, save_all=True, append_images=frames[1:], duration=durations,
                       loop=0)
    best = os.path.basename(os.path.dirname(result["checkpoint"])) == "best"
    return cell(result["mean"]) + ("" if best else " (latest checkpoint: no best yet)")


def cell(value, spec="{:,.1f}"):
    return "—" if value is None else spec.format(value)


def report(runs: str, out: str, save: bool, scoreboard=SCOREBOARD) -> str:
    lines = ["| game | seed | frames | wall h | frames/s | mean-100 at 10M | 20M | 40M | "
             "final mean-100 | Pong: mean-100 0 reached at (frames, h) | +18 reached at | "
             f"eval of the best ({EVAL_GAMES} games) | anchors at 40M frames |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    curves, gifs = {}, set()
    for game, seed, _ in scoreboard:
        folder = run_folder(runs, game, seed)
        if folder is None:
            lines.append(f"| {game} | {seed} | not run | | | | | | | | | | |")
            continue
        done = progress(folder)
        rows = done["rows"]
        if rows is None or not len(rows["episode"]):
            lines.append(f"| {game} | {seed} | no game finished yet | | | | | | | | | | |")
            continue
        curves.setdefault(game, []).append((seed, rows))
        gif = os.path.join(out, f"atari_{short_name(game)}.gif") if save else None
        first_seed = min(s for g, s, _ in SCOREBOARD if g == game)
        try:
            score = evaluate_best(folder, gif if seed == first_seed else None)
            if gif is not None and seed == first_seed:
                gifs.add(game)
        except UsageError as exc:
            score = f"none: {exc}"
        reach = ["—" if game != "ALE/Pong-v5" else "never" if hit is None else
                 f"{hit[0] / 1e6:.1f}M, {hit[1]:.2f} h"
                 for hit in (reached(rows, level) for level in (0.0, PONG_GOAL))]
        anchors = ", ".join(f"{name} {value:g}" for name, value in ANCHORS[game].items())
        lines.append(
            f"| {game} | {seed} | {done['frames'] / 1e6:.1f}M | {done['hours']:.2f} | "
            f"{rows['env_steps'][-1] * FRAME_SKIP / max(rows['wall_s'][-1], 1e-9):,.0f} | "
            + " | ".join(cell(mean_100_at(rows, m, done["frames"])) for m in MILESTONES)
            + f" | {cell(None if np.isnan(done['mean_100']) else done['mean_100'])} | "
            + " | ".join(reach) + f" | {score} | {anchors} |")
        print(lines[-1], file=sys.stderr, flush=True)  # progress: the document goes to stdout
    text = "\n".join(lines)
    if save:
        for game, runs_of_game in curves.items():
            plot(game, runs_of_game, os.path.join(out, f"atari_{short_name(game)}.png"))
    pictures = [f"![{game}: mean-100 against frames and hours](atari_{short_name(game)}.png)"
                + (f" ![{game}: the best agent's first seconds](atari_{short_name(game)}.gif)"
                   if game in gifs else "") for game in curves if save]
    return text + "\n\n" + "\n\n".join(pictures) if pictures else text


def plot(game: str, runs_of_game: list, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (by_frames, by_hours) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for seed, rows in runs_of_game:
        full = np.arange(len(rows["episode"])) >= runlog.RUNNING_WINDOW - 1
        by_frames.plot(rows["env_steps"][full] * FRAME_SKIP / 1e6, rows["running_return"][full],
                       label=f"seed {seed}")
        by_hours.plot(rows["wall_s"][full] / 3600, rows["running_return"][full], label=f"seed {seed}")
    for name, value in ANCHORS[game].items():
        by_frames.axhline(value, linestyle="--", linewidth=0.8, color="grey")
        by_frames.annotate(f"{name} at 40M", (0, value), fontsize=7, color="grey",
                           textcoords="offset points", xytext=(2, 2))
    by_frames.set_xlabel("frames (millions)")
    by_hours.set_xlabel("wall hours on 2 cores")
    by_frames.set_ylabel("mean of the last 100 games")
    for ax in (by_frames, by_hours):
        ax.grid(alpha=0.3)
    by_hours.legend(loc="lower right")
    fig.suptitle(f"A3C on {game}, the Atari preset, {WORKERS} workers", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()),
                                     epilog="run: trains what is missing, one run at a time, "
                                     "resuming runs stopped part-way; report: writes the table, "
                                     "curves and GIFs")
    parser.add_argument("what", choices=("run", "report"))
    parser.add_argument("--runs", required=True, help="the folder that holds (or will hold) "
                        "the run folders, as ALE_<Game>-v5/<run>/")
    parser.add_argument("--games", nargs="+", help="only these games (default: every game of "
                        "the scoreboard); report: with --no-save only")
    parser.add_argument("--out", default=os.path.join(ROOT, "results"),
                        help="report: where atari.md and its pictures go (default: results/)")
    parser.add_argument("--no-save", action="store_true", help="report: print, write nothing")
    args = parser.parse_args(argv)
    if args.what == "report" and not os.path.isdir(args.runs):
        parser.error(f"--runs {args.runs} is not a folder: give the one `run` trained into")
    if os.path.exists(os.path.join(args.runs, "config.json")) or glob.glob(
            os.path.join(args.runs, "*", "config.json")):
        parser.error(f"--runs {args.runs} holds run folders itself: give the folder above its "
                     f"ALE_<Game>-v5/ folders")
    if args.what == "report" and args.games and not args.no_save:
        parser.error("report --games would rewrite atari.md with only those games' rows: "
                     "report every game (drop --games), or add --no-save")
    if args.what == "report" and not args.no_save and not os.path.isdir(args.out):
        parser.error(f"--out {args.out} is not a folder: make it, or give --no-save")
    if args.games:
        unknown = set(args.games) - {game for game, _, _ in SCOREBOARD}
        if unknown:
            parser.error(f"not on the scoreboard: {', '.join(sorted(unknown))}")
    scoreboard = [entry for entry in SCOREBOARD if not args.games or entry[0] in args.games]
    if args.what == "run":
        signal.signal(signal.SIGTERM, on_sigterm)
        for game, seed, stop in scoreboard:
            train(args.runs, game, seed, stop)
        return 0
    table = report(args.runs, args.out, not args.no_save, scoreboard)
    command = " ".join(["python bench/atari_scoreboard.py"] + (argv if argv is not None else sys.argv[1:]))
    text = (f"# Atari scoreboard\n\n`{command}`. Each game with the Atari preset (config.py's "
            f"ATARI: the small CNN on 42x42 frames, {WORKERS} workers x 8 games, no sticky actions, a "
            f"lost life the end of the learning return since 6d9e545: Pong has no lives), "
            f"on 2 cores, for 40M frames; Pong until its mean-100 reaches +{PONG_GOAL:g} "
            f"or {PONG_HOURS:g} hours if either comes first. Our scores are the mean of the "
            f"last 100 training games (mean-100) and the deterministic policy of the best "
            f"checkpoint over {EVAL_GAMES} games; the anchors are rl-baselines3-zoo's "
            f"benchmark (its final model's evaluation) and CleanRL's PPO (its last training "
            f"games), both at 10M agent steps (40M frames).\n\n{table}\n")
    print(text)
    if not args.no_save:
        with open(os.path.join(args.out, "atari.md"), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
