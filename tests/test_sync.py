"""--sync (A2C): one update from every worker's rollout, and every way a run stops."""
import dataclasses
import glob
import json
import os
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import a3c
import best_agent
import checkpoints
import console
import environments
import networks
import config as config_module
from graphs import build_session
from test_training import assert_refused, read_rows, train

v1 = tf.compat.v1


def sync_workers(env_id, **fields):
    """(session, global net, workers, rounds) of a --sync graph, every worker prepared."""
    cfg = dataclasses.replace(config_module.config_for(env_id), sync_updates=True,
                              actor_hidden=(16,), critic_hidden=(16,), **fields)
    spec = environments.probe_spec(env_id, cfg)
    sess, global_net, nets = build_session(spec, cfg)
    workers = [a3c.Worker(i, net, env_id, spec, cfg) for i, net in enumerate(nets)]
    rounds = a3c.UpdateRound.in_one_process(sess, global_net, len(workers))
    for worker in workers:
        worker.prepare(sess, seed=3, rounds=rounds)
    return sess, global_net, workers, rounds, spec, cfg


def close_all(sess, workers):
    for worker in workers:
        worker.close()
    sess.close()


def play_rounds(workers, count):
    """Every worker plays `count` rollouts, each followed by its part in the round, in threads."""
    coord = v1.train.Coordinator()

    def play(worker):
        with coord.stop_on_exception():
            worker.coord = coord
            for _ in range(count):
                worker.rollout()
                worker.push_and_pull(1.0)
    threads = [threading.Thread(target=play, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    coord.join(threads, stop_grace_period_secs=30)


@pytest.mark.parametrize("clip_norm", [0.05, 1e6], ids=["clip-binds", "clip-idle"])
def test_one_update_is_the_concatenated_batchs_gradient_clipped_and_applied_as_by_hand(clip_norm):
    # a clip that binds: the mean is clipped once, as one batch's gradient; one that does not:
    # the update's size shows the mean's (a sum, or any other scale, moves it further)
    sess, global_net, workers, _, spec, cfg = sync_workers("Pendulum-v1", workers=3, envs_per_worker=2,
                                                           clip_norm=clip_norm)
    before = sess.run(global_net.params)
    play_rounds(workers, 1)
    after = sess.run(global_net.params)
    stored = [sess.run(w.net.gradient_store) for w in workers]  # [worker][group][param]

    # the gradient of the three workers' rollouts as one batch, on a net of its own at the same
    # parameters: one worker whose envs are all of theirs, side by side
    wide_cfg = dataclasses.replace(cfg, sync_updates=False, workers=1,
                                   envs_per_worker=cfg.envs_per_worker * len(workers))
    wide_sess, wide_global, (wide_net,) = build_session(spec, wide_cfg)
    wide_sess.run([p.assign(value) for p, value in zip(wide_net.params, before)])
    side_by_side = lambda name: np.concatenate([getattr(w, name) for w in workers], axis=1)
    T, E = wide_cfg.n_steps, wide_cfg.envs_per_worker
    feed = {wide_net.obs: side_by_side("rollout_obs").reshape(T * E, -1),
            wide_net.actions: side_by_side("actions").reshape(T * E, -1),
            wide_net.next_obs: side_by_side("next_obs").reshape(T * E, -1),
            wide_net.rewards: side_by_side("rewards"), wide_net.terminated: side_by_side("terminated"),
            wide_net.ended: side_by_side("ended")}
    batch_gradient = wide_sess.run(wide_net.gradients, feed)

    rates = networks.learning_rates(cfg, spec)
    assert len(batch_gradient) == len(rates) == 2  # actor and critic: each clipped on its own
    expected = []
    for group, rate in enumerate(rates):
        mean = [np.mean([s[group][j] for s in stored], axis=0) for j in range(len(stored[0][group]))]
        for got, want in zip(mean, batch_gradient[group]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        norm = np.sqrt(sum(np.sum(g ** 2) for g in mean))
        assert (norm > cfg.clip_norm) == (clip_norm < 1), "the clip binds in one case only"
        clipped = [g * min(1.0, cfg.clip_norm / norm) for g in mean]
        # TF1's RMSProp: the mean square starts at 1; no momentum
        expected += [lr_step for lr_step in (
            rate * g / np.sqrt(cfg.rmsprop_decay + (1 - cfg.rmsprop_decay) * g ** 2 + cfg.rmsprop_epsilon)
            for g in clipped)]
    groups = networks.optimizer_groups(global_net, spec, cfg)
    by_param = dict(zip([p.name for group in groups for p in group], expected))
    for p, old, new in zip(global_net.params, before, after):
        np.testing.assert_allclose(new, old - by_param[p.name], rtol=1e-5, atol=1e-7)
    close_all(sess, workers)
    wide_sess.close()


@pytest.mark.parametrize("fields", [{}, {"use_lstm": True, "lstm_units": 8}], ids=["mlp", "lstm"])
def test_after_each_round_every_worker_holds_the_global_parameters(fields):
    sess, global_net, workers, rounds, _, _ = sync_workers("CartPole-v1", workers=3, **fields)
    before = sess.run(global_net.params)
    for round_number in range(1, 3):
        play_rounds(workers, 1)
        assert rounds.completed == round_number
        now = sess.run(global_net.params)
        assert all(not np.array_equal(a, b) for a, b in zip(before, now)), "the round trained"
        for worker in workers:
            for mine, theirs in zip(sess.run(worker.net.params), now):
                np.testing.assert_array_equal(mine, theirs)
        before = now
    close_all(sess, workers)


def test_a_stop_releases_every_waiter_without_an_update():
    sess, global_net, workers, rounds, _, _ = sync_workers("CartPole-v1", workers=3)
    coord = v1.train.Coordinator()
    start = sess.run(global_net.params)
    answers = []
    waiters = [threading.Thread(target=lambda: answers.append(rounds.join(coord, 1.0)))
               for _ in range(2)]  # the third never comes
    for thread in waiters:
        thread.start()
    deadline = time.time() + 10
    while rounds.arrived < 2 and time.time() < deadline:
        time.sleep(0.01)
    assert rounds.arrived == 2
    time.sleep(3 * rounds.POLL_S)  # both are waiting on the condition, not just arriving
    assert all(thread.is_alive() for thread in waiters)
    coord.request_stop()
    for thread in waiters:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in waiters)
    assert answers == [False, False] and rounds.completed == 0
    for a, b in zip(start, sess.run(global_net.params)):
        np.testing.assert_array_equal(a, b)
    close_all(sess, workers)


def test_a_sync_run_ends_at_its_budget_with_every_output(tmp_path, monkeypatch):
    locks, prepare, save = [], best_agent.BestCheckpoint.prepare, checkpoints.Checkpoints.save
    round_locks, make_round = [], a3c.UpdateRound.__init__

    def make_round_and_record(rounds, *args, **kwargs):
        make_round(rounds, *args, **kwargs)
        round_locks.append(rounds.condition)

    def prepare_and_record(best, sess):
        locks.append(best.copy_lock)
        prepare(best, sess)

    def save_and_record(checkpoints, sess, *args):
        locks.append(checkpoints.save_lock)
        save(checkpoints, sess, *args)

    monkeypatch.setattr(a3c.UpdateRound, "__init__", make_round_and_record)
    monkeypatch.setattr(best_agent.BestCheckpoint, "prepare", prepare_and_record)
    monkeypatch.setattr(checkpoints.Checkpoints, "save", save_and_record)
    summary, console = train("CartPole-v1", tmp_path, sync_updates=True, max_episodes=60)
    # the best agent is copied, and checkpoints saved, under the rounds' own lock: between
    # rounds, never during an update
    (round_lock,) = round_locks
    assert isinstance(round_lock, threading.Condition)
    assert len(locks) >= 2 and all(lock is round_lock for lock in locks)
    assert "x 2 envs for 60 episodes, synchronous updates (A2C)" in console.splitlines()[0]
    rows = read_rows(summary["run_dir"])
    assert len(rows) == 61 and summary["episodes"] == 60
    assert not [t for t in threading.enumerate() if t.name.startswith("worker_")]
    assert os.path.exists(os.path.join(summary["run_dir"], "rewards.png"))
    checkpoint = checkpoints.latest_checkpoint(os.path.join(summary["run_dir"], checkpoints.CHECKPOINT_FOLDER))
    names = [name for name, _ in v1.train.list_variables(checkpoint)]
    assert any(name.startswith("global/actor") for name in names)
    assert not [name for name in names if "gradient_store" in name or name.startswith("worker_")]

    # resumed, it goes on synchronously from the checkpoint's counters
    code = a3c.main(["--resume", summary["run_dir"], "--max-episodes", "90", "--no-plot"])
    assert code == 0
    rows = read_rows(summary["run_dir"])
    assert len(rows) == 91 and int(rows[-1][2]) > summary["env_steps"]
    with open(os.path.join(summary["run_dir"], "config.json")) as f:
        assert json.load(f)["config"]["sync_updates"] is True


def test_a_failing_worker_stops_every_sync_worker(tmp_path):
    with pytest.raises(console.WorkerError, match="worker_1 raised RuntimeError: the simulator crashed"):
        train("A3CTest/Failing-v0", tmp_path, sync_updates=True, workers=3, envs_per_worker=1,
              max_steps=10_000_000, max_episodes=None)
    assert not [t for t in threading.enumerate() if t.name.startswith("worker_")]
    (run_dir,) = glob.glob(os.path.join(tmp_path, "A3CTest_Failing-v0", "*"))
    assert checkpoints.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER))


def test_a_nan_stops_every_sync_worker_and_nothing_non_finite_is_applied(tmp_path):
    with pytest.raises(console.WorkerError, match="non-finite loss or gradient"):
        train("A3CTest/NaNReward-v0", tmp_path, sync_updates=True, max_steps=1_000_000,
              max_episodes=None)
    assert not [t for t in threading.enumerate() if t.name.startswith("worker_")]
    (run_dir,) = glob.glob(os.path.join(tmp_path, "A3CTest_NaNReward-v0", "*"))
    checkpoint = checkpoints.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER))
    for name, _ in v1.train.list_variables(checkpoint):
        if name != checkpoints.ENV_ID_VARIABLE:
            assert np.all(np.isfinite(v1.train.load_variable(checkpoint, name))), name


def test_sync_set_twice_is_refused(capsys, tmp_path):
    assert_refused(["--sync", "--set", "sync_updates=false"], capsys, tmp_path,
                   "sync_updates is set twice", "--sync")


def test_sync_takes_its_own_preset_values_under_the_command_lines():
    args = a3c.parse_args(["--env", "CartPole-v1", "--sync", "--set", "critic_lr=1e-2"])
    cfg = a3c.config_from_args(args)
    assert cfg.sync_updates and cfg.critic_lr == 1e-2  # the command line wins over the preset
    assert cfg.actor_lr == config_module.SYNC_PRESETS["CartPole-v1"]["actor_lr"]
    plain = a3c.config_from_args(a3c.parse_args(["--env", "CartPole-v1"]))
    assert not plain.sync_updates and plain.actor_lr == config_module.config_for("CartPole-v1").actor_lr
    by_set = a3c.config_from_args(a3c.parse_args(["--env", "Pendulum-v1", "--set", "sync_updates=on"]))
    assert by_set == config_module.config_for("Pendulum-v1", sync=True)


def test_a_sync_round_trains_the_atari_cnn_once_and_every_worker_pulls_it():
    sess, global_net, workers, rounds, spec, cfg = sync_workers(
        "ALE/Pong-v5", workers=2, envs_per_worker=2, n_steps=5)
    assert spec.image and len(networks.optimizer_groups(global_net, spec, cfg)) == 1  # one shared loss
    start = sess.run(global_net.params)
    play_rounds(workers, 2)
    now = sess.run(global_net.params)
    assert rounds.completed == 2
    changed = [not np.array_equal(a, b) for a, b in zip(start, now)]
    assert all(changed), "one shared loss trains the trunk and both heads"
    for worker in workers:
        for mine, theirs in zip(sess.run(worker.net.params), now):
            np.testing.assert_array_equal(mine, theirs)
    close_all(sess, workers)
