"""The best agent: candidates copied from the global net when the mean-100 rises, tried by their
deterministic policy (GreedyPlayer) on trial episodes of their own, and the best kept in
checkpoints/best/; also --eval's episodes (GreedyPlayer, or SampledPlayer with --stochastic) and
--record's episode.gif."""
from __future__ import annotations

import glob
import json
import math
import os
import re
import threading
import time
import typing

import numpy as np

from checkpoints import (CHECKPOINT_FOLDER, ENV_ID_VARIABLE, LR_FRACTION_VARIABLE,
                         latest_checkpoint, run_folder_of, write_atomically)
from config import Config
from console import UsageError, attempt, first_line, tenths, warn
from environments import EnvSpec, make_envs, registered_time_limit
from recording import RECORD_FRAME_LIMIT
from runlog import RUNNING_WINDOW
from sessions import session_callable, tf, v1


BEST_FOLDER = "best"      # checkpoints/best/: the best agent of the run (BestCheckpoint)

BEST_INFO = "best.json"   # beside it: score, mean-100, episode, env steps, lr_fraction, checkpoint

COPY_WAIT_S = 1.0  # how long a best-agent copy waits for a --sync round to end before it asks again

EVAL_SEED = 10_000   # --eval's episode k starts from this seed + k

TRIAL_SEED = 20_000  # a best-agent trial's episode k from this one + k: the two never meet

TRIAL_STEP_LIMIT = 27_000  # steps of a trial episode at most: ALE's own limit (108,000 frames)


class BestCheckpoint:
    """checkpoints/best/: the best agent the run has made, and best.json beside it (its score,
    the mean-100 and episode it was taken at, the env steps then, the learning rates' fraction
    when it was copied, which --eval --stochastic narrows sigma with, and its checkpoint's
    name).

    The mean-100 says when the agent may have got better, but it lags (it averages 100 episodes
    played by nets that kept changing) and it measures the stochastic policy, not the one --eval
    plays. So a new best mean-100 makes the global net of that moment a candidate: a copy taken
    inside the graph in one session call, whose deterministic policy then plays trial_episodes
    episodes on environments of its own, from the same start states for every candidate (others
    than --eval's). A candidate that plays better than every earlier one becomes the best and is
    written at once. Trials run in a thread beside the workers (run_trials), when a
    TrialSchedule allows; the final net gets one more at the end (try_final). With no trial episodes
    a candidate's score is its mean-100."""

    def __init__(self, checkpoints_folder: str, global_net, candidate_net, spec: EnvSpec,
                 cfg: Config, env_id: str, env_id_variable, copy_lock=None):
        """candidate_net: an ACNet like global_net, where candidates are copied and tried;
        env_id_variable: the Checkpoints' own, saved beside the best net; copy_lock: see
        self.copy_lock."""
        self.folder = os.path.join(checkpoints_folder, BEST_FOLDER)
        net = global_net.net_variables
        self.candidate = candidate_net
        candidate = self.candidate.net_variables
        with v1.variable_scope("best_snapshot"):
            snapshot = [v1.get_variable(v.op.name, v.shape, v.dtype.base_dtype, trainable=False,
                                        initializer=v1.zeros_initializer()) for v in net]
        self.take_candidate = tf.group(*[c.assign(v) for c, v in zip(candidate, net)])
        self.promote = tf.group(*[s.assign(c) for s, c in zip(snapshot, candidate)])
        # stored under the net's own names: --eval restores it like any checkpoint. The saver
        # deletes nothing: write() removes the earlier best only once best.json names the new one
        stored = {v.op.name: s for v, s in zip(net, snapshot)}
        self.saver = v1.train.Saver(var_list={**stored, ENV_ID_VARIABLE: env_id_variable},
                                    max_to_keep=None, save_relative_paths=True)
        self.trial_envs = (make_envs(env_id, cfg, cfg.best_trial_episodes, greedy=True)
                           if cfg.best_trial_episodes else None)
        self.on_disk = read_best_info(self.folder)  # what best/ holds now (None: nothing)
        self.unwritten = None  # the label of a best not yet on disk (its write failed)
        self.pending = None    # the label of a candidate copied but not yet tried
        self.trial_episodes = cfg.best_trial_episodes
        self.trial_step_limit = episode_step_limit(env_id, cfg)
        self.obs_dtype = spec.obs_dtype
        self.snapshot_to_candidate = tf.group(*[c.assign(s) for c, s in zip(candidate, snapshot)])
        self.best_score = best_score(self.on_disk) if self.on_disk else -math.inf
        self.best_mean_100 = self.on_disk["mean_100"] if self.on_disk else -math.inf  # the best one's
        self.best_tried = self.on_disk["mean_100"] if self.on_disk else -math.inf  # a mean-100
        # held while the candidate is copied: --sync passes its rounds' lock, so that the copy
        # is one round's net, never half of the next one's update (asynchronous pushes interleave
        # with any copy, as with every read of a Hogwild net). On a cluster the chief's periodic
        # download of the ps's net holds only the round's put lock; a download torn by a round
        # is written over by that round's put before the rounds' lock is free again.
        self.copy_lock = threading.Lock() if copy_lock is None else copy_lock

    def prepare(self, sess) -> None:
        """Build the trial's act call; score a resumed run's best anew if it was scored another
        way than this run scores its candidates (a best.json of an earlier version has no trial
        score, or it was over another number of episodes): the two would not compare."""
        self.greedy = GreedyPlayer(sess, self.candidate, self.trial_episodes, self.obs_dtype)
        info = self.on_disk
        if info is None or (info.get("trial_episodes") == self.trial_episodes and "score" in info):
            return
        if self.trial_envs is None:
            self.best_score = info["mean_100"]
            return
        try:
            self.saver.restore(sess, os.path.join(self.folder, info["checkpoint"]))
        except Exception as exc:  # a corrupt best/: the run goes on, the next best replaces it
            warn(f"cannot read the best checkpoint in {self.folder} ({first_line(exc)}); the "
                 f"run's next best agent will replace it")
            self.on_disk, self.best_score, self.best_mean_100 = None, -math.inf, -math.inf
            return
        sess.run(self.snapshot_to_candidate)
        deadline = time.time() + 60
        score = self.play(lambda: time.time() > deadline)
        self.best_score = info["mean_100"] if score is None else score

    def run_trials(self, sess, coord, log, schedule: "TrialSchedule") -> None:
        """The trial thread: copy the global net the moment the best mean-100 rises, and try the
        newest copy when the schedule allows."""
        while not coord.wait_for_stop(0.05):
            self.take_if_risen(sess, log)
            started = time.time()
            if self.pending is None or not schedule.allows(started):
                continue
            own_cpu, process_cpu = time.thread_time(), time.process_time()
            self.try_pending(sess, coord.should_stop)
            schedule.paid(started, own_cpu_s=time.thread_time() - own_cpu,
                          process_cpu_s=time.process_time() - process_cpu)

    def take_if_risen(self, sess, log, final: bool = False,
                      wait_s: float = COPY_WAIT_S) -> bool:
        """If the best mean-100 has risen since the last copy (or, final, the run has a full
        mean-100 at all), copy the global net into the candidate now, labelled with that
        moment's mean-100, episode and env steps; True if it did. False also when copy_lock
        stayed taken for wait_s (a round that has not ended: the trial loop asks again, and at
        the end a worker stuck in a round leaves the final net untried)."""
        def label():
            if final:
                progress = log.progress()
                return progress["running"], progress["episodes"], progress["env_steps"]
            return log.best()

        running, episode, _ = label()
        risen = episode >= RUNNING_WINDOW if final else running > self.best_tried
        if not risen:
            return False
        if not self.copy_lock.acquire(timeout=wait_s):
            return False
        try:
            running, episode, env_steps = label()  # the net's moment: the lock may have waited
            sess.run(self.take_candidate)
        finally:
            self.copy_lock.release()
        self.best_tried = max(self.best_tried, running)
        # lr_fraction: what --eval --stochastic narrows sigma with (final_sigma_scale)
        self.pending = {"mean_100": running, "episode": episode, "env_steps": env_steps,
                        "lr_fraction": log.lr_fraction()}
        return True

    def try_pending(self, sess, should_stop) -> bool:
        """Score the candidate (its trial return, or its mean-100 without trials) and make it
        the best if it beats the best so far; True if it did."""
        label, self.pending = self.pending, None
        score = self.play(should_stop) if self.trial_envs is not None else label["mean_100"]
        if score is None:  # cut short by the end of training: its copy waits for try_final
            self.pending = label
            return False
        if not self.beats_the_best(score, label["mean_100"]):
            return False
        sess.run(self.promote)
        self.best_score, self.best_mean_100 = score, label["mean_100"]
        self.unwritten = {"score": score, "trial_episodes": self.trial_episodes, **label}
        attempt("write the best checkpoint", self.write, sess)
        return True

    def try_candidate(self, sess, log, should_stop,
                      final: bool = False) -> typing.Optional[bool]:
        """take_if_risen, then try_pending: True if the candidate became the best, False if not,
        None if there was no candidate."""
        if not self.take_if_risen(sess, log, final):
            return None
        return self.try_pending(sess, should_stop)

    def beats_the_best(self, score: float, running: float) -> bool:
        """A higher trial score wins; an equal one (CartPole's nets often all play 500) wins with
        a higher mean-100, the evidence of more episodes: a net that only just reached the cap
        in its trials is often less sure of it than the ones that keep it up."""
        if score != self.best_score:
            return score > self.best_score
        return self.trial_envs is not None and running > self.best_mean_100

    def must_beat(self, mean_100: float) -> None:
        """A resumed run's next candidate must beat its CSV's best mean-100 too."""
        self.best_tried = max(self.best_tried, mean_100)

    def try_final(self, sess, log, time_limit_s: float = 60.0) -> None:
        """At the end of a run: try the candidate still waiting for its trial, then the final net
        (an annealed run often ends at its best), within time_limit_s in all; then write a best
        whose write had failed."""
        deadline = time.time() + time_limit_s
        too_late = lambda: time.time() > deadline  # noqa: E731
        try:
            if self.pending is not None:
                self.try_pending(sess, too_late)
            self.try_candidate(sess, log, too_late, final=True)
            if too_late():
                warn(f"the last trials for the best checkpoint took over {time_limit_s:g} s and "
                     f"were cut short; the best so far is kept")
        finally:
            self.write(sess)

    def play(self, should_stop) -> typing.Optional[float]:
        """The candidate's trial score (None if should_stop() said so first)."""
        return play_trial(self.trial_envs, self.greedy, self.obs_dtype, should_stop,
                          self.trial_step_limit)

    def write(self, sess) -> bool:
        """Write the best not yet on disk; True if it did. At every instant best/ holds a whole,
        labelled best agent: the new one's files first (never over the files best.json names),
        then best.json, replaced in one step, then the earlier agents' files are removed."""
        if self.unwritten is None:
            return False
        os.makedirs(self.folder, exist_ok=True)  # the Saver makes no folders of its own
        name = f"model-{self.unwritten['env_steps']}"
        labelled = self.on_disk["checkpoint"] if self.on_disk else None
        if name == labelled:  # a best taken at the same env step count as the one on disk
            name += "-again"
        path = self.saver.save(sess, os.path.join(self.folder, name), write_meta_graph=False)
        info = {**self.unwritten, "checkpoint": os.path.basename(path)}
        write_atomically(os.path.join(self.folder, BEST_INFO), json.dumps(info))
        self.on_disk, self.unwritten = info, None
        for index in glob.glob(os.path.join(glob.escape(self.folder), "model-*.index")):
            earlier = index[:-len(".index")]
            if os.path.basename(earlier) != info["checkpoint"]:
                attempt("remove an earlier best checkpoint", v1.train.remove_checkpoint, earlier)
        return True

    def close(self) -> None:
        if self.trial_envs is not None:
            self.trial_envs.close()

    def describe(self, log) -> str:
        """The summary's line about the best agent, from what is on disk."""
        if self.on_disk is not None:
            return (f"best agent: {describe_best(self.on_disk)}; its checkpoint (what --eval "
                    f"plays) is in {self.folder}")
        if log.episodes < RUNNING_WINDOW:
            return f"no best checkpoint: fewer than {RUNNING_WINDOW} episodes, so no full mean-100"
        return ("no best checkpoint: none could be written (see the warnings above), or the "
                "run's best predates best checkpoints and was not beaten")


class TrialSchedule:
    """When the best agent's next trial may start: at most one per min_interval_s, and only
    while the trials so far have cost at most cpu_share of the CPU time the process has used
    since the schedule began.

    A trial's cost is its thread's CPU time, or its fair share of the whole process's CPU time
    while it played (over the workers + 1 threads that compete) if that is more: an Atari
    trial's games step in the emulator's threads, and a pinned session runs its ops in a pool
    of its own. Not its wall time, which mid-run is mostly a wait for the GIL while the workers
    train on (docs/implementation.md). Summed over the run, so that one slow trial (the first,
    as the workers start) is paid back rather than holding the next ones off; but the credit a
    long plateau saves up is capped at two trials' cost, so that a burst of rises after one
    does not run trials back to back."""

    def __init__(self, min_interval_s: float, workers: int, cpu_share: float,
                 cpu_clock=time.process_time):
        self.min_interval_s, self.workers, self.cpu_share = min_interval_s, workers, cpu_share
        self.cpu_clock = cpu_clock
        self.cpu_at_start, self.cost, self.next_trial = cpu_clock(), 0.0, -math.inf
        self.dearest = 0.0  # the most one trial has cost

    def allows(self, now: float) -> bool:
        budget = self.cpu_share * (self.cpu_clock() - self.cpu_at_start)
        self.cost = max(self.cost, budget - 2 * self.dearest)
        return now >= self.next_trial and self.cost <= budget

    def paid(self, started: float, own_cpu_s: float, process_cpu_s: float) -> None:
        cost = max(own_cpu_s, process_cpu_s / (self.workers + 1))
        self.cost += cost
        self.dearest = max(self.dearest, cost)
        self.next_trial = started + self.min_interval_s


class GreedyPlayer:
    """A net's deterministic policy (mean action / argmax) over a batch of envs, for the best
    agent's trials and --eval: player(obs) gives the actions; with an LSTM it carries each env's
    state from call to call, start() zeroes them all and restart(k) env k's."""

    def __init__(self, sess, net, count: int, obs_dtype):
        self.call = session_callable(sess, [self.action(net.policy), *net.state_out],
                                     [net.obs, *net.state_in, *self.sampling_feeds(net)])
        self.state_shapes = [(count, part.shape[-1]) for part in net.state_in]
        self.obs_dtype = obs_dtype
        self.start()

    @staticmethod
    def action(policy):
        return policy.greedy_action

    def sampling_feeds(self, net) -> list:
        return []

    def sampling(self) -> tuple:
        return ()

    def start(self) -> None:
        self.state = tuple(np.zeros(shape, np.float32) for shape in self.state_shapes)

    def restart(self, k: int) -> None:
        if self.state:
            self.state = tuple(np.array(part) for part in self.state)
            for part in self.state:
                part[k] = 0.0

    def __call__(self, obs):
        actions, *state = self.call(np.asarray(obs, self.obs_dtype), *self.state, *self.sampling())
        self.state = tuple(state)
        return actions


class SampledPlayer(GreedyPlayer):
    """The policy's sampled actions, as training plays them (--eval --stochastic; rl-zoo scores
    its Atari agents so). A Gaussian's sigma narrows as a worker's did at lr_fraction (the
    learning rates' fraction at the checkpoint's moment; final_sigma_scale). With use_sde each
    env's noise matrix is drawn anew every noise_every calls and at start(), as a training
    rollout of n_steps draws one; seed: those draws'."""

    def __init__(self, sess, net, count: int, obs_dtype, noise_every: int, seed: int,
                 lr_fraction: float = 1.0):
        self.noise_every, self.rng = noise_every, np.random.default_rng(seed)
        self.calls, self.matrix = 0, None
        noise_in = net.policy.noise_in
        self.noise_shape = None if noise_in is None else (count, *noise_in.shape[1:].as_list())
        self.fraction = (np.float32(lr_fraction),) if net.policy.uses_schedule else ()
        super().__init__(sess, net, count, obs_dtype)

    @staticmethod
    def action(policy):
        return policy.env_action

    def sampling_feeds(self, net) -> list:
        return ([] if net.policy.noise_in is None else [net.policy.noise_in]) + (
            [net.acting_fraction] if self.fraction else [])

    def sampling(self) -> tuple:
        if self.noise_shape is None:
            return self.fraction
        if self.calls % self.noise_every == 0:
            self.matrix = self.rng.standard_normal(self.noise_shape, np.float32)
        self.calls += 1
        return (self.matrix, *self.fraction)

    def start(self) -> None:
        super().start()
        self.calls = 0


def best_score(info: dict) -> float:
    """What a best.json's agent scored: its trial return, or its mean-100 (no trials, or a
    best.json written before trials)."""
    return float(info.get("score", info["mean_100"]))


def describe_best(info: dict) -> str:
    taken = f"the net of episode {info['episode']:,} (mean-100 {tenths(info['mean_100'])})"
    if info.get("trial_episodes"):
        return (f"deterministic return {tenths(info['score'])} over {info['trial_episodes']} trial "
                f"episodes, {taken}")
    return f"best mean-100 {tenths(info['mean_100'])} at episode {info['episode']:,}"


def read_best_info(best_folder: str) -> typing.Optional[dict]:
    """best.json of a best/ folder, if it describes the checkpoint that is there."""
    try:
        with open(os.path.join(best_folder, BEST_INFO)) as f:
            info = json.load(f)
        checkpoint = os.path.join(best_folder, info["checkpoint"])
        float(info["mean_100"]), int(info["episode"]), best_score(info)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if os.path.exists(checkpoint + ".index") else None


def lr_fraction_of(checkpoint: str) -> typing.Optional[float]:
    """The learning rates' fraction at a checkpoint's moment, which a worker's sigma narrowed
    with (final_sigma_scale): a best agent's best.json holds it, a run's checkpoints hold it as
    a variable; None for one written before they did."""
    info = read_best_info(os.path.dirname(checkpoint))
    try:
        if info is not None and info["checkpoint"] == os.path.basename(checkpoint):
            fraction = float(info["lr_fraction"])
        else:
            fraction = float(v1.train.load_variable(checkpoint, LR_FRACTION_VARIABLE))
    except (KeyError, TypeError, ValueError, tf.errors.OpError):  # (a hand-edited best.json too)
        return None
    return fraction if 0.0 <= fraction <= 1.0 else None


def best_kept(run_dir: str) -> bool:
    """Whether the run has a best agent on disk (checkpoints/best/ with its best.json)."""
    return read_best_info(os.path.join(run_dir, CHECKPOINT_FOLDER, BEST_FOLDER)) is not None


def pick_checkpoint(run_dir: str, which: str) -> tuple[str, str]:
    """(checkpoint path, what it is in words) for --checkpoint best, latest or a path."""
    folder = os.path.join(run_dir, CHECKPOINT_FOLDER)
    if which == "latest":
        return latest_checkpoint(folder), "the latest checkpoint"
    if which == "best":
        best_folder = os.path.join(folder, BEST_FOLDER)
        try:
            path = latest_checkpoint(best_folder)
        except UsageError:  # a short run, one written before best checkpoints, or a first best
            # write cut short
            return latest_checkpoint(folder), "the latest checkpoint (the run has no best one)"
        info = read_best_info(best_folder)  # the agent it names is whole (see BestCheckpoint.write)
        if info is None:
            return path, "the best checkpoint (no best.json describes it)"
        return os.path.join(best_folder, info["checkpoint"]), f"the best checkpoint ({describe_best(info)})"
    if os.path.isdir(which) and os.path.exists(os.path.join(which, "config.json")):  # a run's
        if os.path.realpath(which) != os.path.realpath(run_dir):
            raise UsageError(f"--checkpoint {which} is another run's folder: play that run with "
                             f"--eval {which}")
        return pick_checkpoint(run_dir, "best")
    if os.path.isdir(which):  # a checkpoint folder, such as the summary's best/: what its
        info = read_best_info(which)  # best.json names, where it has one
        path = os.path.join(which, info["checkpoint"]) if info else latest_checkpoint(which)
        refuse_another_runs(run_dir, which, path)
        return path, "the checkpoint folder given"
    path = re.sub(r"\.(index|meta|data-\d+-of-\d+)$", "", which)  # a file of it names it too
    if not os.path.exists(path + ".index"):
        try:
            example = latest_checkpoint(folder)
        except UsageError:
            example = os.path.join(folder, "model-<env steps>")
        raise UsageError(f"--checkpoint {which}: no such checkpoint; give best, latest or a "
                         f"checkpoint's path without its suffix, e.g. {example}")
    refuse_another_runs(run_dir, which, path)
    return path, "the checkpoint given"


def refuse_another_runs(run_dir: str, which: str, path: str) -> None:
    """A checkpoint inside another run folder is played with that run's config (its env, net and
    statistics), and its recording goes there: --eval that run. (A copy outside any run folder
    plays with run_dir's.)"""
    owner = run_folder_of(os.path.dirname(os.path.realpath(path)))  # ("/" for a loose copy)
    if os.path.exists(os.path.join(owner, "config.json")) and owner != os.path.realpath(run_dir):
        raise UsageError(f"--checkpoint {which} is a checkpoint of the run {owner}, not of "
                         f"{run_dir}: play it with --eval {owner} --checkpoint {which}")


def episode_step_limit(env_id: str, cfg: Config) -> int:
    """The steps a trial or --eval plays of an episode at most: TRIAL_STEP_LIMIT, or the run's or
    the env's own time limit where it is longer (an env without one may never end an episode)."""
    return max(TRIAL_STEP_LIMIT, cfg.max_episode_steps or registered_time_limit(env_id) or 0)


def play_trial(envs, greedy: GreedyPlayer, obs_dtype, should_stop=lambda: False,
               step_limit: int = None) -> typing.Optional[float]:
    """A best-agent trial: the mean raw return of one episode in each of the envs, all stepped
    together from the trial start states (None if should_stop() said so first). An episode still
    going after step_limit steps (TRIAL_STEP_LIMIT if None) counts as cut there."""
    obs = envs.reset(TRIAL_SEED + np.arange(len(envs))).astype(obs_dtype)  # as fed
    greedy.start()
    returns, playing = np.zeros(len(envs)), np.ones(len(envs), bool)
    for _ in range(step_limit or TRIAL_STEP_LIMIT):
        if not playing.any():
            break
        if should_stop():
            return None
        next_obs, rewards, terminated, truncated = envs.step(greedy(obs))
        returns += rewards * playing
        obs = np.array(next_obs, dtype=obs.dtype)
        for k in np.flatnonzero(np.logical_or(terminated, truncated)):
            playing[k] = False  # an env that has played its episode plays on, unscored
            obs[k] = envs.restart(k)
            greedy.restart(k)
    return float(returns.mean())


def play_episodes(env, player, episodes: int, record: bool,
                  first_seed: int = EVAL_SEED, actions: list = None,
                  step_limit: int = None) -> tuple[list, list]:
    """Play `episodes` episodes with a GreedyPlayer (or SampledPlayer) in a batch of one env
    (GymEnvs or AtariEnvs), episode k from seed first_seed + k: their raw returns, and the first
    episode's frames when recording. actions: a list that gets each episode's actions, as the
    env got them (for a replay that draws, recording.draw_in_child). An episode still going
    after step_limit steps (TRIAL_STEP_LIMIT if None; episode_step_limit) is cut there, with a
    warning: an env without a time limit may never end one."""
    step_limit = step_limit or TRIAL_STEP_LIMIT
    returns, frames, cut = [], [], 0
    for episode in range(episodes):
        obs = env.reset([first_seed + episode])
        player.start()
        total, done, steps = 0.0, False, 0
        if actions is not None:
            actions.append([])
        while not done:
            if record and episode == 0 and len(frames) < RECORD_FRAME_LIMIT:
                frames.append(env.render())
            chosen = player(obs)
            if actions is not None:
                actions[-1].append(np.asarray(chosen[0]))
            next_obs, rewards, terminated, truncated = env.step(chosen)
            obs = np.asarray(next_obs)
            total += float(rewards[0])
            steps += 1
            done = bool(terminated[0] or truncated[0])
            if not done and steps >= step_limit:
                done, cut = True, cut + 1
        returns.append(total)
    if cut:
        warn(f"{cut} of the {episodes} episodes were still going after {step_limit:,} steps "
             f"and were cut there, their returns so far counted (the cap on an episode's "
             f"length: an env without a time limit may never end one)")
    return returns, frames
