"""A3C: Asynchronous Advantage Actor-Critic, threaded, in TF1-style graph mode.

    python a3c.py --env Pendulum-v1 --workers 8

One graph, one Session. A global ACNet lives on the CPU; each worker thread owns a local ACNet
(its own variable scope) and its own environments. A worker repeatedly

  1. pulls the global parameters into its local net (fused into the previous push),
  2. acts for n steps in each of its environments,
  3. computes n-step returns R_t = r_t + g r_t+1 + ... + g^k V(s_t+k), bootstrapping from V at
     the rollout's end and at time-limit cuts, from 0 only where an episode really terminated,
  4. pushes the clipped gradients of its actor and critic losses to the global net through two
     RMSProp optimisers (one, on one combined loss, where both heads share a trunk: Atari's CNN,
     or the optional LSTM).

With --sync (A2C) step 4 waits: every worker stores its raw gradients, the last to arrive
applies their mean (clipped once) to the global net, and then all of them pull it (UpdateRound;
on a cluster, the worker processes' rounds meet on the ps: RemoteGlobal.round_for).

The sections below follow that order: settings, environments, networks, the worker loop, push
and pull across processes (--cluster: the global net on TensorFlow's ps tasks, the same worker
loop in every worker process), the training driver, the command line. Hyperparameters live in
config.py; launching and supervising a cluster's processes lives in cluster.py.
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
import cluster as cluster_module
from cpus import CpuLayout, cpu_layout, usable_cpus


KERAS_LOADED_BY_TENSORFLOW = ("keras.src.optimizers", "tf_keras.src.optimizers")  # (Keras 3, 2)


def import_tensorflow_quietly():
    """Import TensorFlow without its C++ start-up lines (oneDNN, CUDA probing): they are written
    to stderr before any logging setting applies, so stderr is silenced for the import alone.

    oneDNN's CPU kernels are asked for (pip's TensorFlow turns them on by itself only on CPUs
    with AVX-512, AVX-VNNI or AMX features): on this 2-core AMD host, the Atari CNN's two
    convolutions, forward and filter gradients at batch 40, took 15 ms with them and 26-36 ms
    without (three runs of each, interleaved), and a Pong worker's update call 26 ms against
    43 ms. The MLPs of classic control were not slower in a side-by-side check. Set
    TF_ENABLE_ONEDNN_OPTS=0 to turn them off. Where TensorFlow was imported before a3c, its
    kernels are already chosen, and nothing is changed here (not even for child processes).

    TensorFlow's import also loads Keras's optimizers eagerly (to register them for SavedModel),
    which loads Keras and matplotlib.pyplot. a3c uses neither Keras nor SavedModel, and without
    that load `import a3c` took 4.2 CPU-s here against 4.6 (medians of 11 fresh processes each,
    results/overheads.md), in every process a run or the tests start. TensorFlow skips it
    when the module cannot be imported, so it is marked unimportable for the import alone:
    Keras imports as usual afterwards, should anything in the process want it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    skipped = []
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
        skipped = [name for name in KERAS_LOADED_BY_TENSORFLOW if name not in sys.modules]
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        sys.modules.update(dict.fromkeys(skipped))  # (None there: "cannot be imported")
        import tensorflow
    finally:
        for name in skipped:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
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
PROCESS_COLUMN = "process"  # a cluster run's episodes.csv also says which worker process played
RUNNING_WINDOW = 100  # running_return is the mean raw return of the last 100 episodes


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit status 2, nothing written."""


def first_line(exc: Exception) -> str:
    """The first line of an exception's message (or its type's name): fit for a one-line error."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    while len(lines) > 1 and (lines[0].startswith("Graph execution error")  # TensorFlow's headers
                              or lines[0].startswith("From /job:") and lines[0].endswith(":")):
        lines = lines[1:]
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= 300 else line[:300] + " ..."  # (a request's dump of tensors)


class WorkerError(Exception):
    """Training stopped because a worker thread (or the driver) raised: carries its name."""


# ---------------------------------------------------------------------------------------------
# Environments
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What the networks need to know about an environment."""
    env_id: str
    obs_dim: int            # flat observations: their size
    discrete: bool
    n_actions: int          # discrete: number of actions; continuous: action dimensions
    action_low: np.ndarray  # continuous only
    action_high: np.ndarray
    action_start: int = 0   # discrete: the env's first action (Discrete(n, start=s) takes s..s+n-1)
    obs_low: np.ndarray = None   # the observation space's bounds (may be infinite)
    obs_high: np.ndarray = None
    image_shape: tuple = None    # Atari: (frames stacked, height, width) of uint8 pixels

    @property
    def image(self) -> bool:
        return self.image_shape is not None

    @property
    def obs_shape(self) -> tuple:
        return self.image_shape if self.image else (self.obs_dim,)

    @property
    def obs_dtype(self):
        return np.uint8 if self.image else np.float32


ATARI_PREFIX = "ALE/"  # gymnasium's ids of ale-py's Atari games: ALE/Pong-v5, ALE/Breakout-v5, ...


def is_atari(env_id: str) -> bool:
    return env_id.startswith(ATARI_PREFIX)


class GymEnvs:
    """A worker's environments as a batch: gymnasium envs stepped one after the other in this
    thread. step() gives each env's next observation (the final one where an episode ended);
    restart(k) starts env k's next episode and gives its first observation."""

    def __init__(self, env_id: str, cfg: Config, count: int, render_mode: str = None):
        self.envs = []
        try:
            for _ in range(count):
                self.envs.append(make_env(env_id, cfg, render_mode))
        except BaseException:  # a failure (or Ctrl-C) part-way leaves none of them open
            self.close()
            raise
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, seeds) -> np.ndarray:
        first = [env.reset(seed=int(seed))[0] for env, seed in zip(self.envs, seeds)]
        for env, seed in zip(self.envs, seeds):
            env.action_space.seed(int(seed))
        return np.stack(first)

    def step(self, actions):
        next_obs, rewards, terminated, truncated, _ = zip(
            *[env.step(action) for env, action in zip(self.envs, actions)])
        return next_obs, np.array(rewards), terminated, truncated

    def restart(self, k: int):
        return self.envs[k].reset()[0]

    def render(self):
        return self.envs[0].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()


FRAME_SKIP = 4  # emulator frames per Atari agent step (the standard preprocessing's skip)


def frame_size(cfg: Config) -> int:
    """The side of the square grayscale frames an Atari env gives: 42 for the small CNN (as
    universe-starter-agent and pytorch-a3c), else the standard 84."""
    return 42 if cfg.cnn == "small" else 84


class AtariEnvs:
    """A worker's Atari games as one ale-py AtariVectorEnv: its C++ threads (atari_threads of
    them) step the games and do the standard preprocessing there: 4 frames skipped per
    action with the last two max-pooled, 84x84 grayscale (42x42 for the small CNN), the last 4
    stacked, up to 30 no-op starts, FIRE at reset where the game needs it, the minimal action
    set. An episode is a whole game (all lives); rewards are the raw score (clipping is for
    learning, in the worker).

    greedy: the envs of a deterministic policy (the best agent's trials, --eval), which press
    FIRE for it after a life is lost in a game that needs FIRE to go on (Breakout): an argmax
    that never picks FIRE would otherwise stand still until the game's 108,000-frame limit,
    and a trial would cost minutes for a score the agent never earned. Training's sampled
    actions press FIRE by themselves."""

    def __init__(self, env_id: str, cfg: Config, count: int, greedy: bool = False):
        game, _ = atari_game(env_id)
        self.game = game
        from ale_py.vector_env import AtariVectorEnv
        frames = 108_000 if cfg.max_episode_steps is None else cfg.max_episode_steps * FRAME_SKIP
        side = frame_size(cfg)
        self.vector = AtariVectorEnv(
            game, count, num_threads=cfg.atari_threads, frameskip=FRAME_SKIP, maxpool=True, stack_num=4,
            img_height=side, img_width=side, grayscale=True, noop_max=30, episodic_life=False,
            reward_clipping=False, repeat_action_probability=cfg.repeat_action_probability,
            full_action_space=False, max_num_frames_per_episode=frames,
            autoreset_mode="SameStep")
        self.observation_space = self.vector.single_observation_space
        self.action_space = self.vector.single_action_space
        self.count = count
        self.restarted = None
        self.fire_after_life_loss = greedy and atari_needs_fire(env_id)
        self.lives = self.life_lost = None

    def __len__(self) -> int:
        return self.count

    def reset(self, seeds) -> np.ndarray:
        # ALE takes C++ ints: seeds past 2**31 - 1 (a resumed part's, a large --seed) wrap round
        obs, info = self.vector.reset(seed=np.asarray(seeds, np.int64) % 2 ** 31)
        self.restarted = obs
        self.lives, self.life_lost = info["lives"], np.zeros(self.count, bool)
        return obs

    def step(self, actions):
        actions = np.asarray(actions, np.int32)
        if self.fire_after_life_loss:
            actions = np.where(self.life_lost, ATARI_FIRE, actions).astype(np.int32)
        obs, rewards, terminated, truncated, info = self.vector.step(actions)
        self.restarted = obs  # where an episode ended, the next one has already begun
        ended = terminated | truncated
        if self.fire_after_life_loss:  # a new game's lives are no loss
            self.life_lost = (info["lives"] < self.lives) & ~ended
            self.lives = info["lives"]
        if ended.any():  # the step's own observation is the final one of the ended game
            obs = np.where(ended[:, None, None, None], info["final_obs"], obs)
        return obs, rewards.astype(np.float64), terminated, truncated

    def restart(self, k: int):
        return self.restarted[k]

    def render(self):
        """The newest preprocessed frame of env 0 (ALE's vector env keeps no screen)."""
        return self.restarted[0, -1].copy()

    def close(self) -> None:
        self.vector.close()


def atari_game(env_id: str) -> tuple[str, dict]:
    """ale-py's game name for an ALE/...-v5 id, and the id's registered settings."""
    if not env_id.endswith("-v5"):
        raise UsageError(f"{env_id}: only the ALE/<Game>-v5 ids are supported (their rules: "
                         f"frame skip 4, minimal action set); use "
                         f"{ATARI_PREFIX}{env_id[len(ATARI_PREFIX):].rsplit('-', 1)[0]}-v5")
    try:
        import ale_py
        gym.register_envs(ale_py)
        registered = gym.spec(env_id)
    except ImportError:
        raise UsageError(f"{env_id} needs ale-py: pip install -r requirements.txt") from None
    except Exception as exc:
        raise UsageError(f"cannot make environment '{env_id}': {first_line(exc)} "
                         f"(gymnasium.pprint_registry() lists the known ids)") from None
    return registered.kwargs["game"], registered.kwargs


ATARI_FIRE = 1  # FIRE's index in the minimal action set of every game that has it


def atari_needs_fire(env_id: str) -> bool:
    """Whether the game has FIRE as the second action of its minimal set (where ALE puts it).
    That is all it checks: in Breakout the ball is served only on FIRE; in a game where FIRE
    shoots (SpaceInvaders) greedy play fires one extra shot after each lost life."""
    env = gym.make(env_id)
    try:
        meanings = env.unwrapped.get_action_meanings()
    finally:
        env.close()
    return len(meanings) > ATARI_FIRE and meanings[ATARI_FIRE] == "FIRE"


def make_envs(env_id: str, cfg: Config, count: int, greedy: bool = False):
    """count environments of env_id as one batch (AtariEnvs for ALE ids, else GymEnvs);
    greedy: for a deterministic policy's play (see AtariEnvs)."""
    if is_atari(env_id):
        return AtariEnvs(env_id, cfg, count, greedy)
    return GymEnvs(env_id, cfg, count)


def probe_spec(env_id: str, cfg: Config) -> "EnvSpec":
    """The EnvSpec of env_id, from one env made and closed (UsageError if it cannot be used)."""
    probe = make_envs(env_id, cfg, 1)
    try:
        return env_spec(probe, env_id)
    finally:
        probe.close()


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


def env_spec(env, env_id: str) -> EnvSpec:
    """Read the spaces of an env (or a batch of them), or refuse the ones this trainer has no
    network for."""
    obs_space, act_space = env.observation_space, env.action_space
    if isinstance(env, AtariEnvs):
        return EnvSpec(env_id, 0, True, int(act_space.n), None, None, image_shape=obs_space.shape)
    if not isinstance(obs_space, gym.spaces.Box):
        raise UsageError(f"{env_id}: observation space {obs_space} is not supported "
                         f"(only flat Box observations)")
    if len(obs_space.shape) != 1:
        raise UsageError(f"{env_id}: image observations {obs_space} are supported for Atari "
                         f"games only (ALE/<Game>-v5 ids, preprocessed by ale-py); other envs "
                         f"need flat Box observations")
    bounds = dict(obs_low=obs_space.low.astype(np.float64), obs_high=obs_space.high.astype(np.float64))
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpec(env_id, obs_space.shape[0], True, int(act_space.n), None, None,
                       int(act_space.start), **bounds)
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        low, high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise UsageError(f"{env_id}: action space {act_space} has infinite bounds; "
                             f"the Gaussian policy maps its mean into finite bounds")
        return EnvSpec(env_id, obs_space.shape[0], False, act_space.shape[0], low, high, **bounds)
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


def scaled_observations(obs, spec: EnvSpec, cfg: Config):
    """With scale_obs, every observation dimension with finite bounds mapped from [low, high] to
    [-1, 1] (the others pass as they are): done in the graph, so it costs the hot loop nothing."""
    if not cfg.scale_obs or spec.obs_low is None:
        return obs
    low, high = spec.obs_low, spec.obs_high
    # bounds past 1e6 stand for "unbounded" (some envs write float32's largest number)
    finite = (np.abs(low) < 1e6) & (np.abs(high) < 1e6) & (high > low)
    if not finite.any():
        return obs
    low, high = np.where(finite, low, -1.0), np.where(finite, high, 1.0)  # the others: x as it is
    centre = ((high + low) / 2).astype(np.float32)
    inverse_half_range = (2 / (high - low)).astype(np.float32)
    return (obs - centre) * inverse_half_range


HIDDEN_ACTIVATION_OPS = {"relu": tf.nn.relu, "tanh": tf.nn.tanh}  # config.HIDDEN_ACTIVATIONS' ops


def mlp(x, sizes, name, cfg: Config):
    for i, size in enumerate(sizes):
        x = dense(x, size, f"{name}/h{i}", HIDDEN_ACTIVATION_OPS[cfg.hidden_activation])
    return x


class GaussianPolicy:
    """Any flat Box action space: a diagonal Gaussian whose mean lies inside [low, high].

    mean  = (low + high) / 2 + (high - low) / 2 * tanh(u)
    sigma = (softplus(v) + sigma_floor) * (high - low) / 2, v from the state or a free parameter,
            times final_sigma_scale + (1 - final_sigma_scale) * schedule in a worker's net
    The raw sample is what the log-probability is taken of; the env gets it clipped to the bounds.
    """

    def __init__(self, features, spec: EnvSpec, cfg: Config, schedule=None):
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
        # final_sigma_scale: sigma narrows with the learning rate's fraction; a rollout's actions
        # are drawn, and their log-probs taken, with the fraction of the push before it
        self.uses_schedule = schedule is not None and cfg.final_sigma_scale != 1.0 and cfg.anneal_lr
        if self.uses_schedule:
            self.sigma = self.sigma * (cfg.final_sigma_scale + (1.0 - cfg.final_sigma_scale) * schedule)
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
    """Discrete actions: a categorical distribution over softmax(logits). The sample is an index
    0..n-1 (what the log-probability is taken of); the env gets it shifted to the space's start."""

    def __init__(self, features, spec: EnvSpec, cfg: Config, schedule=None):
        self.uses_schedule = False
        self.logits = dense(features, spec.n_actions, "logits", gain=0.01)
        self.log_probs = tf.nn.log_softmax(self.logits)
        self.sample = tf.squeeze(tf.random.categorical(self.logits, 1, dtype=tf.int32), axis=1)
        greedy = tf.argmax(self.logits, axis=1, output_type=tf.int32)
        self.env_action, self.greedy_action = (
            (self.sample, greedy) if spec.action_start == 0
            else (self.sample + spec.action_start, greedy + spec.action_start))
        self.entropy = -tf.reduce_sum(tf.exp(self.log_probs) * self.log_probs, axis=1)

    def action_placeholder(self, spec: EnvSpec):
        return v1.placeholder(tf.int32, [None], "actions")

    def log_prob(self, actions):
        return tf.reduce_sum(self.log_probs * tf.one_hot(actions, tf.shape(self.logits)[1]), axis=1)


def build_actor(features, spec: EnvSpec, cfg: Config, hidden: tuple = None, schedule=None):
    """The policy; schedule, a worker's learning-rate fraction, narrows a Gaussian's sigma
    (final_sigma_scale)."""
    with v1.variable_scope("actor"):
        features = mlp(features, cfg.actor_hidden if hidden is None else hidden, "mlp", cfg)
        policy_class = SoftmaxPolicy if spec.discrete else GaussianPolicy
        return policy_class(features, spec, cfg, schedule)


def build_critic(features, cfg: Config, hidden: tuple = None):
    """V(features). Built once per input tensor; AUTO_REUSE makes every call share one set of weights."""
    with v1.variable_scope("critic", reuse=v1.AUTO_REUSE):
        features = mlp(features, cfg.critic_hidden if hidden is None else hidden, "mlp", cfg)
        return tf.squeeze(dense(features, 1, "v", gain=1.0), axis=1)


CNN_LAYERS = {  # (filters, kernel, stride) of each convolution, its padding, the dense layer's size
    "a3c": ([(16, 8, 4), (32, 4, 2)], "VALID", 256),                 # the A3C paper (Mnih et al. 2016)
    "nature": ([(32, 8, 4), (64, 4, 2), (64, 3, 1)], "VALID", 512),  # the DQN Nature paper (2015)
    # on 42x42 frames (42 -> 21 -> 11 -> 6 -> 3): the trunk universe-starter-agent and pytorch-a3c
    # put before their LSTM, with padding that keeps a 3x3x32 map for the dense layer
    "small": ([(32, 3, 2)] * 4, "SAME", 256),
}


TRUNK_ACTIVATION_OPS = {"relu": tf.nn.relu, "elu": tf.nn.elu}  # config.TRUNK_ACTIVATIONS' ops


def conv(x, filters, kernel, stride, padding, name, activation):
    """A convolution from get_variable + conv2d."""
    w = v1.get_variable(f"{name}/w", [kernel, kernel, x.shape[-1], filters],
                        initializer=v1.orthogonal_initializer(np.sqrt(2)))
    b = v1.get_variable(f"{name}/b", [filters], initializer=v1.zeros_initializer())
    return activation(tf.nn.bias_add(tf.nn.conv2d(x, w, [1, stride, stride, 1], padding), b))


def cnn_trunk(obs, cfg: Config):
    """uint8 frames [B, stack, side, side] -> features [B, hidden]. The bytes are cast and scaled to
    [0, 1] here, in the graph: a worker's buffers stay uint8, a quarter of float32's size."""
    # channels last (TensorFlow's CPU conv2d has no NCHW kernel), moved while still bytes: in
    # per-op traces (RunOptions FULL_TRACE) of one Pong worker's update, on a busy CPU, the
    # float transpose took 10.5 ms of 59 ms, the byte one 3.8 ms
    x = tf.cast(tf.transpose(obs, [0, 2, 3, 1]), tf.float32) * (1.0 / 255.0)
    layers, padding, hidden = CNN_LAYERS[cfg.cnn]
    activation = TRUNK_ACTIVATION_OPS[cfg.trunk_activation]
    for i, (filters, kernel, stride) in enumerate(layers):
        x = conv(x, filters, kernel, stride, padding, f"conv{i}", activation)
    x = tf.reshape(x, [-1, int(np.prod(x.shape[1:]))])
    return dense(x, hidden, "fc", activation)


def network_input(obs, spec: EnvSpec, cfg: Config):
    """What the heads see: image observations go through the shared CNN trunk (built once per
    input tensor, its weights shared by every call); flat ones reach the separate actor and
    critic MLPs as they are (or scaled, with scale_obs)."""
    if spec.image:
        with v1.variable_scope("trunk", reuse=v1.AUTO_REUSE):
            return cnn_trunk(obs, cfg)
    return scaled_observations(obs, spec, cfg)


def shared_trunk(spec: EnvSpec, cfg: Config) -> bool:
    """Whether both heads sit on one trunk (the CNN, the LSTM, or both), which then trains on one
    combined loss through one optimiser; otherwise the actor and critic are separate MLPs."""
    return spec.image or cfg.use_lstm


def head_sizes(spec: EnvSpec, cfg: Config) -> tuple:
    """Hidden layers of the (actor, critic) heads: none on top of a shared trunk."""
    return ((), ()) if shared_trunk(spec, cfg) else (cfg.actor_hidden, cfg.critic_hidden)


def lstm_state_placeholders(cfg: Config, batch, name: str) -> tuple:
    """(c, h) placeholders of an LSTM state [batch, lstm_units]; () without an LSTM."""
    if not cfg.use_lstm:
        return ()
    return tuple(v1.placeholder(tf.float32, [batch, cfg.lstm_units], f"{name}_{part}")
                 for part in ("c", "h"))


def lstm_step(features, state: tuple, cfg: Config):
    """One step of the LSTM after the trunk, from get_variable + matmul (Keras' cells do not fit
    a hand-built graph): (output h', state (c', h')) for features [B, F] and state (c, h) [B, U].
    Its weights live in the trunk's scope, shared by every call."""
    c, h = state
    units = cfg.lstm_units
    with v1.variable_scope("trunk", reuse=v1.AUTO_REUSE):
        w = v1.get_variable("lstm/w", [features.shape[-1] + units, 4 * units],
                            initializer=v1.orthogonal_initializer(1.0))
        b = v1.get_variable("lstm/b", [4 * units], initializer=v1.zeros_initializer())
    gates = tf.nn.bias_add(tf.matmul(tf.concat([features, h], axis=1), w), b)
    write, candidate, forget, read = tf.split(gates, 4, axis=1)
    # forget bias 1 (Jozefowicz et al. 2015, TF's own cells): remember by default at the start
    c = tf.sigmoid(forget + 1.0) * c + tf.sigmoid(write) * tf.tanh(candidate)
    h = tf.sigmoid(read) * tf.tanh(c)
    return h, (c, h)


def lstm_unroll(features, initial_state: tuple, ended, cfg: Config):
    """The LSTM over a time-major rollout: features [T * E, F], initial_state the (c, h) [E, U]
    each env had at the rollout's first step, ended [T, E]. An env's state is zeroed after a step
    that ended its episode, as the worker did while acting. Returns the outputs [T * E, U] and
    the state after each step (before that zeroing) [T * E, U] each, for the bootstrap values."""
    steps, envs = ended.shape
    inputs = tf.unstack(tf.reshape(features, [steps, envs, features.shape[-1]]), num=steps)
    state, outputs, states = initial_state, [], []
    for t in range(steps):
        if t > 0:
            going_on = (1.0 - ended[t - 1])[:, None]
            state = tuple(part * going_on for part in state)
        output, state = lstm_step(inputs[t], state, cfg)
        outputs.append(output)
        states.append(state)
    return tf.concat(outputs, 0), tuple(tf.concat(parts, 0) for parts in zip(*states))


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
    With use_lstm, each (c, h) pair [B or E, lstm_units] goes beside its observations: state_in ->
    state_out while acting, current_state -> state_after_pull, and rollout_state, the state at
    the rollout's first step, from which train_policy and train_value unroll the LSTM over the
    rollout (without an LSTM these tuples are empty and train_* are policy and value).
    """

    def __init__(self, scope: str, spec: EnvSpec, cfg: Config, global_net: "ACNet" = None,
                 optimizers: list = None):
        self.scope = scope
        actor_hidden, critic_hidden = head_sizes(spec, cfg)
        with v1.variable_scope(scope):
            self.obs = v1.placeholder(spec.obs_dtype, [None, *spec.obs_shape], "obs")
            self.features = network_input(self.obs, spec, cfg)
            # with an LSTM, one step from the state fed beside obs; state_out is the next one
            self.state_in = lstm_state_placeholders(cfg, None, "state")
            heads_input, self.state_out = (lstm_step(self.features, self.state_in, cfg)
                                           if cfg.use_lstm else (self.features, ()))
            # a worker's policy narrows with the learning rate (final_sigma_scale): it acts, and
            # its rollout is trained on, with the fraction its previous push was fed
            self.acting_fraction = (None if global_net is None else
                                    v1.placeholder_with_default(1.0, [], "acting_fraction"))
            self.policy = build_actor(heads_input, spec, cfg, actor_hidden, self.acting_fraction)
            self.value = build_critic(heads_input, cfg, critic_hidden)
            trainable = v1.GraphKeys.TRAINABLE_VARIABLES
            self.actor_params = v1.get_collection(trainable, f"{scope}/actor")
            self.critic_params = v1.get_collection(trainable, f"{scope}/critic")
            self.trunk_params = v1.get_collection(trainable, f"{scope}/trunk")
            self.params = self.trunk_params + self.actor_params + self.critic_params
            if global_net is not None:
                self._build_update(spec, cfg, global_net, optimizers)

    def _build_update(self, spec, cfg, global_net, optimizers):
        T, E = cfg.n_steps, cfg.envs_per_worker
        actor_hidden, critic_hidden = head_sizes(spec, cfg)
        self.lr_fraction = global_net.lr_fraction
        self.actions = self.policy.action_placeholder(spec)
        self.next_obs = v1.placeholder(spec.obs_dtype, [T * E, *spec.obs_shape], "next_obs")
        self.rewards = v1.placeholder(tf.float32, [T, E], "rewards")
        self.terminated = v1.placeholder(tf.float32, [T, E], "terminated")
        self.ended = v1.placeholder(tf.float32, [T, E], "ended")

        # the rollout's obs are fed to self.obs; with an LSTM they go through it in time order
        # from the state each env had at the rollout's first step
        self.rollout_state = lstm_state_placeholders(cfg, E, "rollout_state")
        # what a push feeds of its rollout, in the order Worker.push_and_pull gives them
        self.rollout_feeds = [self.obs, self.actions, self.next_obs, self.rewards, self.terminated,
                              self.ended, *self.rollout_state]
        if cfg.use_lstm:
            outputs, states_after = lstm_unroll(self.features, self.rollout_state, self.ended, cfg)
            with v1.variable_scope(v1.get_variable_scope(), reuse=True):
                self.train_policy = build_actor(outputs, spec, cfg, actor_hidden, self.acting_fraction)
            self.train_value = build_critic(outputs, cfg, critic_hidden)
        else:
            self.train_policy, self.train_value = self.policy, self.value

        if shared_trunk(spec, cfg):
            # only V(s') where an episode ended or the rollout does is used (n_step_returns):
            # the trunk runs on those rows alone, E of T * E in most rollouts; with an LSTM,
            # from the state after that step (before an episode's end zeroed it)
            last_step = np.zeros((T, E), bool)
            last_step[-1] = True
            needed = tf.where(tf.reshape(tf.logical_or(self.ended > 0, last_step), [-1]))
            features = network_input(tf.gather_nd(self.next_obs, needed), spec, cfg)
            if cfg.use_lstm:
                features, _ = lstm_step(features, tuple(tf.gather_nd(part, needed)
                                                        for part in states_after), cfg)
            some_values = build_critic(features, cfg, critic_hidden)
            next_values = tf.scatter_nd(needed, some_values, [T * E])
        else:  # a tiny MLP runs on all T * E rows faster than a gather and a scatter
            next_values = build_critic(network_input(self.next_obs, spec, cfg), cfg, critic_hidden)
        next_values = tf.stop_gradient(tf.reshape(next_values, [T, E]))
        self.returns = n_step_returns(self.rewards, next_values, self.terminated, self.ended, cfg.gamma)
        flat_returns = tf.reshape(self.returns, [-1])
        advantages = tf.stop_gradient(flat_returns - self.train_value)

        self.entropy = tf.reduce_mean(self.train_policy.entropy)
        self.actor_loss = (-tf.reduce_mean(self.train_policy.log_prob(self.actions) * advantages)
                           - cfg.entropy_beta * self.entropy)
        self.critic_loss = tf.reduce_mean(tf.square(flat_returns - self.train_value))

        if shared_trunk(spec, cfg):  # one loss and one optimiser (as the A3C paper on Atari)
            losses = [(self.actor_loss + cfg.value_loss_coef * self.critic_loss,
                       self.params, global_net.params)]
        else:  # separate MLPs: each its own loss and optimiser
            losses = [(self.actor_loss, self.actor_params, global_net.actor_params),
                      (self.critic_loss, self.critic_params, global_net.critic_params)]
        gradients = [tf.gradients(loss, local_params) for loss, local_params, _ in losses]
        clipped, norms = [], []
        for grads in gradients:
            grads, norm = tf.clip_by_global_norm(grads, cfg.clip_norm)
            clipped.append(grads)
            norms.append(norm)
        self.gradients, self.clipped_grads = gradients, clipped  # one list per optimiser
        if not shared_trunk(spec, cfg):
            self.actor_grads, self.critic_grads = clipped
        self.grad_norm = tf.sqrt(tf.add_n([tf.square(n) for n in norms]))  # before clipping
        # a NaN or inf anywhere in the losses or gradients makes this norm non-finite: the check
        # fails the session call before anything is applied, so the global net stays finite
        finite_check = tf.debugging.check_numerics(self.grad_norm, "non-finite gradient norm")
        self.checked_grad_norm = finite_check  # the same check where gradients are fetched (a cluster)

        def copy_global_params():
            return tf.group(*[local.assign(glob) for local, glob in zip(self.params, global_net.params)])

        self.pull = copy_global_params()
        if cfg.sync_updates:
            # --sync: the raw gradients wait in this worker's own variables (not saved: the
            # Saver skips worker_*) until every worker's are in; mean_gradient_update applies
            # them all at once, and this worker's next call pulls the result
            # (None where a parameter gets no gradient: the optimiser skips it, as in A3C)
            self.gradient_store = [[None if grad is None else v1.get_variable(
                f"gradient_store/{p.op.name.split('/', 1)[1]}", p.shape, p.dtype.base_dtype,
                v1.zeros_initializer(), trainable=False) for p, grad in zip(local_params, grads)]
                for (_, local_params, _), grads in zip(losses, gradients)]
            with tf.control_dependencies([finite_check]):
                self.store_gradients = tf.group(*[
                    store.assign(grad) for stores, grads in zip(self.gradient_store, gradients)
                    for store, grad in zip(stores, grads) if grad is not None])
            pulled = copy_global_params()
        else:
            # the optimisers' slots belong to the global net: made at the root variable scope
            # they are named global/.../RMSPropActor and saved with it (in this scope,
            # worker_0/global/...)
            at_root = v1.variable_scope(v1.VariableScope(reuse=None, name=""),
                                        auxiliary_name_scope=False)
            with at_root, tf.control_dependencies([finite_check]):
                self.push = tf.group(*[
                    optimizer.apply_gradients(zip(grads, global_params))
                    for optimizer, grads, (_, _, global_params) in zip(optimizers, clipped, losses)])
            with tf.control_dependencies([self.push]):  # pull only after this push has landed
                self.push_and_pull = pulled = copy_global_params()

        self.current_obs = v1.placeholder(spec.obs_dtype, [E, *spec.obs_shape], "current_obs")
        self.current_state = lstm_state_placeholders(cfg, E, "current_state")
        with tf.control_dependencies([pulled]):  # read the parameters just pulled
            with v1.variable_scope(v1.get_variable_scope(), reuse=True):
                features = network_input(self.current_obs, spec, cfg)
                features, self.state_after_pull = (lstm_step(features, self.current_state, cfg)
                                                   if cfg.use_lstm else (features, ()))
                # the next rollout's first actions: drawn with this push's fraction, as the rest
                self.policy_after_pull = build_actor(features, spec, cfg, actor_hidden, self.lr_fraction)

    def feedable_params(self) -> tuple:
        """(placeholders like self.params, the op that assigns them): a cluster's worker pulls the
        global parameters over gRPC as arrays and puts them into its net with this."""
        with v1.name_scope(f"{self.scope}/fed"):
            fed = [v1.placeholder(p.dtype.base_dtype, p.shape) for p in self.params]
            return fed, tf.group(*[p.assign(f) for p, f in zip(self.params, fed)])


def optimizer_groups(net: ACNet, spec: EnvSpec, cfg: Config) -> list:
    """The global parameters each optimiser updates, in the order of a worker net's
    clipped_grads: all of them (a shared trunk), or the actor's and the critic's."""
    return [net.params] if shared_trunk(spec, cfg) else [net.actor_params, net.critic_params]


def make_optimizers(spec: EnvSpec, cfg: Config, lr_fraction) -> list:
    """RMSProp for each group of optimizer_groups, at the learning rates times lr_fraction."""
    names = ("RMSProp",) if shared_trunk(spec, cfg) else ("RMSPropActor", "RMSPropCritic")
    return [v1.train.RMSPropOptimizer(rate * lr_fraction, decay=cfg.rmsprop_decay,
                                      epsilon=cfg.rmsprop_epsilon, name=name)
            for rate, name in zip(learning_rates(cfg, spec), names)]


def learning_rates(cfg: Config, spec: EnvSpec = None) -> tuple:
    """The rate of each optimiser, divided by sqrt(workers) when scale_lr_with_workers is on:
    (actor, critic) for separate MLPs, (shared_lr,) for a network with a shared trunk."""
    divisor = math.sqrt(cfg.workers) if cfg.scale_lr_with_workers else 1.0
    rates = ((cfg.shared_lr,) if spec is not None and shared_trunk(spec, cfg)
             else (cfg.actor_lr, cfg.critic_lr))
    return tuple(rate / divisor for rate in rates)


def build_graph(spec: EnvSpec, cfg: Config):
    """The global net on the CPU, its optimisers (actor and critic, or one for a shared trunk),
    and one ACNet per worker."""
    with tf.device("/cpu:0"):
        global_net = ACNet("global", spec, cfg)
        # the fraction of the learning rates in force; workers feed 1 - budget used when annealing
        global_net.lr_fraction = v1.placeholder_with_default(1.0, [], "lr_fraction")
        optimizers = make_optimizers(spec, cfg, global_net.lr_fraction)
        worker_nets = [ACNet(f"worker_{i}", spec, cfg, global_net, optimizers)
                       for i in range(cfg.workers)]
        if cfg.sync_updates:
            # a process's sum of its workers' gradients (on a cluster it goes to the ps tasks),
            # and one process's round: their mean, applied here
            global_net.gradient_sums = stored_gradient_sums(worker_nets)
            global_net.apply_mean_gradients = mean_gradient_update(
                optimizers, optimizer_groups(global_net, spec, cfg), global_net.gradient_sums,
                len(worker_nets), cfg.clip_norm)
    return global_net, worker_nets


def stored_gradient_sums(worker_nets: list) -> list:
    """--sync: per optimiser group, per parameter, the sum of the workers' stored gradients
    (None where a parameter gets no gradient)."""
    return [[None if stored[0] is None else tf.add_n(list(stored))
             for stored in zip(*(net.gradient_store[group] for net in worker_nets))]
            for group in range(len(worker_nets[0].gradient_store))]


def mean_gradient_update(optimizers: list, param_groups: list, gradient_sums: list, count,
                         clip_norm: float):
    """--sync's one update of a round: the mean of `count` workers' gradients (their sums over
    count), clipped to clip_norm once, applied by each optimiser. Each worker's loss is the mean
    over its T * E samples and every worker's batch is as large, so this mean is the gradient of
    the workers' concatenated batch: the update one learner would make on all of it (A2C),
    however the samples fell to the workers (or to processes). Clipping each worker's part first
    would make it depend on that. count: a number, or a tensor (a cluster's round)."""
    updates = []
    for optimizer, params, sums in zip(optimizers, param_groups, gradient_sums):
        mean = [None if total is None else total / tf.cast(count, total.dtype) for total in sums]
        clipped, _ = tf.clip_by_global_norm(mean, clip_norm)
        updates.append(optimizer.apply_gradients(zip(clipped, params)))
    return tf.group(*updates)


# ---------------------------------------------------------------------------------------------
# Shared bookkeeping: the only state the worker threads share besides the global net
# ---------------------------------------------------------------------------------------------

def cpu_seconds() -> float:
    """User + system CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system


def budget_used(cfg: Config, episodes: int, env_steps: int) -> float:
    """The fraction of the run's budget (episodes or env steps, whichever is further) used: the
    run stops at 1."""
    return max(episodes / cfg.max_episodes if cfg.max_episodes else 0.0,
               env_steps / cfg.max_steps if cfg.max_steps else 0.0)


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


class RunHistory(typing.NamedTuple):
    """What a resumed run continues from."""
    rows: dict                 # its episodes.csv, as read_episodes returns it
    env_steps: int             # its env step count
    anneal_start: AnnealStart  # where its learning rates continue from


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
        rows, self.env_steps, self.anneal_start = history
        self.lr_fraction_now = self.anneal_start.lr_fraction
        self.episodes = len(rows["episode"])
        self.finished_steps = int(rows["length"].sum())
        self.wall_before = float(rows["wall_s"][-1]) if self.episodes else 0.0
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
                        best_running=self.best_running, best_episode=self.best_episode)

    def best(self) -> tuple[float, int, int]:
        """(the best mean-100 so far, the episode it was reached at, the env steps then)."""
        with self.lock:
            return self.best_running, self.best_episode, self.best_env_steps

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
        self.envs = make_envs(env_id, cfg, cfg.envs_per_worker)
        T, E = cfg.n_steps, cfg.envs_per_worker
        self.rollout_obs = np.zeros((T, E, *spec.obs_shape), spec.obs_dtype)
        self.next_obs = np.zeros_like(self.rollout_obs)
        self.rewards = np.zeros((T, E), np.float32)
        self.terminated = np.zeros((T, E), np.float32)
        self.ended = np.zeros((T, E), np.float32)
        self.actions = (np.zeros((T, E), np.int32) if spec.discrete
                        else np.zeros((T, E, spec.n_actions), np.float32))
        self.episode_return = np.zeros(E)
        self.episode_length = np.zeros(E, np.int64)

    def prepare(self, sess, seed: int, remote: "RemoteGlobal" = None,
                rounds: "UpdateRound" = None) -> None:
        """Build this worker's session calls, pull the global parameters and reset the envs
        with seeds drawn from `seed` (the run's, or a resumed part's). TensorFlow prepares a
        callable's executors when it is made, so this runs before the clock starts. remote: the
        global net is on a cluster's ps tasks, and the update pushes and pulls through it.
        rounds: --sync, where this worker's gradients wait for the others' (see UpdateRound)."""
        net = self.net
        # a policy that narrows with the learning rate acts, and its rollout is trained on, with
        # the fraction of the last push (act_schedule: () where sigma does not narrow)
        scheduled = [net.acting_fraction] if net.policy.uses_schedule else []
        self.act = session_callable(sess, [net.policy.sample, net.policy.env_action, *net.state_out],
                                    [net.obs, *net.state_in, *scheduled])
        self.act_schedule = tuple(np.float32(1.0) for _ in scheduled)
        self.rounds = rounds
        if rounds is not None:
            self.store = session_callable(
                sess, [net.store_gradients, net.entropy, net.grad_norm],
                [*net.rollout_feeds, *scheduled])
            self.pull_and_act = session_callable(
                sess, [net.policy_after_pull.sample, net.policy_after_pull.env_action,
                       *net.state_after_pull],
                [net.current_obs, *net.current_state, net.lr_fraction])
        elif remote is None:
            self.update = session_callable(
                sess, [net.push_and_pull, net.entropy, net.grad_norm, net.policy_after_pull.sample,
                       net.policy_after_pull.env_action, *net.state_after_pull],
                [*net.rollout_feeds, net.current_obs, *net.current_state, *scheduled, net.lr_fraction])
        else:
            self.update = remote.update_for(net, sess, scheduled)
        if remote is None:
            sess.run(net.pull)
        else:
            remote.pull_into(sess, net)
        # (sampled, for the envs, the LSTM state after this step) for self.obs, chosen by the last update
        self.chosen_actions = None
        first_seed = seed * 1000 + self.index * len(self.envs)
        self.obs = self.envs.reset(first_seed + np.arange(len(self.envs))).astype(self.spec.obs_dtype)
        # with an LSTM: each env's (c, h), carried from step to step and rollout to rollout,
        # zeroed when its episode ends; () without one
        self.state = tuple(np.zeros((len(self.envs), self.cfg.lstm_units), np.float32)
                           for _ in net.state_in)

    def rollout(self) -> list:
        """Act n_steps in every env; return (env index, raw return, length) of episodes that ended.

        Per step: one session call for all E actions, E env steps, and whole-row NumPy writes
        (per-env scalar writes cost more than the step of a cheap env)."""
        shift, scale, clip = self.cfg.reward_shift, self.cfg.reward_scale, self.cfg.reward_clip
        finished = []
        self.rollout_state = self.state  # the training unroll starts from it
        for t in range(self.cfg.n_steps):
            self.rollout_obs[t] = self.obs
            if self.chosen_actions is None:
                self.chosen_actions = self.act(self.obs, *self.state, *self.act_schedule)
            self.actions[t], env_actions, *state = self.chosen_actions
            self.state = tuple(state)
            self.chosen_actions = None
            next_obs, raw_rewards, terminated, truncated = self.envs.step(env_actions)
            self.next_obs[t] = next_obs
            learning_rewards = raw_rewards if clip is None else np.clip(raw_rewards, -clip, clip)
            self.rewards[t] = (learning_rewards + shift) * scale
            self.terminated[t] = terminated
            self.ended[t] = np.logical_or(terminated, truncated)
            self.episode_return += raw_rewards
            self.episode_length += 1
            self.obs[:] = self.next_obs[t]
            if self.state and self.ended[t].any():  # a new episode starts from a zero state
                going_on = (1.0 - self.ended[t])[:, None]
                self.state = tuple(part * going_on for part in self.state)
            for k in np.flatnonzero(self.ended[t]):
                # the final observation stays in next_obs for the bootstrap; the env starts anew
                finished.append((int(k), float(self.episode_return[k]), int(self.episode_length[k])))
                self.episode_return[k] = 0.0
                self.episode_length[k] = 0
                self.obs[k] = self.envs.restart(k)
        return finished

    def push_and_pull(self, lr_fraction: float) -> tuple[float, float]:
        """Push this rollout's clipped gradients to the global net and pull it back; the same call
        chooses the next step's actions with the pulled parameters. Returns the policy entropy
        and the gradient norm before clipping."""
        T, E = self.cfg.n_steps, len(self.envs)
        rollout = (self.rollout_obs.reshape(T * E, *self.spec.obs_shape),
                   self.actions.reshape(T * E, *self.actions.shape[2:]),
                   self.next_obs.reshape(T * E, *self.spec.obs_shape), self.rewards,
                   self.terminated, self.ended, *self.rollout_state)
        if self.rounds is None:
            entropy, grad_norm, *chosen = self.update(*rollout, self.obs, *self.state,
                                                      *self.act_schedule, np.float32(lr_fraction))
        else:  # --sync: wait for every worker's gradients to be applied, then pull
            entropy, grad_norm = self.store(*rollout, *self.act_schedule)
            chosen = (self.pull_and_act(self.obs, *self.state, np.float32(lr_fraction))
                      if self.rounds.join(self.coord, lr_fraction) else [])
        self.chosen_actions = chosen or None  # none from a cluster's update: the next step acts
        # the next actions were drawn with this push's fraction: so are the rest of the rollout's
        self.act_schedule = tuple(np.float32(lr_fraction) for _ in self.act_schedule)
        return float(entropy), float(grad_norm)

    def work(self, coord, log: EpisodeLog) -> None:
        self.coord = coord
        steps_per_rollout = self.cfg.n_steps * len(self.envs)
        update_stats = np.zeros((len(self.envs), 3))  # per env: entropy sum, grad norm sum, pushes
        self.act_schedule = tuple(np.float32(log.lr_fraction()) for _ in self.act_schedule)
        while not coord.should_stop():
            finished = self.rollout()
            log.add_steps(steps_per_rollout)
            lr_fraction = log.lr_fraction()
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
        self.envs.close()


class UpdateRound:
    """--sync (A2C): the barrier where every worker's gradients meet. Each worker stores its
    rollout's gradients in its own variables and joins; the last to arrive applies their mean to
    the global net in one session call (mean_gradient_update) and releases the others, and then
    every worker pulls the same parameters. A plain Python barrier: the session call releases the
    GIL, and the waiters sleep on a condition, so a round costs one wake-up per worker.

    No worker is ever left waiting: a waiter looks at the Coordinator every tenth of a second,
    and once a stop is requested (the budget, Ctrl-C, SIGTERM, a worker's exception, a NaN)
    join returns False and the worker leaves without pulling.

    On a cluster the same barrier gathers a process's workers, and the last one in takes their
    sum to the ps tasks, where the processes' rounds meet (RemoteGlobal.round_for). It holds the
    condition while it waits there, so the others wake with it: a stop reaches it through
    RemoteGlobal.release_rounds, not the Coordinator."""

    POLL_S = 0.1

    def __init__(self, parties: int, apply):
        self.parties = parties
        # apply(lr_fraction) -> bool: the one update of a round; False when the run stopped
        # before it was applied (a cluster's round, released by a stop)
        self.apply = apply
        self.arrived = 0
        self.completed = 0  # rounds ended so far
        self.failed = False  # a round was not applied: the run is stopping
        self.condition = threading.Condition()

    @classmethod
    def in_one_process(cls, sess, global_net: ACNet, parties: int) -> "UpdateRound":
        """The rounds of a run in one process: the mean of the workers' stores, applied here."""
        apply_mean = session_callable(sess, [global_net.apply_mean_gradients],
                                      [global_net.lr_fraction])

        def apply(lr_fraction) -> bool:
            apply_mean(lr_fraction)
            return True
        return cls(parties, apply)

    def join(self, coord, lr_fraction: float) -> bool:
        """Wait until this round's update is applied (True), or until the run stops (False)."""
        with self.condition:
            round_number = self.completed
            self.arrived += 1
            if self.arrived == self.parties:  # the last one in applies the round (at its rate)
                self.arrived = 0
                applied = False
                try:
                    applied = self.apply(np.float32(lr_fraction))
                finally:  # an error or a stop: the run stops; nobody pulls this round
                    self.failed = self.failed or not applied
                    self.completed += 1
                    self.condition.notify_all()
                if not applied:
                    coord.request_stop()
                return applied
            while self.completed == round_number:
                if coord.should_stop():
                    return False
                self.condition.wait(self.POLL_S)
            return not self.failed


class GreedyPlayer:
    """A net's deterministic policy (mean action / argmax) over a batch of envs, for the best
    agent's trials and --eval: player(obs) gives the actions; with an LSTM it carries each env's
    state from call to call, start() zeroes them all and restart(k) env k's."""

    def __init__(self, sess, net: ACNet, count: int, obs_dtype):
        self.call = session_callable(sess, [net.policy.greedy_action, *net.state_out],
                                     [net.obs, *net.state_in])
        self.state_shapes = [(count, part.shape[-1]) for part in net.state_in]
        self.obs_dtype = obs_dtype
        self.start()

    def start(self) -> None:
        self.state = tuple(np.zeros(shape, np.float32) for shape in self.state_shapes)

    def restart(self, k: int) -> None:
        if self.state:
            self.state = tuple(np.array(part) for part in self.state)
            for part in self.state:
                part[k] = 0.0

    def __call__(self, obs):
        actions, *state = self.call(np.asarray(obs, self.obs_dtype), *self.state)
        self.state = tuple(state)
        return actions


# ---------------------------------------------------------------------------------------------
# Push and pull across processes (--cluster): the global net on the ps tasks
# ---------------------------------------------------------------------------------------------

WAIT_FOR_ROUND_MS = 7 * 24 * 3600 * 1000  # a cluster's --sync round: no clock (see round_for)


class RemoteGlobal:
    """A worker process's view of a cluster run's shared state: the global net and its RMSProp
    slots on the ps tasks (spread over them by replica_device_setter), and the run's counters
    and episode queue on ps task 0 (cluster.Control).

    Acting never crosses the network: the worker nets live in the process's own plain session,
    as in one process (a call through the distributed master costs ~190 us even for local ops).
    A push is three calls: the clipped gradients are computed locally, applied on the ps in one
    gRPC call that brings the new parameters and the global counters back, and the parameters
    are put into the worker net locally; its next step acts with them. That gRPC call goes to
    ps task 0's own master (cluster.ps_session), which runs it where the variables are."""

    def __init__(self, spec: EnvSpec, cfg: Config, cluster, server):
        """server: this process's own, kept alive with it."""
        self.cluster, self.server = cluster, server
        self.sync = cfg.sync_updates
        self.log = None  # the process's ClusterLog, set once the chief's counters are known
        self.graph = tf.Graph()
        with self.graph.as_default():
            # variables round-robin over the ps tasks; every other op on ps task 0 (see below)
            setter = v1.train.replica_device_setter(ps_tasks=len(cluster.spec["ps"]),
                                                    worker_device="/job:ps/task:0")
            with v1.device(setter):
                self.net = ACNet("global", spec, cfg)
                groups = optimizer_groups(self.net, spec, cfg)
            # Every op of a push sits on the ps task of the variable it serves, the fed gradients
            # and the fetched parameters too: the master then sends each ps task one request
            # that carries its feeds and brings its fetches back, instead of one RPC per tensor
            # between this worker task and the ps.
            ps_0 = "/job:ps/task:0"
            with v1.device(ps_0):
                self.lr_fraction = v1.placeholder(tf.float32, [], "lr_fraction")
            self.grads = []
            for group in groups:
                grads = []
                for p in group:
                    with v1.device(p.device):
                        grads.append(v1.placeholder(p.dtype.base_dtype, p.shape))
                self.grads.append(grads)
            # each update sits on its variable's task; the slots are named as in one process's
            # graph, so that a checkpoint reads the same
            optimizers = make_optimizers(spec, cfg, self.lr_fraction)
            if cfg.sync_updates:  # a push adds this process's gradients to the round's sums
                apply = self._build_rounds(cfg, cluster, groups, optimizers)
            else:
                with v1.device(ps_0):
                    apply = tf.group(*[optimizer.apply_gradients(zip(grads, group)) for optimizer,
                                       grads, group in zip(optimizers, self.grads, groups)])
            self.control = cluster_module.control_variables(tf, len(cluster.spec["worker"]))
            with v1.device(ps_0):
                self.counts = v1.placeholder(tf.int64, [3], "counts")  # env steps, episodes, their steps
                self.add_counts = tf.identity(self.control.totals.assign_add(self.counts))
                with tf.control_dependencies([apply]):  # (identity: a resource assign's value)
                    totals = tf.identity(self.control.totals.assign_add(self.counts))
            self.params_now = self._params_after(None)
            if cfg.sync_updates:
                self._build_round_calls(cluster, totals)
            else:
                with v1.device(ps_0), tf.control_dependencies([apply]):
                    mark = self._count_push(cluster.task)
                push = [*self._params_after(apply), totals, mark]
            with v1.device(ps_0):
                self.row_feeds = [v1.placeholder(getattr(tf, t), [None])
                                  for t in cluster_module.EPISODE_ROW_TYPES]
                self.enqueue = self.control.episodes.enqueue_many(self.row_feeds)
                self.finished_value = v1.placeholder(tf.int64, [])
                self.set_finished = v1.scatter_update(self.control.finished, [cluster.task],
                                                      tf.reshape(self.finished_value, [1]))
                self.variables = v1.global_variables()
        self.sess = cluster_module.ps_session(tf, cluster, self.graph)
        # --sync: the calls that wait in a round have a session of their own, without the
        # timeout of every other call (see round_for)
        self.round_sess = (cluster_module.ps_session(tf, cluster, self.graph, WAIT_FOR_ROUND_MS)
                           if self.sync else None)
        # --sync: a round's parameters and the chief's downloads both write this process's
        # global net (ChiefLink.download); one at a time, so that a download read before a
        # round cannot put older parameters back after it
        self.local_params_lock = threading.RLock()  # (a checkpoint's save holds it to download)
        self.round_seconds, self.last_round_at = deque(maxlen=20), None  # the chief's, recent
        if not cfg.sync_updates:
            flat = [g for group in self.grads for g in group]
            self.push = session_callable(self.sess, push, [*flat, self.lr_fraction, self.counts])

    def _params_after(self, op) -> list:
        """The global parameters as read after op (None: whenever), each read on its ps task."""
        params = []
        for p in self.net.params:
            with v1.device(p.device), tf.control_dependencies([] if op is None else [op]):
                params.append(tf.identity(p))
        return params

    def _count_push(self, task: int):
        """One more push (--sync: arrival) of worker process `task`, which the chief watches."""
        return tf.identity(v1.scatter_add(self.control.pushes, [task], tf.constant([1], tf.int64)))

    def _build_rounds(self, cfg: Config, cluster, groups: list, optimizers: list):
        """--sync on a cluster: where the worker processes' rounds meet, on the ps tasks. Each
        process adds the sum of its workers' gradients to the round's sums (beside each
        parameter; returned: the op that adds them) and arrives, with its worker count, in a
        queue; the chief takes all of the processes' arrivals, applies the sums over the
        workers' count (mean_gradient_update, as in one process) and releases each process
        with a token in a queue of its own, after which the process reads the parameters.

        TensorFlow's queues block in C++ without holding the GIL, and nothing here times a
        wait out: a cancelled dequeue_many drops what it had taken. A stop releases every
        waiter instead with a token that says stop (release_rounds). Each process's part of a
        round is one call to the ps (the chief's, two); see _build_round_calls."""
        ps_0 = "/job:ps/task:0"
        processes = len(cluster.spec["worker"])
        self.sums, adds = [], []
        for group, grads in zip(groups, self.grads):
            sums = []
            for p, grad in zip(group, grads):
                with v1.device(p.device):  # not saved: the chief's checkpoints hold global/ only
                    total = v1.get_variable(f"sync/{p.op.name}", p.shape, p.dtype.base_dtype,
                                            v1.zeros_initializer(), trainable=False)
                    adds.append(total.assign_add(grad, read_value=False))
                sums.append(total)
            self.sums.append(sums)
        with v1.device(ps_0):
            # a run leaves at most 2 entries per process in arrivals (its own and a stop) and
            # 3 in a token queue: with room for far more, an enqueue never waits
            capacity = 16 + 4 * processes
            self.arrivals = v1.FIFOQueue(capacity, [tf.int32, tf.int64], shapes=[[], []],
                                         shared_name="run/sync_arrivals", name="run/sync_arrivals")
            self.tokens = [v1.FIFOQueue(capacity, [tf.int64], shapes=[[]],
                                        shared_name=f"run/sync_token_{task}",
                                        name=f"run/sync_token_{task}")
                           for task in range(processes)]
            self.threads = v1.placeholder(tf.int64, [], "threads")  # a process's workers
            self.workers_arrived = v1.placeholder(tf.float32, [], "workers_arrived")
            applied = mean_gradient_update(optimizers, groups, self.sums, self.workers_arrived,
                                           cfg.clip_norm)
        zeroed = []
        for total in (t for sums in self.sums for t in sums):
            with v1.device(total.device), tf.control_dependencies([applied]):
                zeroed.append(total.assign(tf.zeros(total.shape, total.dtype), read_value=False))
        with v1.device(ps_0):
            go, stop = tf.constant(1, tf.int64), tf.constant(0, tf.int64)
            with tf.control_dependencies(zeroed):
                self.release_round = tf.group(*[queue.enqueue(go) for queue in self.tokens])
            self.release_own = self.tokens[cluster.task].enqueue(stop)
            self.release_all = tf.group(
                self.arrivals.enqueue_many([tf.fill([processes], -1),
                                            tf.zeros([processes], tf.int64)]),
                *[queue.enqueue(stop) for queue in self.tokens])
            # what an earlier run on these ps tasks left in the queues: the chief empties them
            self.drain_rounds = tf.group(*[queue.dequeue_up_to(queue.size())
                                           for queue in [self.arrivals, *self.tokens]])
        return tf.group(*adds)

    def _build_round_calls(self, cluster, totals) -> None:
        """What a process fetches in its part of a round (--sync): the global counters after
        its counts, and
          a worker process other than the chief: its token, and the parameters after it, in
            the call that brings its gradients (arrive_and_wait);
          the chief: every process's arrival, in the call that brings its own (arrive_and_take),
            then, in a second call, its token after the round is applied and released, and the
            parameters (apply_and_release)."""
        processes = len(cluster.spec["worker"])
        own_queue = self.tokens[cluster.task]
        with v1.device("/job:ps/task:0"):
            with tf.control_dependencies([totals]):  # arrives once its gradients are in
                arrive = self.arrivals.enqueue([cluster.task, self.threads])
            with tf.control_dependencies([arrive]):  # counts only arrivals really queued
                totals = tf.identity(totals)
                mark = self._count_push(cluster.task)
            with tf.control_dependencies([mark]):
                token = own_queue.dequeue()
                arrived = self.arrivals.dequeue_many(processes)  # (tasks, their workers)
            self.arrive_and_wait = [totals, token, *self._params_after(token)]
            self.arrive_and_take = [totals, *arrived]
            with tf.control_dependencies([self.release_round]):
                token = own_queue.dequeue()
            self.apply_and_release = [token, *self._params_after(token)]

    def round_for(self, sess, global_net: ACNet, workers: int, chief: bool = True):
        """UpdateRound's apply for --sync on a cluster, run by the last of this process's
        workers to arrive: their gradients' sum and the process's counts and episodes go to
        the ps tasks; the chief, once every process has arrived, applies the round; every
        process waits for its token and puts the new parameters into its own global net, from
        which its workers pull. False: the run stopped before the round was applied."""
        local_sums = session_callable(sess, [g for sums in global_net.gradient_sums for g in sums], [])
        fed, assign = global_net.fed
        put = session_callable(sess, [assign], fed)
        # the waits end when the round is applied or a stop releases them, not on a clock (a
        # timed-out dequeue_many would drop what it took); the chief ends a run whose worker
        # process is gone (ChiefLink.check_rounds)
        feeds = [*(g for group in self.grads for g in group), self.threads, self.counts]
        arrive = session_callable(self.round_sess,
                                  self.arrive_and_take if chief else self.arrive_and_wait, feeds)
        apply = session_callable(self.sess, self.apply_and_release,
                                 [self.workers_arrived, self.lr_fraction])
        threads = np.int64(workers)
        processes = len(self.cluster.spec["worker"])

        def round_(lr_fraction) -> bool:
            counts, rows = self.log.take()
            if rows:
                self.send(rows)
            totals, *answer = arrive(*local_sums(), threads, counts)
            self.log.settle(totals, counts)
            if chief:
                tasks, workers_each = answer
                if (tasks < 0).any():  # released by a stop
                    return False
                if sorted(tasks.tolist()) != list(range(processes)):  # a bug, or a stray process
                    raise RuntimeError(f"a synchronous round's arrivals came from worker "
                                       f"processes {sorted(tasks.tolist())}, not each of 0-{processes - 1} "
                                       f"once; nothing of it was applied")
                answer = apply(np.float32(workers_each.sum()), lr_fraction)
                now = time.time()
                if self.last_round_at is not None:  # (the first one waited for the others to join)
                    self.round_seconds.append(now - self.last_round_at)
                self.last_round_at = now
            token, *params = answer
            if token != 1:
                return False
            with self.local_params_lock:
                put(*params)
            return True
        return round_

    def release_rounds(self, every_process: bool) -> None:
        """Wake whatever waits in a round (this process's own token; the chief: every process's,
        and its own wait for arrivals) with a stop; a ps that is gone needs nothing."""
        try:
            self.sess.run(self.release_all if every_process else self.release_own,
                          options=v1.RunOptions(timeout_in_ms=5000))
        except tf.errors.OpError:
            pass

    def pull_into(self, sess, net: ACNet) -> None:
        """The global parameters as the ps holds them now, into a worker net."""
        fed, assign = net.fed
        sess.run(assign, dict(zip(fed, self.sess.run(self.params_now))))

    def update_for(self, net: ACNet, sess, scheduled: list):
        """Worker.update for a cluster: the same feeds and the entropy and the gradient norm as
        in one process, but no next actions (they come from the net just pulled)."""
        rollout_feeds = net.rollout_feeds
        flat_grads = [g for grads in net.clipped_grads for g in grads]
        gradients = session_callable(sess, [*flat_grads, net.entropy, net.checked_grad_norm],
                                     [*rollout_feeds, *scheduled])
        fed, assign = net.fed
        put = session_callable(sess, [assign], fed)
        rollout_count, state_count, schedule_count = (len(rollout_feeds), len(net.current_state),
                                                      len(scheduled))

        def update(*feeds):
            schedule = feeds[len(feeds) - 1 - schedule_count:len(feeds) - 1]
            *grads, entropy, grad_norm = gradients(*feeds[:rollout_count], *schedule)
            counts, rows = self.log.take()
            *params, totals, _ = self.push(*grads, feeds[-1], counts)
            if rows:
                self.send(rows)
            self.log.settle(totals, counts)
            put(*params)
            return entropy, grad_norm
        del state_count  # the current state is carried by the worker: the next act call reads it
        return update

    def send(self, rows: list) -> None:
        """Finished episodes' rows into the queue the chief drains."""
        columns = [np.array(column, getattr(np, t))
                   for column, t in zip(zip(*rows), cluster_module.EPISODE_ROW_TYPES)]
        self.sess.run(self.enqueue, dict(zip(self.row_feeds, columns)))

    def flush(self) -> None:
        """What the process's threads counted but did not push yet (the last rollouts'
        episodes), to the ps, and a mark that this process has sent all it had: a worker
        process calls this when its threads have stopped (the chief waits for the marks)."""
        counts, rows = self.log.take()
        if rows:
            self.send(rows)
        if counts.any():
            self.log.settle(self.sess.run(self.add_counts, {self.counts: counts}), counts)
        self.mark_finished(1)

    def mark_finished(self, value: int) -> None:
        self.sess.run(self.set_finished, {self.finished_value: value})

    def close(self) -> None:
        close_remote_session(self.sess)
        if self.round_sess is not None:
            close_remote_session(self.round_sess)


def make_feedable(global_net: ACNet, worker_nets: list, cfg: Config) -> None:
    """A cluster process's nets that take parameters from the ps as arrays (ACNet.fed): every
    worker net, and with --sync the process's global net, where a round's parameters go."""
    for net in worker_nets + ([global_net] if cfg.sync_updates else []):
        net.fed = net.feedable_params()


def close_remote_session(sess) -> None:
    """Close a session with the ps tasks; when they are gone, closing can wait on gRPC for good,
    so give up after a few seconds (the process is ending; leave() then exits at once)."""
    closing = threading.Thread(target=sess.close, name="close_remote", daemon=True)
    closing.start()
    closing.join(5.0)


def falling_lr_fraction(cfg: Config, previous: float, episodes: int, finished_steps: int,
                        env_steps: int, start: AnnealStart) -> float:
    """The fraction of the base learning rates in force: 1, or annealed, and never rising (a
    longer mean episode length would otherwise push an episode budget's conversion up again)."""
    if not cfg.anneal_lr:
        return 1.0
    used = anneal_used(cfg, episodes, finished_steps, env_steps)
    return min(previous, annealed_fraction(used, start))


class ClusterLog:
    """What a worker process's threads share in a cluster run, where one process has EpisodeLog:
    the global counters as the last push brought them back, the env steps and episodes not
    pushed yet, and finished episodes' rows, which go to the chief through the ps's queue."""

    def __init__(self, cfg: Config, process: int, totals, anneal_start: AnnealStart):
        self.cfg, self.process = cfg, process
        # --sync: a round needs every process, so only the chief ends the run at the budget
        # (its stop releases the others); one that stopped on its own would stall the rest
        self.budget_is_the_chiefs = cfg.sync_updates and process != 0
        self.lock = threading.Lock()
        self.totals = np.array(totals, np.int64)  # env steps, episodes, env steps of those
        self.pending = np.zeros(3, np.int64)
        self.in_flight = np.zeros(3, np.int64)  # taken by pushes not answered yet
        self.rows = []
        self.anneal_start = anneal_start
        self.lr_fraction_now = anneal_start.lr_fraction

    @property
    def env_steps(self) -> int:
        return int(self.totals[0] + self.pending[0] + self.in_flight[0])

    def add_steps(self, count: int) -> None:
        with self.lock:
            self.pending[0] += count

    def record(self, worker: int, episode_return: float, length: int, entropy: float,
               grad_norm: float) -> None:
        with self.lock:
            self.rows.append((self.process, worker, episode_return, length, entropy, grad_norm,
                              self.totals[0] + self.pending[0] + self.in_flight[0]))
            self.pending[1:] += (1, length)

    def take(self) -> tuple:
        """(the counts not pushed yet, the rows not sent yet), both handed over to a push."""
        with self.lock:
            counts, rows = self.pending.copy(), self.rows
            self.in_flight += counts
            self.pending[:] = 0
            self.rows = []
            return counts, rows

    def settle(self, totals, counts) -> None:
        """The global totals a push brought back, which include its counts."""
        with self.lock:
            self.in_flight -= counts
            self.totals = np.maximum(self.totals, totals)

    def budget_used(self) -> float:
        """From what the ps has confirmed and what is not pushed yet, not what is in flight: a
        push's answer counts its siblings' in-flight pushes too, so counting them here could
        stop the process short of the budget."""
        if self.budget_is_the_chiefs:
            return 0.0
        with self.lock:
            seen = self.totals + self.pending
        return budget_used(self.cfg, int(seen[1]), int(seen[0]))

    def lr_fraction(self) -> float:
        with self.lock:
            steps, episodes, finished = self.totals + self.pending + self.in_flight
            self.lr_fraction_now = falling_lr_fraction(self.cfg, self.lr_fraction_now, int(episodes),
                                                       int(finished), int(steps), self.anneal_start)
            return self.lr_fraction_now


class ChiefLink:
    """What the chief (worker task 0) does for the cluster beyond its own workers: set up the
    ps tasks' state from its own (fresh or restored) global net; keep that local copy fresh,
    since checkpoints and the best-agent trials read it; collect every process's episodes into
    the one episodes.csv; beat the heart the other processes watch; report worker processes
    that stop pushing; and, at the end, tell the others that the run is over."""

    def __init__(self, remote: RemoteGlobal, local_shared: list):
        """Built in the chief's own graph (its global net, slots and counter: local_shared)."""
        self.remote = remote
        local = {v.op.name: v for v in local_shared if v.op.name.startswith("global/")}
        on_ps = {v.op.name: v for v in remote.variables if v.op.name.startswith("global/")}
        if set(local) != set(on_ps):  # both graphs come from the same code: a bug if not
            raise RuntimeError(f"the ps graph's variables differ from the chief's: "
                               f"{sorted(set(local) ^ set(on_ps))[:3]}")
        names = sorted(local)
        param_names = {p.op.name for p in remote.net.params}
        self.params = [n for n in names if n in param_names]
        self.local = [local[n] for n in names]
        self.feeds = [v1.placeholder(local[n].dtype.base_dtype, local[n].shape) for n in names]
        self.put_local = [v.assign(f) for v, f in zip(self.local, self.feeds)]
        with remote.graph.as_default():
            control = remote.control
            self.remote_vars = [on_ps[n] for n in names]
            self.remote_feeds = [v1.placeholder(v.dtype.base_dtype, v.shape) for v in self.remote_vars]
            self.put_remote = [v.assign(f) for v, f in zip(self.remote_vars, self.remote_feeds)]
            self.init = v1.variables_initializer(remote.variables)
            self.flag_index = v1.placeholder(tf.int32, [])
            self.flag_value = v1.placeholder(tf.int64, [])
            self.set_flag = v1.scatter_update(control.flags, self.flag_index, self.flag_value)
            self.beat = v1.scatter_add(control.flags, cluster_module.HEARTBEAT, tf.constant(1, tf.int64))
            self.start_values = [v1.placeholder(tf.string, []), v1.placeholder(tf.int64, [3]),
                                 v1.placeholder(tf.float64, [2])]
            self.set_start = tf.group(control.config.assign(self.start_values[0]),
                                      control.totals.assign(self.start_values[1]),
                                      control.anneal_start.assign(self.start_values[2]))
            self.queue_size = control.episodes.size()
            self.take_count = v1.placeholder(tf.int32, [])
            self.dequeue = control.episodes.dequeue_up_to(self.take_count)
            self.read_state = [control.totals, control.pushes, control.finished]
        self.param_positions = [names.index(n) for n in self.params]
        self.last_pushes, self.last_change, self.silent = None, {}, set()
        self.rounds_moved, self.told_waiting = time.time(), False  # --sync: see check_rounds
        self.next_param_sync = 0.0
        self.heart_stops = threading.Event()
        self.heart = None
        self.ps_lost = False  # the ps stopped answering: no more calls to it at the end

    def start(self, sess, run_config: str, totals, anneal_start: AnnealStart) -> None:
        """Put this process's global net, slots and counters on the ps tasks and open the run."""
        remote = self.remote.sess
        remote.run(self.init)
        left = int(remote.run(self.queue_size))  # rows of an earlier run on a ps that outlived it
        if left:
            remote.run(self.dequeue, {self.take_count: left})
        if self.remote.sync:
            remote.run(self.remote.drain_rounds)
        values = sess.run(self.local)
        remote.run(self.put_remote, dict(zip(self.remote_feeds, values)))
        remote.run(self.set_start, dict(zip(self.start_values, [
            run_config, np.array(totals, np.int64), np.array(anneal_start, np.float64)])))
        self.flag(cluster_module.RUN_ID, int(np.random.SeedSequence().generate_state(1)[0]))
        # the heartbeat the others and the ps tasks watch: a thread of its own, beating from
        # now until shutdown (through the rest of the set-up and the final saves too)
        remote.run(self.beat)

        def beat():
            while not self.heart_stops.wait(0.5):
                try:
                    self.remote.sess.run(self.beat)
                except Exception:  # a slow or lost ps: tick finds out; beat on while it may
                    pass
        self.heart = threading.Thread(target=beat, name="chief_heartbeat", daemon=True)
        self.heart.start()

    def open(self) -> None:
        """Let the other worker processes in."""
        self.flag(cluster_module.READY, 1)

    def flag(self, index: int, value: int) -> None:
        self.remote.sess.run(self.set_flag, {self.flag_index: index, self.flag_value: value})

    def download(self, sess, params_only: bool = False) -> None:
        """The ps tasks' global net (and slots) into the chief's local copy."""
        positions = self.param_positions if params_only else range(len(self.local))
        with self.remote.local_params_lock:
            values = self.remote.sess.run([self.remote_vars[i] for i in positions])
            sess.run([self.put_local[i] for i in positions],
                     {self.feeds[i]: value for i, value in zip(positions, values)})

    def tick(self, sess, log: EpisodeLog, say) -> None:
        """Once per supervisor loop: episodes, counters, silent workers, and every 2 s the
        parameters the trials copy."""
        try:
            self.beat_and_collect(sess, log, say)
        except tf.errors.OpError as exc:
            self.ps_lost = True
            raise WorkerError(f"the ps tasks stopped answering ({first_line(exc)}); the final "
                              f"checkpoint holds the last global net the chief brought home "
                              f"(at most a few seconds old)") from None

    def beat_and_collect(self, sess, log: EpisodeLog, say) -> None:
        self.collect(log)
        now = time.time()
        if now >= self.next_param_sync:
            self.download(sess, params_only=True)
            self.next_param_sync = now + 2.0
        if self.remote.sync:
            self.check_rounds(*self.remote.sess.run(self.read_state[1:]), now, say)
            return
        pushes = self.remote.sess.run(self.read_state[1])
        for task in range(1, len(pushes)):
            if self.last_pushes is None or pushes[task] != self.last_pushes[task]:
                self.last_change[task] = now
                if task in self.silent:
                    self.silent.discard(task)
                    say(f"worker process {task} pushes again")
            elif (pushes[task] and task not in self.silent
                  and now - self.last_change.get(task, now) > cluster_module.WORKER_SILENCE_S):
                self.silent.add(task)
                say(f"worker process {task} has not pushed for "
                    f"{cluster_module.WORKER_SILENCE_S:.0f} s: it has stopped or stalls; the "
                    f"others go on (start it again with the same command to rejoin)")
        self.last_pushes = pushes

    def check_rounds(self, pushes, finished, now: float, say) -> None:
        """--sync: every round needs every worker process's gradients, so one that stops sending
        them stalls the run. It ends (WorkerError, with its checkpoint) at once when a worker
        process says it has stopped; when one that had sent before is behind the others and
        nothing has moved for WORKER_SILENCE_S, or five of the slowest recent rounds if longer;
        when every process has arrived and still no round came for as long; and after
        CHIEF_WAIT_S for one that never joined. (pushes: arrivals so far, per worker process.)"""
        gone = [task for task in range(1, len(pushes)) if finished[task]]
        if gone:
            self.silent.update(gone)
            raise WorkerError(f"worker process {', '.join(map(str, gone))} has stopped, and a "
                              f"synchronous round needs every worker process, so the run stops "
                              f"here; {resume_hint()}")
        if self.last_pushes is None or (pushes != self.last_pushes).any():
            self.last_pushes, self.rounds_moved = pushes, now
            return
        waited = now - self.rounds_moved
        patience = max([cluster_module.WORKER_SILENCE_S, *(5 * t for t in self.remote.round_seconds)])
        # the chief's own workers are not waited for here: they are in this process
        behind = [task for task in range(1, len(pushes)) if pushes[task] < pushes.max()]
        names = ", ".join(str(task) for task in behind)
        if waited < patience:
            return
        if pushes.min() > 0 and (pushes == pushes.max()).all():  # every process has arrived
            raise WorkerError(f"no synchronous round has been applied for {waited:.0f} s though "
                              f"every worker process has sent its gradients; the run stops here; "
                              f"{resume_hint()}")
        if not behind:
            return
        if any(pushes[task] for task in behind):
            self.silent.update(behind)
            raise WorkerError(f"worker process {names} has sent no gradients for {waited:.0f} s "
                              f"and a synchronous round needs every worker process's, so the run "
                              f"stops here; {resume_hint()}")
        if waited >= cluster_module.CHIEF_WAIT_S:
            self.silent.update(behind)
            raise WorkerError(f"worker process {names} did not join within {waited:.0f} s; a "
                              f"synchronous run needs every worker process of the cluster: start "
                              f"each with the same cluster file (--job worker --task N)")
        if not self.told_waiting:
            self.told_waiting = True
            say(f"the synchronous rounds wait for worker process {names} to join")

    def collect(self, log: EpisodeLog) -> None:
        """The episodes in the queue into episodes.csv, and the global env step count."""
        waiting = int(self.remote.sess.run(self.queue_size))
        if waiting:
            process, worker, returns, lengths, entropy, norms, ended_at = self.remote.sess.run(
                self.dequeue, {self.take_count: waiting})
            for row in zip(process, worker, returns, lengths, entropy, norms, ended_at):
                log.record(int(row[1]), float(row[2]), int(row[3]), float(row[4]), float(row[5]),
                           process=int(row[0]), env_steps=int(row[6]))
        log.count_to(int(self.remote.sess.run(self.read_state[0])[0]))

    def finish(self, sess, log: EpisodeLog) -> bool:
        """Tell the other processes the run is over; once every one still pushing has sent its
        last episodes (15 s at most), collect them and bring the global net home for the
        checkpoint."""
        self.flag(cluster_module.DONE, 1)
        deadline = time.time() + 15.0
        while time.time() < deadline:
            _, pushes, finished = self.remote.sess.run(self.read_state)
            pushing = [task for task in range(1, len(pushes))
                       if pushes[task] and task not in self.silent]
            if all(finished[task] for task in pushing):
                break
            time.sleep(0.2)
        self.collect(log)
        self.download(sess)
        return True

    def shutdown(self) -> None:
        """The ps tasks may go: the chief has what it needs."""
        self.heart_stops.set()
        if self.heart is not None:
            self.heart.join(5.0)
        self.flag(cluster_module.SHUTDOWN, 1)


# ---------------------------------------------------------------------------------------------
# The training driver
# ---------------------------------------------------------------------------------------------

def file_name(env_id: str) -> str:
    """An env id as one file or folder name (ALE/Pong-v5 -> ALE_Pong-v5)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in env_id)


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


def versions() -> dict:
    return {"python": sys.version.split()[0], "tensorflow": tf.__version__,
            "gymnasium": gym.__version__, "numpy": np.__version__}


def session_config(op_threads: int):
    """Grappler's graph rewrites are off: on these tiny graphs they cost more per call than they
    save, and memory. One thread per op: the graphs are too small to share out. op_threads < 0
    runs each call's ops in the thread that made it; > 0 gives the session its own pool.

    No GPU, even where TensorFlow has one (pip's `tensorflow` on Linux is a CUDA build): this
    trainer is CPU by design (a GPU would only add a copy to every tiny call), and a session
    that sees a GPU places what has no device of its own there and reserves most of its memory."""
    config = v1.ConfigProto(intra_op_parallelism_threads=1,
                            inter_op_parallelism_threads=op_threads,
                            use_per_session_threads=op_threads > 0,
                            device_count={"GPU": 0})
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


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


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) that ended the program before a clean stop; the message says
    what is true of the run at that point."""


def tell(stream, text: str) -> bool:
    """Print text to stream; False, and the stream silenced for good, if it is gone (a broken
    pipe, a closed terminal): a message must never be what stops a run or its cleanup."""
    try:
        print(text, file=stream, flush=True)
        return True
    except (OSError, ValueError):
        if stream in (sys.stdout, sys.stderr):  # keep Python's exit-time flush from failing too
            try:
                with open(os.devnull, "w") as devnull:
                    os.dup2(devnull.fileno(), stream.fileno())
            except (OSError, ValueError):
                pass
        return False


def warn(text: str) -> None:
    tell(sys.stderr, f"a3c.py: warning: {text}")


def attempt(what: str, step, *args):
    """step(*args), or None after a warning if it raised: one failing step of a cleanup must not
    keep the others from running."""
    try:
        return step(*args)
    except Exception as exc:
        warn(f"could not {what}: {first_line(exc)}")
        return None


class Console:
    """Progress lines for the user. A console that goes away (`a3c.py ... | head`, a closed
    terminal) stops the lines, not the training: the run goes on to write its files."""

    def __init__(self, out):
        self.out = out
        self.open = True

    def say(self, text: str) -> None:
        if self.open and not tell(self.out, text):
            self.open = False
            warn("the console went away; training goes on without progress lines")


def write_atomically(path: str, text: str) -> None:
    """A file that is either its old self or its new self, never half written (a resume rewrites
    config.json, which the run cannot be resumed or evaluated without)."""
    partial = path + ".partial"
    with open(partial, "w") as f:
        f.write(text)
    os.replace(partial, path)


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


def train(env_id: str, cfg: Config, results_dir: str = "results", show_plot: bool = True,
          out=None, resume_dir: str = None, cluster=None) -> dict:
    """Train, writing everything into a new run folder (or continuing resume_dir's run from its
    latest checkpoint); returns a summary dict. cluster: this process is the chief (worker task
    0) of a cluster run, whose global net lives on the ps tasks (see ChiefLink).

    Raises UsageError before anything is written when the env or config cannot work, re-raises
    a worker's exception (after saving the checkpoint, the CSV and the plot) when a worker fails,
    and raises Interrupted on a Ctrl-C during set-up or a second one during the final saves.
    """
    console = Console(out or sys.stdout)
    cfg.validate()
    spec = probe_spec(env_id, cfg)
    earlier = read_run_info(resume_dir) if resume_dir is not None else None
    part = len(earlier.get("resumed", [])) + 1 if earlier is not None else 0
    seed = part_seed(cfg.seed, part)
    if cluster is not None:  # before anything is written: a port in use, no ps
        server = start_cluster_task(cluster)

    run_dir, sess, workers, checkpoints, remote, chief = resume_dir, None, [], None, None, None
    try:
        graph = tf.Graph()
        with graph.as_default():
            v1.set_random_seed(seed)
            np.random.seed(seed)
            global_net, worker_nets = build_graph(spec, cfg)
            if cluster is not None:
                remote = RemoteGlobal(spec, cfg, cluster, server)
                make_feedable(global_net, worker_nets, cfg)
            run_dir = resume_dir or new_run_dir(results_dir, env_id, cfg.seed)
            checkpoints = Checkpoints(run_dir, cfg, env_id, global_net, spec)
            chief = None if remote is None else ChiefLink(remote, checkpoints.shared)
            init = v1.global_variables_initializer()
        layout = cpu_layout(cfg)
        sess = open_session(graph, layout)
        sess.run(init)
        history = None
        if resume_dir is not None:
            history = resume_history(sess, checkpoints, run_dir, cfg, earlier)
        workers = [Worker(i, net, env_id, spec, cfg) for i, net in enumerate(worker_nets)]

        run_info = {"env": env_id, "config": dataclasses.asdict(cfg),
                    "effective_learning_rates": learning_rates(cfg, spec),
                    "argv": sys.argv, "versions": versions(),
                    "cpus": None if layout is None else {"workers": sorted(layout.workers),
                                                         "tensorflow_ops": sorted(layout.ops)}}
        if history is not None:  # keep the history of how the run was started and resumed
            run_info["resumed"] = earlier.get("resumed", []) + [
                {"argv": sys.argv, "env_steps": history.env_steps, "seed": seed,
                 "anneal_start": history.anneal_start._asdict(),
                 "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}]
            run_info["argv"] = earlier.get("argv")
        if cluster is not None:
            run_info["cluster"] = cluster.shape
        write_atomically(os.path.join(run_dir, "config.json"), json.dumps(run_info, indent=2))
        summary_writer = v1.summary.FileWriter(run_dir, graph)
        worker_log = None
        if chief is not None:  # the ps tasks take this process's net, slots and counters
            start = history or RunHistory({}, 0, AnnealStart())
            totals = (start.env_steps, len(start.rows.get("episode", ())),
                      int(start.rows["length"].sum()) if start.rows else 0)
            chief.start(sess, json.dumps({"env": env_id, "config": dataclasses.asdict(cfg),
                                          "seed": seed, "cluster": cluster.spec}),
                        totals, start.anneal_start)
            checkpoints.before_save = chief.download
            checkpoints.save_lock = remote.local_params_lock
            worker_log = remote.log = ClusterLog(cfg, cluster.task, totals, start.anneal_start)
        rounds = None
        if cfg.sync_updates and remote is not None:
            rounds = UpdateRound(len(workers), remote.round_for(sess, global_net, len(workers)))
        elif cfg.sync_updates:
            rounds = UpdateRound.in_one_process(sess, global_net, len(workers))
        for worker in workers:
            worker.prepare(sess, seed, remote, rounds)
        if rounds is not None:  # a round's update (and on a cluster its put) holds this lock
            checkpoints.best.copy_lock = rounds.condition
            if remote is None:  # (a cluster's saves wait on the round's put lock instead: the
                checkpoints.save_lock = rounds.condition  # chief's watch must never wait a round)
        checkpoints.best.prepare(sess)
        # the clock starts with the workers
        log = EpisodeLog(run_dir, cfg, summary_writer, history, cluster=cluster is not None)
        worker_log = worker_log or log
        # a resumed run's next candidate must beat its CSV's best mean-100 too
        checkpoints.best.best_tried = max(checkpoints.best.best_tried, log.best_running)
    except BaseException as exc:
        if sess is not None:
            sess.close()
        for worker in workers:
            worker.close()
        if checkpoints is not None:
            checkpoints.best.close()
        if chief is not None and chief.heart is not None:  # the others must not wait for it
            attempt("tell the ps tasks to stop", chief.shutdown)
        if remote is not None:
            remote.close()
        if not isinstance(exc, KeyboardInterrupt):
            raise
        if resume_dir is not None:
            raise Interrupted(f"interrupted during set-up, before training started; "
                              f"{checkpoint_note(run_dir)}") from None
        where = f"; {run_dir} holds no checkpoint" if run_dir is not None else ""
        raise Interrupted(f"interrupted during set-up, before training started: nothing was "
                          f"trained{where}") from None

    where = "" if layout is None else f" ({layout.describe()})"
    if history is not None:
        where += f"; resumed at {history.env_steps:,} env steps with seed {seed}"
        if cfg.anneal_lr:
            where += f", learning rates at {history.anneal_start.lr_fraction:.0%} of their base"
    coord = v1.train.Coordinator()
    threads = []
    error = None
    interrupted = False
    try:
        if cluster is not None:
            where += (f"; the chief of a cluster of {len(cluster.spec['ps'])} ps and "
                      f"{len(cluster.spec['worker'])} worker processes")
        mode = ", synchronous updates (A2C)" if cfg.sync_updates else ""
        console.say(f"training {env_id} with {cfg.workers} workers x {cfg.envs_per_worker} envs"
                    f"{mode}{where}; results in {run_dir}")
        if chief is not None:
            chief.open()
        threads += start_workers(workers, coord, worker_log, layout)

        def run_trials():
            with coord.stop_on_exception():
                if layout is not None:
                    os.sched_setaffinity(0, layout.workers)  # Python, like the workers
                try:
                    schedule = TrialSchedule(cfg.best_checkpoint_every_s, len(workers),
                                             cfg.best_trial_cpu_share)
                    checkpoints.best.run_trials(sess, coord, log, schedule)
                except Exception as exc:
                    raise WorkerError(f"the best-agent trials raised {type(exc).__name__}: "
                                      f"{exc}") from exc
        thread = threading.Thread(target=run_trials, name="best_trials", daemon=True)
        thread.start()
        threads.append(thread)
        supervise(coord, log, checkpoints, sess, cfg, console, chief)
    except KeyboardInterrupt:
        interrupted = True
    except WorkerError as exc:  # the cluster's ps tasks went away
        error = exc
    except Exception as exc:  # the driver itself failed: the workers stop all the same
        error = WorkerError(f"the driver raised {type(exc).__name__}: {first_line(exc)}")
    try:
        # every way out stops and joins the workers before anything they use is closed
        release = (None if remote is None or rounds is None
                   else lambda: remote.release_rounds(every_process=True))
        raised, stuck = stop_workers(coord, threads, release)
        error = error or raised
        if chief is not None and chief.ps_lost:
            checkpoints.before_save = None  # the ps is gone: save the last copy there is
        elif chief is not None:
            if not stuck:  # its own threads' last episodes, like any worker process's
                attempt("send the last episodes", remote.flush)
            if attempt("collect the cluster's last episodes and global net", chief.finish,
                       sess, log) is None:
                checkpoints.before_save = None  # the ps is gone: save the last copy there is
        final = log.progress()  # the workers have stopped: the clock stops too
        attempt("write the final checkpoint", checkpoints.save, sess, log.env_steps)
        if "best_trials" not in stuck:  # else it may still be playing: best/ stays as it is
            attempt("try the last candidates for the best checkpoint", checkpoints.best.try_final,
                    sess, log, 10.0 if interrupted or error is not None else 60.0)
        if stuck:  # closing what a running thread uses could crash the process or lose its rows
            warn(f"{', '.join(stuck)} did not stop within 30 s; the CSV, the session and the "
                 f"environments are left open for them")
        else:
            attempt("close episodes.csv", log.close)
            attempt("close the TensorBoard events", summary_writer.close)
            attempt("close the session", sess.close)
            for worker in workers:
                attempt(f"close {worker.name}'s environments", worker.close)
            attempt("close the trial environments", checkpoints.best.close)
        plot_path = attempt("draw rewards.png", plot_rewards, run_dir, env_id,
                            show_plot and error is None and not interrupted)
        if chief is not None and not chief.ps_lost:
            attempt("tell the ps tasks to stop", chief.shutdown)
        if chief is not None and not stuck:
            attempt("close the session with the ps tasks", remote.close)
    except KeyboardInterrupt:
        how = "interrupted twice" if interrupted else "interrupted while finishing the run"
        why = f" (training had stopped: {error})" if error is not None else ""
        raise Interrupted(f"{how}: stopped at once{why}; {checkpoint_note(run_dir)}") from None

    final.update(run_dir=run_dir, plot=plot_path, interrupted=interrupted)
    how = "interrupted" if interrupted else ("stopped by an error" if error else "done")
    if checkpoints.best.on_disk is not None:
        final.update(best_checkpoint=checkpoints.best.folder)
    console.say(f"{how}: {progress_line(final)}\n{checkpoints.best.describe(log)}\n"
                f"results in {run_dir}")
    if error is not None:
        raise error
    return final


def stop_workers(coord, threads: list, release=None) -> tuple:
    """Stop the threads and join them (30 s of grace): (what a worker raised, for which the
    Coordinator stopped the others, or None; the names of threads still running). release():
    wakes a thread that waits where the Coordinator cannot reach it (a cluster's --sync round)."""
    coord.request_stop()
    if release is not None:
        release()
    try:
        coord.join(threads, stop_grace_period_secs=30, ignore_live_threads=True)
        raised = None
    except Exception as exc:
        raised = exc
    return raised, [thread.name for thread in threads if thread.is_alive()]


def start_workers(workers: list, coord, log, layout) -> list:
    """A thread per worker, running its loop under the Coordinator; returns the threads."""
    threads = []
    for worker in workers:
        def run(worker=worker):  # bind this worker now, not the loop variable's last value
            with coord.stop_on_exception():
                if layout is not None:
                    os.sched_setaffinity(0, layout.workers)  # this thread only
                try:
                    worker.work(coord, log)
                except Exception as exc:
                    raise WorkerError(f"{worker.name} raised {type(exc).__name__}: "
                                      f"{first_line(exc)}") from exc
        thread = threading.Thread(target=run, name=worker.name, daemon=True)
        thread.start()
        threads.append(thread)
    return threads


def start_cluster_task(cluster) -> "v1.train.Server":
    """This process's TensorFlow server, once every ps task answers (cluster.ClusterError: its
    port is taken, or no ps came within cluster.PS_WAIT_S)."""
    server = cluster_module.start_server(tf, cluster)
    cluster_module.wait_for_ps(cluster)
    return server


def resume_hint() -> str:
    return ("the chief's last checkpoint keeps the run: resume it on the chief's machine with "
            "--resume RUN_DIR and the same cluster")


def train_as_worker(cluster, workers: typing.Optional[int], env_id: typing.Optional[str],
                    out=None) -> int:
    """A worker process other than the chief: it takes the run's env and config from the chief
    (through ps task 0), trains with its own threads and writes nothing; its episodes go to the
    chief. Returns 0 when the run is over, 1 if the chief or a ps task went away or a worker
    raised, 130 on Ctrl-C (or SIGTERM). A process started again with the same command rejoins."""
    console = Console(out or sys.stdout)
    server = start_cluster_task(cluster)
    graph = tf.Graph()
    with graph.as_default():
        control = cluster_module.control_variables(tf, len(cluster.spec["worker"]))
    control_sess = cluster_module.ps_session(tf, cluster, graph, one_task=True)
    try:
        return join_the_run(cluster, server, control, control_sess, workers, env_id, console)
    finally:
        close_remote_session(control_sess)


def join_the_run(cluster, server, control, control_sess, workers: typing.Optional[int],
                 env_id: typing.Optional[str], console: Console) -> int:
    """train_as_worker, once it can read the chief's flags: wait for the run, join it, train."""
    watch = cluster_module.ChiefWatch(tf, control_sess, control)
    deadline = time.time() + cluster_module.CHIEF_WAIT_S
    while (state := watch.state()) == "waiting":
        if time.time() > deadline:
            warn(f"the chief (worker task 0) did not open the run within "
                 f"{cluster_module.CHIEF_WAIT_S:.0f} s; start it with the same cluster file, then this")
            return 1
        time.sleep(0.5)
    if state != "running":
        raise UsageError(f"the cluster's run is {'over' if state in ('done', 'shutdown') else 'gone'}"
                         f" (the chief is {state}); nothing to join")
    run = json.loads(control_sess.run(control.config).decode())
    totals, anneal_start = control_sess.run([control.totals, control.anneal_start])
    if run["cluster"] != cluster.spec:
        raise UsageError(f"this process's cluster {json.dumps(cluster.spec)} is not the chief's "
                         f"{json.dumps(run['cluster'])}; give every process the same cluster file")
    if env_id is not None and env_id != run["env"]:
        raise UsageError(f"--env {env_id}: the cluster's run trains {run['env']}; a worker "
                         f"process takes the chief's env and config (drop --env)")
    run_cfg = config_module.from_dict(run["config"])  # the global net's, and its learning rates
    if run_cfg.sync_updates and control_sess.run(control.pushes)[cluster.task]:
        # its last round may still be in the queues on the ps: taking it back could misalign
        # the rounds; the chief ends the run when it goes silent
        raise UsageError(f"worker process {cluster.task} already took part in this synchronous "
                         f"(--sync) run, which cannot take a worker process back; once the chief "
                         f"has ended it, {resume_hint()}")
    cfg = run_cfg if workers is None else checked(dataclasses.replace(run_cfg, workers=workers))
    seed = int(np.random.SeedSequence([run["seed"], cluster.task]).generate_state(1)[0])
    spec = probe_spec(run["env"], cfg)
    local = tf.Graph()
    with local.as_default():
        v1.set_random_seed(seed)
        global_net, worker_nets = build_graph(spec, cfg)
        make_feedable(global_net, worker_nets, cfg)
        init = v1.global_variables_initializer()
    remote = RemoteGlobal(spec, run_cfg, cluster, server)  # the chief's rates, whatever --workers
    sess, workers_here = None, []
    try:
        remote.mark_finished(0)  # (a process that rejoins)
        layout = cpu_layout(cfg)
        sess = open_session(local, layout)
        sess.run(init)
        remote.log = ClusterLog(cfg, cluster.task, totals, AnnealStart(*anneal_start))
        workers_here = [Worker(i, net, run["env"], spec, cfg) for i, net in enumerate(worker_nets)]
        rounds = (UpdateRound(len(workers_here), remote.round_for(sess, global_net, len(workers_here),
                                                                  chief=False))
                  if cfg.sync_updates else None)
        for worker in workers_here:
            worker.prepare(sess, seed, remote, rounds)
    except BaseException:
        for worker in workers_here:
            worker.close()
        if sess is not None:
            sess.close()
        if cfg.sync_updates:  # the chief's rounds must not wait for this process
            attempt("tell the chief this process stopped", remote.mark_finished, 1)
        remote.close()
        raise
    coord = v1.train.Coordinator()
    threads = start_workers(workers_here, coord, remote.log, layout)
    console.say(f"worker process {cluster.task} joined the run of {run['env']} at "
                f"{int(totals[0]):,} env steps with {cfg.workers} workers x {cfg.envs_per_worker} envs"
                f"{', synchronous updates (A2C)' if cfg.sync_updates else ''}")
    outcome = "done"
    try:
        while not coord.wait_for_stop(0.5):
            state = watch.state()
            if state in ("done", "shutdown", "silent", "lost", "waiting", "restarted"):
                outcome = state
                coord.request_stop()
    except KeyboardInterrupt:
        outcome = "interrupted"
    error, stuck = stop_workers(coord, threads, None if rounds is None else
                                lambda: remote.release_rounds(every_process=False))
    if outcome in ("done", "interrupted") and error is None and not stuck:
        attempt("send the last episodes to the chief", remote.flush)
    elif rounds is not None and outcome not in ("lost", "silent"):
        # --sync: the chief's rounds wait for this process until it says it has stopped
        attempt("tell the chief this process stopped", remote.mark_finished, 1)
    if stuck:  # closing what a running thread uses could crash the process
        warn(f"{', '.join(stuck)} did not stop within 30 s; leaving without closing")
    else:
        for worker in workers_here:
            attempt(f"close {worker.name}'s environments", worker.close)
        attempt("close the session", sess.close)
        attempt("close the session with the ps tasks", remote.close)
    if outcome in ("waiting", "restarted"):
        warn("the chief (worker task 0) started the run anew; start this process again to join it")
        return 1
    if outcome == "silent":
        warn(f"the chief (worker task 0) has been silent for {cluster_module.CHIEF_SILENCE_S:.0f} s, "
             f"so this process stopped; {resume_hint()}")
        return 1
    if outcome == "lost" or error is not None:
        why = f"{first_line(error)}" if error is not None else "ps task 0 does not answer"
        warn(f"worker process {cluster.task} stopped: {why}; if a ps task or the chief went away, "
             f"{resume_hint()}")
        return 1
    console.say(f"worker process {cluster.task}: {'interrupted' if outcome == 'interrupted' else 'the run is over'}")
    return 130 if outcome == "interrupted" else 0


def supervise(coord, log: EpisodeLog, checkpoints: "Checkpoints", sess, cfg: Config,
              console: Console, chief: ChiefLink = None) -> None:
    """Until the workers stop: a progress line every log_every_s seconds and a checkpoint every
    checkpoint_every_s (the best checkpoint has a thread of its own). A checkpoint that fails (disk full,
    folder moved) is reported and tried again at the next one; it does not end a long run.
    A cluster's chief also runs its ChiefLink's tick twice a second."""
    next_line = next_save = time.time()
    next_line += cfg.log_every_s
    next_save += cfg.checkpoint_every_s
    while not coord.wait_for_stop(min(max(min(next_line, next_save) - time.time(), 0.0), 0.5)):
        if chief is not None:
            chief.tick(sess, log, console.say)
        now = time.time()
        if now >= next_line:
            console.say(progress_line(log.progress()))
            next_line = now + cfg.log_every_s
        if now >= next_save:
            attempt(f"write a periodic checkpoint (next try in {cfg.checkpoint_every_s:g} s)",
                    checkpoints.save, sess, log.env_steps)
            next_save = now + cfg.checkpoint_every_s


def resume_history(sess, checkpoints: "Checkpoints", run_dir: str, cfg: Config,
                   earlier: dict) -> RunHistory:
    """Restore the run's latest checkpoint into sess and say where training continues from
    (resume_point)."""
    return resume_point(run_dir, cfg, earlier, checkpoints.restore(sess))


def resume_point(run_dir: str, cfg: Config, earlier: dict, checkpoint_steps: int) -> RunHistory:
    """Where a run resumed from a checkpoint of checkpoint_steps env steps goes on: its
    episodes, its env step count (the checkpoint's, or further if the CSV recorded episodes
    after it), and the learning rate it had annealed to. UsageError if its budget is spent."""
    try:
        rows = read_episodes(os.path.join(run_dir, "episodes.csv"))
    except (OSError, KeyError, ValueError) as exc:
        raise UsageError(f"cannot read {run_dir}'s episodes.csv ({first_line(exc)}); only a run "
                         f"folder with its CSV can be resumed") from None
    env_steps = int(max([checkpoint_steps, *rows["env_steps"].astype(int)]))
    episodes, finished_steps = len(rows["episode"]), int(rows["length"].sum())
    if budget_used(cfg, episodes, env_steps) >= 1:
        raise UsageError(f"{run_dir} already used its budget (max_episodes={cfg.max_episodes}, "
                         f"max_steps={cfg.max_steps}); raise --max-episodes or --max-steps")
    before = config_module.from_dict(earlier["config"])  # the budget of the part that ran last
    reached = 1.0
    if before.anneal_lr:
        last_start = earlier.get("resumed", [{}])[-1].get("anneal_start", {})
        reached = annealed_fraction(
            anneal_used(before, episodes, finished_steps, env_steps),
            AnnealStart(**last_start))
    used = anneal_used(cfg, episodes, finished_steps, env_steps)
    starts_at = reached if used < 1 else 0.0  # past anneal_steps it is 0 whatever was reached
    if cfg.anneal_lr and starts_at < 0.01:
        raise UsageError(f"{run_dir}'s learning rates are annealed to {starts_at:.1%} of their "
                         f"base, so it would learn nothing more; resume it with --set "
                         f"anneal_lr=false to train on at the base rates (a jump that can "
                         f"undo what was learned: copy the run folder first), or start a new run")
    return RunHistory(rows, env_steps, AnnealStart(reached, used))


CHECKPOINT_FOLDER = "checkpoints"
BEST_FOLDER = "best"      # checkpoints/best/: the best agent of the run (BestCheckpoint)
BEST_INFO = "best.json"   # beside it: its score, mean-100, episode, env steps, checkpoint name
COPY_WAIT_S = 1.0  # how long a best-agent copy waits for a --sync round to end before it asks again
ENV_ID_VARIABLE = "run/env_id"
ENV_STEPS_VARIABLE = "run/env_steps"


class Checkpoints:
    """Saves and restores the global net, its RMSProp slots and the run's env step counter
    (the workers' own copies are pulled anew). Each save writes new files and only then swaps
    the "checkpoint" index file atomically, so a save cut short never leaves a broken latest."""

    def __init__(self, run_dir: str, cfg: Config, env_id: str, global_net: "ACNet", spec: EnvSpec):
        self.folder = os.path.join(run_dir, CHECKPOINT_FOLDER)
        self.env_id = env_id
        env_id_variable = v1.Variable(env_id, name=ENV_ID_VARIABLE, trainable=False)  # checked
        self.env_steps = v1.get_variable(ENV_STEPS_VARIABLE, [], tf.int64, v1.zeros_initializer(),
                                         trainable=False)
        self.steps_in = v1.placeholder(tf.int64, [], "run/env_steps_in")
        self.set_steps = self.env_steps.assign(self.steps_in)
        shared = [v for v in v1.global_variables() if not v.op.name.startswith("worker_")]
        # relative paths in the index: a run folder that is moved reads its own files
        self.saver = v1.train.Saver(var_list=shared, max_to_keep=cfg.keep_checkpoints,
                                    save_relative_paths=True)
        self.shared = shared
        self.slots = [v for v in shared if "/RMSProp" in v.op.name]
        self.best = BestCheckpoint(self.folder, global_net, spec, cfg, env_id, env_id_variable)
        self.before_save = None
        self.save_lock = threading.RLock()  # --sync: a round's lock (no save during an update)

    def save(self, sess, env_steps: int) -> None:
        # a cluster's chief: the global net from the ps first, and nothing else writes it
        # until it is saved (a --sync round's parameters: RemoteGlobal.local_params_lock)
        with self.save_lock:
            if self.before_save is not None:
                self.before_save(sess)
            sess.run(self.set_steps, {self.steps_in: env_steps})
            self.saver.save(sess, os.path.join(self.folder, "model"), global_step=env_steps,
                            write_meta_graph=False)  # nothing reads it; it is ~1 MB and GIL-bound

    def restore(self, sess) -> int:
        """Restore the latest checkpoint; returns its env step count."""
        checkpoint = latest_checkpoint(self.folder)
        missing = restore_checkpoint(sess, self.saver, checkpoint, self.shared, self.env_id,
                                     optional=self.slots)
        if missing:
            warn(f"{checkpoint} holds no RMSProp averages (written before they were saved): "
                 f"the optimisers start theirs afresh")
        adopt_checkpoints(self.saver, self.folder)  # so that keep_checkpoints counts them too
        return int(sess.run(self.env_steps))


class BestCheckpoint:
    """checkpoints/best/: the best agent the run has made, and best.json beside it (its score,
    the mean-100 and episode it was taken at, the env steps then, and its checkpoint's name).

    The mean-100 says when the agent may have got better, but it lags (it averages 100 episodes
    played by nets that kept changing) and it measures the stochastic policy, not the one --eval
    plays. So a new best mean-100 makes the global net of that moment a candidate: a copy taken
    inside the graph in one session call, whose deterministic policy then plays trial_episodes
    episodes on environments of its own, from the same start states for every candidate (others
    than --eval's). A candidate that plays better than every earlier one becomes the best and is
    written at once. Trials run in a thread beside the workers (run_trials), when a
    TrialSchedule allows; the final net gets one more at the end (try_final). With no trial episodes
    a candidate's score is its mean-100."""

    def __init__(self, checkpoints_folder: str, global_net: "ACNet", spec: EnvSpec, cfg: Config,
                 env_id: str, env_id_variable):
        self.folder = os.path.join(checkpoints_folder, BEST_FOLDER)
        net = global_net.params
        self.candidate = ACNet("best_candidate", spec, cfg)
        candidate = self.candidate.params
        with v1.variable_scope("best_snapshot"):
            snapshot = [v1.get_variable(v.op.name, v.shape, v.dtype.base_dtype, trainable=False,
                                        initializer=v1.zeros_initializer()) for v in net]
        self.take_candidate = tf.group(*[c.assign(v) for c, v in zip(candidate, net)])
        self.promote = tf.group(*[s.assign(c) for s, c in zip(snapshot, candidate)])
        # stored under the net's own names: --eval restores it like any checkpoint
        stored = {v.op.name: s for v, s in zip(net, snapshot)}
        self.saver = v1.train.Saver(var_list={**stored, ENV_ID_VARIABLE: env_id_variable},
                                    max_to_keep=1, save_relative_paths=True)
        self.trial_envs = (make_envs(env_id, cfg, cfg.best_trial_episodes, greedy=True)
                           if cfg.best_trial_episodes else None)
        self.on_disk = read_best_info(self.folder)  # what best/ holds now (None: nothing)
        try:  # whatever best/ holds, labelled or not, so that the next write replaces it
            adopt_checkpoints(self.saver, self.folder)
        except Exception:  # an unreadable index: the next write makes a new one
            pass
        self.unwritten = None  # the label of a best not yet on disk (its write failed)
        self.pending = None    # the label of a candidate copied but not yet tried
        self.trial_episodes = cfg.best_trial_episodes
        self.obs_dtype = spec.obs_dtype
        self.snapshot_to_candidate = tf.group(*[c.assign(s) for c, s in zip(candidate, snapshot)])
        self.best_score = best_score(self.on_disk) if self.on_disk else -math.inf
        self.best_mean_100 = self.on_disk["mean_100"] if self.on_disk else -math.inf  # the best one's
        self.best_tried = self.on_disk["mean_100"] if self.on_disk else -math.inf  # a mean-100
        # held while the candidate is copied: --sync sets its rounds' lock, so that the copy is
        # one round's net, never half of the next one's update (asynchronous pushes interleave
        # with any copy, as with every read of a Hogwild net). On a cluster the chief's periodic
        # download of the ps's net holds only the round's put lock; a download torn by a round
        # is written over by that round's put before the rounds' lock is free again.
        self.copy_lock = threading.Lock()

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

    def run_trials(self, sess, coord, log: "EpisodeLog", schedule: "TrialSchedule") -> None:
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

    def take_if_risen(self, sess, log: "EpisodeLog", final: bool = False,
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
        self.pending = {"mean_100": running, "episode": episode, "env_steps": env_steps}
        return True

    def try_pending(self, sess, should_stop) -> bool:
        """Score the candidate (its trial return, or its mean-100 without trials) and make it
        the best if it beats the best so far; True if it did."""
        label, self.pending = self.pending, None
        score = self.play(should_stop) if self.trial_envs is not None else label["mean_100"]
        if score is None or not self.beats_the_best(score, label["mean_100"]):
            return False
        sess.run(self.promote)
        self.best_score, self.best_mean_100 = score, label["mean_100"]
        self.unwritten = {"score": score, "trial_episodes": self.trial_episodes, **label}
        attempt("write the best checkpoint", self.write, sess)
        return True

    def try_candidate(self, sess, log: "EpisodeLog", should_stop,
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

    def try_final(self, sess, log: "EpisodeLog", time_limit_s: float = 60.0) -> None:
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
        """The candidate's mean raw return over one episode in each trial env, all stepped
        together (None if should_stop() said so first). An episode still going after
        TRIAL_STEP_LIMIT steps (an env without a time limit) counts as cut there."""
        envs = self.trial_envs
        obs = envs.reset(TRIAL_SEED + np.arange(len(envs))).astype(self.obs_dtype)  # as fed
        self.greedy.start()
        returns, playing = np.zeros(len(envs)), np.ones(len(envs), bool)
        for _ in range(TRIAL_STEP_LIMIT):
            if not playing.any():
                break
            if should_stop():
                return None
            next_obs, rewards, terminated, truncated = envs.step(self.greedy(obs))
            returns += rewards * playing
            obs = np.array(next_obs, dtype=obs.dtype)
            for k in np.flatnonzero(np.logical_or(terminated, truncated)):
                playing[k] = False  # an env that has played its episode plays on, unscored
                obs[k] = envs.restart(k)
                self.greedy.restart(k)
        return float(returns.mean())

    def write(self, sess) -> bool:
        """Write the best not yet on disk; True if it did."""
        if self.unwritten is None:
            return False
        os.makedirs(self.folder, exist_ok=True)  # the Saver makes no folders of its own
        path = self.saver.save(sess, os.path.join(self.folder, "model"),
                               global_step=self.unwritten["env_steps"], write_meta_graph=False)
        info = {**self.unwritten, "checkpoint": os.path.basename(path)}
        write_atomically(os.path.join(self.folder, BEST_INFO), json.dumps(info))
        self.on_disk, self.unwritten = info, None
        return True

    def close(self) -> None:
        if self.trial_envs is not None:
            self.trial_envs.close()

    def describe(self, log: "EpisodeLog") -> str:
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
    train on (a Pendulum trial of 50 episodes: 1-2 s of wall time, ~0.25 s of CPU). Summed over
    the run, so that one slow trial (the first, as the workers start) is paid back rather than
    holding the next ones off for ten times its wall time (the rule before, which left Pendulum
    runs of ~8 s with 2-3 trials); but the credit a long plateau saves up is capped at two
    trials' cost, so that a burst of rises after one does not run trials back to back."""

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


EVAL_SEED = 10_000   # --eval's episode k starts from this seed + k
TRIAL_SEED = 20_000  # a best-agent trial's episode k from this one + k: the two never meet
TRIAL_STEP_LIMIT = 27_000  # steps of a trial episode at most: ALE's own limit (108,000 frames)


def best_score(info: dict) -> float:
    """What a best.json's agent scored: its trial return, or its mean-100 (no trials, or a
    best.json written before trials)."""
    return float(info.get("score", info["mean_100"]))


def describe_best(info: dict) -> str:
    taken = f"the net of episode {info['episode']:,} (mean-100 {info['mean_100']:.1f})"
    if info.get("trial_episodes"):
        return (f"deterministic return {info['score']:.1f} over {info['trial_episodes']} trial "
                f"episodes, {taken}")
    return f"best mean-100 {info['mean_100']:.1f} at episode {info['episode']:,}"


def adopt_checkpoints(saver, folder: str) -> None:
    """Make saver count the checkpoints already in folder (named inside it, wherever the index
    says they were written), so that its max_to_keep deletes them in turn."""
    state = v1.train.get_checkpoint_state(folder)
    saver.recover_last_checkpoints([os.path.join(folder, os.path.basename(p))
                                    for p in (state.all_model_checkpoint_paths if state else [])])


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
        raise UsageError(f"no checkpoint in {folder}; "
                         f"runs write one at the end and every checkpoint_every_s seconds")
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
                raise ValueError(f"it holds {name} as {stored.get(name)}, the config builds {shape}")
        if missing:
            saver = v1.train.Saver(var_list=[v for v in variables if v not in missing])
        saver.restore(sess, checkpoint)
    except Exception as exc:
        raise UsageError(f"cannot restore {checkpoint}: {first_line(exc)} (corrupt, or written for "
                         f"another env or network shape)") from None
    return [v.op.name for v in missing]


def read_run_info(run_dir: str) -> dict:
    """The config.json of a run folder that a3c.py wrote."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{run_dir} is not a readable run folder ({exc}); pass a folder that "
                         f"a3c.py wrote, e.g. results/Pendulum-v1/<run>") from None


def read_run(run_dir: str) -> tuple[str, Config]:
    """(env id, config) of a run folder that a3c.py wrote."""
    saved = read_run_info(run_dir)
    try:
        cfg = config_module.from_dict(saved["config"])
        cfg.validate()  # a hand-edited value must be refused here, not crash the graph's build
        return saved["env"], cfg
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{run_dir} is not a readable run folder ({exc}); pass a folder that "
                         f"a3c.py wrote, e.g. results/Pendulum-v1/<run>") from None


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
        info = read_best_info(best_folder)
        if info is None or info["checkpoint"] != os.path.basename(path):
            return path, "the best checkpoint (its best.json describes another one)"
        return path, f"the best checkpoint ({describe_best(info)})"
    if os.path.isdir(which):  # a checkpoint folder, such as the summary's best/
        return latest_checkpoint(which), which
    if not os.path.exists(which + ".index"):
        raise UsageError(f"--checkpoint {which}: no such checkpoint; give best, latest or a "
                         f"checkpoint's path without its suffix, e.g. {folder}/model-12000")
    return which, which


def evaluate(run_dir: str, episodes: int = 10, render: bool = False, record: bool = False,
             out=None, checkpoint: str = "best") -> dict:
    """Run the deterministic policy (mean action / argmax) of a run's best checkpoint, or of
    the one that `checkpoint` names (latest, or a path)."""
    out = out or sys.stdout
    if render and record:  # a window's render mode gives no frames, a recording's no window
        raise UsageError("--render and --record do not go together: --render shows the "
                         "episodes in a window, --record writes episode.gif; choose one")
    env_id, cfg = read_run(run_dir)
    if render and is_atari(env_id):
        raise UsageError("Atari games cannot render in a window (ale-py's vector env keeps no "
                         "screen); use --record to write the agent's frames to episode.gif")
    if render and not display_available():  # pygame would crash the process, not raise
        raise UsageError("--render needs a display and none is set (DISPLAY or WAYLAND_DISPLAY); "
                         "use --record to write episode.gif instead")
    checkpoint, played = pick_checkpoint(run_dir, checkpoint)
    render_mode = "human" if render else ("rgb_array" if record else None)
    if render_mode == "rgb_array":
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # frames only: no window, no display
    env = make_envs(env_id, cfg, 1, greedy=True)
    spec = env_spec(env, env_id)
    if render_mode is not None and not is_atari(env_id):
        # an env made with a mode it lacks only warns, then draws nothing
        modes = env.envs[0].metadata.get("render_modes", [])
        env.close()
        if render_mode not in modes:
            raise UsageError(f"{env_id} cannot {'record' if record else 'render'}: it offers "
                             f"render modes {modes}, not {render_mode}")
        env = GymEnvs(env_id, cfg, 1, render_mode=render_mode)
    graph = tf.Graph()
    with graph.as_default():
        net = ACNet("global", spec, cfg)
        saver = v1.train.Saver(var_list=net.params)
    sess = open_session(graph, None)  # one thread plays the episodes: no pool to feed
    try:
        restore_checkpoint(sess, saver, checkpoint, net.params, env_id)
    except UsageError:
        sess.close()
        raise

    greedy = GreedyPlayer(sess, net, 1, spec.obs_dtype)
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
    print(f"{env_id}: deterministic policy of {played}, {checkpoint}: return "
          f"{result['mean']:.1f} ± {result['std']:.1f} over {episodes} episodes"
          + (f"; animation in {result['animation']}" if "animation" in result else ""),
          file=out, flush=True)
    return result


RECORD_FRAME_LIMIT = 5_000  # --record keeps an episode's first frames only (an Atari game can
                           # last 27,000 steps)


def run_greedy_episodes(env, greedy, episodes: int, record: bool,
                        first_seed: int = EVAL_SEED) -> tuple[list, list]:
    """Play `episodes` episodes with a GreedyPlayer in a batch of one env (GymEnvs or
    AtariEnvs), episode k from seed first_seed + k: their raw returns, and the first episode's
    frames when recording."""
    returns, frames = [], []
    for episode in range(episodes):
        obs = env.reset([first_seed + episode])
        greedy.start()
        total, done = 0.0, False
        while not done:
            if record and episode == 0 and len(frames) < RECORD_FRAME_LIMIT:
                frames.append(env.render())
            next_obs, rewards, terminated, truncated = env.step(greedy(obs))
            obs = np.asarray(next_obs)
            total += float(rewards[0])
            done = bool(terminated[0] or truncated[0])
        returns.append(total)
    return returns, frames


def save_animation(frames: list, path: str) -> str:
    from PIL import Image  # installed with matplotlib

    def image(frame):
        frame = np.asarray(frame)
        if frame.ndim == 2:  # an Atari agent's grayscale view (84 or 42 square), enlarged
            return Image.fromarray(frame).resize((frame.shape[1] * 3, frame.shape[0] * 3),
                                                 Image.NEAREST)
        # a GIF frame holds 256 colours: PIL's default reduction (median cut) took 26 ms a
        # CartPole frame here, fast octree 6.5 (a 500-step episode: 13 s against 3 s;
        # results/overheads.md)
        return Image.fromarray(frame).quantize(method=Image.Quantize.FASTOCTREE)

    images = [image(frame) for frame in frames]
    partial = path + ".partial"  # an interrupted save never leaves half a GIF under the name
    images[0].save(partial, format="GIF", save_all=True, append_images=images[1:], duration=33,
                   loop=0)
    os.replace(partial, path)
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
        try:
            plt.show()
        except KeyboardInterrupt:  # Ctrl-C closes the window; everything was saved before it
            pass
    plt.close(fig)
    return path


def read_episodes(path: str) -> dict:
    """episodes.csv as a dict of NumPy columns (with a process column if it has one)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        names = EPISODE_COLUMNS + ([PROCESS_COLUMN] if PROCESS_COLUMN in (reader.fieldnames or ())
                                   else [])
    return {name: np.array([float(row[name]) for row in rows]) for name in names}


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
                        "policy of RUN_DIR's best checkpoint (see --checkpoint) and print its "
                        "mean return")
    parser.add_argument("--episodes", type=int, default=10, help="episodes for --eval (default 10)")
    parser.add_argument("--checkpoint", help="--eval: best (the default: the run's best agent), "
                        "latest, or a checkpoint's path")
    parser.add_argument("--render", action="store_true", help="--eval: show the environment's window")
    parser.add_argument("--record", action="store_true", help="--eval: write the first episode "
                        "as episode.gif into RUN_DIR")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of config.py, e.g. --set actor_lr=3e-4 (repeatable)")
    parser.add_argument("--sync", dest="sync_updates", action="store_const", const=True,
                        help="A2C: every worker's rollout goes into one update, then all pull "
                        "the same parameters (config: sync_updates, with config.py's SYNC_PRESETS)")
    parser.add_argument("--cluster", metavar="local:N|FILE", help="train on TensorFlow's distributed "
                        "runtime: local:N starts 1 ps and N worker processes (of --workers threads "
                        "each) on this machine's loopback; FILE is a cluster dict "
                        '{"ps": ["host:port"], "worker": ["host:port", ...]} used with --job and '
                        "--task, one command per process (worker task 0 is the chief: it writes the "
                        "run folder). No authentication, no encryption: a trusted network only")
    parser.add_argument("--job", choices=cluster_module.JOBS, help="with a cluster FILE: this "
                        "process's job")
    parser.add_argument("--task", type=int, help="with a cluster FILE: this process's index in "
                        "its job's list")
    return parser.parse_args(argv)


RESUMABLE_FIELDS = ("max_episodes", "max_steps", "log_every_s", "checkpoint_every_s",
                    "best_checkpoint_every_s", "best_trial_episodes", "best_trial_cpu_share",
                    "keep_checkpoints", "pin_threads", "anneal_lr", "atari_threads")
# the config field each shortcut flag sets: --max-steps N is --set max_steps=N
FLAG_FIELDS = {"workers": "--workers", "max_episodes": "--max-episodes",
               "max_steps": "--max-steps", "seed": "--seed", "sync_updates": "--sync"}


def overrides_from_args(args) -> dict:
    """The config fields the command line sets. A flag is a shortcut for --set of its field, with
    the same meaning (0 for a budget: no limit); a field set twice is refused."""
    flags = {field: flag if getattr(args, field) is True else f"{flag} {getattr(args, field)}"
             for field, flag in FLAG_FIELDS.items() if getattr(args, field) is not None}
    for field in flags:
        if getattr(args, field) < 0 and field in config_module.NO_LIMIT_FIELDS:
            raise UsageError(f"{flags[field]}: must be >= 0 (0: no limit)")
    try:
        overrides = config_module.parse_overrides(args.set)
        twice = sorted(set(overrides) & set(flags))
        if twice:
            raise ValueError(f"{twice[0]} is set twice ({flags[twice[0]]} and --set "
                             f"{twice[0]}=...); set it once")
        overrides.update(config_module.parse_overrides(
            [f"{field}={getattr(args, field)}" for field in flags]))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return overrides


def cluster_role(args):
    """None (one process), N of --cluster local:N, or this process's cluster.Cluster."""
    if args.cluster is None:
        if args.job is not None or args.task is not None:
            raise UsageError("--job and --task place this process in a cluster: they go with "
                             "--cluster FILE")
        return None
    count = cluster_module.parse_local(args.cluster)
    if count is not None:
        if args.job is not None or args.task is not None:
            raise UsageError("--cluster local:N starts every process itself; --job and "
                             "--task go with a cluster file")
        return count
    return cluster_module.cluster_for(args.cluster, args.job, args.task)


def describe_shape(shape: typing.Optional[dict]) -> str:
    if shape is None:
        return "in one process (no --cluster)"
    return f"on {shape['ps']} ps and {shape['worker']} worker processes"


def resume_config(args, cluster_shape: dict = None) -> tuple[str, Config]:
    """The (env id, config) to continue args.resume's run with: its own config, with only the
    fields that cannot change what was learned taken from the command line. A cluster run goes
    on with a cluster of the same shape, and a one-process run in one process."""
    env_id, saved = read_run(args.resume)
    trained_on = read_run_info(args.resume).get("cluster")
    if trained_on != cluster_shape:
        raise UsageError(f"{args.resume} was trained {describe_shape(trained_on)}; resume it "
                         f"the same way (it is being resumed {describe_shape(cluster_shape)})")
    if args.env != DEFAULT_ENV or args.workers is not None or args.seed is not None:
        raise UsageError("--resume continues a run with its own --env, --workers and --seed; "
                         "start a new run to change them")
    overrides = overrides_from_args(args)
    fixed = sorted(set(overrides) - set(RESUMABLE_FIELDS))
    if fixed:
        raise UsageError(f"--resume cannot change {', '.join(fixed)}; only "
                         f"{', '.join(RESUMABLE_FIELDS)} (start a new run to change the others)")
    return env_id, checked(dataclasses.replace(saved, **overrides))


def config_from_args(args) -> Config:
    """The env's preset with the command line's fields on top."""
    overrides = overrides_from_args(args)
    preset = config_module.config_for(args.env, sync=overrides.get("sync_updates", False))
    return checked(dataclasses.replace(preset, **overrides))


def checked(cfg: Config) -> Config:
    try:
        cfg.validate()
    except ValueError as exc:
        raise UsageError(f"bad config: {exc}") from None
    return cfg


def stop_like_ctrl_c(signum, frame):
    raise KeyboardInterrupt


def stop_like_ctrl_c_or_exit(signum, frame):
    """A cluster process: a stop as Ctrl-C, and an exit all the same if that stop has not
    ended the process within cluster.STOP_GRACE_S (a call to a vanished ps can wait forever)."""
    timer = threading.Timer(cluster_module.STOP_GRACE_S, os._exit, (130,))
    timer.daemon = True
    timer.start()
    raise KeyboardInterrupt


def main(argv=None, command_line: bool = False) -> int:
    """command_line: the process is `python a3c.py ...` itself (local:N may then replace it by
    the launcher)."""
    args = parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # `kill`, and a closed terminal or dropped ssh session, stop as cleanly as Ctrl-C; a
        # signal the caller ignores (`nohup` ignores SIGHUP) stays ignored
        for name in ("SIGTERM", "SIGHUP"):
            number = getattr(signal, name, None)
            if number is not None and signal.getsignal(number) is not signal.SIG_IGN:
                signal.signal(number, stop_like_ctrl_c if args.cluster is None
                              else stop_like_ctrl_c_or_exit)
    try:
        if args.eval is not None:
            if args.cluster is not None or args.job is not None or args.task is not None:
                raise UsageError("--eval plays a run's checkpoint in this process, whatever "
                                 "trained it; drop --cluster, --job and --task")
            if args.episodes < 1:
                raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
            try:
                evaluate(args.eval, args.episodes, args.render, args.record,
                         checkpoint=args.checkpoint or "best")
            except KeyboardInterrupt:
                raise Interrupted("interrupted: evaluation stopped; nothing was written") from None
            return 0
        if args.checkpoint is not None:
            raise UsageError("--checkpoint picks what --eval plays; --resume always continues "
                             "from the latest checkpoint")
        cluster = cluster_role(args)
        if cluster is not None and not isinstance(cluster, int) and not cluster.is_chief:
            if cluster.job == "ps":
                return cluster_module.run_ps(tf, cluster, lambda text: tell(sys.stdout, text))
            return train_as_worker(cluster, args.workers,
                                   None if args.env == DEFAULT_ENV else args.env)
        shape = None if cluster is None else (
            {"ps": 1, "worker": cluster} if isinstance(cluster, int) else cluster.shape)
        if args.resume is not None:
            env_id, cfg = resume_config(args, shape)
        else:
            env_id, cfg = args.env, config_from_args(args)
            if isinstance(cluster, int):
                probe_spec(env_id, cfg)  # a bad env fails here, before any process starts
        if isinstance(cluster, int):
            if args.resume is not None:  # a run that cannot go on: refused before any process starts
                checkpoint = latest_checkpoint(os.path.join(args.resume, CHECKPOINT_FOLDER))
                try:
                    steps = int(v1.train.load_variable(checkpoint, ENV_STEPS_VARIABLE))
                except (tf.errors.OpError, ValueError) as exc:
                    raise UsageError(f"cannot read {checkpoint} ({first_line(exc)}); resume from "
                                     f"a run folder whose checkpoints are whole") from None
                resume_point(args.resume, cfg, read_run_info(args.resume), steps)
            if command_line:  # the launcher needs no TensorFlow, so drop it
                cluster_module.become_launcher(os.path.abspath(__file__), sys.argv[1:], cluster,
                                               cfg.sync_updates)
            return cluster_module.launch_local(os.path.abspath(__file__),
                                               list(sys.argv[1:] if argv is None else argv),
                                               cluster, lambda text: tell(sys.stderr, text),
                                               sync=cfg.sync_updates)
        if args.resume is not None:
            summary = train(env_id, cfg, show_plot=not args.no_plot, resume_dir=args.resume,
                            cluster=cluster)
        else:
            summary = train(env_id, cfg, args.results_dir, show_plot=not args.no_plot,
                            cluster=cluster)
    except (UsageError, cluster_module.ClusterError) as exc:  # the input, cluster files too
        tell(sys.stderr, f"a3c.py: error: {exc}")
        return 2
    except WorkerError as exc:
        tell(sys.stderr, f"a3c.py: error: training stopped: {exc}")
        return 1
    except OSError as exc:  # the disk, not the input: a full disk, a folder that went away
        tell(sys.stderr, f"a3c.py: error: {exc}")
        return 1
    except Interrupted as exc:  # a Ctrl-C that training could not turn into a clean stop
        tell(sys.stderr, f"a3c.py: {exc}")
        return 130
    except KeyboardInterrupt:
        tell(sys.stderr, "a3c.py: interrupted")
        return 130
    return 130 if summary["interrupted"] else 0


def leave(code: int) -> int:
    """Exit with code; straight away, skipping Python's shutdown, while a worker thread is still
    inside TensorFlow (a second Ctrl-C stopped at once): finalising the interpreter under a
    running session call aborts the process (SIGABRT) instead of exiting with the code."""
    if cluster_module.Resends.count:
        tell(sys.stderr, f"a3c.py: note: the ps refused this process's calls as repeats of earlier "
                         f"ones {cluster_module.Resends.count} times, a TensorFlow defect "
                         f"(REPEATED_REQUEST in cluster.py); each time the call was sent again")
    if any(thread.daemon and thread.is_alive() for thread in threading.enumerate()):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(leave(main(command_line=True)))
