"""The pieces of the A3C graph against hand-computed and closed-form values."""
import dataclasses
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import a3c
import checkpoints
import environments
import networks
import sessions
import config as config_module
import cpus
from config import Config
from graphs import build_session

v1 = tf.compat.v1


def evaluate(tensor_fn):
    with tf.Graph().as_default():
        out = tensor_fn()
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            return sess.run(out)


def returns_of(rewards, next_values, terminated, ended, gamma):
    as_tensor = lambda a: tf.constant(np.asarray(a, np.float32))  # noqa: E731
    return evaluate(lambda: a3c.n_step_returns(as_tensor(rewards), as_tensor(next_values),
                                               as_tensor(terminated), as_tensor(ended), gamma))


def column(values):
    return [[v] for v in values]


def test_n_step_returns_bootstrap_from_the_last_value_when_nothing_ends():
    got = returns_of(column([1, 2, 3]), column([10, 20, 30]), column([0, 0, 0]), column([0, 0, 0]), 0.5)
    # R2 = 3 + .5*30 = 18; R1 = 2 + .5*18 = 11; R0 = 1 + .5*11 = 6.5
    np.testing.assert_allclose(got[:, 0], [6.5, 11.0, 18.0], rtol=1e-6)


def test_n_step_returns_use_zero_after_a_real_termination():
    # the episode terminates at step 1; step 2 belongs to the next episode
    got = returns_of(column([1, 2, 3]), column([10, 20, 30]), column([0, 1, 0]), column([0, 1, 0]), 0.5)
    # R2 = 3 + .5*30 = 18; R1 = 2 (terminal: nothing after it); R0 = 1 + .5*2 = 2
    np.testing.assert_allclose(got[:, 0], [2.0, 2.0, 18.0], rtol=1e-6)


def test_n_step_returns_bootstrap_from_the_cut_state_at_a_time_limit():
    # truncated at step 1: bootstrap from V(final obs of step 1) = 20, not from the next episode
    got = returns_of(column([1, 2, 3]), column([10, 20, 30]), column([0, 0, 0]), column([0, 1, 0]), 0.5)
    # R2 = 18; R1 = 2 + .5*20 = 12; R0 = 1 + .5*12 = 7
    np.testing.assert_allclose(got[:, 0], [7.0, 12.0, 18.0], rtol=1e-6)


def test_n_step_returns_keep_environments_apart():
    rewards = [[1, 1], [1, 1]]
    next_values = [[4, 8], [2, 6]]
    terminated = [[0, 1], [0, 0]]
    ended = [[0, 1], [1, 0]]
    got = returns_of(rewards, next_values, terminated, ended, 0.9)
    # env 0: truncated at the last step -> R1 = 1 + .9*2 = 2.8, R0 = 1 + .9*2.8 = 3.52
    # env 1: terminated at step 0 -> R0 = 1; R1 = 1 + .9*6 = 6.4
    np.testing.assert_allclose(got, [[3.52, 1.0], [2.8, 6.4]], rtol=1e-6)


@pytest.mark.parametrize("steps", [5, a3c.UNROLLED_STEPS + 1])
def test_n_step_returns_match_a_plain_loop_unrolled_or_looped(steps):
    rng = np.random.default_rng(steps)
    rewards, next_values = rng.normal(size=(steps, 3)), rng.normal(size=(steps, 3))
    ended = (rng.random((steps, 3)) < 0.2).astype(np.float32)
    terminated = ended * (rng.random((steps, 3)) < 0.5)
    expected, following = np.zeros((steps, 3)), next_values[-1]
    for t in reversed(range(steps)):
        bootstrap = np.where(ended[t] > 0, next_values[t], following)
        expected[t] = following = rewards[t] + 0.9 * (1 - terminated[t]) * bootstrap
    np.testing.assert_allclose(returns_of(rewards, next_values, terminated, ended, 0.9), expected,
                               rtol=1e-5, atol=1e-5)


def box_spec(low, high, obs_dim=4):
    low, high = np.array(low, np.float32), np.array(high, np.float32)
    return environments.EnvSpec("test", obs_dim, False, len(low), low, high)


def discrete_spec(n, obs_dim=4):
    return environments.EnvSpec("test", obs_dim, True, n, None, None)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_both_mlps_use_the_configured_hidden_activation_in_every_layer(activation):
    cfg = Config(workers=1, actor_hidden=(8, 8), critic_hidden=(8,), hidden_activation=activation)
    sess, _, _ = build_session(discrete_spec(2), cfg)
    ops = [op.type for op in sess.graph.get_operations() if op.name.startswith("global/")]
    assert ops.count({"relu": "Relu", "tanh": "Tanh"}[activation]) == 3, "two actor layers, one critic"
    assert ops.count({"relu": "Tanh", "tanh": "Relu"}[activation]) == 0
    sess.close()


def test_a_run_saved_before_hidden_activation_existed_is_read_as_the_relu_net_it_trained(tmp_path):
    saved = dataclasses.asdict(config_module.config_for("CartPole-v1"))
    assert saved.pop("hidden_activation") == "tanh", "today's preset"
    (tmp_path / "config.json").write_text(json.dumps({"env": "CartPole-v1", "config": saved}))
    env_id, cfg = checkpoints.read_run(str(tmp_path))  # what --resume and --eval read
    assert (env_id, cfg.hidden_activation) == ("CartPole-v1", "relu")
    saved["hidden_activation"] = "tanh"
    (tmp_path / "config.json").write_text(json.dumps({"env": "CartPole-v1", "config": saved}))
    assert checkpoints.read_run(str(tmp_path))[1].hidden_activation == "tanh"


def test_every_hidden_activation_the_config_accepts_has_an_op():
    assert set(networks.HIDDEN_ACTIVATION_OPS) == set(config_module.HIDDEN_ACTIVATIONS)


def test_gaussian_log_prob_and_entropy_match_closed_form():
    spec = box_spec([-1.0, 0.0, 5.0], [2.0, 0.5, 10.0])
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(6, 4)).astype(np.float32)
    actions = rng.uniform(-1, 10, size=(6, 3)).astype(np.float32)

    def build():
        x = tf.constant(obs)
        policy = networks.build_actor(x, spec, Config())
        return policy.mean, policy.sigma, policy.log_prob(tf.constant(actions)), policy.entropy

    mean, sigma, log_prob, entropy = evaluate(build)
    expected_log_prob = np.sum(-0.5 * ((actions - mean) / sigma) ** 2 - np.log(sigma)
                               - 0.5 * np.log(2 * np.pi), axis=1)
    expected_entropy = np.sum(0.5 * np.log(2 * np.pi * np.e * sigma ** 2), axis=1)
    np.testing.assert_allclose(log_prob, expected_log_prob, rtol=1e-5)
    np.testing.assert_allclose(entropy, expected_entropy, rtol=1e-5)
    assert np.all(mean > spec.action_low) and np.all(mean < spec.action_high)
    assert np.all(sigma >= Config().sigma_floor * (spec.action_high - spec.action_low) / 2)


def test_softmax_log_prob_and_entropy_match_closed_form():
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(5, 4)).astype(np.float32) * 50  # large inputs: far from uniform
    actions = rng.integers(0, 3, size=5).astype(np.int32)

    def build():
        policy = networks.build_actor(tf.constant(obs), discrete_spec(3), Config(actor_hidden=(16,)))
        return policy.logits, policy.log_prob(tf.constant(actions)), policy.entropy

    logits, log_prob, entropy = evaluate(build)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(log_prob, np.log(p[np.arange(5), actions]), rtol=1e-5)
    np.testing.assert_allclose(entropy, -np.sum(p * np.log(p), axis=1), rtol=1e-5)


def test_sampled_actions_stay_within_asymmetric_multidimensional_bounds():
    spec = box_spec([-1.0, 0.0, 5.0], [2.0, 0.5, 10.0])
    obs = np.random.default_rng(2).normal(size=(5000, 4)).astype(np.float32) * 100

    def build():
        # a wide sigma floor, so that most raw samples fall outside the bounds
        policy = networks.build_actor(tf.constant(obs), spec, Config(sigma_floor=2.0, initial_sigma=3.0))
        return policy.sample, policy.env_action, policy.greedy_action

    sample, env_action, greedy = evaluate(build)
    assert np.mean((sample < spec.action_low) | (sample > spec.action_high)) > 0.2
    for actions in (env_action, greedy):
        assert actions.shape == (5000, 3)
        assert np.all(actions >= spec.action_low) and np.all(actions <= spec.action_high)
    # the clip only touches samples outside the box
    inside = np.all((sample >= spec.action_low) & (sample <= spec.action_high), axis=1)
    np.testing.assert_array_equal(env_action[inside], sample[inside])


def rollout_feed(net, spec, cfg, rng):
    T, E = cfg.n_steps, cfg.envs_per_worker
    if spec.discrete:
        actions = rng.integers(0, spec.n_actions, size=T * E).astype(np.int32)
    else:
        actions = rng.uniform(spec.action_low, spec.action_high, (T * E, spec.n_actions)).astype(np.float32)
    return {net.obs: rng.normal(size=(T * E, spec.obs_dim)).astype(np.float32),
            net.actions: actions,
            net.next_obs: rng.normal(size=(T * E, spec.obs_dim)).astype(np.float32),
            net.rewards: rng.normal(size=(T, E)).astype(np.float32),
            net.terminated: np.zeros((T, E), np.float32),
            net.ended: np.zeros((T, E), np.float32)}


@pytest.mark.parametrize("spec, sigma_from_state", [
    (box_spec([-2.0], [2.0]), False), (box_spec([-2.0], [2.0]), True), (discrete_spec(3), False)],
    ids=["box", "box-sigma-from-state", "discrete"])
def test_push_changes_the_global_net_and_pull_makes_local_equal_global(spec, sigma_from_state):
    cfg = Config(workers=2, envs_per_worker=2, n_steps=3, actor_hidden=(8,), critic_hidden=(8,),
                 sigma_from_state=sigma_from_state)
    sess, global_net, workers = build_session(spec, cfg)
    global_params = global_net.actor_params + global_net.critic_params
    worker = workers[0]
    local_params = worker.actor_params + worker.critic_params
    other_params = workers[1].actor_params + workers[1].critic_params

    sigma_layer = [v for v in global_params if "/sigma/" in v.name]
    if not spec.discrete:
        assert [v.op.name.rsplit("/", 1)[1] for v in sigma_layer] == (
            ["w", "b"] if sigma_from_state else ["v"])
    before = sess.run(global_params)
    sess.run(worker.push, rollout_feed(worker, spec, cfg, np.random.default_rng(3)))
    after = sess.run(global_params)
    unmoved = [v.name for v, b, a in zip(global_params, before, after) if np.array_equal(b, a)]
    assert not unmoved, "every global variable moves"
    assert not all(np.allclose(l, g) for l, g in zip(sess.run(local_params), after))

    sess.run(worker.pull)
    for local, glob in zip(sess.run(local_params), sess.run(global_params)):
        np.testing.assert_array_equal(local, glob)

    # the fused push-and-pull leaves this worker equal to the global net it just updated
    sess.run(workers[1].pull)
    sess.run(worker.push_and_pull, rollout_feed(worker, spec, cfg, np.random.default_rng(4)))
    newest = sess.run(global_params)
    for local, glob in zip(sess.run(local_params), newest):
        np.testing.assert_array_equal(local, glob)
    assert not all(np.allclose(o, g) for o, g in zip(sess.run(other_params), newest))
    sess.close()


def test_the_update_chooses_the_next_actions_with_the_parameters_it_just_pulled():
    spec = discrete_spec(3)
    cfg = Config(workers=1, envs_per_worker=16, n_steps=2, actor_hidden=(8,), critic_hidden=(8,))
    sess, global_net, (worker,) = build_session(spec, cfg)
    sess.run(worker.pull)
    # the global policy now all but always picks action 2; this worker's copy still picks any
    logits_bias = next(v for v in global_net.actor_params if v.op.name.endswith("logits/b"))
    sess.run(logits_bias.assign([-50.0, -50.0, 50.0]))
    current_obs = np.random.default_rng(5).normal(size=(16, spec.obs_dim)).astype(np.float32)
    before = sess.run(worker.policy.sample, {worker.obs: current_obs})
    assert len(set(before.tolist())) > 1

    feed = rollout_feed(worker, spec, cfg, np.random.default_rng(6))
    feed[worker.current_obs] = current_obs
    chosen = sess.run(worker.policy_after_pull.sample, feed)
    np.testing.assert_array_equal(chosen, np.full(16, 2))
    sess.close()


def test_gradients_are_clipped_to_the_configured_global_norm():
    spec = discrete_spec(2)
    cfg = Config(workers=1, n_steps=4, clip_norm=1e-3, actor_hidden=(8,), critic_hidden=(8,))
    sess, global_net, (worker,) = build_session(spec, cfg)
    feed = rollout_feed(worker, spec, cfg, np.random.default_rng(5))
    feed[worker.rewards] = feed[worker.rewards] * 1000  # huge advantages: huge raw gradients
    with sess.graph.as_default():
        clipped = [tf.linalg.global_norm(worker.actor_grads), tf.linalg.global_norm(worker.critic_grads)]
    raw_norm, (actor_norm, critic_norm) = sess.run([worker.grad_norm, clipped], feed)
    assert raw_norm > 1.0, "the reported norm is the one before clipping"
    assert actor_norm == pytest.approx(1e-3, rel=1e-3)
    assert critic_norm == pytest.approx(1e-3, rel=1e-3)
    sess.close()


def test_learning_rates_are_divided_by_sqrt_workers_when_asked():
    cfg = Config(workers=4, actor_lr=0.1, critic_lr=0.2, scale_lr_with_workers=True)
    assert networks.learning_rates(cfg) == pytest.approx((0.05, 0.1))
    assert networks.learning_rates(dataclasses.replace(cfg, scale_lr_with_workers=False)) == (0.1, 0.2)


@pytest.mark.parametrize("scale_with_workers, lr_fraction", [(False, 1.0), (True, 0.25)],
                         ids=["base-rate", "scaled-and-annealed"])
def test_a_push_moves_the_global_net_by_the_learning_rate_in_force(scale_with_workers, lr_fraction):
    # TF1's RMSProp starts its mean square at 1, so the first step of a weight with clipped
    # gradient g is exactly lr * g / sqrt(decay + (1 - decay) g^2 + epsilon)
    spec = discrete_spec(3)
    cfg = Config(workers=4, n_steps=3, envs_per_worker=2, actor_lr=0.02, critic_lr=0.05,
                 scale_lr_with_workers=scale_with_workers, actor_hidden=(8,), critic_hidden=(8,))
    sess, global_net, workers = build_session(spec, cfg)
    worker = workers[0]
    sess.run(worker.pull)
    feed = rollout_feed(worker, spec, cfg, np.random.default_rng(7))
    actor_grads, critic_grads = sess.run([worker.actor_grads, worker.critic_grads], feed)
    params = global_net.actor_params + global_net.critic_params
    before = sess.run(params)
    sess.run(worker.push, {**feed, worker.lr_fraction: lr_fraction})
    after = sess.run(params)
    actor_lr, critic_lr = networks.learning_rates(cfg)
    rates = [actor_lr] * len(actor_grads) + [critic_lr] * len(critic_grads)
    largest = 0.0
    for b, a, g, lr in zip(before, after, actor_grads + critic_grads, rates):
        step = lr * lr_fraction * g / np.sqrt(cfg.rmsprop_decay + (1 - cfg.rmsprop_decay) * g ** 2
                                              + cfg.rmsprop_epsilon)
        rounding = 1e-6 * np.abs(b)  # b - a of float32 weights loses digits as the step shrinks
        assert np.all(np.abs((b - a) - step) <= 2e-3 * np.abs(step) + rounding + 1e-9)
        largest = max(largest, np.abs(step).max())
    assert largest > 1e-4 * lr_fraction  # steps large enough for the rounding to matter little
    sess.close()


def test_softmax_env_actions_start_where_the_action_space_starts():
    spec = environments.EnvSpec("test", 4, True, 3, None, None, action_start=-1)
    obs = np.random.default_rng(8).normal(size=(2000, 4)).astype(np.float32) * 50

    def build():
        policy = networks.build_actor(tf.constant(obs), spec, Config(actor_hidden=(16,)))
        return policy.sample, policy.env_action, policy.greedy_action, policy.logits

    sample, env_action, greedy, logits = evaluate(build)
    assert set(sample.tolist()) == {0, 1, 2}, "the policy's own index: what log-probs are of"
    np.testing.assert_array_equal(env_action, sample - 1)
    np.testing.assert_array_equal(greedy, np.argmax(logits, axis=1) - 1)


def test_a_state_dependent_sigma_depends_on_the_state():
    spec = box_spec([-2.0], [2.0])
    obs = np.random.default_rng(9).normal(size=(50, 4)).astype(np.float32) * 100

    def build():
        state = networks.build_actor(tf.constant(obs), spec, Config(sigma_from_state=True))
        with v1.variable_scope("shared"):
            shared = networks.build_actor(tf.constant(obs), spec, Config(sigma_from_state=False))
        return state.sigma, shared.sigma

    state_sigma, shared_sigma = evaluate(build)
    assert np.ptp(state_sigma) > 1e-3
    assert np.ptp(shared_sigma) == 0
    np.testing.assert_allclose(np.median(state_sigma), 0.7 * 2, rtol=0.2)  # initial_sigma x half range


def test_sde_noise_spreads_by_its_sigma_which_depends_on_the_state_and_log_prob_is_its_gaussians():
    spec = box_spec([-2.0, 0.0], [2.0, 1.0])
    rng = np.random.default_rng(4)
    draws = 4000
    features = np.repeat(np.abs(rng.normal(size=(1, 16))).astype(np.float32), draws, axis=0)
    other = np.abs(rng.normal(size=(draws, 16))).astype(np.float32)  # other states

    def build():
        x = v1.placeholder(tf.float32, [None, 16])
        policy = networks.GaussianPolicy(x, spec, Config(use_sde=True))
        weights = v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, "sigma/w")[0]
        spread = weights.assign(rng.normal(size=(16, 2)).astype(np.float32))  # W differs by entry
        return x, policy, spread

    graph = tf.Graph()
    with graph.as_default():
        x, policy, spread = build()
        actions = v1.placeholder(tf.float32, [None, 2])
        log_prob = policy.log_prob(actions)
        sess = v1.Session(graph=graph)
        sess.run(v1.global_variables_initializer())
    sess.run(spread)
    noise = rng.normal(size=(draws, 16, 2)).astype(np.float32)
    sample, mean, sigma = sess.run([policy.sample, policy.mean, policy.sigma],
                                   {x: features, policy.noise_in: noise})
    np.testing.assert_allclose(np.std(sample - mean, axis=0), sigma[0], rtol=0.06)
    assert np.ptp(sess.run(policy.sigma, {x: other}), axis=0).min() > 1e-3, "sigma varies with the state"
    z = (sample[:5] - mean[:5]) / sigma[:5]
    np.testing.assert_allclose(sess.run(log_prob, {x: features[:5], actions: sample[:5]}),
                               np.sum(-0.5 * z ** 2 - np.log(sigma[:5]) - 0.5 * np.log(2 * np.pi), 1),
                               rtol=1e-4)
    # without noise fed (a net that never samples) only the floor's own noise is left
    floor = Config().sigma_floor * np.array([2.0, 0.5])
    quiet = sess.run(policy.sample, {x: features}) - mean
    np.testing.assert_allclose(np.std(quiet, axis=0), floor, rtol=0.06)
    sess.close()


@pytest.mark.parametrize("sync", [False, True])
def test_a_worker_draws_its_sde_noise_once_a_rollout_and_the_update_acts_with_the_next(sync):
    cfg = Config(workers=1, envs_per_worker=3, n_steps=4, use_sde=True, sync_updates=sync,
                 actor_hidden=(16,), critic_hidden=(8,))
    spec = environments.probe_spec("Pendulum-v1", cfg)
    sess, global_net, (net,) = build_session(spec, cfg)
    worker = a3c.Worker(0, net, "Pendulum-v1", spec, cfg)
    rounds = a3c.UpdateRound.in_one_process(sess, global_net, 1) if sync else None
    worker.prepare(sess, seed=3, rounds=rounds)
    floor = cfg.sigma_floor * 2.0  # of Pendulum's half range

    def off(noise):  # the sample for the current obs with this noise, less the chosen one
        sample, *_ = worker.act(worker.obs, *worker.state, *worker.act_schedule, *noise)
        return np.abs(sample - worker.chosen_actions[0]).max()

    first = worker.noise
    worker.rollout()
    assert worker.noise is first, "one noise matrix for the whole rollout"
    worker.push_and_pull(1.0)
    assert worker.noise is not first and not np.allclose(worker.noise[0], first[0])
    # the push's call drew the next rollout's first actions with the new matrix, not the old
    assert off(worker.noise) < 6 * floor < off(first)
    worker.close()
    sess.close()


def test_scale_obs_maps_finite_bounds_to_unit_range_and_leaves_infinite_ones():
    low = np.array([-1.0, 0.0, -np.inf, -8.0])
    high = np.array([1.0, 10.0, np.inf, 8.0])
    spec = dataclasses.replace(discrete_spec(3), obs_low=low, obs_high=high)
    obs = np.array([[0.5, 10.0, 123.0, -8.0], [-1.0, 2.5, -7.0, 4.0]], np.float32)
    by_hand = np.array([[0.5, 1.0, 123.0, -1.0], [-1.0, -0.5, -7.0, 0.5]], np.float32)

    def build():
        scaled = a3c.ACNet("scaled", spec, Config(scale_obs=True))
        with v1.variable_scope("", reuse=True):  # the same weights, fed the scaled obs by hand
            plain = a3c.ACNet("scaled", spec, Config(scale_obs=False))
        return ((scaled.value, scaled.policy.logits), {scaled.obs: obs},
                (plain.value, plain.policy.logits), {plain.obs: by_hand})

    with tf.Graph().as_default():
        scaled_fetch, scaled_feed, plain_fetch, plain_feed = build()
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            got, want = sess.run(scaled_fetch, scaled_feed), sess.run(plain_fetch, plain_feed)
            unscaled = sess.run(plain_fetch, {plain_feed_key: obs for plain_feed_key in plain_feed})
    for g, w, u in zip(got, want, unscaled):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        assert not np.allclose(g, u, rtol=1e-3), "the scaling changed what the net sees"


class SessionWithoutCppCallables:
    """The real session, seen as a TensorFlow that lacks Session._make_callable_from_options."""

    def __init__(self, sess):
        self.make_callable = sess.make_callable


def test_session_callables_return_what_session_run_returns_and_run_their_operations():
    with tf.Graph().as_default() as graph:
        x = v1.placeholder(tf.float32, [None, 2], "x")
        k = v1.placeholder(tf.int32, [], "k")
        counter = v1.get_variable("counter", [], tf.int32, v1.zeros_initializer())
        bump = counter.assign_add(k).op
        doubled, shifted = 2.0 * x, tf.cast(k, tf.float32) + tf.reduce_sum(x, axis=1)
        init = v1.global_variables_initializer()
    sess = v1.Session(graph=graph)
    sess.run(init)
    values = np.arange(6, dtype=np.float32).reshape(3, 2)
    expected = sess.run([doubled, shifted], {x: values, k: 5})

    fast = sessions.session_callable(sess, [doubled, bump, shifted], [x, k])
    slow = sessions.session_callable(SessionWithoutCppCallables(sess), [doubled, bump, shifted], [x, k])
    assert type(fast) is not type(slow)  # the installed TensorFlow offers the C++ callable
    for run in (fast, slow):
        got = run(values, np.int32(5))
        assert len(got) == 2
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)
    assert sess.run(counter) == 10  # each call ran the operation once
    sess.close()


def test_worker_threads_share_one_cpu_only_when_it_pays():
    allowed = os.sched_getaffinity(0)
    assert cpus.cpu_layout(Config(workers=2)) is None  # too few workers to keep a pool fed
    assert cpus.cpu_layout(Config(workers=8, pin_threads=False)) is None
    layout = cpus.cpu_layout(Config(workers=8))
    if len(allowed) >= 2 and cpus.usable_cpus()[1] >= 2:
        assert layout.workers == {min(allowed)} and layout.ops <= allowed - {min(allowed)}
    else:
        assert layout is None


def test_pinning_on_many_cores_and_under_a_cpu_quota():
    many = list(range(64))
    layout = cpus.cpu_layout(Config(workers=8), many, 64.0)
    assert layout == ({0}, set(range(1, 9))), "one pool thread per worker: more would idle"
    assert cpus.cpu_layout(Config(workers=8), [4, 9, 11], 3.0) == ({4}, {9, 11})
    # a quota of 2.5 CPUs on a 64-CPU host: pin to 2 CPUs, never to more than the quota grants
    assert cpus.cpu_layout(Config(workers=8), many, 2.5) == ({0}, {1})
    assert cpus.cpu_layout(Config(workers=8), many, 1.5) is None


@pytest.mark.parametrize("files, quota", [
    ({"cpu.max": "250000 100000\n"}, 2.5),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "150000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
], ids=["v2", "v2-none", "v1", "v1-none", "no-cgroup"])
def test_the_cgroup_cpu_quota_is_read_from_either_cgroup_version(files, quota, tmp_path):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cpus.cpu_quota(str(tmp_path)) == quota


def test_sessions_never_use_a_gpu():
    for op_threads in (-1, 1):
        device_count = sessions.session_config(op_threads).device_count
        assert "GPU" in device_count and device_count["GPU"] == 0  # a missing key also reads 0
    with tf.Graph().as_default() as graph:
        tf.constant(1.0)
    sess = sessions.open_session(graph, None)
    assert not [d.name for d in sess.list_devices() if "GPU" in d.device_type]
    sess.close()


def thread_names():
    return {int(tid): open(f"/proc/self/task/{tid}/comm").read().strip()
            for tid in os.listdir("/proc/self/task")}


def test_a_pinned_session_runs_its_ops_in_a_pool_on_the_tensorflow_cpus():
    allowed = sorted(os.sched_getaffinity(0))
    layout = cpus.CpuLayout(workers={allowed[0]}, ops={allowed[-1]})  # 1 CPU: both roles share it
    with tf.Graph().as_default() as graph:
        x = v1.placeholder(tf.float32, [None], "x")
        tripled = 3.0 * x
    before = thread_names()
    sess = sessions.open_session(graph, layout)
    pool = [tid for tid, name in thread_names().items()
            if tid not in before and name == "tf_Compute"]
    assert len(pool) == len(layout.ops)
    assert all(os.sched_getaffinity(tid) == layout.ops for tid in pool)
    assert os.sched_getaffinity(0) == set(allowed), "the calling thread keeps all its CPUs"
    np.testing.assert_array_equal(sess.run(tripled, {x: [1.0, 2.0]}), [3.0, 6.0])
    sess.close()


@pytest.mark.parametrize("use_lstm", [False, True])
def test_final_sigma_scale_narrows_sigma_with_the_fraction_each_rollout_acted_with(use_lstm):
    E = 1000  # a wide batch: the spread of one step's samples measures sigma (to ~2%)
    cfg = Config(workers=1, envs_per_worker=E, n_steps=2, final_sigma_scale=0.25, anneal_lr=True,
                 use_lstm=use_lstm, lstm_units=4)
    envs = environments.make_envs("Pendulum-v1", cfg, 1)
    spec = environments.env_spec(envs, "Pendulum-v1")
    envs.close()
    sess, global_net, (net,) = build_session(spec, cfg)
    worker = a3c.Worker(0, net, "Pendulum-v1", spec, cfg)
    worker.prepare(sess, seed=3)

    def sigma(policy_net, feeds=None):  # sigma is one per action dimension, whatever the state
        feed = {policy_net.obs: np.zeros((1, 3), np.float32),
                **{part: np.zeros((1, cfg.lstm_units), np.float32) for part in policy_net.state_in}}
        return sess.run(policy_net.policy.sigma, {**feed, **(feeds or {})})[0, 0]

    own = sigma(global_net)  # the global net's policy never narrows
    for acting, learning in ((1.0, 0.0), (0.5, 1.0), (0.0, 0.5)):  # acting decides, not learning
        assert sigma(net, {net.acting_fraction: acting, net.lr_fraction: learning}) == \
            pytest.approx(own * (0.25 + 0.75 * acting), rel=1e-5)

    def entropy_at(fraction):  # what the update's entropy is, with sigma narrowed that far
        return 0.5 + 0.5 * np.log(2 * np.pi) + np.log(sigma(net, {net.acting_fraction: fraction}))

    worker.rollout()  # acted with fraction 1: nothing pushed yet
    expected = entropy_at(1.0)
    entropy, _ = worker.push_and_pull(0.5)
    assert entropy == pytest.approx(expected, rel=1e-5), "trained with the fraction it acted with"
    # the next rollout's actions, its first ones chosen by the update itself, are drawn with 0.5
    own = sigma(global_net)  # after the push, which moved it a little
    mean = sess.run(global_net.policy.mean, {global_net.obs: worker.obs,
                                             **dict(zip(global_net.state_in, worker.state))})
    assert np.std(worker.chosen_actions[0] - mean) == pytest.approx(0.625 * own, rel=0.1)
    sample, *_ = worker.act(worker.obs, *worker.state, *worker.act_schedule)
    assert np.std(sample - mean) == pytest.approx(0.625 * own, rel=0.1)
    worker.rollout()
    expected = entropy_at(0.5)
    entropy, _ = worker.push_and_pull(0.2)
    assert entropy == pytest.approx(expected, rel=1e-5)
    worker.close()
    sess.close()


def test_tensorflow_comes_without_keras_and_leaves_it_importable():
    """a3c asks TensorFlow's import to skip its eager load of Keras (CPU time at every process's
    start); the mark that skips it is gone afterwards, so Keras would import as usual."""
    assert "tensorflow" in sys.modules and "keras" not in sys.modules
    for name in sessions.KERAS_LOADED_BY_TENSORFLOW:
        assert name not in sys.modules, f"{name}: loaded, or still marked unimportable"


# a valid value other than the presets of the envs below for each field config.unused_fields may name
OTHER_VALUE = dict(cnn="nature", trunk_activation="relu", repeat_action_probability=0.1,
                   atari_threads=2, sigma_from_state=True, initial_sigma=0.3,
                   final_sigma_scale=0.55, sigma_floor=0.05, actor_lr=0.123, critic_lr=0.123,
                   actor_hidden=(7,), critic_hidden=(7,), shared_lr=0.123, value_loss_coef=0.3,
                   hidden_activation="tanh", lstm_units=16, lstm_input_hidden=(9,),
                   anneal_steps=1234, obs_clip=3.0, scale_obs=True, best_trial_cpu_share=0.5,
                   terminal_on_life_loss=True, use_sde=True)


def graph_bytes(spec, cfg) -> bytes:
    graph = tf.Graph()
    with graph.as_default():
        a3c.build_graph(spec, cfg)
    return graph.as_graph_def().SerializeToString(deterministic=True)


@pytest.mark.parametrize("env_id, overrides", [
    ("CartPole-v1", {}), ("Pendulum-v1", {"use_lstm": True, "anneal_lr": False}),
    ("Pendulum-v1", {"use_sde": False}), ("ALE/Pong-v5", {}), ("Hopper-v5", {})])
def test_the_settings_a_run_warns_change_nothing_leave_its_graph_as_it_is(env_id, overrides):
    """What `--set` warns of as changing nothing (config.unused_fields) builds the same graph,
    all of them changed at once; the env and schedule settings among them act outside it
    (environments.py, runlog.py)."""
    cfg = dataclasses.replace(config_module.config_for(env_id), workers=1, **overrides)
    spec = environments.probe_spec(env_id, cfg)
    unused = config_module.unused_fields(cfg, spec.image, spec.discrete, spec.scalable_obs.any())
    assert set(unused) <= set(OTHER_VALUE)
    same = graph_bytes(spec, cfg)
    changed = dataclasses.replace(cfg, **{field: OTHER_VALUE[field] for field in unused})
    assert graph_bytes(spec, changed) == same, sorted(unused)
    in_use = "shared_lr" if spec.image or cfg.use_lstm else "actor_lr"  # (the check can fail)
    assert in_use not in unused
    assert graph_bytes(spec, dataclasses.replace(cfg, **{in_use: OTHER_VALUE[in_use]})) != same


def test_scale_obs_is_said_to_change_nothing_where_no_observation_has_finite_bounds():
    """MuJoCo's observations are all unbounded, so scale_obs leaves them as they are; Pendulum's
    are bounded, and it maps them."""
    [note] = environments.unused_setting_warnings(
        "Hopper-v5", config_module.config_for("Hopper-v5"), {"scale_obs": True})
    assert "--set scale_obs changes nothing" in note and "unbounded" in note
    assert environments.unused_setting_warnings(
        "Pendulum-v1", config_module.config_for("Pendulum-v1"), {"scale_obs": True}) == []


def test_a_run_warns_of_a_setting_that_changes_nothing_and_only_of_those():
    notes = environments.unused_setting_warnings(
        "CartPole-v1", config_module.config_for("CartPole-v1"),
        {"cnn": "nature", "actor_lr": 1e-3, "shared_lr": 1e-3})
    assert len(notes) == 2 and "--set cnn changes nothing" in notes[0] and "Atari" in notes[0]
    assert "--set shared_lr changes nothing" in notes[1]
