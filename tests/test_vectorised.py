"""Several environments per worker: the same targets and episode accounting as one env per worker."""
import dataclasses

import numpy as np
import tensorflow as tf

import a3c
import environments
from config import Config
from graphs import build_session

v1 = tf.compat.v1
ENV = "A3CTest/Staggered-v0"  # episodes of 3, 4, 5 (cut at 5) and 6 (cut at 5) steps by seed


def make_workers(cfg):
    spec = environments.env_spec(environments.make_env(ENV, cfg), ENV)
    sess, _, nets = build_session(spec, cfg)
    workers = [a3c.Worker(i, net, ENV, spec, cfg) for i, net in enumerate(nets)]
    for worker in workers:
        worker.prepare(sess, cfg.seed)
    return workers


def test_vectorised_rollouts_match_one_env_per_worker_step_for_step():
    base = Config(n_steps=7, seed=1, actor_hidden=(4,), critic_hidden=(4,), reward_scale=0.5,
                  reward_shift=1.0)
    (vectorised,) = make_workers(dataclasses.replace(base, workers=1, envs_per_worker=4))
    # with one env per worker, worker k's env gets the seed of the vectorised worker's env k
    singles = make_workers(dataclasses.replace(base, workers=4, envs_per_worker=1))

    for _ in range(3):  # three rollouts, so episodes span rollout boundaries
        finished = vectorised.rollout()
        for k, single in enumerate(singles):
            single_finished = single.rollout()
            assert [(r, n) for j, r, n in finished if j == k] == [(r, n) for _, r, n in single_finished]
            for name in ("rollout_obs", "next_obs", "rewards", "terminated", "ended"):
                np.testing.assert_array_equal(getattr(vectorised, name)[:, k],
                                              getattr(single, name)[:, 0], err_msg=name)

        # the same n-step targets, whether computed for all envs at once or for each alone
        def targets(worker):
            values = worker.next_obs.sum(axis=2)  # any fixed stand-in for V(s')
            with tf.Graph().as_default(), v1.Session() as sess:
                return sess.run(a3c.n_step_returns(tf.constant(worker.rewards), tf.constant(values),
                                                   tf.constant(worker.terminated),
                                                   tf.constant(worker.ended), 0.9))
        together = targets(vectorised)
        for k, single in enumerate(singles):
            np.testing.assert_allclose(together[:, k], targets(single)[:, 0], rtol=1e-6)


def test_episodes_ending_at_different_steps_are_accounted_exactly():
    cfg = Config(workers=1, envs_per_worker=4, n_steps=6, seed=1, actor_hidden=(4,),
                 critic_hidden=(4,))
    (worker,) = make_workers(cfg)
    finished = worker.rollout() + worker.rollout()
    # seeds 1000..1003 -> kinds 0..3 -> episodes of 3, 4, 5 and 6 steps; the time limit cuts at 5
    lengths = {0: 3, 1: 4, 2: 5, 3: 5}
    expected = []
    for k, length in lengths.items():
        expected += [(k, float(sum(range(1, length + 1))), length)] * (12 // length)
    assert sorted(finished) == sorted(expected)

    # second rollout (steps 6..11): env 0 ends at steps 8 and 11, really terminated
    ended, terminated = worker.ended, worker.terminated
    np.testing.assert_array_equal(ended[:, 0], [0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(terminated[:, 0], [0, 0, 1, 0, 0, 1])
    # env 3 would run 6 steps: cut by the time limit at step 9 (ended, not terminated)
    np.testing.assert_array_equal(ended[:, 3], [0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(terminated[:, 3], [0, 0, 0, 0, 0, 0])
    # the step that ends an episode keeps the final observation for the bootstrap ...
    np.testing.assert_array_equal(worker.next_obs[3, 3], [3, 5, 1])
    # ... and the next step starts from the new episode's first observation
    np.testing.assert_array_equal(worker.rollout_obs[4, 3], [3, 0, 2])
