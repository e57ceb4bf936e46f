"""Atari scoreboard: Pong on seeds 1-3 (the preset's 50M frames at most, and the rows of its
earlier 40M), Breakout and SpaceInvaders at 40M frames (each with and without the LSTM: the
preset, and the variant), beside the published anchors at equal frames.

    python bench/atari_scoreboard.py run --runs RUNS      # trains what is missing, one at a time
    python bench/atari_scoreboard.py report --runs RUNS   # results/atari.md, curves and GIFs

`run` trains each game and seed of SCOREBOARD with its preset (8 workers) under RUNS, and each
variant (the preset with values changed, as --set does: the LSTM on or off) under
RUNS/<variant>/, one run at a time: each for its preset's budget (40M frames; Pong's 50M), Pong
until the mean of the last 100 games reaches +18 or after 2 hours of training, whichever comes
first (it stops such a run as Ctrl-C does: the checkpoint is saved first). A run stopped part-way (Ctrl-C, SIGTERM, a
session's end) is continued with `a3c.py --resume` the next time its folder is there (with the
row's budget, where the run's own is an earlier preset's); a finished one is left alone, and so
is one whose finished row `report` kept in results/atari_runs.json. A run folder counts for a
row only if its config holds that row's values (a variant's, or the preset's), its budget aside.
The rows of an earlier preset (RETIRED: Pong's 40M-frame budget) are shown as kept, never trained,
and a folder of runs no row looks in (a variant the game has no row of) is named and left out.

`report` reads the run folders: frames, wall hours, frames/s, the mean-100 at 10M, 20M and 40M
frames, the frames and hours at which the mean-100 first reached 0 and +18, the deterministic
eval of the best checkpoint over 10 games (what `a3c.py --eval RUN --episodes 10` plays) and the
sampled policy of the latest checkpoint over 10 games (`--checkpoint latest --stochastic`: the
net and policy rl-baselines3-zoo scores its Atari agents by), beside the anchors; one curve per
game (mean-100 against frames and against wall hours) and a GIF of the best agent of the game's
first finished row (its first seconds, the colour screen), made from its run folder here or kept
from an earlier report, and named for its row. Writes results/atari.md, results/atari_<game>.png
and atari_<game>_s<seed>[_<variant>].gif unless --no-save, and keeps each run's row and curve in
results/atari_runs.json: a row whose run folder is not under RUNS (it trained on another
machine, or in an earlier session whose files are gone) is carried from there, and the table
says so.
"""
from __future__ import annotations

import dataclasses
import glob
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from console import quiet_ctrl_c_while_starting  # noqa: E402  (the standard library only)

# the imports below take seconds (TensorFlow, through checkpoints)
quiet_start = __name__ == "__main__" and quiet_ctrl_c_while_starting("atari_scoreboard.py")

import numpy as np  # noqa: E402

import config  # noqa: E402
import runlog  # noqa: E402
from checkpoints import LEAST_RATE_FRACTION, file_name, latest_checkpoint, read_run  # noqa: E402
from console import OneLineParser, UsageError, first_line  # noqa: E402
from environments import FRAME_SKIP  # noqa: E402

PONG_GOAL, PONG_HOURS = 18.0, 2.0
# A variant is the preset with some values changed (a3c.py's --set); its runs go under
# RUNS/<variant>/, its rows are named by it. docs/atari.md has why the LSTM was tried (Breakout's
# runs, then SpaceInvaders': it became both presets'); "feed-forward" is their preset before it;
# 40M is Pong's preset before its budget grew to 50M frames (its rows are carried from
# atari_runs.json).
VARIANTS = {"": {}, "lstm": {"use_lstm": True}, "feed-forward": {"use_lstm": False},
            "40M": {"max_steps": 10_000_000}}
RETIRED = ("40M",)  # an earlier preset's rows: `report` shows them as kept, `run` trains none
# A run's budget is no part of what it trained (a run resumed with a longer one is the same run):
# of_variant does not compare it; the folder a variant's runs go to tells them apart. Nor does
# it compare the seed (the folder's name holds it) or how a run was run rather than what it
# trained: threads, logging and checkpoint cadence.
BUDGETS = ("max_steps", "max_episodes")
NOT_TRAINED = BUDGETS + ("seed", "pin_threads", "atari_threads", "log_every_s",
                         "checkpoint_every_s", "keep_checkpoints", "best_checkpoint_every_s",
                         "best_trial_cpu_share")


def set_values(variant: str) -> list:
    """A variant's values as a3c.py's --set takes them: use_lstm=true."""
    return [f"{name}={str(value).lower() if isinstance(value, bool) else value}"
            for name, value in VARIANTS[variant].items()]


def row_difference(folder: str, game: str, variant: str) -> str | None:
    """How a run folder's config differs from what the row trains (the preset, with the
    variant's values), as "shared_lr=0.001 (the row's: 0.002)"; None where it is the row's, or
    where it cannot be read (the scoreboard's own checks then say what is wrong with it)."""
    try:
        cfg = read_run(folder)[1]
    except UsageError:
        return None
    wanted = dataclasses.replace(config.config_for(game), **VARIANTS[variant])
    unused = config.unused_fields(wanted, image=True, discrete=True)  # (the MLPs', sigma's...)
    for name in config.field_names():
        if name not in NOT_TRAINED and name not in unused and \
                getattr(cfg, name) != getattr(wanted, name):
            return f"{name}={getattr(cfg, name)} (the row's: {getattr(wanted, name)})"
    return None


def of_variant(folder: str, game: str, variant: str) -> bool:
    """Whether a run folder trained that row: the preset with the variant's values."""
    return row_difference(folder, game, variant) is None


def budget(game: str, variant: str = "") -> int:
    """The agent steps a row of the scoreboard trains: the preset's, or its variant's."""
    return VARIANTS[variant].get("max_steps", config.config_for(game).max_steps)


class Entry(NamedTuple):
    """One row of the scoreboard. stop: (mean-100, hours), the first reached ends the run; None:
    the preset's budget."""
    game: str
    seed: int
    stop: tuple | None = None
    variant: str = ""

    @property
    def key(self) -> str:  # its row's name in RECORDS
        return f"{self.game} {self.seed}" + (f" {self.variant}" if self.variant else "")

    @property
    def label(self) -> str:  # its seed cell and curve
        return f"{self.seed}" + (f" ({self.variant})" if self.variant else "")


SCOREBOARD = [Entry("ALE/Pong-v5", seed, (PONG_GOAL, PONG_HOURS), variant)
              for variant in ("", "40M") for seed in (1, 2, 3)] + [
    Entry("ALE/Breakout-v5", 1), Entry("ALE/Breakout-v5", 1, variant="feed-forward"),
    Entry("ALE/SpaceInvaders-v5", 1),
    Entry("ALE/SpaceInvaders-v5", 1, variant="feed-forward")]
WORKERS = 8
POLL_S = 10  # how often a run's folder is read for its stop
MILESTONES = (10e6, 20e6, 40e6)  # frames
EVAL_GAMES = 10
CELLS = 11  # a row's cells after game and seed, before the anchors
BEST_EVAL, FINAL_SAMPLED = 9, 10  # the cells of the two evals (an eval that failed: "none: ...")
CURVE_POINTS = 400  # per run, in the records: enough for a smooth curve
RECORDS = "atari_runs.json"  # beside atari.md: each run's row and curve, kept across machines
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


def run_folder(runs: str, game: str, seed: int, variant: str = ""):
    """The newest run folder of game and seed that trained that variant under runs, or None.
    Only folders named as a3c.py names them (<UTC stamp>-s<seed>[-n]) count: a copy or a note
    named otherwise would sort after them all."""
    named = re.compile(rf"\d{{8}}T\d{{6}}Z-s{seed}(-\d+)?")
    found = sorted((folder for folder in glob.glob(os.path.join(runs, variant, file_name(game), "*"))
                    if named.fullmatch(os.path.basename(folder)) and os.path.isdir(folder)),
                   key=start_order)
    of_row = []
    for folder in found:
        difference = row_difference(folder, game, variant)
        if difference is None:
            of_row.append(folder)
        elif folder not in LEFT_OUT:  # (said once: run_folder is asked again and again)
            LEFT_OUT.add(folder)
            print(f"{folder} is not a run of the row {game} seed {seed}"
                  + (f" ({variant})" if variant else "") + f": {difference}; left out",
                  file=sys.stderr, flush=True)
    return of_row[-1] if of_row else None


LEFT_OUT = set()  # the run folders run_folder has said are not their row's


def say_rowless_folders(runs: str, games: list) -> None:
    """Says which folders of games' runs under runs no row of the scoreboard looks in: a variant
    the game has no row of (RUNS/lstm/ALE_SpaceInvaders-v5 once its preset had the LSTM), whose
    runs would otherwise be passed over without a word while their row trains anew."""
    rows = {(entry.game, entry.variant) for entry in SCOREBOARD}
    for game in games:
        for variant in VARIANTS:
            folder = os.path.join(runs, variant, file_name(game))
            if (game, variant) not in rows and glob.glob(os.path.join(folder, "*", "config.json")):
                print(f"{folder}: no row of the scoreboard runs {game}"
                      + (f" with the variant {variant}" if variant else " with its preset")
                      + " (its rows: " + ", ".join(entry.label for entry in SCOREBOARD
                                                   if entry.game == game)
                      + "); its runs are left out (docs/atari.md says where a row's runs go)",
                      file=sys.stderr, flush=True)


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
    try:
        rows = runlog.read_episodes(path) if os.path.exists(path) else None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path} ({first_line(exc)}): if a run is training into it, "
                         f"try again; else {runlog.MEND_EPISODES}, or move that run folder out "
                         f"of --runs (`run` then trains that game and seed afresh)") from None
    frames = steps_done(folder, rows) * FRAME_SKIP
    if rows is None or not len(rows["episode"]):
        return dict(rows=rows, frames=frames, hours=0.0, mean_100=float("nan"))
    full = len(rows["episode"]) >= runlog.RUNNING_WINDOW
    return dict(rows=rows, frames=frames, hours=float(rows["wall_s"][-1]) / 3600,
                mean_100=float(rows["running_return"][-1]) if full else float("nan"))


def stop_reached(folder: str, stop) -> bool:
    """Whether a run reached its stop (mean-100, hours) before its budget: at any game, as the
    games that end while a stopped run saves can take its last mean-100 back below the goal."""
    if stop is None:
        return False
    done = progress(folder)
    return done["rows"] is not None and (
        reached(done["rows"], stop[0]) is not None or done["hours"] >= stop[1])


def finished(folder: str, stop, max_steps: int = None) -> bool:
    """Whether a run reached its stop or trained max_steps agent steps (default: its own budget,
    if it has one in steps; the scoreboard counts its row's, budget()), or so nearly that its
    annealed rates are below LEAST_RATE_FRACTION: a3c.py would refuse to resume it."""
    try:
        cfg = read_run(folder)[1]
    except UsageError:  # (a run that had not written its config: it trained nothing)
        if max_steps is None:
            raise
        cfg = None
    if max_steps is None:
        max_steps = cfg.max_steps
    annealed = cfg is None or cfg.anneal_lr
    if max_steps is None:
        return stop_reached(folder, stop)
    frames, budget_frames = progress(folder)["frames"], max_steps * FRAME_SKIP
    return stop_reached(folder, stop) or frames >= budget_frames or (
        annealed and frames > (1.0 - LEAST_RATE_FRACTION) * budget_frames)


def a3c_command(runs: str, game: str, seed: int, workers: int, variant: str, folder) -> list:
    """The a3c.py command that trains a row: a new run into runs/<variant>/, or a resume of
    folder, given the row's budget where its own differs (an earlier, shorter preset's: it goes on
    as a run started with the longer schedule would be now, docs/config.md)."""
    command = [sys.executable, os.path.join(ROOT, "a3c.py"), "--no-plot"]
    if folder is None:
        return command + ["--env", game, "--seed", str(seed), "--workers", str(workers),
                          "--results-dir", os.path.join(runs, variant)] + [
            part for value in set_values(variant) for part in ("--set", value)]
    cfg = read_run(folder)[1]
    steps = budget(game, variant)
    longer = ["--max-steps", str(steps)] * (cfg.max_steps is None or cfg.max_steps < steps) + \
        ["--max-episodes", "0"] * (cfg.max_episodes is not None)
    return command + ["--resume", folder] + longer


INTERRUPTED = 130  # the exit status of a scoreboard stopped by Ctrl-C or SIGTERM (as a shell's)


class Terminated(Exception):
    """SIGTERM reached the scoreboard (a session's end, a kill): its run is stopped as by Ctrl-C."""


def on_sigterm(signum, frame):
    raise Terminated


def start_held_back(command: list):
    """Popen(command) in a session of its own, and the (signal, handler) of each Ctrl-C or SIGTERM
    that came meanwhile, held back: raised during Popen, it would leave the child training unseen.
    (Only the main thread handles signals; another starts it as it is.)"""
    held_back, handlers = [], {}
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            if callable(signal.getsignal(number)):
                handlers[number] = signal.signal(number, lambda n, _: held_back.append(n))
    try:
        child = subprocess.Popen(command, start_new_session=True)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return child, [(number, handlers[number]) for number in held_back]


def train(runs: str, game: str, seed: int, stop, workers: int = WORKERS, variant: str = "",
          resume: bool = True) -> None:
    """Start or continue (resume) one run, and stop it (as Ctrl-C does) once it reaches its
    stop; a run that ends on its budget ends by itself (its final checkpoint and trials are not
    cut)."""
    name = f"{game} seed {seed}" + (f" ({variant})" if variant else "")
    known = run_folder(runs, game, seed, variant)  # (a new run's folder comes after it)
    folder = known if resume else None
    if folder is not None and not os.path.exists(os.path.join(folder, "checkpoints", "checkpoint")):
        folder = None  # stopped before its first checkpoint: nothing to resume, start afresh
    if folder is not None and finished(folder, stop, budget(game, variant)):
        print(f"{name}: finished ({folder})", flush=True)
        return
    command = a3c_command(runs, game, seed, workers, variant, folder)
    print(f"{name}: {' '.join(command[1:])}", flush=True)
    stopped = False

    def stop_child():  # SIGTERM, which a3c.py takes as Ctrl-C: a background start ignores SIGINT
        nonlocal stopped
        if not stopped and child.poll() is None:
            stopped = True
            child.send_signal(signal.SIGTERM)

    def wait_saved():
        """Wait for a run told to stop while it saves. A second signal is not passed on (a3c.py
        would take it as "stop at once" and skip the save); it is said once the run is saved."""
        signalled = None
        while True:
            try:
                child.wait()
                return signalled
            except Terminated:
                signalled = "terminated"
            except KeyboardInterrupt:
                signalled = "stopped by Ctrl-C"

    def interrupted(why: str):
        for stop_signal in (signal.SIGINT, signal.SIGTERM):  # (more of them: still one line, 130)
            signal.signal(stop_signal, signal.SIG_IGN)
        print(f"{name}: {why}; `run` again continues the scoreboard", file=sys.stderr,
              flush=True)
        return SystemExit(INTERRUPTED)

    # its own session: a terminal's Ctrl-C reaches the scoreboard only, which passes one SIGTERM on
    # (the child getting both, further apart than a3c.py's SAME_STOP_S, would skip its save)
    child, held_back = start_held_back(command)
    try:
        for number, handler in held_back:  # a stop that came as the child started: the child
            handler(number, None)           # exists now, and the handlers below stop it
        while child.poll() is None:
            time.sleep(POLL_S)
            current = run_folder(runs, game, seed, variant)
            if current is None or (folder is None and current == known):
                continue  # a new run's folder is not made yet: not an older run's stop
            try:
                stop_now = stop_reached(current, stop)
            except UsageError:  # a line half-written as it was read: the next look reads it whole
                continue
            if stop_now:
                stop_child()
                why = wait_saved()
                if why is not None:
                    raise interrupted(why)
    except Terminated:  # pass it on, once, and let the run save
        stop_child()
        wait_saved()
        raise interrupted("terminated") from None
    except KeyboardInterrupt:  # pass it on as SIGTERM, once, and let the run save
        stop_child()
        wait_saved()
        raise interrupted("stopped by Ctrl-C") from None
    if child.returncode not in (0, 130):
        raise SystemExit(f"{name}: a3c.py ended with status {child.returncode}")


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


def evaluate_best(folder: str, gif_path) -> tuple[str, bool]:
    """The eval of a run's best checkpoint (or of its latest, where it has none: said so), and
    whether the first seconds of its first game went to gif_path as a GIF."""
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
        frames[0].save(gif_path, format="GIF", save_all=True, append_images=frames[1:], duration=durations,
                       loop=0)
    best = os.path.basename(os.path.dirname(result["checkpoint"])) == "best"
    return (cell(result["mean"]) + ("" if best else " (latest checkpoint: no best yet)"),
            gif_path is not None and "animation" in result)


def evaluate_final_sampled(folder: str) -> str:
    """The net and policy rl-zoo scores: the latest checkpoint's sampled policy (a3c.py --eval
    RUN --checkpoint latest --stochastic), over EVAL_GAMES games."""
    import a3c
    try:
        result = a3c.evaluate(folder, episodes=EVAL_GAMES, checkpoint="latest", stochastic=True,
                              out=io.StringIO())
    except UsageError as exc:
        return f"none: {exc}"
    return cell(result["mean"])


def cell(value, spec="{:,.1f}"):
    return "—" if value is None else spec.format(value)


def load_records(out: str) -> dict:
    """The rows and curves `report` kept in out/RECORDS, by "game seed [variant]": a run folder does not
    outlive the machine it trained on, the scoreboard must."""
    path = os.path.join(out, RECORDS)
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            records = json.load(f)
        for record in records.values():
            if isinstance(record["cells"], list) and len(record["cells"]) == FINAL_SAMPLED:
                record["cells"].append("—")  # kept before that eval was made
            curve = record["curve"]
            if not (isinstance(record["run"], (str, type(None))) and len(record["cells"]) == CELLS
                    and all(isinstance(text, str) for text in record["cells"])
                    and isinstance(record["gif"], bool) and isinstance(record["finished"], bool)
                    and (curve is None or len(curve["frames"]) == len(curve["hours"])
                         == len(curve["mean_100"]))):
                raise ValueError("a row without its run, cells, curve, gif or finished")
            kept_frames(record)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UsageError(f"{path} is not the scoreboard's kept rows ({type(exc).__name__}: "
                         f"{exc}): restore it from git (git checkout -- {os.path.relpath(path, ROOT)}) or move it "
                         f"away") from None
    return records


def start_order(folder: str) -> tuple:
    """A run folder's place among its row's by start: its UTC stamp, then the -n a3c.py adds to a
    second run started within the same second (-s1-10 after -s1-9)."""
    stamp, _, rest = os.path.basename(folder).partition("-s")
    return stamp, int(rest.partition("-")[2] or 0)


def started_before(folder: str, kept: dict) -> bool:
    """Whether a run folder started before the run a kept row measured (folders are named by
    their start): it is not that run, nor a later try of the row."""
    return kept["run"] is not None and start_order(folder) < start_order(kept["run"])


def kept_row_stands(folder, kept, game: str, stop, variant: str = "") -> str | None:
    """Why the kept row of a run stands over the run folder here (None: the folder's row is
    measured). The folder wins when it is the kept run, or newer and finished too where the kept
    run had finished, or as far where it had not: a short try of a game, a restart of a run whose
    folder is gone, or an older copy must not replace it."""
    if kept is None or folder is None or kept["run"] == os.path.basename(folder):
        return None
    if started_before(folder, kept):
        return f"{folder} started before the run kept in {RECORDS} ({kept['run']})"
    if kept["finished"] and not finished(folder, stop, budget(game, variant)):
        return (f"{folder} has not finished the scoreboard's budget or stop, and the run kept in "
                f"{RECORDS} ({kept['run'] or 'an earlier one'}) had")
    frames = progress(folder)["frames"]
    if not kept["finished"] and frames < kept_frames(kept):  # (a restart, not yet as far)
        return (f"{folder} has trained {frames / 1e6:.1f}M frames, fewer than the run kept in "
                f"{RECORDS} ({kept['cells'][0]})")
    return None


def kept_frames(kept: dict) -> float:
    """The frames a kept row had trained: its first cell, as "31.8M" or "2.0M (unfinished)"."""
    return float(kept["cells"][0].split("M")[0]) * 1e6


def curve_of(rows: dict, points: int = CURVE_POINTS) -> dict:
    """The mean-100 curve of a run, thinned to about `points` games for the records."""
    full = np.flatnonzero(np.arange(len(rows["episode"])) >= runlog.RUNNING_WINDOW - 1)
    kept = full[np.unique(np.linspace(0, len(full) - 1, min(points, len(full))).astype(int))] \
        if len(full) else full
    return {"frames": [int(rows["env_steps"][i]) * FRAME_SKIP for i in kept],
            "hours": [round(float(rows["wall_s"][i]) / 3600, 4) for i in kept],
            "mean_100": [round(float(rows["running_return"][i]), 2) for i in kept]}


def record_of(folder: str, game: str, seed: int, stop, gif, variant: str = "") -> dict | None:
    """One run's row cells (after game and seed), its curve, whether it is finished and whether
    its GIF was written; None before its first game."""
    done = progress(folder)
    rows = done["rows"]
    if rows is None or not len(rows["episode"]):
        return None
    try:
        score, gif_written = evaluate_best(folder, gif)
    except UsageError as exc:
        score, gif_written = f"none: {exc}", False
    done_row = finished(folder, stop, budget(game, variant))
    reach = ["—" if game != "ALE/Pong-v5" else f"{hit[0] / 1e6:.1f}M, {hit[1]:.2f} h" if hit
             else "never" if done_row else "not yet"
             for hit in (reached(rows, level) for level in (0.0, PONG_GOAL))]
    cells = ([f"{done['frames'] / 1e6:.1f}M" + ("" if done_row else " (unfinished)"),
              f"{done['hours']:.2f}",
              f"{rows['env_steps'][-1] * FRAME_SKIP / max(rows['wall_s'][-1], 1e-9):,.0f}"]
             + [cell(mean_100_at(rows, m, done["frames"])) for m in MILESTONES]
             + [cell(None if np.isnan(done["mean_100"]) else done["mean_100"])] + reach + [score]
             + [evaluate_final_sampled(folder)])
    return {"run": os.path.basename(folder), "cells": cells, "curve": curve_of(rows),
            "finished": done_row,
            "gif": gif_written}


def measured_folders(runs: str, records: dict, scoreboard) -> dict:
    """{entry: (its run folder under runs, whether it finished)} for each row measured from a
    folder (where a kept row stands over one, it is said, and the row carried). Reads every CSV
    the report will: one it cannot read stops the report before it writes anything."""
    measured = {}
    for entry in scoreboard:
        folder = run_folder(runs, entry.game, entry.seed, entry.variant)
        if folder is None:
            continue
        stands = kept_row_stands(folder, records.get(entry.key), entry.game, entry.stop,
                                 entry.variant)
        if stands is not None:
            print(f"{entry.game} seed {entry.label}: {stands}: the kept row stays",
                  file=sys.stderr, flush=True)
            continue
        measured[entry] = folder, finished(folder, entry.stop, budget(entry.game, entry.variant))
    return measured


def gif_name(entry: Entry) -> str:
    """The file under results/ of a row's best agent's GIF: atari_Pong_s2.gif, and
    atari_Breakout_s1_feed-forward.gif for a variant's row."""
    return (f"atari_{short_name(entry.game)}_s{entry.seed}"
            + (f"_{entry.variant}" if entry.variant else "") + ".gif")


def gif_choices(measured: dict, records: dict, out: str, scoreboard) -> dict:
    """The row whose best agent each game's GIF shows: its first finished row that is measured
    from a run folder here (its GIF is made) or whose GIF an earlier report made in out; else
    its first row measured here or with such a GIF (a run still training)."""
    def choose(row_done):
        chosen = {}
        for entry in scoreboard:
            if entry.game in chosen:
                continue
            if entry in measured:
                done = measured[entry][1]
            else:
                kept = records.get(entry.key)
                if kept is None or not os.path.exists(os.path.join(out, gif_name(entry))):
                    continue
                done = kept["finished"]
            if done or not row_done:
                chosen[entry.game] = entry
        return chosen
    return {**choose(row_done=False), **choose(row_done=True)}


def report(runs: str, out: str, save: bool, records: dict, scoreboard=SCOREBOARD) -> str:
    """The table of the scoreboard's runs: measured from the run folders under runs where they
    are, else carried from records, the rows an earlier report kept in out (and said so)."""
    lines = ["| game | seed | frames | wall h | frames/s | mean-100 at 10M | 20M | 40M | "
             "final mean-100 | Pong: mean-100 0 reached at (frames, h) | +18 reached at | "
             f"eval of the best ({EVAL_GAMES} games) | the final net's sampled policy "
             f"({EVAL_GAMES} games: rl-zoo's choice of net and policy) | anchors at 40M frames |",
             "|" + " --- |" * (CELLS + 3)]
    shown, carried = {}, []
    staged = []  # GIFs written as .part, named with the rest once every row is measured
    measured = measured_folders(runs, records, scoreboard)
    gif_rows = gif_choices(measured, records, out, scoreboard) if save else {}
    try:
        for entry in scoreboard:
            game, seed, stop, key = entry.game, entry.seed, entry.stop, entry.key
            folder = measured.get(entry, (None, False))[0]
            kept = records.get(key)
            if folder is not None:
                gif = os.path.join(out, gif_name(entry) + ".part") \
                    if gif_rows.get(game) == entry else None
                staged += [gif] if gif is not None else []
                record = record_of(folder, game, seed, stop, gif, entry.variant)
                if record is None:
                    lines.append(f"| {game} | {entry.label} | no game finished yet |"
                                 + " |" * CELLS)
                    continue
                for index in (BEST_EVAL, FINAL_SAMPLED):
                    if record["cells"][index].startswith("none:") and kept is not None and \
                            kept["run"] == record["run"] and \
                            not kept["cells"][index].startswith(("none:", "—")):
                        # (a checkpoint replaced as it was read, say): not to be kept for good
                        print(f"{game} seed {entry.label}: its eval failed "
                              f"({record['cells'][index]}); the eval kept for this run in "
                              f"{RECORDS} stays", file=sys.stderr, flush=True)
                        record["cells"][index] = kept["cells"][index]
                records[key] = record
            elif kept is not None:
                record = kept
                carried.append(f"{short_name(game)} seed {entry.label}")
            else:
                lines.append(f"| {game} | {entry.label} | not run |" + " |" * CELLS)
                continue
            shown.setdefault(game, []).append((entry.label, record))
            anchors = ", ".join(f"{name} {value:g}" for name, value in ANCHORS[game].items())
            lines.append(f"| {game} | {entry.label} | " + " | ".join(record["cells"]) + f" | {anchors} |")
            print(lines[-1], file=sys.stderr, flush=True)  # progress: the document goes to stdout
    except BaseException:  # (a run folder it cannot read, Ctrl-C): nothing of this report stays
        for part in staged:
            if os.path.exists(part):
                os.remove(part)
        raise
    text = "\n".join(lines)
    if carried:
        text += (f"\n\nRows carried from {RECORDS}, as an earlier report measured them (their "
                 f"run folders are not under `--runs`, or are older or unfinished there): "
                 f"{', '.join(carried)}.")
    if not save:
        return text
    for part in staged:
        if os.path.exists(part):
            os.replace(part, part[:-len(".part")])
    with open(os.path.join(out, RECORDS + ".part"), "w") as f:  # (a cut write keeps the old)
        json.dump(records, f, indent=1, ensure_ascii=False)
    os.replace(os.path.join(out, RECORDS + ".part"), os.path.join(out, RECORDS))
    pictures = []
    for game, shown_runs in shown.items():
        png = f"atari_{short_name(game)}.png"
        curves = [(label, record["curve"]) for label, record in shown_runs if record["curve"]]
        if curves:
            plot(game, curves, os.path.join(out, png),
                 [label for label, record in shown_runs if not record["curve"]])
        # (else an earlier report's picture of these very runs stays: records kept before the
        # curves were have none)
        if os.path.exists(os.path.join(out, png)):
            pictures.append(f"![{game}: mean-100 against frames and hours]({png})")
            shown_gif = gif_rows.get(game)
            if shown_gif is not None and os.path.exists(os.path.join(out, gif_name(shown_gif))):
                pictures[-1] += (f" ![{game}, seed {shown_gif.label}: the best agent's first "
                                 f"seconds]({gif_name(shown_gif)})\n\n*{short_name(game)}'s "
                                 f"GIF: the best agent of seed {shown_gif.label}.*")
    return text + "\n\n" + "\n\n".join(pictures) if pictures else text


def plot(game: str, runs_of_game: list, path: str, without_curve=()) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (by_frames, by_hours) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for label, curve in runs_of_game:
        by_frames.plot(np.asarray(curve["frames"]) / 1e6, curve["mean_100"], label=f"seed {label}")
        by_hours.plot(curve["hours"], curve["mean_100"], label=f"seed {label}")
    for (name, value), style in zip(ANCHORS[game].items(), ("--", ":", "-.")):
        by_frames.axhline(value, linestyle=style, linewidth=0.8, color="grey",
                          label=f"{name} at 40M frames")  # (the legend: close values overlap)
    by_frames.set_xlabel("frames (millions)")
    by_hours.set_xlabel("wall hours on 2 cores")
    by_frames.set_ylabel("mean of the last 100 games")
    for ax in (by_frames, by_hours):
        ax.grid(alpha=0.3)
    by_frames.legend(loc="lower right", fontsize=7)
    by_hours.legend(loc="lower right")
    fig.suptitle(f"A3C on {game}, the Atari preset (a seed's variant: the preset with values "
                 f"changed, as atari.md says), {WORKERS} workers" + (
        f" (seeds {', '.join(map(str, without_curve))}: no curve kept)" if without_curve else ""),
        fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = OneLineParser(prog="bench/atari_scoreboard.py", description=" ".join(__doc__.split("\n\n")[0].split()),
                           epilog="run: trains what is missing, one run at a time, "
                                     "resuming runs stopped part-way; report: writes the table, "
                                     "curves and GIFs")
    parser.add_argument("what", choices=("run", "report"))
    parser.add_argument("--runs", required=True, help="the folder that holds (or will hold) "
                        "the run folders, as ALE_<Game>-v5/<run>/ and a variant's as "
                        "<variant>/ALE_<Game>-v5/<run>/")
    parser.add_argument("--games", nargs="+", help="only these games (default: every game of "
                        "the scoreboard); report: with --no-save only")
    parser.add_argument("--seeds", nargs="+", type=int, help="only these seeds (default: "
                        "every seed of the scoreboard); report: with --no-save only")
    parser.add_argument("--out", default=os.path.join(ROOT, "results"),
                        help="where atari.md, its pictures and the kept rows (atari_runs.json) "
                        "go; `run` skips a finished run kept there (default: results/)")
    parser.add_argument("--no-save", action="store_true", help="report: print, write nothing")
    args = parser.parse_args(argv)
    if not args.runs.strip():
        parser.error("--runs is empty: give the folder that holds (or will hold) the run folders")
    if os.path.basename(os.path.normpath(args.runs)) in {file_name(entry.game) for entry in SCOREBOARD}:
        parser.error(f"--runs {args.runs} is a game's folder: give the folder above it")
    if args.what == "report" and not os.path.isdir(args.runs):
        parser.error(f"--runs {args.runs} is not a folder: give the one `run` trained into")
    if os.path.exists(os.path.join(args.runs, "config.json")) or glob.glob(
            os.path.join(args.runs, "*", "config.json")):
        parser.error(f"--runs {args.runs} holds run folders itself: give the folder above its "
                     f"ALE_<Game>-v5/ folders")
    if os.path.basename(os.path.normpath(args.runs)) in set(VARIANTS) - {""}:
        parser.error(f"--runs {args.runs} is the folder of a variant's runs: give the folder "
                     f"above it, which holds the preset's ALE_<Game>-v5/ folders too")
    if args.what == "run" and args.no_save:
        parser.error("--no-save is for report (print, write nothing): run trains; drop it")
    for flag, chosen, rows in (("--games", args.games, "games'"), ("--seeds", args.seeds, "seeds'")):
        if args.what == "report" and chosen and not args.no_save:
            parser.error(f"report {flag} would rewrite atari.md with only those {rows} rows: "
                         f"report them all (drop {flag}), or add --no-save")
    if not os.path.isdir(args.out):  # (--no-save reads the kept rows there all the same)
        parser.error(f"--out {args.out} is not a folder: make it, or give the folder that holds "
                     f"{RECORDS} (default results/)")
    games = list(dict.fromkeys(entry.game for entry in SCOREBOARD))
    if args.games:
        unknown = set(args.games) - set(games)
        if unknown:
            parser.error(f"not on the scoreboard: {', '.join(sorted(unknown))} (its games: "
                         f"{', '.join(games)})")
    chosen = [game for game in games if not args.games or game in args.games]
    if args.seeds:  # each seed asked for must have a row among the games asked for
        seeds = {entry.seed for entry in SCOREBOARD if entry.game in chosen}
        missing = sorted(set(args.seeds) - seeds)
        if missing:
            parser.error(f"no row of the scoreboard has seed {', '.join(map(str, missing))}"
                         + (f" of {', '.join(chosen)}" if args.games else "") + " (its seeds: "
                         + "; ".join(f"{game} " + ", ".join(str(seed) for seed in sorted(
                             {entry.seed for entry in SCOREBOARD if entry.game == game}))
                             for game in chosen) + ")")
    scoreboard = [entry for entry in SCOREBOARD if entry.game in chosen
                  and (not args.seeds or entry.seed in args.seeds)]
    say_rowless_folders(args.runs, chosen)
    try:  # (a damaged file is no misused flag: one line, without the usage)
        records = load_records(args.out)
        return run_all(args.runs, scoreboard, records) if args.what == "run" else \
            write_report(args, argv, records, scoreboard)
    except UsageError as exc:  # atari_runs.json, or a run folder under --runs, damaged
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # (run passes its own on; this is report's)
        print(f"{args.what} stopped by Ctrl-C; run it again", file=sys.stderr)
        return INTERRUPTED


def run_all(runs: str, scoreboard: list, records: dict) -> int:
    """Train what the scoreboard lacks, one run at a time; a finished row kept is skipped."""
    before = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        for entry in scoreboard:
            kept = records.get(entry.key)
            folder = run_folder(runs, entry.game, entry.seed, entry.variant)
            if kept is not None and kept["finished"] and (
                    folder is None or kept_row_stands(folder, kept, entry.game, entry.stop,
                                                      entry.variant) is not None):
                print(f"{entry.game} seed {entry.label}: finished (its row is kept in {RECORDS})",
                      flush=True)
                continue
            if entry.variant in RETIRED:
                print(f"{entry.game} seed {entry.label}: a row of an earlier preset, not trained "
                      f"again", flush=True)
                continue
            older = kept is not None and folder is not None and started_before(folder, kept)
            if older:  # (report measures the kept run, not it: a new try of the row goes on)
                print(f"{entry.game} seed {entry.label}: {folder} started before the run kept in "
                      f"{RECORDS} ({kept['run']}); a new run starts", flush=True)
            train(runs, entry.game, entry.seed, entry.stop, variant=entry.variant,
                  resume=not older)
    except (KeyboardInterrupt, Terminated):  # between runs: none was training
        print("stopped between runs; `run` again continues the scoreboard", file=sys.stderr)
        return INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, before)
    return 0


def write_report(args, argv, records: dict, scoreboard: list) -> int:
    """atari.md (and its pictures and kept rows) from the runs under args.runs and records."""
    table = report(args.runs, args.out, not args.no_save, records, scoreboard)
    command = " ".join(["python bench/atari_scoreboard.py"] + (argv if argv is not None else sys.argv[1:]))
    text = (f"# Atari scoreboard\n\n`{command}`. Each game with the Atari preset (config.py's "
            f"ATARI: the small CNN on 42x42 frames, {WORKERS} workers x 8 games, no sticky actions, a "
            f"lost life the end of the learning return (since commit 6d9e545; Pong has no lives)), "
            f"on 2 cores; Breakout's and SpaceInvaders' own presets put an LSTM of "
            f"{config.config_for('ALE/Breakout-v5').lstm_units} cells after the CNN (the rows named "
            f"feed-forward ran the net they had before). Each for its preset's budget (40M "
            f"frames; Pong 50M, 40M in the rows named so), Pong stopping once its mean-100 reaches +{PONG_GOAL:g} "
            f"or after {PONG_HOURS:g} hours, whichever comes first. Our scores are the mean of the "
            f"last 100 training games (mean-100), the deterministic policy of the best "
            f"checkpoint over {EVAL_GAMES} games (`a3c.py --eval RUN --episodes {EVAL_GAMES}`), "
            f"and the final net's sampled policy over {EVAL_GAMES} games (`--checkpoint latest "
            f"--stochastic`: the net and policy rl-zoo scores, over fewer games; — in a row kept "
            f"before it was measured); the "
            f"anchors are rl-baselines3-zoo's benchmark (its final model's evaluation, which "
            f"samples the policy on Atari) and CleanRL's PPO (its last training games), both at "
            f"10M agent steps (40M frames). A row whose seed names a variant ran "
            f"the preset with these values changed: "
            + "; ".join(f"{name}: {', '.join(set_values(name))}" for name in VARIANTS
                        if name and any(entry.variant == name for entry in scoreboard))
            + f".\n\n{table}\n")
    print(text)
    if not args.no_save:
        with open(os.path.join(args.out, "atari.md"), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    if quiet_start:  # the imports are done: Ctrl-C is KeyboardInterrupt again
        signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
