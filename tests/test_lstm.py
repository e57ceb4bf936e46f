"""The LSTM after the trunk (use_lstm): each env's state carried across steps and rollouts, zeroed
where an episode ends, the update unrolled from the state the rollout started with."""
import dataclasses
import io
import json
import os

import numpy as np
import pytest

import a3c
import checkpoints
import environments
import runlog
import config as config_module
from graphs import build_session

STAGGERED = "A3CTest/Staggered-v0"  # 4 envs: episodes of 3, 4 and 5 steps, and 6 cut at 5
CUE = "A3CTest/Cue-v0"              # needs a memory of two steps


def lstm_worker(env_id, **fields):
    cfg = dataclasses.replace(config_module.Config(), use_lstm=True, lstm_units=8, workers=1,
                              envs_per_worker=4, n_steps=4, pin_threads=False, **fields)
    envs = environments.make_envs(env_id, cfg, 1)
    spec = environments.env_spec(envs, env_id)
    envs.close()
    sess, _, (net,) = build_session(spec, cfg)
    worker = a3c.Worker(0, net, env_id, spec, cfg)
    worker.prepare(sess, seed=1)
    return cfg, sess, net, worker


def replay_one_step_at_a_time(sess, net, worker):
    """The worker's last rollout again through the acting path, one step per session call from
    the rollout's first state, zeroing an env's state after the step that ended its episode:
    the logits of every step, V of every next observation from the state after its step, and
    the state the next rollout must start from."""
    state, logits, next_values = worker.rollout_state, [], []
    for t in range(worker.cfg.n_steps):
        step_logits, *after = sess.run([net.policy.logits, *net.state_out],
                                       {net.obs: worker.rollout_obs[t], **dict(zip(net.state_in, state))})
        next_values.append(sess.run(net.value, {net.obs: worker.next_obs[t],
                                                **dict(zip(net.state_in, after))}))
        logits.append(step_logits)
        state = tuple(part * (1.0 - worker.ended[t])[:, None] for part in after)
    return np.array(logits), np.array(next_values), state


@pytest.mark.parametrize("input_hidden", [(), (6,)])
def test_the_update_unrolls_the_lstm_from_each_rollouts_first_state_and_resets_at_episode_ends(
        input_hidden):
    """(input_hidden: flat observations reach the LSTM directly, or through a hidden layer of
    the trunk first.)"""
    cfg, sess, net, worker = lstm_worker(STAGGERED, gamma=0.9, lstm_input_hidden=input_hidden)
    assert any("trunk/mlp/h0" in p.op.name for p in net.trunk_params) == bool(input_hidden)
    T, E = cfg.n_steps, cfg.envs_per_worker
    ends_inside_a_rollout = cuts = 0
    for _ in range(5):
        carried = worker.state
        worker.rollout()
        for got, want in zip(worker.rollout_state, carried):
            np.testing.assert_array_equal(got, want, "a rollout starts from the state the last one left")
        logits, next_values, state_after = replay_one_step_at_a_time(sess, net, worker)
        for got, want in zip(worker.state, state_after):
            np.testing.assert_allclose(got, want, atol=1e-6, err_msg="carried, and zeroed at episode ends")

        feed = {net.obs: worker.rollout_obs.reshape(T * E, -1), net.next_obs: worker.next_obs.reshape(T * E, -1),
                net.rewards: worker.rewards, net.terminated: worker.terminated, net.ended: worker.ended,
                **dict(zip(net.rollout_state, worker.rollout_state))}
        train_logits, returns = sess.run([net.train_policy.logits, net.returns], feed)
        np.testing.assert_allclose(train_logits.reshape(logits.shape), logits, atol=1e-5)
        want, following = np.zeros((T, E)), next_values[-1]
        for t in reversed(range(T)):  # the returns bootstrap from V with the state after the step
            bootstrap = np.where(worker.ended[t] > 0, next_values[t], following)
            want[t] = worker.rewards[t] + cfg.gamma * (1 - worker.terminated[t]) * bootstrap
            following = want[t]
        np.testing.assert_allclose(returns, want, rtol=1e-5, atol=1e-5)

        ends_inside_a_rollout += int(worker.ended[:-1].sum())
        cuts += int((worker.ended - worker.terminated).sum())
        worker.push_and_pull(1.0)  # the parameters change between rollouts; the states carry on
    assert ends_inside_a_rollout >= 3
    assert cuts >= 1, "a time-limit cut, whose return bootstraps from V with the state after it"
    worker.close()
    sess.close()


def test_the_lstm_learns_what_needs_memory_and_plays_it_back_where_the_feed_forward_net_cannot(tmp_path):
    common = dict(workers=2, envs_per_worker=4, n_steps=5, max_episodes=None, pin_threads=False,
                  shared_lr=3e-3, actor_lr=3e-3, log_every_s=60.0)
    cfg = dataclasses.replace(config_module.Config(), use_lstm=True, lstm_units=32, max_steps=30_000,
                              best_trial_episodes=10, **common)
    said = io.StringIO()
    summary = a3c.train(CUE, cfg, str(tmp_path), show_plot=False, out=said)
    assert "2 workers x 4 envs for 30,000 env steps, an LSTM of 32 cells;" in said.getvalue()
    rows = runlog.read_episodes(os.path.join(summary["run_dir"], "episodes.csv"))
    assert rows["running_return"][-1] >= 0.8, "the cue is remembered over two steps"
    played = a3c.evaluate(summary["run_dir"], episodes=10, out=io.StringIO())
    assert "best" in played["checkpoint"] and played["mean"] == 1.0, "--eval carries the state too"

    cfg = dataclasses.replace(config_module.Config(), use_lstm=False, max_steps=6_000,
                              best_trial_episodes=0, **common)
    summary = a3c.train(CUE, cfg, str(tmp_path), show_plot=False, out=io.StringIO())
    rows = runlog.read_episodes(os.path.join(summary["run_dir"], "episodes.csv"))
    assert np.max(rows["running_return"][99:]) < 0.5, "without memory the cue is a coin toss"


def test_a_run_saved_before_lstm_input_hidden_existed_is_read_as_the_lstm_on_raw_observations(tmp_path):
    saved = dataclasses.asdict(dataclasses.replace(config_module.config_for("CartPole-v1"), use_lstm=True))
    assert saved.pop("lstm_input_hidden") != (), "today's default has an input layer"
    # what --resume and --eval read: a run folder's config.json without the field
    (tmp_path / "config.json").write_text(json.dumps({"env": "CartPole-v1", "config": saved}))
    env_id, cfg = checkpoints.read_run(str(tmp_path))
    assert (env_id, cfg.use_lstm, cfg.lstm_input_hidden) == ("CartPole-v1", True, ())
