"""The run's log: its budget and learning-rate anneal, the counters and per-episode record the
worker threads share (EpisodeLog: episodes.csv and TensorBoard), and rewards.png."""
from __future__ import annotations

import csv
import io
import math
import os
import sys
import threading
import time
import typing
from collections import deque

import numpy as np

from config import Config
from console import counted
from cpus import usable_cpus
from sessions import v1


EPISODE_COLUMNS = ["worker", "episode", "env_steps", "wall_s", "return", "length",
                   "running_return", "entropy", "grad_norm"]

PROCESS_COLUMN = "process"  # a cluster run's episodes.csv also says which worker process played

RUNNING_WINDOW = 100  # running_return is the mean raw return of the last 100 episodes


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system


def budget_used(cfg: Config, episodes: int, env_steps: int) -> float:
    """The fraction of the run's budget (episodes or env steps, whichever is further) used: the
    run stops at 1."""
    return max(episodes / cfg.max_episodes if cfg.max_episodes else 0.0,
               env_steps / cfg.max_steps if cfg.max_steps else 0.0)


def describe_budget(cfg: Config, frames_per_step: int = 1) -> str:
    """"12,500,000 env steps (50M frames)" (an Atari step is frames_per_step frames), "1,000
    episodes", or both joined by "or" (the run ends at the first reached): the budget as the
    run's first lines tell it."""
    parts = [counted(cfg.max_episodes, "episode")] if cfg.max_episodes else []
    if cfg.max_steps:
        frames = (f" ({cfg.max_steps * frames_per_step / 1e6:,.4g}M frames)"
                  if frames_per_step > 1 else "")
        parts.append(counted(cfg.max_steps, "env step") + frames)
    return " or ".join(parts) + (", whichever comes first" if len(parts) == 2 else "")


def anneal_used(cfg: Config, episodes: int, finished_steps: int, env_steps: int) -> float:
    """How far the learning-rate anneal has gone, 0 to 1 (and past it): env steps over
    anneal_steps when that is set, otherwise the fraction of the budget used, counted in env steps
    so that it grows with every step: an episode budget is converted into env steps with the mean
    length of the episodes finished so far (finished_steps / episodes). Counting finished
    episodes instead moves in jumps when all envs' episodes end together (Pendulum's 64 envs,
    every 200 steps)."""
    if cfg.anneal_steps:
        return env_steps / cfg.anneal_steps
    used = env_steps / cfg.max_steps if cfg.max_steps else 0.0
    if cfg.max_episodes and episodes:
        used = max(used, env_steps * episodes / (cfg.max_episodes * finished_steps))
    return used


class AnnealStart(typing.NamedTuple):
    """Where this process's part of the run starts annealing from: the fraction of the base
    learning rates the run had reached, and the budget used then (a fresh run: 1 and 0)."""
    lr_fraction: float = 1.0
    budget_used: float = 0.0


def annealed_fraction(used: float, start: AnnealStart) -> float:
    """Linear from start.lr_fraction at start.budget_used to 0 when the budget is spent."""
    left = (1.0 - used) / max(1.0 - start.budget_used, 1e-9)
    return start.lr_fraction * min(1.0, max(0.0, left))


def falling_lr_fraction(cfg: Config, previous: float, episodes: int, finished_steps: int,
                        env_steps: int, start: AnnealStart) -> float:
    """The fraction of the base learning rates in force: 1, or annealed, and never rising (a
    longer mean episode length would otherwise push an episode budget's conversion up again)."""
    if not cfg.anneal_lr:
        return 1.0
    used = anneal_used(cfg, episodes, finished_steps, env_steps)
    return min(previous, annealed_fraction(used, start))


class RunHistory(typing.NamedTuple):
    """What a resumed run continues from."""
    rows: dict                 # its episodes.csv, as read_episodes returns it
    env_steps: int             # its env step count
    anneal_start: AnnealStart  # where its learning rates continue from
    reached: float = None      # the fraction its earlier schedule had reached (None: the same)
    lost_steps: int = 0        # env steps its CSV counts past the checkpoint restored (a kill -9)
    wall_s: float = 0.0        # its training seconds when that checkpoint was saved


class EpisodeLog:
    """Global counters and the per-episode record, guarded by one lock.

    Every finished episode becomes one row of episodes.csv (flushed at once) and one TensorBoard
    scalar set; `return` is always the environment's raw return.
    """

    def __init__(self, run_dir: str, cfg: Config, summary_writer, history: RunHistory = None,
                 cluster: bool = False):
        """history: a resumed run's episodes and counters, to continue its CSV instead of
        starting a new one; cluster: the rows come from several processes (a process column)."""
        self.cfg = cfg
        self.columns = EPISODE_COLUMNS + [PROCESS_COLUMN] if cluster else EPISODE_COLUMNS
        self.lock = threading.Lock()
        self.session_start = time.time()
        self.start_cpu = cpu_seconds()
        self.cpu_capacity = usable_cpus()[1]  # cpu_utilisation is of what this process may use
        self.wall_before = 0.0  # seconds the run had trained before this process took it up
        self.env_steps = 0
        self.episodes = 0
        self.finished_steps = 0  # env steps of the finished episodes
        self.anneal_start = AnnealStart()
        self.lr_fraction_now = 1.0
        self.recent_returns = deque(maxlen=RUNNING_WINDOW)
        self.best_running = -math.inf  # the best mean-100 over a full window, its episode and
        self.best_episode = 0           # the env step count when that episode ended
        self.best_env_steps = 0
        self.summary_writer = summary_writer
        path = os.path.join(run_dir, "episodes.csv")
        if history is None:
            self.csv_file = open(path, "w", newline="")
            self.csv = csv.writer(self.csv_file)
            self.csv.writerow(self.columns)
            self.csv_file.flush()
            return
        rows, self.env_steps, self.anneal_start = history.rows, history.env_steps, history.anneal_start
        self.lr_fraction_now = self.anneal_start.lr_fraction
        self.episodes = len(rows["episode"])
        self.finished_steps = int(rows["length"].sum())
        self.wall_before = max(history.wall_s, float(rows["wall_s"][-1]) if self.episodes else 0.0)
        self.recent_returns.extend(rows["return"][-RUNNING_WINDOW:])
        if self.episodes >= RUNNING_WINDOW:
            best = int(np.argmax(rows["running_return"][RUNNING_WINDOW - 1:])) + RUNNING_WINDOW - 1
            self.best_running = float(rows["running_return"][best])
            self.best_episode = int(rows["episode"][best])
            self.best_env_steps = int(rows["env_steps"][best])
        self.csv_file = open(path, "a", newline="")
        self.csv = csv.writer(self.csv_file)

    def wall(self) -> float:
        return self.wall_before + time.time() - self.session_start

    def add_steps(self, count: int) -> None:
        with self.lock:
            self.env_steps += count

    def count_to(self, env_steps: int) -> None:
        """A cluster's chief: the global env step count, as the ps tasks hold it."""
        with self.lock:
            self.env_steps = max(self.env_steps, env_steps)

    def budget_used(self) -> float:
        return budget_used(self.cfg, self.episodes, self.env_steps)

    def lr_fraction(self) -> float:
        with self.lock:
            self.lr_fraction_now = falling_lr_fraction(self.cfg, self.lr_fraction_now, self.episodes,
                                                       self.finished_steps, self.env_steps,
                                                       self.anneal_start)
            return self.lr_fraction_now

    def record(self, worker: int, episode_return: float, length: int, entropy: float,
               grad_norm: float, process: int = None, env_steps: int = None) -> None:
        """process, env_steps: a cluster's episode, from the process that played it, which
        ended when the global count was env_steps."""
        with self.lock:
            if self.cfg.max_episodes is not None and self.episodes >= self.cfg.max_episodes:
                return  # other workers finished the last episodes of the budget first
            self.episodes += 1
            self.finished_steps += length
            self.recent_returns.append(episode_return)
            running = float(np.mean(self.recent_returns))
            if len(self.recent_returns) == RUNNING_WINDOW:
                if running > self.best_running:
                    self.best_running, self.best_episode = running, self.episodes
                    self.best_env_steps = self.env_steps if env_steps is None else env_steps
            wall = self.wall()
            ended_at = self.env_steps if env_steps is None else env_steps
            self.csv.writerow([worker, self.episodes, ended_at, f"{wall:.3f}",
                               f"{episode_return:.6g}", length, f"{running:.6g}",
                               f"{entropy:.6g}", f"{grad_norm:.6g}",
                               *([] if process is None else [process])])
            self.csv_file.flush()
            summary = v1.Summary(value=[
                v1.Summary.Value(tag="charts/episodic_return", simple_value=episode_return),
                v1.Summary.Value(tag="charts/episodic_length", simple_value=length),
                v1.Summary.Value(tag="charts/running_return", simple_value=running),
                v1.Summary.Value(tag="losses/entropy", simple_value=entropy),
                v1.Summary.Value(tag="losses/grad_norm", simple_value=grad_norm)])
            self.summary_writer.add_summary(summary, ended_at)

    def progress(self) -> dict:
        with self.lock:
            wall = self.wall()
            session = time.time() - self.session_start
            return dict(episodes=self.episodes, env_steps=self.env_steps, wall_s=wall,
                        steps_per_s=self.env_steps / max(wall, 1e-9),
                        cpu_utilisation=(cpu_seconds() - self.start_cpu) / max(session, 1e-9)
                        / self.cpu_capacity,
                        running=float(np.mean(self.recent_returns)) if self.recent_returns else math.nan,
                        window=len(self.recent_returns),
                        best_running=self.best_running, best_episode=self.best_episode)

    def best(self) -> tuple[float, int, int]:
        """(the best mean-100 so far, the episode it was reached at, the env steps then)."""
        with self.lock:
            return self.best_running, self.best_episode, self.best_env_steps

    def close(self) -> None:
        self.csv_file.close()


# what to do with an episodes.csv that read_episodes refuses, for the refusals that say so
MEND_EPISODES = "mend it (a last line cut off by a kill: delete that line)"


def read_episodes(path: str) -> dict:
    """episodes.csv as a dict of NumPy columns (with a process column if it has one). ValueError,
    naming the line, where the file is not whole: a kill mid-write cuts its last line."""
    with open(path, newline="") as f:
        text = f.read()
    if not text.endswith("\n"):  # (every line a run writes ends so, its header's first)
        raise ValueError("the file is empty" if not text else
                         f"line {text.count(chr(10)) + 1}, its last, is cut off (no line end)")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:  # (blank lines skipped, as csv.DictReader skips them)
        lines = [(reader.line_num, line) for line in reader if line]
    except csv.Error as exc:
        raise ValueError(f"line {reader.line_num}: {exc}") from None
    header = lines[0][1] if lines else []
    missing = [name for name in EPISODE_COLUMNS if name not in header]
    if missing:
        raise ValueError(f"line 1, the header, lacks the column(s) {', '.join(missing)}")
    names = EPISODE_COLUMNS + ([PROCESS_COLUMN] if PROCESS_COLUMN in header else [])
    where = [header.index(name) for name in names]
    values = []
    for number, line in lines[1:]:
        try:
            if len(line) != len(header):
                raise ValueError
            values.append([float(line[index]) for index in where])
        except ValueError:
            raise ValueError(f"line {number} is not a whole row of numbers") from None
    columns = np.array(values, dtype=np.float64).reshape(len(values), len(names))
    return {name: columns[:, index].copy() for index, name in enumerate(names)}


def display_available() -> bool:
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def display_answers() -> bool:
    """display_available, and on Linux the display named answers: one left in DISPLAY by a
    closed ssh -X or tmux session names none, and pygame's window would crash the process on it.
    matplotlib's check connects to the display (its backend choice uses it)."""
    available = display_available()
    if not available or not sys.platform.startswith("linux"):
        return available
    try:
        from matplotlib import _c_internal_utils
        return bool(_c_internal_utils.display_is_valid())
    except (ImportError, AttributeError):  # a matplotlib without the check: the variables' word
        return True


def plot_rewards(run_dir: str, env_id: str, show: bool) -> str:
    """rewards.png: raw returns and the mean-100 against episodes and against env steps."""
    import matplotlib
    if not (show and display_available()):
        matplotlib.use("Agg")  # never block or fail a headless run
        show = False
    import matplotlib.pyplot as plt

    rows = read_episodes(os.path.join(run_dir, "episodes.csv"))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, x_key, x_label in ((axes[0], "episode", "episode"), (axes[1], "env_steps", "env steps")):
        x = rows[x_key]
        ax.plot(x, rows["return"], color="tab:blue", alpha=0.3, linewidth=0.8, label="episode return")
        ax.plot(x, rows["running_return"], color="tab:blue", linewidth=2, label="mean of last 100")
        ax.set_xlabel(x_label)
        ax.set_ylabel("raw return")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right")
    fig.suptitle(f"A3C on {env_id}: {os.path.basename(run_dir)}")
    fig.tight_layout()
    path = os.path.join(run_dir, "rewards.png")
    fig.savefig(path, dpi=100)
    if show:
        try:
            plt.show()
        except KeyboardInterrupt:  # Ctrl-C closes the window; everything was saved before it
            pass
    plt.close(fig)
    return path
