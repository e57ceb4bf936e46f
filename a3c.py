"""A3C: Asynchronous Advantage Actor-Critic, threaded, in TF1-style graph mode.

    python a3c.py --env Pendulum-v1 --workers 8

One graph, one Session. A global ACNet lives on the CPU; each worker thread owns a local ACNet
(its own variable scope) and its own environments. A worker repeatedly

  1. pulls the global parameters into its local net (fused into the previous push),
  2. acts for n steps in each of its environments,
  3. computes n-step returns R_t = r_t + g r_t+1 + ... + g^k V(s_t+k), bootstrapping from V at
     the rollout's end and at time-limit cuts, from 0 only where an episode really terminated,
  4. pushes the clipped gradients of its actor and critic losses to the global net through two
     RMSProp optimisers.

The sections below follow that order: settings, environments, networks, the worker loop, the
training driver, the command line. Hyperparameters live in config.py.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import math
import os
import signal
import sys
import threading
import time
import typing
from collections import deque

import gymnasium as gym
import numpy as np

import config as config_module
from config import Config


def import_tensorflow_quietly():
    """Import TensorFlow without its C++ start-up lines (oneDNN, CUDA probing): they are written
    to stderr before any logging setting applies, so stderr is silenced for the import alone."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        import tensorflow
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    return tensorflow


tf = import_tensorflow_quietly()
tf.compat.v1.disable_eager_execution()
tf.get_logger().setLevel("ERROR")  # compat.v1 deprecation notices
v1 = tf.compat.v1
try:  # the options of the C++ callable beneath Session.make_callable (see session_callable)
    from tensorflow.core.protobuf.config_pb2 import CallableOptions
except ImportError:
    CallableOptions = None

EPISODE_COLUMNS = ["worker", "episode", "env_steps", "wall_s", "return", "length",
                   "running_return", "entropy", "grad_norm"]
RUNNING_WINDOW = 100  # running_return is the mean raw return of the last 100 episodes


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit status 2, nothing written."""


def first_line(exc: Exception) -> str:
    """The first line of an exception's message (or its type's name): fit for a one-line error."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class WorkerError(Exception):
    """A worker thread raised: carries the worker's name to the user."""


# ---------------------------------------------------------------------------------------------
# Environments
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What the networks need to know about an environment."""
    env_id: str
    obs_dim: int
    discrete: bool
    n_actions: int          # discrete: number of actions; continuous: action dimensions
    action_low: np.ndarray  # continuous only
    action_high: np.ndarray


def make_env(env_id: str, cfg: Config, render_mode: str = None) -> gym.Env:
    kwargs = {"disable_env_checker": True}
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    try:
        return gym.make(env_id, **kwargs)
    except Exception as exc:  # gymnasium raises several types for unknown or broken ids
        raise UsageError(f"cannot make environment '{env_id}': {first_line(exc)} "
                         f"(gymnasium.pprint_registry() lists the known ids)") from exc


def env_spec(env: gym.Env, env_id: str) -> EnvSpec:
    """Read the spaces, or refuse the ones this trainer has no network for."""
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, gym.spaces.Box):
        raise UsageError(f"{env_id}: observation space {obs_space} is not supported "
                         f"(only flat Box observations)")
    if len(obs_space.shape) != 1:
        raise UsageError(f"{env_id}: image observations {obs_space} are not supported yet "
                         f"(only flat Box observations; Atari needs the CNN network)")
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpec(env_id, obs_space.shape[0], True, int(act_space.n), None, None)
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        low, high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise UsageError(f"{env_id}: action space {act_space} has infinite bounds; "
                             f"the Gaussian policy maps its mean into finite bounds")
        return EnvSpec(env_id, obs_space.shape[0], False, act_space.shape[0], low, high)
    raise UsageError(f"{env_id}: action space {act_space} is not supported "
                     f"(only Discrete or a flat Box)")


# ---------------------------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------------------------

def dense(x, size, name, activation=None, gain=np.sqrt(2), bias=0.0):
    """A fully connected layer from get_variable + matmul (tf.compat.v1.layers left with Keras 3)."""
    w = v1.get_variable(f"{name}/w", [x.shape[-1], size], initializer=v1.orthogonal_initializer(gain))
    b = v1.get_variable(f"{name}/b", [size], initializer=v1.constant_initializer(bias))
    y = tf.nn.bias_add(tf.matmul(x, w), b)  # its gradient is one op; a broadcasting add's is seven
    return activation(y) if activation is not None else y


def mlp(x, sizes, name):
    for i, size in enumerate(sizes):
        x = dense(x, size, f"{name}/h{i}", tf.nn.relu)
    return x


class GaussianPolicy:
    """Any flat Box action space: a diagonal Gaussian whose mean lies inside [low, high].

    mean  = (low + high) / 2 + (high - low) / 2 * tanh(u)
    sigma = (softplus(v) + sigma_floor) * (high - low) / 2, v from the state or a free parameter
    The raw sample is what the log-probability is taken of; the env gets it clipped to the bounds.
    """

    def __init__(self, features, spec: EnvSpec, cfg: Config):
        half_range = (spec.action_high - spec.action_low) / 2
        centre = (spec.action_high + spec.action_low) / 2
        u = dense(features, spec.n_actions, "mean", gain=0.01)
        v_init = np.log(np.expm1(cfg.initial_sigma - cfg.sigma_floor))  # softplus(v_init) + floor
        if cfg.sigma_from_state:
            v = dense(features, spec.n_actions, "sigma", gain=0.01, bias=v_init)
        else:  # one learned sigma per action dimension, shared by all states
            v = v1.get_variable("sigma/v", [spec.n_actions], initializer=v1.constant_initializer(v_init))
            v = v + tf.zeros_like(u)
        self.mean = centre + half_range * tf.tanh(u)
        self.sigma = (tf.nn.softplus(v) + cfg.sigma_floor) * half_range
        self.sample = self.mean + self.sigma * tf.random.normal(tf.shape(self.mean))
        self.env_action = tf.clip_by_value(self.sample, spec.action_low, spec.action_high)
        self.greedy_action = self.mean
        self.entropy = tf.reduce_sum(0.5 + 0.5 * np.log(2 * np.pi) + tf.math.log(self.sigma), axis=1)

    def action_placeholder(self, spec: EnvSpec):
        return v1.placeholder(tf.float32, [None, spec.n_actions], "actions")

    def log_prob(self, actions):
        z = (actions - self.mean) / self.sigma
        return tf.reduce_sum(-0.5 * tf.square(z) - tf.math.log(self.sigma) - 0.5 * np.log(2 * np.pi),
                             axis=1)


class SoftmaxPolicy:
    """Discrete actions: a categorical distribution over softmax(logits)."""

    def __init__(self, features, spec: EnvSpec, cfg: Config):
        self.logits = dense(features, spec.n_actions, "logits", gain=0.01)
        self.log_probs = tf.nn.log_softmax(self.logits)
        self.sample = tf.squeeze(tf.random.categorical(self.logits, 1, dtype=tf.int32), axis=1)
        self.env_action = self.sample
        self.greedy_action = tf.argmax(self.logits, axis=1, output_type=tf.int32)
        self.entropy = -tf.reduce_sum(tf.exp(self.log_probs) * self.log_probs, axis=1)

    def action_placeholder(self, spec: EnvSpec):
        return v1.placeholder(tf.int32, [None], "actions")

    def log_prob(self, actions):
        return tf.reduce_sum(self.log_probs * tf.one_hot(actions, tf.shape(self.logits)[1]), axis=1)


def build_actor(obs, spec: EnvSpec, cfg: Config):
    with v1.variable_scope("actor"):
        features = mlp(obs, cfg.actor_hidden, "mlp")
        policy_class = SoftmaxPolicy if spec.discrete else GaussianPolicy
        return policy_class(features, spec, cfg)


def build_critic(obs, cfg: Config):
    """V(obs). Built once per input tensor; AUTO_REUSE makes every call share one set of weights."""
    with v1.variable_scope("critic", reuse=v1.AUTO_REUSE):
        return tf.squeeze(dense(mlp(obs, cfg.critic_hidden, "mlp"), 1, "v", gain=1.0), axis=1)


def n_step_returns(rewards, next_values, terminated, ended, gamma):
    """Bootstrapped n-step returns of a [T, E] time-major rollout.

    rewards[t]     reward of step t (already scaled for learning)
    next_values[t] V(s') of the observation step t led to (its final observation if it ended)
    terminated[t]  1 where the episode really ended at step t: nothing follows, V = 0
    ended[t]       1 where it ended for any reason (terminated or truncated by a time limit)

    R_t = r_t + gamma * (1 - terminated_t) * (V(s'_t) if step t ended or is the last, else R_t+1)
    so a time-limit cut bootstraps from V of the state it was cut in, exactly as the rollout's end.
    T is static, so the recursion unrolls into T small ops (no while loop in the hot path).
    """
    steps = rewards.shape[0]
    rewards, next_values, terminated, ended = (
        tf.unstack(x, num=steps) for x in (rewards, next_values, terminated, ended))
    returns = [None] * steps
    following = next_values[steps - 1]
    for t in reversed(range(steps)):
        bootstrap = ended[t] * next_values[t] + (1.0 - ended[t]) * following
        returns[t] = rewards[t] + gamma * (1.0 - terminated[t]) * bootstrap
        following = returns[t]
    return tf.stack(returns)


class ACNet:
    """Actor and critic in one variable scope ('global' or 'worker_<i>').

    Tensors (B = any batch; T = n_steps, E = envs_per_worker, N = T * E):
      obs [B, obs_dim]            -> policy.env_action [B, ...], value [B]
    Worker nets only, fed once per rollout:
      rollout_obs [N, obs_dim], rollout_actions [N, ...], next_obs [N, obs_dim]  (time-major)
      rewards, terminated, ended [T, E]
      -> returns [T, E]; push_and_pull: apply both clipped gradients to the global net, then
         copy the global parameters back into this net, in one session call.
      current_obs [E, obs_dim] -> policy_after_pull: the next step's actions, chosen in that same
         call with the parameters just pulled (one act call fewer per rollout).
    """

    def __init__(self, scope: str, spec: EnvSpec, cfg: Config, global_net: "ACNet" = None,
                 actor_optimizer=None, critic_optimizer=None):
        self.scope = scope
        with v1.variable_scope(scope):
            self.obs = v1.placeholder(tf.float32, [None, spec.obs_dim], "obs")
            self.policy = build_actor(self.obs, spec, cfg)
            self.value = build_critic(self.obs, cfg)
            self.actor_params = v1.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES, f"{scope}/actor")
            self.critic_params = v1.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES, f"{scope}/critic")
            if global_net is not None:
                self._build_update(spec, cfg, global_net, actor_optimizer, critic_optimizer)

    def _build_update(self, spec, cfg, global_net, actor_optimizer, critic_optimizer):
        T, E = cfg.n_steps, cfg.envs_per_worker
        self.lr_fraction = global_net.lr_fraction
        self.actions = self.policy.action_placeholder(spec)
        self.next_obs = v1.placeholder(tf.float32, [T * E, spec.obs_dim], "next_obs")
        self.rewards = v1.placeholder(tf.float32, [T, E], "rewards")
        self.terminated = v1.placeholder(tf.float32, [T, E], "terminated")
        self.ended = v1.placeholder(tf.float32, [T, E], "ended")

        next_values = tf.stop_gradient(tf.reshape(build_critic(self.next_obs, cfg), [T, E]))
        self.returns = n_step_returns(self.rewards, next_values, self.terminated, self.ended, cfg.gamma)
        flat_returns = tf.reshape(self.returns, [-1])
        advantages = tf.stop_gradient(flat_returns - self.value)

        self.entropy = tf.reduce_mean(self.policy.entropy)
        self.actor_loss = (-tf.reduce_mean(self.policy.log_prob(self.actions) * advantages)
                           - cfg.entropy_beta * self.entropy)
        self.critic_loss = tf.reduce_mean(tf.square(flat_returns - self.value))

        self.actor_grads, actor_norm = tf.clip_by_global_norm(
            tf.gradients(self.actor_loss, self.actor_params), cfg.clip_norm)
        self.critic_grads, critic_norm = tf.clip_by_global_norm(
            tf.gradients(self.critic_loss, self.critic_params), cfg.clip_norm)
        self.grad_norm = tf.sqrt(tf.square(actor_norm) + tf.square(critic_norm))  # before clipping
        # a NaN or inf anywhere in the losses or gradients makes this norm non-finite: the check
        # fails the session call before anything is applied, so the global net stays finite
        finite_check = tf.debugging.check_numerics(self.grad_norm, "non-finite gradient norm")

        with tf.control_dependencies([finite_check]):
            self.push = tf.group(
                actor_optimizer.apply_gradients(zip(self.actor_grads, global_net.actor_params)),
                critic_optimizer.apply_gradients(zip(self.critic_grads, global_net.critic_params)))

        def copy_global_params():
            pairs = zip(self.actor_params + self.critic_params,
                        global_net.actor_params + global_net.critic_params)
            return tf.group(*[local.assign(glob) for local, glob in pairs])

        self.pull = copy_global_params()
        with tf.control_dependencies([self.push]):  # pull only after this push has landed
            self.push_and_pull = copy_global_params()

        self.current_obs = v1.placeholder(tf.float32, [E, spec.obs_dim], "current_obs")
        with tf.control_dependencies([self.push_and_pull]):  # read the parameters just pulled
            with v1.variable_scope(v1.get_variable_scope(), reuse=True):
                self.policy_after_pull = build_actor(self.current_obs, spec, cfg)


def learning_rates(cfg: Config) -> tuple[float, float]:
    """(actor, critic) learning rates, divided by sqrt(workers) when scale_lr_with_workers is on."""
    divisor = math.sqrt(cfg.workers) if cfg.scale_lr_with_workers else 1.0
    return cfg.actor_lr / divisor, cfg.critic_lr / divisor


def build_graph(spec: EnvSpec, cfg: Config):
    """The global net on the CPU, its two optimisers, and one ACNet per worker."""
    actor_lr, critic_lr = learning_rates(cfg)
    with tf.device("/cpu:0"):
        global_net = ACNet("global", spec, cfg)
        # the fraction of the learning rates in force; workers feed 1 - budget used when annealing
        global_net.lr_fraction = v1.placeholder_with_default(1.0, [], "lr_fraction")
        actor_optimizer = v1.train.RMSPropOptimizer(
            actor_lr * global_net.lr_fraction, decay=cfg.rmsprop_decay, epsilon=cfg.rmsprop_epsilon,
            name="RMSPropActor")
        critic_optimizer = v1.train.RMSPropOptimizer(
            critic_lr * global_net.lr_fraction, decay=cfg.rmsprop_decay, epsilon=cfg.rmsprop_epsilon,
            name="RMSPropCritic")
        worker_nets = [ACNet(f"worker_{i}", spec, cfg, global_net, actor_optimizer, critic_optimizer)
                       for i in range(cfg.workers)]
    return global_net, worker_nets


# ---------------------------------------------------------------------------------------------
# Shared bookkeeping: the only state the worker threads share besides the global net
# ---------------------------------------------------------------------------------------------

def cpu_seconds() -> float:
    """User + system CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system


def budget_used(cfg: Config, episodes: int, env_steps: int) -> float:
    """The fraction of the run's budget (episodes or env steps, whichever is further) used."""
    return max(episodes / cfg.max_episodes if cfg.max_episodes else 0.0,
               env_steps / cfg.max_steps if cfg.max_steps else 0.0)


class EpisodeLog:
    """Global counters and the per-episode record, guarded by one lock.

    Every finished episode becomes one row of episodes.csv (flushed at once) and one TensorBoard
    scalar set; `return` is always the environment's raw return.
    """

    def __init__(self, run_dir: str, cfg: Config, summary_writer, history: tuple = None):
        """history: (rows of the run's episodes.csv, env steps so far) to continue that CSV and
        those counters instead of starting a new one."""
        self.cfg = cfg
        self.lock = threading.Lock()
        self.session_start = time.time()
        self.start_cpu = cpu_seconds()
        self.wall_before = 0.0  # seconds the run had trained before this process took it up
        self.env_steps = 0
        self.episodes = 0
        self.recent_returns = deque(maxlen=RUNNING_WINDOW)
        self.best_running = -math.inf
        self.summary_writer = summary_writer
        path = os.path.join(run_dir, "episodes.csv")
        if history is None:
            self.csv_file = open(path, "w", newline="")
            self.csv = csv.writer(self.csv_file)
            self.csv.writerow(EPISODE_COLUMNS)
            self.csv_file.flush()
            return
        rows, self.env_steps = history
        self.episodes = len(rows["episode"])
        self.wall_before = float(rows["wall_s"][-1]) if self.episodes else 0.0
        self.recent_returns.extend(rows["return"][-RUNNING_WINDOW:])
        if self.episodes >= RUNNING_WINDOW:
            self.best_running = float(np.max(rows["running_return"][RUNNING_WINDOW - 1:]))
        self.csv_file = open(path, "a", newline="")
        self.csv = csv.writer(self.csv_file)

    def wall(self) -> float:
        return self.wall_before + time.time() - self.session_start

    def add_steps(self, count: int) -> None:
        with self.lock:
            self.env_steps += count

    def budget_used(self) -> float:
        return budget_used(self.cfg, self.episodes, self.env_steps)

    def record(self, worker: int, episode_return: float, length: int, entropy: float,
               grad_norm: float) -> None:
        with self.lock:
            if self.cfg.max_episodes is not None and self.episodes >= self.cfg.max_episodes:
                return  # other workers finished the last episodes of the budget first
            self.episodes += 1
            self.recent_returns.append(episode_return)
            running = float(np.mean(self.recent_returns))
            if len(self.recent_returns) == RUNNING_WINDOW:
                self.best_running = max(self.best_running, running)
            wall = self.wall()
            self.csv.writerow([worker, self.episodes, self.env_steps, f"{wall:.3f}",
                               f"{episode_return:.6g}", length, f"{running:.6g}",
                               f"{entropy:.6g}", f"{grad_norm:.6g}"])
            self.csv_file.flush()
            summary = v1.Summary(value=[
                v1.Summary.Value(tag="charts/episodic_return", simple_value=episode_return),
                v1.Summary.Value(tag="charts/episodic_length", simple_value=length),
                v1.Summary.Value(tag="charts/running_return", simple_value=running),
                v1.Summary.Value(tag="losses/entropy", simple_value=entropy),
                v1.Summary.Value(tag="losses/grad_norm", simple_value=grad_norm)])
            self.summary_writer.add_summary(summary, self.env_steps)

    def progress(self) -> dict:
        with self.lock:
            wall = self.wall()
            session = time.time() - self.session_start
            return dict(episodes=self.episodes, env_steps=self.env_steps, wall_s=wall,
                        steps_per_s=self.env_steps / max(wall, 1e-9),
                        cpu_utilisation=(cpu_seconds() - self.start_cpu) / max(session, 1e-9)
                        / (os.cpu_count() or 1),
                        running=float(np.mean(self.recent_returns)) if self.recent_returns else math.nan,
                        best_running=self.best_running)

    def close(self) -> None:
        self.csv_file.close()


# ---------------------------------------------------------------------------------------------
# The worker loop
# ---------------------------------------------------------------------------------------------

def session_callable(sess, fetches: list, feeds: list):
    """A function of the feeds' values (NumPy arrays of exactly the placeholders' dtypes) that
    runs `fetches` in one session call and returns the values of the tensors among them.

    Session.make_callable hands every call that has feeds to Session.run, whose Python feed and
    fetch handling costs ~55 us per call here, more than these graphs' ops, and holds the GIL
    throughout. The C++ callable beneath it (Session._make_callable_from_options, which
    TensorFlow's own Keras 2 backend uses) costs ~4 us and releases the GIL while the ops run,
    so worker threads overlap. A TensorFlow without it gets make_callable: same results, slower.
    """
    tensors = [f for f in fetches if isinstance(f, tf.Tensor)]
    operations = [f for f in fetches if isinstance(f, tf.Operation)]
    make_from_options = getattr(sess, "_make_callable_from_options", None)
    if CallableOptions is None or make_from_options is None:
        slow = sess.make_callable(tensors + operations, feed_list=feeds)
        return lambda *values: slow(*values)[:len(tensors)]
    return make_from_options(CallableOptions(feed=[t.name for t in feeds],
                                             fetch=[t.name for t in tensors],
                                             target=[op.name for op in operations]))


class Worker:
    """One thread's environments and local net, running the n-step rollout loop.

    The rollout buffers are time-major [T, E] (T = n_steps, E = envs_per_worker); a step that
    ends an episode stores the episode's final observation in next_obs and the env restarts at
    once, so every rollout is exactly T steps and each push carries T * E samples.
    """

    def __init__(self, index: int, net: ACNet, env_id: str, spec: EnvSpec, cfg: Config):
        self.index = index
        self.name = f"worker_{index}"
        self.net = net
        self.spec = spec
        self.cfg = cfg
        self.envs = [make_env(env_id, cfg) for _ in range(cfg.envs_per_worker)]
        T, E = cfg.n_steps, cfg.envs_per_worker
        self.rollout_obs = np.zeros((T, E, spec.obs_dim), np.float32)
        self.next_obs = np.zeros_like(self.rollout_obs)
        self.rewards = np.zeros((T, E), np.float32)
        self.terminated = np.zeros((T, E), np.float32)
        self.ended = np.zeros((T, E), np.float32)
        self.actions = (np.zeros((T, E), np.int32) if spec.discrete
                        else np.zeros((T, E, spec.n_actions), np.float32))
        self.episode_return = np.zeros(E)
        self.episode_length = np.zeros(E, np.int64)

    def prepare(self, sess) -> None:
        """Build this worker's two session calls, pull the global parameters and reset the envs
        with their seeds. TensorFlow prepares a callable's executors when it is made, so this runs
        before the clock starts."""
        net = self.net
        self.act = session_callable(sess, [net.policy.sample, net.policy.env_action], [net.obs])
        self.update = session_callable(
            sess, [net.push_and_pull, net.entropy, net.grad_norm,
                   net.policy_after_pull.sample, net.policy_after_pull.env_action],
            [net.obs, net.actions, net.next_obs, net.rewards, net.terminated, net.ended,
             net.current_obs, net.lr_fraction])
        self.chosen_actions = None  # (sampled, for the envs) for self.obs, chosen by the last update
        sess.run(net.pull)
        first_seed = self.cfg.seed * 1000 + self.index * len(self.envs)
        self.obs = np.stack([env.reset(seed=first_seed + k)[0]
                             for k, env in enumerate(self.envs)]).astype(np.float32)
        for k, env in enumerate(self.envs):
            env.action_space.seed(first_seed + k)

    def rollout(self) -> list:
        """Act n_steps in every env; return (env index, raw return, length) of episodes that ended.

        Per step: one session call for all E actions, E env steps, and whole-row NumPy writes
        (per-env scalar writes cost more than the step of a cheap env)."""
        shift, scale = self.cfg.reward_shift, self.cfg.reward_scale
        finished = []
        for t in range(self.cfg.n_steps):
            self.rollout_obs[t] = self.obs
            if self.chosen_actions is None:
                self.chosen_actions = self.act(self.obs)
            self.actions[t], env_actions = self.chosen_actions
            self.chosen_actions = None
            next_obs, raw_rewards, terminated, truncated, _ = zip(
                *[env.step(action) for env, action in zip(self.envs, env_actions)])
            raw_rewards = np.array(raw_rewards)
            self.next_obs[t] = next_obs
            self.rewards[t] = (raw_rewards + shift) * scale
            self.terminated[t] = terminated
            self.ended[t] = np.logical_or(terminated, truncated)
            self.episode_return += raw_rewards
            self.episode_length += 1
            self.obs[:] = self.next_obs[t]
            for k in np.flatnonzero(self.ended[t]):
                # the final observation stays in next_obs for the bootstrap; the env starts anew
                finished.append((int(k), float(self.episode_return[k]), int(self.episode_length[k])))
                self.episode_return[k] = 0.0
                self.episode_length[k] = 0
                self.obs[k] = self.envs[k].reset()[0]
        return finished

    def push_and_pull(self, lr_fraction: float) -> tuple[float, float]:
        """Push this rollout's clipped gradients to the global net and pull it back; the same call
        chooses the next step's actions with the pulled parameters. Returns the policy entropy
        and the gradient norm before clipping."""
        T, E = self.cfg.n_steps, len(self.envs)
        entropy, grad_norm, *self.chosen_actions = self.update(
            self.rollout_obs.reshape(T * E, -1), self.actions.reshape(T * E, *self.actions.shape[2:]),
            self.next_obs.reshape(T * E, -1), self.rewards, self.terminated, self.ended, self.obs,
            np.float32(lr_fraction))
        return float(entropy), float(grad_norm)

    def work(self, coord, log: EpisodeLog) -> None:
        steps_per_rollout = self.cfg.n_steps * len(self.envs)
        update_stats = np.zeros((len(self.envs), 3))  # per env: entropy sum, grad norm sum, pushes
        while not coord.should_stop():
            finished = self.rollout()
            log.add_steps(steps_per_rollout)
            lr_fraction = max(0.0, 1.0 - log.budget_used()) if self.cfg.anneal_lr else 1.0
            try:
                this_push = (*self.push_and_pull(lr_fraction), 1)
            except tf.errors.InvalidArgumentError as exc:
                if "non-finite" not in str(exc):
                    raise
                raise FloatingPointError(
                    f"non-finite loss or gradient at global env step {log.env_steps:,}; this push "
                    f"was not applied, so the global net and its checkpoints stay finite "
                    f"(try lower learning rates or reward_scale)") from None
            update_stats += this_push
            for k, episode_return, length in finished:
                entropy_sum, norm_sum, pushes = update_stats[k]
                log.record(self.index, episode_return, length, entropy_sum / pushes, norm_sum / pushes)
                update_stats[k] = this_push  # it also trained on env k's next episode's first steps
            if log.budget_used() >= 1.0:
                coord.request_stop()

    def close(self) -> None:
        for env in self.envs:
            env.close()


# ---------------------------------------------------------------------------------------------
# The training driver
# ---------------------------------------------------------------------------------------------

def new_run_dir(results_dir: str, env_id: str, seed: int) -> str:
    """results/<env>/<UTC timestamp>-s<seed>/, created fresh: an earlier run is never touched."""
    env_folder = "".join(c if c.isalnum() or c in "-_." else "_" for c in env_id)
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


def versions() -> dict:
    return {"python": sys.version.split()[0], "tensorflow": tf.__version__,
            "gymnasium": gym.__version__, "numpy": np.__version__}


def session_config(op_threads: int):
    """Grappler's graph rewrites are off: on these tiny graphs they cost more per call than they
    save, and memory. One thread per op: the graphs are too small to share out. op_threads < 0
    runs each call's ops in the thread that made it; > 0 gives the session its own pool."""
    config = v1.ConfigProto(intra_op_parallelism_threads=1,
                            inter_op_parallelism_threads=op_threads,
                            use_per_session_threads=op_threads > 0)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


class CpuLayout(typing.NamedTuple):
    """Where the threads run when they are pinned."""
    workers: set  # the CPUs the worker threads share
    ops: set      # the CPUs of the session's op pool

    def describe(self) -> str:
        ops = f"CPU {min(self.ops)}" if len(self.ops) == 1 else f"{len(self.ops)} other CPUs"
        return f"worker threads share CPU {min(self.workers)}, TensorFlow's ops run on {ops}"


def cpu_layout(cfg: Config) -> typing.Optional[CpuLayout]:
    """Where the worker threads and TensorFlow's op pool run, or None: no pinning.

    Only one thread at a time runs Python (the GIL), and every session call hands it on. Left to
    the OS, the next worker often sleeps on the other CPU, and waking it there costs more than
    the call: 8 workers x 8 Pendulum envs on 2 cores kept the CPUs ~67% busy at ~0.35x the bare
    env loop. With the workers taking turns on one CPU and their ops queued to a pool on the
    others, both CPUs stay busy (results/throughput.md). It takes 3 or more workers: with fewer,
    there is seldom another worker ready to run while one waits for its ops, and a lone worker
    ran at half its speed waiting on the pool."""
    if not cfg.pin_threads or cfg.workers < 3 or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return CpuLayout(workers={cpus[0]}, ops=set(cpus[1:]))


def open_session(graph, layout: typing.Optional[CpuLayout]) -> "v1.Session":
    """A session running its ops in the calling thread (layout None), or in a pool of one thread
    per TensorFlow CPU of the layout, pinned there."""
    if layout is None:
        return v1.Session(graph=graph, config=session_config(-1))
    everywhere = os.sched_getaffinity(0)
    os.sched_setaffinity(0, layout.ops)  # the pool's threads start now and inherit these CPUs
    try:
        return v1.Session(graph=graph, config=session_config(len(layout.ops)))
    finally:
        os.sched_setaffinity(0, everywhere)


def train(env_id: str, cfg: Config, results_dir: str = "results", show_plot: bool = True,
          out=None, resume_dir: str = None) -> dict:
    """Train, writing everything into a new run folder (or continuing resume_dir's run from its
    latest checkpoint); returns a summary dict.

    Raises UsageError before anything is written when the env or config cannot work, and
    re-raises a worker's exception (after saving the CSV and plot) when a worker fails.
    """
    out = out or sys.stdout
    cfg.validate()
    probe = make_env(env_id, cfg)
    spec = env_spec(probe, env_id)
    probe.close()

    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(cfg.seed)
        np.random.seed(cfg.seed)
        global_net, worker_nets = build_graph(spec, cfg)
        run_dir = resume_dir or new_run_dir(results_dir, env_id, cfg.seed)
        checkpoints = Checkpoints(run_dir, cfg, env_id)
        init = v1.global_variables_initializer()
    layout = cpu_layout(cfg)
    sess = open_session(graph, layout)
    sess.run(init)
    history = None
    if resume_dir is not None:
        try:
            rows = read_episodes(os.path.join(run_dir, "episodes.csv"))
            # the checkpoint's step count, or further if the CSV recorded episodes after it
            resume_steps = int(max([checkpoints.restore(sess), *rows["env_steps"].astype(int)]))
            history = (rows, resume_steps)
            if budget_used(cfg, len(rows["episode"]), resume_steps) >= 1:
                raise UsageError(f"{run_dir} already used its budget (max_episodes="
                                 f"{cfg.max_episodes}, max_steps={cfg.max_steps}); raise "
                                 f"--max-episodes or --max-steps")
        except UsageError:
            sess.close()
            raise
    workers = [Worker(i, net, env_id, spec, cfg) for i, net in enumerate(worker_nets)]

    actor_lr, critic_lr = learning_rates(cfg)
    run_info = {"env": env_id, "config": dataclasses.asdict(cfg),
                "effective_actor_lr": actor_lr, "effective_critic_lr": critic_lr,
                "argv": sys.argv, "versions": versions(),
                "cpus": None if layout is None else {"workers": sorted(layout.workers),
                                                     "tensorflow_ops": sorted(layout.ops)}}
    if resume_dir is not None:  # keep the history of how the run was started and resumed
        with open(os.path.join(run_dir, "config.json")) as f:
            earlier = json.load(f)
        run_info["resumed"] = earlier.get("resumed", []) + [
            {"argv": sys.argv, "env_steps": resume_steps,
             "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}]
        run_info["argv"] = earlier.get("argv")
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(run_info, f, indent=2)
    summary_writer = v1.summary.FileWriter(run_dir, graph)
    for worker in workers:
        worker.prepare(sess)
    log = EpisodeLog(run_dir, cfg, summary_writer, history)  # the clock starts with the workers
    where = "" if layout is None else f" ({layout.describe()})"
    print(f"training {env_id} with {cfg.workers} workers x {cfg.envs_per_worker} envs{where}; "
          f"results in {run_dir}", file=out, flush=True)
    coord = v1.train.Coordinator()
    threads = []
    for worker in workers:
        def run(worker=worker):  # bind this worker now, not the loop variable's last value
            with coord.stop_on_exception():
                if layout is not None:
                    os.sched_setaffinity(0, layout.workers)  # this thread only
                try:
                    worker.work(coord, log)
                except Exception as exc:
                    raise WorkerError(f"{worker.name} raised {type(exc).__name__}: {exc}") from exc
        thread = threading.Thread(target=run, name=worker.name, daemon=True)
        thread.start()
        threads.append(thread)

    error = None
    interrupted = False
    try:
        last_checkpoint = time.time()
        while not coord.wait_for_stop(min(cfg.log_every_s, cfg.checkpoint_every_s)):
            print(progress_line(log.progress()), file=out, flush=True)
            if time.time() - last_checkpoint >= cfg.checkpoint_every_s:
                checkpoints.save(sess, log.env_steps)
                last_checkpoint = time.time()
        coord.join(threads, stop_grace_period_secs=30)
    except KeyboardInterrupt:
        interrupted = True
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=30, ignore_live_threads=True)
    except Exception as exc:  # a worker raised: the Coordinator stopped the others
        error = exc
    finally:
        final = log.progress()  # the workers have stopped: the clock stops too
        checkpoints.save(sess, log.env_steps)
        log.close()
        summary_writer.close()
        sess.close()
        for worker in workers:
            worker.close()

    plot_path = plot_rewards(run_dir, env_id, show=show_plot and error is None and not interrupted)
    final.update(run_dir=run_dir, plot=plot_path, interrupted=interrupted)
    how = "interrupted" if interrupted else ("stopped by an error" if error else "done")
    print(f"{how}: {progress_line(final)}\nresults in {run_dir}", file=out, flush=True)
    if error is not None:
        raise error
    return final


CHECKPOINT_FOLDER = "checkpoints"
ENV_ID_VARIABLE = "run/env_id"


class Checkpoints:
    """Saves and restores the global net, its RMSProp slots and the run's env step counter
    (the workers' own copies are pulled anew). Each save writes new files and only then swaps
    the "checkpoint" index file atomically, so a save cut short never leaves a broken latest."""

    def __init__(self, run_dir: str, cfg: Config, env_id: str):
        self.folder = os.path.join(run_dir, CHECKPOINT_FOLDER)
        self.env_id = env_id
        v1.Variable(env_id, name=ENV_ID_VARIABLE, trainable=False)  # checked when restoring
        self.env_steps = v1.get_variable("run/env_steps", [], tf.int64, v1.zeros_initializer(),
                                         trainable=False)
        self.steps_in = v1.placeholder(tf.int64, [], "run/env_steps_in")
        self.set_steps = self.env_steps.assign(self.steps_in)
        shared = [v for v in v1.global_variables() if not v.op.name.startswith("worker_")]
        self.saver = v1.train.Saver(var_list=shared, max_to_keep=cfg.keep_checkpoints)
        self.shared = shared

    def save(self, sess, env_steps: int) -> None:
        sess.run(self.set_steps, {self.steps_in: env_steps})
        self.saver.save(sess, os.path.join(self.folder, "model"), global_step=env_steps)

    def restore(self, sess) -> int:
        """Restore the latest checkpoint; returns its env step count."""
        restore_checkpoint(sess, self.saver, latest_checkpoint(self.folder), self.shared, self.env_id)
        # adopt the earlier checkpoints, so that keep_checkpoints counts them too
        state = v1.train.get_checkpoint_state(self.folder)
        self.saver.recover_last_checkpoints(
            [os.path.join(self.folder, os.path.basename(p)) for p in state.all_model_checkpoint_paths])
        return int(sess.run(self.env_steps))


def latest_checkpoint(folder: str) -> str:
    checkpoint = v1.train.latest_checkpoint(folder)
    if checkpoint is None:
        raise UsageError(f"no checkpoint in {folder}; "
                         f"runs write one at the end and every checkpoint_every_s seconds")
    # the index file names checkpoints by absolute path: resolve it here, so a moved or copied
    # run folder reads its own files
    return os.path.join(folder, os.path.basename(checkpoint))


def restore_checkpoint(sess, saver, checkpoint: str, variables: list, env_id: str) -> None:
    """saver.restore, after checking that the checkpoint was trained on env_id and that every
    variable is stored with this graph's shape (resource variables would silently take another
    shape); UsageError when it doesn't fit."""
    try:
        stored = dict(v1.train.list_variables(checkpoint))
        trained_on = v1.train.load_variable(checkpoint, ENV_ID_VARIABLE).decode()
        if trained_on != env_id:
            raise ValueError(f"it was trained on {trained_on}, not {env_id}")
        for variable in variables:
            name, shape = variable.op.name, variable.shape.as_list()
            if stored.get(name) != shape:
                raise ValueError(f"it holds {name} as {stored.get(name)}, the config builds {shape}")
        saver.restore(sess, checkpoint)
    except Exception as exc:
        raise UsageError(f"cannot restore {checkpoint}: {first_line(exc)} (corrupt, or written for "
                         f"another env or network shape)") from None


def read_run(run_dir: str) -> tuple[str, Config]:
    """(env id, config) of a run folder that a3c.py wrote."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            saved = json.load(f)
        return saved["env"], config_module.from_dict(saved["config"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{run_dir} is not a readable run folder ({exc}); pass a folder that "
                         f"a3c.py wrote, e.g. results/Pendulum-v1/<run>") from None


def evaluate(run_dir: str, episodes: int = 10, render: bool = False, record: bool = False,
             out=None) -> dict:
    """Run the deterministic policy (mean action / argmax) of a run's latest checkpoint."""
    out = out or sys.stdout
    env_id, cfg = read_run(run_dir)
    checkpoint = latest_checkpoint(os.path.join(run_dir, CHECKPOINT_FOLDER))
    render_mode = "human" if render else ("rgb_array" if record else None)
    if render_mode == "rgb_array":
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # frames only: no window, no display
    env = make_env(env_id, cfg, render_mode=render_mode)
    spec = env_spec(env, env_id)
    graph = tf.Graph()
    with graph.as_default():
        net = ACNet("global", spec, cfg)
        saver = v1.train.Saver(var_list=net.actor_params + net.critic_params)
    sess = open_session(graph, None)  # one thread plays the episodes: no pool to feed
    try:
        restore_checkpoint(sess, saver, checkpoint, net.actor_params + net.critic_params, env_id)
    except UsageError:
        sess.close()
        raise

    greedy = sess.make_callable(net.policy.greedy_action, feed_list=[net.obs])
    try:
        returns, frames = run_greedy_episodes(env, greedy, episodes, record)
    except gym.error.DependencyNotInstalled as exc:
        raise UsageError(f"{env_id} cannot render: {exc}") from None
    finally:
        env.close()
        sess.close()
    result = dict(env=env_id, checkpoint=checkpoint, returns=returns,
                  mean=float(np.mean(returns)), std=float(np.std(returns)))
    if record and frames:
        result["animation"] = save_animation(frames, os.path.join(run_dir, "episode.gif"))
    print(f"{env_id}: deterministic policy of {checkpoint}: return {result['mean']:.1f} "
          f"± {result['std']:.1f} over {episodes} episodes"
          + (f"; animation in {result['animation']}" if "animation" in result else ""),
          file=out, flush=True)
    return result


def run_greedy_episodes(env, greedy, episodes: int, record: bool) -> tuple[list, list]:
    """Play `episodes` episodes with the greedy policy: their raw returns, and the first
    episode's frames when recording."""
    returns, frames = [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)
        total, done = 0.0, False
        while not done:
            if record and episode == 0:
                frames.append(env.render())
            action = greedy(np.asarray(obs, np.float32)[None])[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    return returns, frames


def save_animation(frames: list, path: str) -> str:
    from PIL import Image  # installed with matplotlib

    images = [Image.fromarray(np.asarray(frame)) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=33, loop=0)
    return path


def progress_line(p: dict) -> str:
    best = f"{p['best_running']:.1f}" if math.isfinite(p["best_running"]) else "n/a"
    return (f"episodes {p['episodes']:>6} | env steps {p['env_steps']:>10,} | "
            f"{p['steps_per_s']:>7,.0f} steps/s | mean-100 return {p['running']:8.1f} | "
            f"best mean-100 {best} | {p['wall_s']:.0f} s")


def display_available() -> bool:
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
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
        plt.show()
    plt.close(fig)
    return path


def read_episodes(path: str) -> dict:
    """episodes.csv as a dict of NumPy columns."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {name: np.array([float(row[name]) for row in rows]) for name in EPISODE_COLUMNS}


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------

DEFAULT_ENV = "Pendulum-v1"


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Threaded A3C (TF1 graph mode) on a gymnasium environment. "
                    "Hyperparameters live in config.py; any field can be set with --set.")
    parser.add_argument("--env", default=DEFAULT_ENV, help=f"gymnasium id (default {DEFAULT_ENV}); "
                        "'module:Env-v0' imports module first")
    parser.add_argument("--workers", type=int, help="worker threads (config: workers)")
    parser.add_argument("--max-episodes", type=int, help="stop after this many episodes "
                        "(config: max_episodes; 0 means no limit)")
    parser.add_argument("--max-steps", type=int, help="stop after this many global env steps "
                        "(config: max_steps; 0 means no limit)")
    parser.add_argument("--seed", type=int, help="random seed (config: seed)")
    parser.add_argument("--results-dir", default="results", help="where run folders go (default results/)")
    parser.add_argument("--no-plot", action="store_true", help="don't open the plot window "
                        "(rewards.png is saved anyway)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue RUN_DIR's run from its latest "
                        "checkpoint with its config; --max-episodes, --max-steps and --set of "
                        + ", ".join(RESUMABLE_FIELDS) + " may change")
    parser.add_argument("--eval", metavar="RUN_DIR", help="don't train: run the deterministic "
                        "policy of RUN_DIR's latest checkpoint and print its mean return")
    parser.add_argument("--episodes", type=int, default=10, help="episodes for --eval (default 10)")
    parser.add_argument("--render", action="store_true", help="--eval: show the environment's window")
    parser.add_argument("--record", action="store_true", help="--eval: write the first episode "
                        "as episode.gif into RUN_DIR")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of config.py, e.g. --set actor_lr=3e-4 (repeatable)")
    return parser.parse_args(argv)


RESUMABLE_FIELDS = ("max_episodes", "max_steps", "log_every_s", "checkpoint_every_s",
                    "keep_checkpoints", "pin_threads")


def resume_config(args) -> tuple[str, Config]:
    """The (env id, config) to continue args.resume's run with: its own config, with only the
    fields that cannot change what was learned taken from the command line."""
    env_id, saved = read_run(args.resume)
    if args.env != DEFAULT_ENV or args.workers is not None or args.seed is not None:
        raise UsageError("--resume continues a run with its own --env, --workers and --seed; "
                         "start a new run to change them")
    try:
        overrides = config_module.parse_overrides(args.set)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    fixed = sorted(set(overrides) - set(RESUMABLE_FIELDS))
    if fixed:
        raise UsageError(f"--resume cannot change {', '.join(fixed)}; only "
                         f"{', '.join(RESUMABLE_FIELDS)} (start a new run to change the others)")
    args.env = env_id
    return env_id, config_from_args(args, base=dataclasses.replace(saved, **overrides))


def config_from_args(args, base: Config = None) -> Config:
    cfg = base if base is not None else config_module.config_for(args.env)
    try:
        overrides = {} if base is not None else config_module.parse_overrides(args.set)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for flag, key in (("workers", "workers"), ("seed", "seed")):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    for flag, key in (("max_episodes", "max_episodes"), ("max_steps", "max_steps")):
        value = getattr(args, flag)
        if value is not None:
            if value < 0:
                raise UsageError(f"--{flag.replace('_', '-')} must be >= 0, got {value}")
            overrides[key] = value or None
    cfg = dataclasses.replace(cfg, **overrides)
    try:
        cfg.validate()
    except ValueError as exc:
        raise UsageError(f"bad config: {exc}") from None
    return cfg


def stop_like_ctrl_c(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    args = parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop_like_ctrl_c)  # `kill` stops as cleanly as Ctrl-C
    try:
        if args.eval is not None:
            if args.episodes < 1:
                raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
            evaluate(args.eval, args.episodes, args.render, args.record)
            return 0
        if args.resume is not None:
            env_id, cfg = resume_config(args)
            summary = train(env_id, cfg, show_plot=not args.no_plot, resume_dir=args.resume)
        else:
            cfg = config_from_args(args)
            summary = train(args.env, cfg, args.results_dir, show_plot=not args.no_plot)
    except UsageError as exc:
        print(f"a3c.py: error: {exc}", file=sys.stderr)
        return 2
    except WorkerError as exc:
        print(f"a3c.py: error: training stopped: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C while the first one was being handled
        print("a3c.py: interrupted twice: stopped at once; the run keeps its last checkpoint and "
              "every episode its CSV recorded (--resume continues it)", file=sys.stderr)
        return 130
    return 130 if summary["interrupted"] else 0


if __name__ == "__main__":
    sys.exit(main())
