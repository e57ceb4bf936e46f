"""Run folders and checkpoints: where a run writes, saving and restoring the global net with its
RMSProp slots and env step count, and where a resumed run continues from."""
from __future__ import annotations

import dataclasses
import datetime
import math
import json
import os
import shutil
import re
import sys
import threading
import typing

try:
    import fcntl
except ImportError:  # (Windows: no lock)
    fcntl = None

import numpy as np

import config as config_module
from config import Config
from console import UsageError, attempt, counted, first_line, is_ctrl_c, warn
from runlog import (MEND_EPISODES, AnnealStart, RunHistory, anneal_used, annealed_fraction,
                    budget_used, read_episodes)
from sessions import tf, v1, versions


CHECKPOINT_FOLDER = "checkpoints"

ENV_ID_VARIABLE = "run/env_id"

ENV_STEPS_VARIABLE = "run/env_steps"
WALL_VARIABLE = "run/wall_s"  # the run's training seconds at the save (absent before 2026-12-05)
# the learning rates' fraction at the save, which a worker's sigma narrows with (final_sigma_scale):
# what --eval --stochastic plays it with (checkpoints written before it existed lack it)
LR_FRACTION_VARIABLE = "run/lr_fraction"


class Checkpoints:
    """Saves and restores the global net, its RMSProp slots, the run's env step counter, its
    seconds trained and its learning rates' fraction (the workers' own copies are pulled
    anew). Each save writes new files and only then swaps the "checkpoint" index file
    atomically, so a save cut short never leaves a broken latest.
    Built once the global net and its optimisers are in the graph: it saves what is there.

    save_lock: held by every save; --sync passes its rounds' lock (no save during an update),
    a cluster's chief the lock of its local copy of the ps's net. before_save(sess): run first
    under that lock (the chief: bring the ps's net home)."""

    def __init__(self, run_dir: str, cfg: Config, env_id: str, save_lock=None, before_save=None):
        self.folder = os.path.join(run_dir, CHECKPOINT_FOLDER)
        self.env_id = env_id
        # saved and checked on restore, so that a checkpoint is never restored for another env
        self.env_id_variable = v1.Variable(env_id, name=ENV_ID_VARIABLE, trainable=False)
        # the run's own scalars, set at each save (a resumed run's clock goes on from wall_s:
        # episodes.csv's last row may be well before it)
        records = [run_record(name, dtype, initializer) for name, dtype, initializer in (
            (ENV_STEPS_VARIABLE, tf.int64, v1.zeros_initializer()),
            (WALL_VARIABLE, tf.float64, v1.zeros_initializer()),
            (LR_FRACTION_VARIABLE, tf.float32, v1.ones_initializer()))]
        (self.env_steps, self.wall_s, self.lr_fraction), self.records_in, self.set_records = (
            zip(*records))
        shared = [v for v in v1.global_variables() if not v.op.name.startswith("worker_")]
        # relative paths in the index: a run folder that is moved reads its own files
        self.saver = v1.train.Saver(var_list=shared, max_to_keep=cfg.keep_checkpoints,
                                    save_relative_paths=True)
        self.keep, self.beyond_keep = cfg.keep_checkpoints, []
        self.shared = shared
        self.slots = [v for v in shared if "/RMSProp" in v.op.name]
        self.before_save = before_save
        self.save_lock = threading.RLock() if save_lock is None else save_lock

    def save(self, sess, env_steps: int, wall_s: float, lr_fraction: float) -> None:
        with self.save_lock:
            if self.before_save is not None:
                self.before_save(sess)
            sess.run(self.set_records,
                     dict(zip(self.records_in, (env_steps, wall_s, lr_fraction))))
            self.saver.save(sess, os.path.join(self.folder, "model"), global_step=env_steps,
                            write_meta_graph=False)  # nothing reads it; it is ~1 MB and GIL-bound
            for stale in self.beyond_keep:  # once a newer one is written, not before
                attempt(f"remove the checkpoint {stale}", v1.train.remove_checkpoint, stale)
            self.beyond_keep = []

    def restore(self, sess) -> tuple[int, float, float]:
        """Restore the latest checkpoint; returns its env step count, training seconds and
        learning rates' fraction (0 and 1 for a checkpoint written before they were saved)."""
        checkpoint = latest_checkpoint(self.folder)
        missing = restore_checkpoint(sess, self.saver, checkpoint, self.shared, self.env_id,
                                     optional=[*self.slots, self.wall_s, self.lr_fraction])
        if set(missing) - {WALL_VARIABLE, LR_FRACTION_VARIABLE}:
            warn(f"{checkpoint} holds no RMSProp averages (written before they were saved): "
                 f"the optimisers start theirs afresh")
        # so that keep_checkpoints counts them too
        self.beyond_keep = adopt_checkpoints(self.saver, self.folder, self.keep)
        env_steps, wall_s, lr_fraction = sess.run([self.env_steps, self.wall_s, self.lr_fraction])
        return int(env_steps), float(wall_s), float(lr_fraction)


def run_record(name: str, dtype, initializer) -> tuple:
    """A scalar variable of the run saved with the net (name: run/...), the placeholder of its
    value and the op that sets it."""
    variable = v1.get_variable(name, [], dtype, initializer, trainable=False)
    value_in = v1.placeholder(dtype, [], f"{name}_in")
    return variable, value_in, variable.assign(value_in)


def adopt_checkpoints(saver, folder: str, keep: int) -> list:
    """Make saver count the newest `keep` checkpoints already in folder (named inside it,
    wherever the index says they were written), so that its max_to_keep deletes them in turn;
    the older ones, beyond keep (a resume told to keep fewer: the saver would delete only one a
    save), are returned for the caller to delete."""
    state = v1.train.get_checkpoint_state(folder)
    paths = [os.path.join(folder, os.path.basename(p))
             for p in (state.all_model_checkpoint_paths if state else [])]
    saver.recover_last_checkpoints(paths[-keep:])
    return paths[:-keep]


def run_folder_of(folder: str) -> str:
    """The run folder of a checkpoints folder: RUN/checkpoints, or RUN/checkpoints/best."""
    folder = os.path.normpath(folder)
    while os.path.basename(folder) != CHECKPOINT_FOLDER and folder != os.path.dirname(folder):
        folder = os.path.dirname(folder)
    return os.path.dirname(folder)


def latest_checkpoint(folder: str) -> str:
    """The newest checkpoint in folder (UsageError if none). Runs written before the index held
    relative paths name their checkpoints by absolute path: each name is resolved inside folder,
    so a moved run folder reads its own files whichever way it was written."""
    try:
        state = v1.train.get_checkpoint_state(folder)
    except Exception as exc:
        raise UsageError(f"cannot read the checkpoint index in {folder}: {first_line(exc)}") from None
    checkpoint = state and os.path.join(folder, os.path.basename(state.model_checkpoint_path))
    if not checkpoint or not os.path.exists(checkpoint + ".index"):
        names = os.listdir(folder) if os.path.isdir(folder) else []
        steps = sorted(int(match.group(1)) for match in (
            re.fullmatch(r"model-(\d+)\.index", name) for name in names) if match)
        if steps:  # the files are there, the index that names the newest is not
            raise UsageError(
                f"the index {os.path.join(folder, 'checkpoint')} is missing or names no checkpoint "
                f"there, though the folder holds {counted(len(steps), 'checkpoint')}: "
                f"--eval {run_folder_of(folder)} --checkpoint "
                f"{os.path.join(folder, f'model-{steps[-1]}')} plays the newest; to resume, write "
                f"the line model_checkpoint_path: \"model-{steps[-1]}\" into that index")
        raise UsageError(f"no checkpoint in {folder}; runs write one at the end and every "
                         f"checkpoint_every_s seconds (a run killed before its first has none "
                         f"to resume or play: train it anew)")
    return checkpoint


def restore_checkpoint(sess, saver, checkpoint: str, variables: list, env_id: str,
                       optional: list = ()) -> list:
    """saver.restore, after checking that the checkpoint was trained on env_id and that every
    variable is stored with this graph's shape (resource variables would silently take another
    shape); UsageError when it doesn't fit. Variables in `optional` may be missing: the others
    are restored, and the names of the missing ones returned."""
    try:
        stored = dict(v1.train.list_variables(checkpoint))
        trained_on = v1.train.load_variable(checkpoint, ENV_ID_VARIABLE).decode()
        if trained_on != env_id:
            raise ValueError(f"it was trained on {trained_on}, not {env_id}")
        missing = [v for v in optional if v.op.name not in stored]
        for variable in variables:
            name, shape = variable.op.name, variable.shape.as_list()
            if stored.get(name) != shape and variable not in missing:
                raise ValueError(f"it has no {name}, which the config builds" if name not in stored
                                 else f"it holds {name} as {stored[name]}, the config builds {shape}")
        if missing:
            saver = v1.train.Saver(var_list=[v for v in variables if v not in missing])
        saver.restore(sess, checkpoint)
    except Exception as exc:
        if is_ctrl_c(exc):  # pybind11's rewrite of a Ctrl-C: the checkpoint may be fine
            raise KeyboardInterrupt from None
        raise UsageError(f"cannot restore {checkpoint}: {first_line(exc)} (corrupt, or written for "
                         f"another env or network shape)") from None
    return [v.op.name for v in missing]


def file_name(env_id: str) -> str:
    """An env id as one file or folder name (ALE/Pong-v5 -> ALE_Pong-v5)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in env_id)


def check_results_dir(results_dir: str) -> None:
    """UsageError, before a run starts, where no run folder could be made under results_dir:
    a file on its path, a folder on it that cannot be written, or a run folder's own (new_run_dir
    says the rest)."""
    existing = os.path.abspath(results_dir)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    inside = existing
    for _ in range(3):  # RUN, RUN/checkpoints, RUN/checkpoints/best: that run's files alone
        if os.path.isfile(os.path.join(inside, "config.json")) and os.path.isdir(
                os.path.join(inside, CHECKPOINT_FOLDER)):
            raise UsageError(f"--results-dir {results_dir} is inside the run folder {inside}: "
                             f"give a folder outside any run, e.g. results/")
        inside = os.path.dirname(inside)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        what = "is not a folder" if not os.path.isdir(existing) else "cannot be written"
        raise UsageError(f"--results-dir {results_dir}: {existing} {what}; give a folder you "
                         f"can write")


def new_run_dir(results_dir: str, env_id: str, seed: int) -> str:
    """results/<env>/<UTC timestamp>-s<seed>/, created fresh: an earlier run is never touched."""
    env_folder = file_name(env_id)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = os.path.join(results_dir, env_folder, f"{stamp}-s{seed}")
    path, suffix = base, 1
    while True:
        try:
            os.makedirs(path)
            return path
        except FileExistsError:
            suffix += 1
            path = f"{base}-{suffix}"
        except OSError as exc:  # a file on the way, no permission, a read-only disk
            raise UsageError(f"cannot make a run folder under {results_dir} ({exc.strerror}: "
                             f"{exc.filename}); give --results-dir a folder you can write") from None


def remove_unstarted_run(run_dir: str) -> None:
    """Remove a new run's folder whose set-up stopped before training: its config.json, event
    file, empty episodes.csv and checkpoint folders, nothing trained. (Its env's folder stays: a
    run starting beside it may be about to make its own folder there.)"""
    try:
        shutil.rmtree(run_dir)
    except FileNotFoundError:  # (the results folder went away: the error that stopped set-up)
        pass


def run_info(env_id: str, cfg: Config, learning_rates: dict, layout, seed: int,
             history: typing.Optional[RunHistory], earlier: typing.Optional[dict],
             cluster_shape: typing.Optional[dict]) -> dict:
    """What config.json records of a run: its env and config, the rates in force, how it was
    started, and each time it was resumed (a resume keeps the history and adds itself)."""
    info = {"env": env_id, "config": dataclasses.asdict(cfg),
            "effective_learning_rates": learning_rates,
            "argv": sys.argv, "versions": versions(),
            "cpus": None if layout is None else {"workers": sorted(layout.workers),
                                                 "tensorflow_ops": sorted(layout.ops)}}
    if history is not None:
        info["resumed"] = earlier.get("resumed", []) + [
            {"argv": sys.argv, "env_steps": history.env_steps, "seed": seed,
             "anneal_start": history.anneal_start._asdict(),
             "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}]
        info["argv"] = earlier.get("argv")
    if cluster_shape is not None:
        info["cluster"] = cluster_shape
    return info


class RunFolderLock:
    """One process trains in a run folder at a time: a second one (a --resume of a run that is
    still training) would interleave its rows into episodes.csv and its files into checkpoints/.
    An flock on the folder itself, which writes nothing there and which the OS lets go when the
    process ends, however it ends (none where the platform has no fcntl)."""

    def __init__(self):
        self.fd = None

    def take(self, run_dir: str) -> None:
        """Hold run_dir, or raise UsageError if another process holds it."""
        if fcntl is None:
            return
        try:
            fd = os.open(run_dir, os.O_RDONLY)
        except OSError as exc:
            raise UsageError(f"cannot open {run_dir} ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(f"{run_dir} is being trained by another process; let that run end "
                             f"or stop it, then --resume") from None
        except OSError as exc:  # a file system without locks (some network ones): train unlocked
            os.close(fd)
            warn(f"cannot lock {run_dir} ({exc.strerror}): nothing stops another process from "
                 f"training in it at the same time")
            return
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    @classmethod
    def refuse_if_held(cls, run_dir: str) -> None:
        """UsageError if another process trains in run_dir now."""
        lock = cls()
        lock.take(run_dir)
        lock.release()


def write_atomically(path: str, text: str) -> None:
    """A file that is either its old self or its new self, never half written (a resume rewrites
    config.json, which the run cannot be resumed or evaluated without)."""
    partial = path + ".partial"
    with open(partial, "w") as f:
        f.write(text)
    os.replace(partial, path)


def read_run_info(run_dir: str) -> dict:
    """The config.json of a run folder that a3c.py wrote."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{run_dir} is not a readable run folder ({exc}); pass a folder that "
                         f"a3c.py wrote, e.g. results/Pendulum-v1/<run>") from None


def resumes_well_formed(resumed) -> bool:
    """Whether config.json's "resumed" is a list of resumes as run_info writes them, as far as a
    resume reads them (the last one's anneal_start)."""
    def well_formed(start) -> bool:
        return isinstance(start, dict) and set(start) <= set(AnnealStart._fields) and all(
            isinstance(value, (int, float)) and not isinstance(value, bool)
            for value in start.values())
    return isinstance(resumed, list) and all(
        isinstance(part, dict) and well_formed(part.get("anneal_start", {})) for part in resumed)


def read_run(run_dir: str) -> tuple[str, Config]:
    """(env id, config) of a run folder that a3c.py wrote."""
    saved = read_run_info(run_dir)
    try:
        cfg = config_module.from_dict(saved["config"])
        cfg.validate()  # a hand-edited value must be refused here, not crash the graph's build
        if not isinstance(saved["env"], str):
            raise ValueError(f"its env is {saved['env']!r}, not an env id")
        if not resumes_well_formed(saved.get("resumed", [])):
            raise ValueError("its resumed entry is not the list of resumes a3c.py writes")
        return saved["env"], cfg
    except KeyError as exc:
        raise UsageError(f"{run_dir} is not a readable run folder (its config.json has no "
                         f"{exc} entry); pass a folder that a3c.py wrote, e.g. "
                         f"results/Pendulum-v1/<run>") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{run_dir} is not a readable run folder ({exc}); pass a folder that "
                         f"a3c.py wrote, e.g. results/Pendulum-v1/<run>") from None


def part_seed(seed: int, part: int) -> int:
    """The seed of one part of a run: the run's own for its first part (part 0), and for the
    part started by its n-th --resume one drawn from (seed, n), so that no part replays another's
    start states and action noise."""
    if part == 0:
        return seed
    return int(np.random.SeedSequence([seed, part]).generate_state(1)[0])


def checkpoint_note(run_dir: str) -> str:
    """What a run folder holds to continue from, in words."""
    try:
        latest = latest_checkpoint(os.path.join(run_dir, CHECKPOINT_FOLDER))
    except UsageError:
        return f"{run_dir} has no checkpoint, so it cannot be resumed"
    return (f"{run_dir} keeps its checkpoint {os.path.basename(latest)} and every episode its "
            f"CSV recorded (--resume continues it)")


# A resume whose annealed rates would start below this fraction of their base is refused: it
# would learn nothing more (bench/atari_scoreboard.py counts such a run as finished).
LEAST_RATE_FRACTION = 0.01


def resume_point(run_dir: str, cfg: Config, earlier: dict, checkpoint_steps: int,
                 checkpoint_wall_s: float = 0.0, checkpoint_lr_fraction: float = 1.0) -> RunHistory:
    """Where a run resumed from a checkpoint of checkpoint_steps env steps goes on: its
    episodes, its env step count (the checkpoint's, or further if the CSV recorded episodes
    after it), and where its learning rates go on from. UsageError if its budget is spent, or
    if its rates are annealed to nothing and stay there (it would learn nothing more).

    An annealed run whose schedule is made longer (a larger budget, or anneal_steps) goes on
    where a run started with the longer schedule would be now: a doubled budget resumes at half
    the base rates and falls to 0 at its new end, also after the shorter schedule reached 0.
    Otherwise it goes on from the rate it had reached, falling to 0 at its end."""
    try:
        rows = read_episodes(os.path.join(run_dir, "episodes.csv"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {run_dir}'s episodes.csv ({first_line(exc)}); only a run "
                         f"folder with its whole CSV can be resumed: {MEND_EPISODES}") from None
    env_steps = int(max([checkpoint_steps, *rows["env_steps"].astype(int)]))
    episodes, finished_steps = len(rows["episode"]), int(rows["length"].sum())
    if budget_used(cfg, episodes, env_steps) >= 1:
        spent = [(flag, f"{limit:,} {what}, {done:,} done") for flag, limit, what, done in (
            ("--max-episodes", cfg.max_episodes, "episodes", episodes),
            ("--max-steps", cfg.max_steps, "env steps", env_steps)) if limit and done >= limit]
        raise UsageError(f"{run_dir} already used its budget ({'; '.join(s for _, s in spent)}); "
                         f"raise {' and '.join(flag for flag, _ in spent)}")
    before = config_module.from_dict(earlier["config"])  # the budget of the part that ran last
    used_before = anneal_used(before, episodes, finished_steps, env_steps)
    used = anneal_used(cfg, episodes, finished_steps, env_steps)
    reached = earlier_reached = 1.0
    if before.anneal_lr:
        last_start = (earlier.get("resumed") or [{}])[-1].get("anneal_start", {})
        # never above the fraction the checkpoint was trained at: the one in force only falls
        # (runlog.falling_lr_fraction), while an episode budget's conversion from the CSV can rise
        reached = earlier_reached = min(annealed_fraction(used_before, AnnealStart(**last_start)),
                                        checkpoint_lr_fraction)
        if cfg.anneal_lr and used < used_before:  # a longer schedule
            reached = max(reached, 1.0 - used)
    starts_at = reached if used < 1 else 0.0  # past anneal_steps it is 0 whatever was reached
    if cfg.anneal_lr and starts_at < LEAST_RATE_FRACTION:
        # the smallest schedule that leaves 1% of the rates (runlog.anneal_used's formulas)
        at_least = ([f"--set anneal_steps=N, N at least {math.ceil(env_steps / 0.99):,}"]
                    if cfg.anneal_steps else
                    [f"--{flag} at least {math.ceil(need):,}" for flag, limit, need in (
                        ("max-episodes", cfg.max_episodes,
                         env_steps * episodes / (0.99 * max(finished_steps, 1))),
                        ("max-steps", cfg.max_steps, env_steps / 0.99)) if limit])
        longer = " and ".join(at_least) or "--max-episodes or --max-steps"
        raise UsageError(f"{run_dir}'s learning rates are annealed to {starts_at:.1%} of their "
                         f"base, so it would learn nothing more; make its schedule longer "
                         f"({longer}), or resume it with --set anneal_lr=false to train on at "
                         f"the base rates (a jump that can undo what was learned: copy the run "
                         f"folder first)")
    return RunHistory(rows, env_steps, AnnealStart(reached, used),
                      earlier_reached if reached > earlier_reached + 1e-9 else None,
                      env_steps - checkpoint_steps, checkpoint_wall_s)


def resume_history(sess, checkpoints: "Checkpoints", run_dir: str, cfg: Config,
                   earlier: dict) -> RunHistory:
    """Restore the run's latest checkpoint into sess and say where training continues from
    (resume_point)."""
    return resume_point(run_dir, cfg, earlier, *checkpoints.restore(sess))
