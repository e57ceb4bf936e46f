"""The pieces ACNet is built from: layers from get_variable + matmul / conv2d (tf.compat.v1.layers
left with Keras 3), the policies (Gaussian, softmax), the CNN trunks and the LSTM, and the RMSProp
optimisers with --sync's mean-gradient update."""
from __future__ import annotations

import math

import numpy as np

from config import Config
from environments import EnvSpec
from sessions import tf, v1


def dense(x, size, name, activation=None, gain=np.sqrt(2), bias=0.0):
    """A fully connected layer from get_variable + matmul (tf.compat.v1.layers left with Keras 3)."""
    w = v1.get_variable(f"{name}/w", [x.shape[-1], size], initializer=v1.orthogonal_initializer(gain))
    b = v1.get_variable(f"{name}/b", [size], initializer=v1.constant_initializer(bias))
    y = tf.nn.bias_add(tf.matmul(x, w), b)  # its gradient is one op; a broadcasting add's is seven
    return activation(y) if activation is not None else y


def scaled_observations(obs, spec: EnvSpec, cfg: Config):
    """With scale_obs, every observation dimension with finite bounds mapped from [low, high] to
    [-1, 1] (the others pass as they are): done in the graph, so it costs the hot loop nothing."""
    finite = spec.scalable_obs
    if not cfg.scale_obs or not finite.any():
        return obs
    # the others pass as they are
    low, high = np.where(finite, spec.obs_low, -1.0), np.where(finite, spec.obs_high, 1.0)
    centre = ((high + low) / 2).astype(np.float32)
    inverse_half_range = (2 / (high - low)).astype(np.float32)
    return (obs - centre) * inverse_half_range


def normalised_observations(obs, cfg: Config):
    """normalize_obs: (obs - mean) / sqrt(variance + 1e-8), clipped to +-obs_clip. The statistics
    are the count, sum and sum of squares of the observations the net has been trained on,
    float64 variables of the current variable scope's obs_norm/ (made on first use, then
    reused): sums, not a running mean, so that workers can add theirs at any moment with
    assign_add (observation_statistics_update). Before two observations: obs as they are."""
    dims = obs.shape[-1]
    with v1.variable_scope("obs_norm", reuse=v1.AUTO_REUSE):
        count = v1.get_variable("count", [], tf.float64, v1.zeros_initializer(), trainable=False)
        total, squares = (v1.get_variable(name, [dims], tf.float64, v1.zeros_initializer(),
                                          trainable=False) for name in ("sum", "sum_squares"))
    seen = tf.maximum(count, 1.0)
    mean = total / seen
    variance = tf.where(count >= 2, tf.maximum(squares / seen - tf.square(mean), 0.0),
                        tf.ones_like(mean))
    mean, scale = tf.cast(mean, tf.float32), tf.cast(tf.math.rsqrt(variance + 1e-8), tf.float32)
    return tf.clip_by_value((obs - mean) * scale, -cfg.obs_clip, cfg.obs_clip)


def observation_statistics_update(statistics: list, obs):
    """The op that adds a batch of observations [N, dims] to a net's statistics ([count, sum,
    sum_squares], as normalised_observations makes them)."""
    count, total, squares = statistics
    obs = tf.cast(obs, tf.float64)
    return tf.group(count.assign_add(tf.cast(tf.shape(obs)[0], tf.float64)),
                    total.assign_add(tf.reduce_sum(obs, 0)),
                    squares.assign_add(tf.reduce_sum(tf.square(obs), 0)))


HIDDEN_ACTIVATION_OPS = {"relu": tf.nn.relu, "tanh": tf.nn.tanh}  # config.HIDDEN_ACTIVATIONS' ops


def mlp(x, sizes, name, cfg: Config):
    for i, size in enumerate(sizes):
        x = dense(x, size, f"{name}/h{i}", HIDDEN_ACTIVATION_OPS[cfg.hidden_activation])
    return x


class GaussianPolicy:
    """Any flat Box action space: a diagonal Gaussian whose mean lies inside [low, high].

    mean  = (low + high) / 2 + (high - low) / 2 * tanh(u)
    sigma = (softplus(v) + sigma_floor) * (high - low) / 2, v from the state or a free parameter,
            times final_sigma_scale + (1 - final_sigma_scale) * schedule where one is fed (a
            worker's net, --eval --stochastic)
    With use_sde (gSDE, Raffin et al. 2021) the noise of action a is instead sum_f z_f W_fa
    eps_fa (+ sigma_floor's own), z the features scaled to unit length, W = softplus(w), eps a
    matrix each env draws once a rollout and feeds as noise_in: in the states one rollout visits
    the perturbation changes smoothly, and sigma_a = sqrt(sum_f z_f^2 W_fa^2 + sigma_floor^2),
    the same half-range scale and schedule. noise_in defaults to zeros (a net that never samples).
    The raw sample is what the log-probability is taken of; the env gets it clipped to the bounds.
    """

    def __init__(self, features, spec: EnvSpec, cfg: Config, schedule=None):
        half_range = (spec.action_high - spec.action_low) / 2
        centre = (spec.action_high + spec.action_low) / 2
        u = dense(features, spec.n_actions, "mean", gain=0.01)
        v_init = np.log(np.expm1(cfg.initial_sigma - cfg.sigma_floor))  # softplus(v_init) + floor
        self.mean = centre + half_range * tf.tanh(u)
        # final_sigma_scale: sigma narrows with the learning rate's fraction; a rollout's actions
        # are drawn, and their log-probs taken, with the fraction of the push before it
        self.uses_schedule = schedule is not None and cfg.final_sigma_scale != 1.0 and cfg.anneal_lr
        narrowing = (cfg.final_sigma_scale + (1.0 - cfg.final_sigma_scale) * schedule
                     if self.uses_schedule else 1.0)
        self.noise_in = None
        if cfg.use_sde:
            n_features = int(features.shape[-1])
            unit = tf.stop_gradient(tf.math.l2_normalize(features, axis=1))  # (gSDE: features fixed)
            # every W_fa starts at initial_sigma - floor: sigma_a at sqrt((initial - floor)^2 + floor^2)
            weights = tf.nn.softplus(v1.get_variable(
                "sigma/w", [n_features, spec.n_actions], initializer=v1.constant_initializer(v_init)))
            self.noise_in = v1.placeholder_with_default(
                np.zeros((1, n_features, spec.n_actions), np.float32),
                [None, n_features, spec.n_actions], "sde_noise")
            unit_sigma = tf.sqrt(tf.matmul(tf.square(unit), tf.square(weights)) + cfg.sigma_floor ** 2)
            noise = (tf.reduce_sum(unit[:, :, None] * weights * self.noise_in, axis=1)
                     + cfg.sigma_floor * tf.random.normal(tf.shape(self.mean)))
        else:
            if cfg.sigma_from_state:
                v = dense(features, spec.n_actions, "sigma", gain=0.01, bias=v_init)
            else:  # one learned sigma per action dimension, shared by all states
                v = v1.get_variable("sigma/v", [spec.n_actions], initializer=v1.constant_initializer(v_init))
                v = v + tf.zeros_like(u)
            unit_sigma = tf.nn.softplus(v) + cfg.sigma_floor
            noise = unit_sigma * tf.random.normal(tf.shape(self.mean))
        self.sigma = unit_sigma * half_range * narrowing
        self.sample = self.mean + noise * half_range * narrowing
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
        self.noise_in = None  # (use_sde is for continuous actions)
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
    # channels last (TensorFlow's CPU conv2d has no NCHW kernel), moved while still bytes: a
    # third of the float transpose's cost (docs/implementation.md)
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
    critic MLPs as they are, or scaled (scale_obs) and normalised (normalize_obs)."""
    if spec.image:
        with v1.variable_scope("trunk", reuse=v1.AUTO_REUSE):
            return cnn_trunk(obs, cfg)
    obs = scaled_observations(obs, spec, cfg)
    if cfg.normalize_obs:
        obs = normalised_observations(obs, cfg)
    if cfg.use_lstm and cfg.lstm_input_hidden:  # the LSTM's input layers, in the shared trunk
        with v1.variable_scope("trunk", reuse=v1.AUTO_REUSE):
            return mlp(obs, cfg.lstm_input_hidden, "mlp", cfg)
    return obs


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


def optimizer_groups(net, spec: EnvSpec, cfg: Config) -> list:
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
