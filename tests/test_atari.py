"""Atari from pixels: ale-py's vector env as a worker's batch, the CNN trunk, the shared update."""
import dataclasses
import glob
import io
import json
import os
import re
import shutil

import numpy as np
import pytest

import a3c
import checkpoints
import environments
import networks
import runlog
import sessions
import config as config_module
from graphs import build_session, checkpoints_and_best
from test_training import read_rows, refused, train

import atari_scoreboard
import sb3_atari
import trunk_probe

PONG = "ALE/Pong-v5"
SMALL = dict(workers=2, envs_per_worker=2, n_steps=5, log_every_s=0.5, best_trial_episodes=2)


def atari_config(**fields):
    return dataclasses.replace(config_module.config_for(PONG), **{**SMALL, **fields})


def pong_spec(cfg):
    """The EnvSpec of Pong's frames and actions, read from a real ale-py vector env."""
    envs = environments.make_envs(PONG, cfg, 1)
    try:
        return environments.env_spec(envs, PONG)
    finally:
        envs.close()


def test_every_atari_id_gets_the_atari_preset():
    for env_id in (PONG, "ALE/Breakout-v5", "ALE/SpaceInvaders-v5"):
        cfg = config_module.config_for(env_id)
        assert (cfg.reward_clip, cfg.envs_per_worker, cfg.max_episodes) == (1.0, 8, None)
        assert (cfg.cnn, cfg.n_steps, cfg.clip_norm) == ("small", 20, 0.5)
    assert config_module.config_for("CartPole-v1").reward_clip is None


def test_a_run_saved_with_the_paper_net_is_read_back_with_it_and_its_84x84_frames(tmp_path):
    """The preset's trunk changed (to the small net on 42x42 frames): --resume and --eval of a
    run that trained the paper net must build that net and its frames, not today's preset."""
    run_dir = write_run_folder(tmp_path / "run", PONG, cnn="a3c", n_steps=5, shared_lr=3e-4)
    env_id, cfg = checkpoints.read_run(run_dir)
    assert (env_id, cfg.cnn, cfg.n_steps, cfg.shared_lr) == (PONG, "a3c", 5, 3e-4)
    envs = environments.make_envs(env_id, cfg, 1)
    assert envs.reset([3]).shape == (1, 4, 84, 84)
    envs.close()


def test_atari_envs_give_uint8_frame_stacks_and_the_final_frames_of_a_cut_game():
    cfg = atari_config(max_episode_steps=30)  # 120 frames: a game cut by the time limit
    envs = environments.make_envs(PONG, cfg, 2)
    spec = environments.env_spec(envs, PONG)
    side = environments.frame_size(cfg)  # the preset's: 42 (its small CNN)
    assert spec.image and spec.obs_shape == (4, side, side) and spec.obs_dtype == np.uint8
    assert spec.discrete and spec.n_actions == 6
    obs = envs.reset([5, 6])
    assert obs.shape == (2, 4, side, side) and obs.dtype == np.uint8
    # what the README says of a game's start: the stack holds the first frame and zeros before
    # it (gymnasium's FrameStack would repeat the first frame)
    assert np.all(obs[:, :3] == 0) and np.all(obs[:, 3].max(axis=(1, 2)) > 0)
    for step in range(1, 31):
        next_obs, rewards, terminated, truncated = envs.step(np.array([0, 0]))
        assert rewards.dtype == np.float64 and not np.any(terminated)
        if step < 30:
            assert not np.any(truncated)
            np.testing.assert_array_equal(next_obs[:, :3], obs[:, 1:], "the stack shifts by one")
        obs = np.asarray(next_obs)
    assert np.all(truncated), "cut at 30 agent steps"
    for k in range(2):
        first = envs.restart(k)
        assert not np.array_equal(first, next_obs[k]), "the final frames, not the new game's"
        assert np.all(first[:3] == 0) and first[3].max() > 0, "a fresh stack, zero-padded"
    envs.close()


def test_same_seeds_give_the_same_games():
    cfg = atari_config()
    runs = []
    for _ in range(2):
        envs = environments.make_envs(PONG, cfg, 2)
        frames = [envs.reset([11, 12])]
        for action in [2, 3, 2, 2, 3, 0, 1] * 5:
            frames.append(np.asarray(envs.step(np.array([action, 5 - action]))[0]))
        envs.close()
        runs.append(np.stack(frames))
    np.testing.assert_array_equal(runs[0], runs[1])


def test_evals_screen_twin_gives_the_agent_trainings_observations_and_draws_its_games():
    """--eval --record/--render play Breakout through AtariEnvs(screen=...): the agent's input
    must be training's own from the same seed, through lost lives (greedy FIRE), a game cut by
    the time limit and the next game, sticky actions included, and the colour screen must be
    the games it plays."""
    from PIL import Image  # installed with matplotlib
    cfg = atari_config(max_episode_steps=400, repeat_action_probability=0.25)
    side = environments.frame_size(cfg)
    game = "ALE/Breakout-v5"
    watched = environments.make_envs(game, cfg, 1, greedy=True, screen="rgb_array")
    plain = environments.make_envs(game, cfg, 1, greedy=True)
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(watched.reset([21]), plain.reset([21]))
    ends, screens, differences = 0, set(), []
    for _ in range(900):
        actions = rng.integers(0, 4, 1)
        seen, rewards, terminated, truncated = watched.step(actions)
        expected, rewards_2, terminated_2, truncated_2 = plain.step(actions)
        np.testing.assert_array_equal(seen, expected)
        assert (rewards, terminated, truncated) == (rewards_2, terminated_2, truncated_2)
        ends += int(terminated[0] or truncated[0])
        screen = watched.render()
        assert screen.shape == (210, 160, 3) and screen.dtype == np.uint8
        screens.add(screen.tobytes())
        # the screen, grayed and shrunk to the agent's size, is the agent's newest frame but
        # for blur and max-pooling; another game's screen differs by ~1.3 of 255 on average
        shrunk = np.asarray(Image.fromarray(screen).convert("L").resize((side, side), Image.BOX))
        if not (terminated[0] or truncated[0]):  # (at an end the agent sees the final frame)
            differences.append(np.abs(shrunk.astype(np.int16) - seen[0, -1]).mean())
    assert ends >= 1 and len(screens) > 100
    assert np.mean(differences) < 0.9 and max(differences) < 3, (np.mean(differences),
                                                                 max(differences))
    assert np.array_equal(plain.render(), plain.restarted[0, -1]), "no twin: the agent's frame"
    watched.close()
    plain.close()


def test_the_atari_window_shows_the_screen_enlarged(monkeypatch):
    """--eval --render's window (pygame's own, with SDL's dummy video driver: no display here)
    draws each step's screen, enlarged 3x."""
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    envs = environments.make_envs(PONG, atari_config(), 1, greedy=True, screen="human")
    window = envs.window
    window.steps_per_s = 1000  # the test need not wait for the game's pace
    envs.reset([3])
    for action in (2, 3, 2):
        envs.step(np.array([action]))
    drawn = window.pygame.surfarray.array3d(window.surface).swapaxes(0, 1)
    assert drawn.shape == (630, 480, 3)
    np.testing.assert_array_equal(drawn[::3, ::3], envs.render())
    envs.close()


@pytest.mark.parametrize("use_lstm", [False, True])
def test_the_cnn_net_takes_bytes_and_one_push_trains_trunk_and_both_heads(use_lstm):
    cfg = atari_config(workers=2, envs_per_worker=2, n_steps=3, shared_lr=1e-3, use_lstm=use_lstm,
                       cnn="a3c")
    spec = pong_spec(cfg)
    sess, global_net, workers = build_session(spec, cfg)
    worker = workers[0]
    names = [v.op.name for v in global_net.params]
    assert [n for n in names if "conv" in n] == ["global/trunk/conv0/w", "global/trunk/conv0/b",
                                                 "global/trunk/conv1/w", "global/trunk/conv1/b"]
    assert sess.run(global_net.params[0]).shape == (8, 8, 4, 16)  # the A3C paper's first layer
    shapes = {n: v.shape.as_list() for n, v in zip(names, global_net.params)}
    if use_lstm:  # 256 cells after the 256-unit fc layer: [fc + h, 4 gates x 256]
        assert shapes["global/trunk/lstm/w"] == [512, 1024] and shapes["global/trunk/lstm/b"] == [1024]
        assert shapes["global/actor/logits/w"] == [256, 6]
    else:
        assert not any("lstm" in n for n in names)
    with sess.graph.as_default():
        slots = [v.op.name for v in sessions.v1.global_variables() if "RMSProp" in v.op.name]
    optimisers = {name.split("/")[-1] for name in slots}
    assert optimisers == {"RMSProp", "RMSProp_1"}, "one optimiser: mean square and momentum slots"

    rng = np.random.default_rng(3)
    T, E = cfg.n_steps, cfg.envs_per_worker
    frames = rng.integers(0, 256, (T * E, 4, 84, 84), dtype=np.uint8)
    feed = {worker.obs: frames, worker.actions: rng.integers(0, 6, T * E).astype(np.int32),
            worker.next_obs: rng.integers(0, 256, (T * E, 4, 84, 84), dtype=np.uint8),
            worker.rewards: rng.choice([-1.0, 0.0, 1.0], (T, E)).astype(np.float32),
            worker.terminated: np.zeros((T, E), np.float32),
            worker.ended: np.zeros((T, E), np.float32)}
    for part in worker.rollout_state:
        feed[part] = rng.normal(0, 0.5, (E, cfg.lstm_units)).astype(np.float32)
    sess.run(worker.pull)
    before = sess.run(global_net.params)
    sess.run(worker.push_and_pull, feed)
    after = sess.run(global_net.params)
    for name, b, a in zip(names, before, after):
        assert not np.array_equal(b, a), f"{name} was not trained"
    for local, glob_ in zip(sess.run(worker.params), after):
        np.testing.assert_array_equal(local, glob_)
    sess.close()


def test_the_preset_pushes_whole_rollouts_of_8_games_x_20_steps_clipped_to_its_norm():
    cfg = dataclasses.replace(config_module.config_for(PONG), workers=1)
    spec = pong_spec(cfg)
    sess, global_net, (worker,) = build_session(spec, cfg)
    T, E, side = cfg.n_steps, cfg.envs_per_worker, environments.frame_size(cfg)
    assert (T, E, side) == (20, 8, 42)
    rng = np.random.default_rng(9)
    feed = {worker.obs: rng.integers(0, 256, (T * E, 4, side, side), dtype=np.uint8),
            worker.actions: rng.integers(0, 6, T * E).astype(np.int32),
            worker.next_obs: rng.integers(0, 256, (T * E, 4, side, side), dtype=np.uint8),
            worker.rewards: rng.choice([-1.0, 0.0, 1.0], (T, E)).astype(np.float32),
            worker.terminated: np.zeros((T, E), np.float32),
            worker.ended: np.zeros((T, E), np.float32)}
    sess.run(worker.pull)
    (clipped,), norm = sess.run([worker.clipped_grads, worker.grad_norm], feed)
    clipped_norm = np.sqrt(sum(np.sum(np.square(g)) for g in clipped))
    assert norm > cfg.clip_norm, "random frames and rewards: a norm the clip must bind on"
    assert clipped_norm == pytest.approx(cfg.clip_norm, rel=1e-4)
    before = sess.run(global_net.params)
    sess.run(worker.push_and_pull, feed)
    assert all(not np.array_equal(b, a) for b, a in zip(before, sess.run(global_net.params)))
    sess.close()


@pytest.mark.parametrize("use_lstm", [False, True])
def test_the_small_cnn_reads_42x42_frames_and_one_push_trains_all_of_it(use_lstm):
    cfg = atari_config(workers=1, envs_per_worker=2, n_steps=2, shared_lr=1e-3, cnn="small",
                       use_lstm=use_lstm)
    envs = environments.make_envs(PONG, cfg, 2)
    spec = environments.env_spec(envs, PONG)
    obs = envs.reset([1, 2])
    envs.close()
    assert spec.obs_shape == (4, 42, 42) and obs.shape == (2, 4, 42, 42) and obs.dtype == np.uint8
    assert obs.max() > 0, "a real frame, not an empty buffer"
    sess, global_net, (worker,) = build_session(spec, cfg)
    shapes = {v.op.name: v.shape.as_list() for v in global_net.params}
    assert shapes["global/trunk/conv0/w"] == [3, 3, 4, 32]
    assert [shapes[f"global/trunk/conv{i}/w"] for i in (1, 2, 3)] == [[3, 3, 32, 32]] * 3
    assert shapes["global/trunk/fc/w"] == [3 * 3 * 32, 256], "42 -> 21 -> 11 -> 6 -> 3"
    rng = np.random.default_rng(5)
    feed = {worker.obs: rng.integers(0, 256, (4, 4, 42, 42), dtype=np.uint8),
            worker.actions: np.array([1, 4, 0, 2], np.int32),
            worker.next_obs: rng.integers(0, 256, (4, 4, 42, 42), dtype=np.uint8),
            worker.rewards: np.array([[1.0, 0.0], [-1.0, 1.0]], np.float32),
            worker.terminated: np.zeros((2, 2), np.float32),
            worker.ended: np.zeros((2, 2), np.float32)}
    for part in worker.rollout_state:
        feed[part] = rng.normal(0, 0.5, (2, cfg.lstm_units)).astype(np.float32)
    assert any("lstm" in v.op.name for v in global_net.params) == use_lstm
    sess.run(worker.pull)
    before = sess.run(global_net.params)
    sess.run(worker.push_and_pull, feed)
    for v, b, a in zip(global_net.params, before, sess.run(global_net.params)):
        assert not np.array_equal(b, a), f"{v.op.name} was not trained"
    sess.close()


def test_the_shared_loss_weights_the_value_loss_by_its_coefficient():
    cfg = atari_config(workers=1, envs_per_worker=1, n_steps=2, value_loss_coef=0.25, cnn="a3c")
    spec = pong_spec(cfg)
    sess, global_net, (worker,) = build_session(spec, cfg)
    rng = np.random.default_rng(4)
    feed = {worker.obs: rng.integers(0, 256, (2, 4, 84, 84), dtype=np.uint8),
            worker.actions: np.array([1, 4], np.int32),
            worker.next_obs: rng.integers(0, 256, (2, 4, 84, 84), dtype=np.uint8),
            worker.rewards: np.array([[1.0], [-1.0]], np.float32),
            worker.terminated: np.zeros((2, 1), np.float32), worker.ended: np.zeros((2, 1), np.float32)}
    sess.run(worker.pull)
    fc = next(v for v in worker.params if v.op.name.endswith("trunk/fc/w"))
    with sess.graph.as_default():
        weighted = sessions.tf.gradients(worker.actor_loss + 0.25 * worker.critic_loss, [fc])[0]
        unweighted = sessions.tf.gradients(worker.actor_loss + worker.critic_loss, [fc])[0]
    want, raw = sess.run([weighted, unweighted], feed)
    norm = sess.run(worker.grad_norm, feed)
    got = sess.run(worker.clipped_grads[0][worker.params.index(fc)], feed)
    scale = min(1.0, cfg.clip_norm / norm)
    np.testing.assert_allclose(got, want * scale, rtol=1e-4, atol=1e-7)
    assert not np.allclose(want, raw), "the coefficient changes the gradient"
    sess.close()


def test_learning_rewards_are_clipped_and_logged_returns_are_raw():
    cfg = atari_config(workers=1, envs_per_worker=2, n_steps=5, reward_clip=0.5)
    spec = pong_spec(cfg)
    sess, _, (net,) = build_session(spec, cfg)
    worker = a3c.Worker(0, net, PONG, spec, cfg)
    worker.prepare(sess, seed=1)
    learned = []
    for _ in range(60):  # 300 agent steps: Pong's first points fall within ~100, a game lasts longer
        worker.rollout()
        learned.append(worker.rewards.copy())
        worker.chosen_actions = None
    learned = np.concatenate(learned)
    assert set(np.unique(learned)) <= {-0.5, 0.0, 0.5} and np.any(learned != 0), "clipped"
    scores = worker.episode_return  # the games so far (none ends in 300 steps), in raw points
    assert np.any(np.abs(scores) >= 1)
    np.testing.assert_array_equal(scores, 2 * learned.sum(axis=0), "raw: each +-1 learned as +-0.5")
    worker.close()
    sess.close()


def test_a_lost_life_ends_the_learning_return_but_not_the_game_nor_its_record():
    """terminal_on_life_loss: in Breakout each lost life is a terminal step of the rollout (no
    bootstrap past it, and the chain of returns cut there), while the game plays on, keeps its
    score, and is recorded once, whole, when its last life is gone."""
    breakout = "ALE/Breakout-v5"
    cfg = atari_config(workers=1, envs_per_worker=2, n_steps=5, terminal_on_life_loss=True)
    envs = environments.make_envs(breakout, cfg, 1)
    try:
        spec = environments.env_spec(envs, breakout)
    finally:
        envs.close()
    sess, _, (net,) = build_session(spec, cfg)
    worker = a3c.Worker(0, net, breakout, spec, cfg)
    worker.prepare(sess, seed=2)
    real_step, seen = worker.envs.step, []

    def step_and_note(actions):  # each step's game ends, lives before and after, and score
        before = worker.envs.lives.copy()
        obs, rewards, terminated, truncated = real_step(actions)
        seen.append((terminated.copy(), truncated.copy(), before, worker.envs.lives.copy(),
                     rewards.copy()))
        return obs, rewards, terminated, truncated
    worker.envs.step = step_and_note
    score, length, lost_this_game = np.zeros(2), np.zeros(2, int), np.zeros(2, int)
    lives_lost = games_ended = 0
    for _ in range(120):  # 1,200 agent steps of a near-random policy: dozens of lives, a few games
        seen.clear()
        records = worker.rollout()
        worker.chosen_actions = None
        terminated, truncated, before, after, rewards = (np.array(part) for part in zip(*seen))
        game_over = terminated | truncated
        lost = (after < before) & ~game_over  # (a new game's lives, after a game over, are no loss)
        np.testing.assert_array_equal(worker.terminated, terminated | lost)
        np.testing.assert_array_equal(worker.ended, game_over)  # (the LSTM state goes on too)
        expected = []
        for t in range(len(seen)):  # what each game's one record must hold: all of its lives
            score, length, lost_this_game = score + rewards[t], length + 1, lost_this_game + lost[t]
            for k in np.flatnonzero(game_over[t]):
                assert lost_this_game[k] <= 4, "Breakout's 5 lives: 4 lost, then the game ends"
                expected.append((int(k), float(score[k]), int(length[k])))
                score[k], length[k], lost_this_game[k] = 0, 0, 0
        assert records == expected
        lives_lost += int(lost.sum())
        games_ended += int(game_over.sum())
    assert lives_lost >= 5 and games_ended >= 1, (lives_lost, games_ended)
    worker.close()
    sess.close()


def test_a_short_pong_run_writes_every_output_tries_its_best_resumes_and_records(tmp_path, capsys,
                                                                                 monkeypatch):
    # games cut at 10 agent steps: 100 of them, and the trials of a best agent, within the budget
    cfg = atari_config(max_steps=1600, max_episode_steps=10, best_checkpoint_every_s=0.0)
    out = io.StringIO()
    summary = a3c.train(PONG, cfg, str(tmp_path), show_plot=False, out=out)
    run_dir = summary["run_dir"]
    assert os.path.basename(os.path.dirname(run_dir)) == "ALE_Pong-v5"
    rows = read_rows(run_dir)[1:]
    assert len(rows) >= 150 and {int(r[5]) for r in rows} == {10}
    assert all(float(r[4]) == int(float(r[4])) and -10 <= float(r[4]) <= 10 for r in rows)
    with open(os.path.join(run_dir, "config.json")) as f:
        assert json.load(f)["effective_learning_rates"] == [cfg.shared_lr]
    assert glob.glob(os.path.join(run_dir, "checkpoints", "model-*.index"))
    with open(os.path.join(run_dir, "checkpoints", "best", "best.json")) as f:
        best = json.load(f)
    assert best["trial_episodes"] == 2 and -10 <= best["score"] <= 10

    # a resumed part draws a seed in [0, 2**32): ALE's C++ ints must take whatever it draws
    assert a3c.main(["--resume", run_dir, "--max-steps", "2000", "--no-plot",
                     "--set", "anneal_lr=false"]) == 0  # (its annealed rate reached 0)
    assert len(read_rows(run_dir)) - 1 > len(rows)
    assert "learning rates at their base (anneal_lr off; they had annealed to 0%)" in \
        capsys.readouterr().out, "the jump up is said"

    assert a3c.main(["--eval", run_dir, "--episodes", "1", "--record"]) == 0
    printed = capsys.readouterr().out
    assert "ALE/Pong-v5: deterministic policy of the best checkpoint" in printed
    from PIL import Image  # installed with matplotlib
    with Image.open(os.path.join(run_dir, "episode.gif")) as gif:
        assert gif.size == (160, 210), "the console's screen, not the agent's 42x42 frames"
        durations = []  # (a GIF counts in 10 ms and merges equal frames, adding their time)
        for index in range(gif.n_frames):
            gif.seek(index)
            durations.append(gif.info["duration"])
        # the game's 10 steps, each 4 of the console's 60 frames a second: 10 x 66.7 ms
        assert sum(durations) == 670
        gif.seek(0)
        colours = np.asarray(gif.convert("RGB"), np.int16)
        assert np.abs(colours[..., 0] - colours[..., 2]).max() > 50, "in colour"
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    refused(["--eval", run_dir, "--render"], capsys, "--render needs a display", "--record")

    # bench/trunk_probe.py reads every checkpoint the run kept
    checkpoints = glob.glob(os.path.join(run_dir, "checkpoints", "model-*.index"))
    assert trunk_probe.main([run_dir, "--name", "probe", "--out", str(tmp_path / "probe")]) == 0
    table = [line for line in (tmp_path / "probe" / "probe.md").read_text().splitlines()
             if line.startswith("| ") and line[2].isdigit()]
    assert len(table) == len(checkpoints)
    for line in table:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert 0 <= int(cells[1].rstrip("%")) <= 100 and float(cells[4]) >= 0

    # bench/atari_scoreboard.py: a run that used its budget is finished, though no game ended in
    # its last rollouts (its checkpoint counts), so `run` goes on to the next game. (The run
    # stands in for the row's: the values it changes are not compared here.)
    monkeypatch.setattr(atari_scoreboard, "NOT_TRAINED", atari_scoreboard.NOT_TRAINED + tuple(
        {**SMALL, "max_episode_steps": 0, "anneal_lr": 0, "best_checkpoint_every_s": 0}))
    rows = atari_scoreboard.progress(run_dir)["rows"]
    assert atari_scoreboard.progress(run_dir)["frames"] >= 2000 * environments.FRAME_SKIP
    if rows["env_steps"][-1] < 2000:  # (else the check below is the row's, made the same way)
        assert atari_scoreboard.finished(run_dir, None)
    capsys.readouterr()
    row_budget = atari_scoreboard.budget
    monkeypatch.setattr(atari_scoreboard, "budget", lambda game, variant="": 2000)  # the run's
    atari_scoreboard.train(str(tmp_path), PONG, 1, (18.0, 2.0))
    assert "finished" in capsys.readouterr().out
    monkeypatch.setattr(atari_scoreboard, "budget", row_budget)
    # the row's budget is the preset's 12.5M steps: `run` would resume this run with it
    assert not atari_scoreboard.finished(run_dir, (18.0, 2.0), atari_scoreboard.budget(PONG))
    command = atari_scoreboard.a3c_command(str(tmp_path), PONG, 1, 8, "", run_dir)
    assert command[2:] == ["--no-plot", "--resume", run_dir, "--max-steps", "12500000"]
    popen = atari_scoreboard.subprocess.Popen
    monkeypatch.setattr(atari_scoreboard.subprocess, "Popen", None)
    with pytest.raises(TypeError):  # it goes on to start a3c.py (None here: nothing trains)
        atari_scoreboard.train(str(tmp_path), PONG, 1, (18.0, 2.0))
    monkeypatch.setattr(atari_scoreboard.subprocess, "Popen", popen)
    assert "--max-steps 12500000" in capsys.readouterr().out

    # it reports the run (seed 1, as the scoreboard's first Pong seed)
    with pytest.raises(SystemExit) as refusal:
        atari_scoreboard.main(["report", "--runs", str(tmp_path), "--out", str(tmp_path / "no")])
    assert refusal.value.code == 2 and not (tmp_path / "no").exists()
    (tmp_path / "empty" / "ALE_Breakout-v5").mkdir(parents=True)
    capsys.readouterr()
    for wrong in (tmp_path / "ALE_Pong-v5", tmp_path / "nothing-here", "",  # a level too deep;
                  tmp_path / "empty" / "ALE_Breakout-v5"):  # none; empty; a game's, empty
        with pytest.raises(SystemExit) as refusal:
            atari_scoreboard.main(["report", "--runs", str(wrong), "--no-save"])
        err = capsys.readouterr().err
        assert refusal.value.code == 2 and len(err.strip().splitlines()) == 1, err
    # a run folder it cannot read stops report before it writes anything (Pong's GIF included)
    damaged = tmp_path / "ALE_Breakout-v5" / "20260101T000000Z-s1"
    damaged.parent.mkdir()
    write_run_folder(damaged, "ALE/Breakout-v5")
    (damaged / "episodes.csv").write_text(",".join(runlog.EPISODE_COLUMNS) + "\n0,1,20")
    (tmp_path / "untouched").mkdir()
    with pytest.raises(SystemExit) as refusal:
        atari_scoreboard.main(["report", "--runs", str(tmp_path),
                               "--out", str(tmp_path / "untouched")])
    assert refusal.value.code == 2 and os.listdir(tmp_path / "untouched") == []
    shutil.rmtree(damaged.parent)
    capsys.readouterr()
    results = tmp_path / "results"
    results.mkdir()
    with pytest.raises(SystemExit) as refusal:  # a table of one game would replace the whole one
        atari_scoreboard.main(["report", "--runs", str(tmp_path), "--games", PONG,
                               "--out", str(results)])
    assert refusal.value.code == 2 and not list(results.iterdir())
    capsys.readouterr()
    assert atari_scoreboard.main(["report", "--runs", str(tmp_path), "--out", str(results)]) == 0
    table = (results / "atari.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ALE/Pong-v5 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["1", "2", "3", "1 (40M)", "2 (40M)",
                                                           "3 (40M)"]
    assert "not run" not in rows[0] and all("not run" in row for row in rows[1:])
    assert "| ALE/Breakout-v5 | 1 | not run |" in table and "](atari_Pong_s1.gif)" in table
    assert "*Pong's GIF: the best agent of seed 1.*" in table
    assert "| ALE/Breakout-v5 | 1 (feed-forward) | not run |" in table
    assert "| ALE/SpaceInvaders-v5 | 1 (feed-forward) | not run |" in table
    assert "feed-forward: use_lstm=false" in table and "40M: max_steps=10000000" in table
    assert "lstm: use_lstm=true" not in table, "a variant that no row runs"
    assert capsys.readouterr().out.startswith("# Atari scoreboard"), "the rows' progress: stderr"
    with Image.open(results / "atari_Pong_s1.gif") as gif:
        assert gif.size == (160, 210)
    assert (results / "atari_Pong.png").stat().st_size > 0
    # the GIF comes from the game's first row with a finished run folder, here seed 2's (seed 1's
    # run has not finished the preset's budget), else from its first row with a run folder
    later = tmp_path / "later"
    shutil.copytree(run_dir, later / "ALE_Pong-v5" / "20260101T000000Z-s1")
    shutil.copytree(run_dir, later / "ALE_Pong-v5" / "20260101T000000Z-s2")
    with open(later / "ALE_Pong-v5" / "20260101T000000Z-s2" / "episodes.csv", "a") as f:
        f.write(f"0,999999,{12_500_000},1.0,18,10,18.0,1.0,0.5\n")  # its stop reached
    assert atari_scoreboard.gif_choices(atari_scoreboard.measured_folders(
        str(later), {}, atari_scoreboard.SCOREBOARD), {}, str(later),
        atari_scoreboard.SCOREBOARD)[PONG].seed == 2
    shutil.rmtree(later / "ALE_Pong-v5" / "20260101T000000Z-s1")
    (tmp_path / "later_results").mkdir()
    assert atari_scoreboard.main(["report", "--runs", str(later),
                                  "--out", str(tmp_path / "later_results")]) == 0
    assert (tmp_path / "later_results" / "atari_Pong_s2.gif").stat().st_size > 0
    assert "](atari_Pong_s2.gif)" in (tmp_path / "later_results" / "atari.md").read_text()

    # the run folder gone (another machine, a session's end): its row and curve are carried,
    # over a folder that started before it too
    gone = tmp_path / "gone"
    (gone / "ALE_Pong-v5" / "20000101T000000Z-s1").mkdir(parents=True)
    (results / "atari_Pong.png").unlink()
    capsys.readouterr()
    assert atari_scoreboard.main(["report", "--runs", str(gone), "--out", str(results)]) == 0
    assert "started before the run kept" in capsys.readouterr().err
    carried = (results / "atari.md").read_text()
    assert [line for line in carried.splitlines() if line.startswith("| ALE/Pong-v5 | 1 |")] \
        == rows[:1]
    assert "carried from atari_runs.json, as an earlier report" in carried
    assert "unfinished there): Pong seed 1." in carried
    assert (results / "atari_Pong.png").stat().st_size > 0, "drawn again from the kept curve"
    assert "](atari_Pong_s1.gif)" in carried, "the GIF of a carried row still training stays"
    # a finished kept row stands over a newer try that has not finished the scoreboard's budget,
    # and `run` does not train again what a kept row says is finished
    kept = json.loads((results / "atari_runs.json").read_text())
    assert not kept[f"{PONG} 1"]["finished"], "2,000 steps are not the preset's 50M frames"
    assert kept[f"{PONG} 1"]["gif"]
    (gone / "ALE_Pong-v5" / "29990101T000000Z-s1").mkdir()
    (results / "atari_runs.json").write_text(json.dumps(  # unfinished, further than a restart
        {f"{PONG} 1": {**kept[f"{PONG} 1"], "cells": ["30.0M"] + kept[f"{PONG} 1"]["cells"][1:]}}))
    assert atari_scoreboard.main(["report", "--runs", str(gone), "--out", str(results)]) == 0
    assert "has trained 0.0M frames, fewer than the run kept" in capsys.readouterr().err
    assert "| ALE/Pong-v5 | 1 | 30.0M |" in (results / "atari.md").read_text()
    for key in [f"{PONG} {seed}{variant}" for seed in (1, 2, 3) for variant in ("", " 40M")]:
        kept[key] = {**kept[f"{PONG} 1"], "finished": True}
    (results / "atari_runs.json").write_text(json.dumps(kept))
    assert atari_scoreboard.main(["report", "--runs", str(gone), "--out", str(results)]) == 0
    assert "has not finished the scoreboard's budget" in capsys.readouterr().err
    assert [line for line in (results / "atari.md").read_text().splitlines()
            if line.startswith("| ALE/Pong-v5 | 1 |")] == rows[:1]
    assert atari_scoreboard.main(["run", "--runs", str(gone), "--games", PONG,
                                  "--out", str(results)]) == 0
    assert capsys.readouterr().out.count("finished (its row is kept in atari_runs.json)") == 6
    assert len(os.listdir(gone / "ALE_Pong-v5")) == 2, "nothing trained"
    # a damaged atari_runs.json, or no --out folder to keep rows in: refused in one line
    (results / "atari_runs.json").write_text("{")
    for what in ("run", "report"):
        for out in (results, tmp_path / "typo"):
            with pytest.raises(SystemExit) as refusal:
                atari_scoreboard.main([what, "--runs", str(gone), "--out", str(out)])
            assert refusal.value.code == 2
    assert "atari_runs.json is not the scoreboard's kept rows" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()


def write_run_folder(folder, env_id, **fields):
    """A run folder holding only the config.json a3c.py would write for env_id."""
    saved = dataclasses.asdict(dataclasses.replace(config_module.config_for(env_id), **fields))
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"env": env_id, "config": saved}))
    return str(folder)


@pytest.mark.parametrize("case, words", [
    ("missing", ["not a readable run folder"]),
    ("no checkpoints", ["has no checkpoints"]),
    ("lstm", ["with an LSTM", "feed-forward Atari run"]),
    ("cartpole", ["CartPole-v1 run", "feed-forward Atari run"]),
])
def test_trunk_probe_refuses_what_it_cannot_probe_and_writes_nothing(case, words, tmp_path, capsys):
    run_dir = {"missing": lambda: str(tmp_path / "nothing"),
               "no checkpoints": lambda: write_run_folder(tmp_path / "run", PONG),
               "lstm": lambda: write_run_folder(tmp_path / "run", PONG, use_lstm=True),
               "cartpole": lambda: write_run_folder(tmp_path / "run", "CartPole-v1")}[case]()
    out = tmp_path / "out"
    assert trunk_probe.main([run_dir, "--name", "probe", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err
    assert not out.exists()


@pytest.mark.parametrize("flag, value, words", [
    ("--frames", "nan", "--frames must be a number >= 320"),
    ("--frames", "inf", "--frames must be a number >= 320"),
    ("--frames", "319", "--frames must be a number >= 320"),
    ("--seed", "-1", "--seed must be from 0 to 4,294,967,280"),
    ("--seed", "4294967281", "--seed must be from 0 to 4,294,967,280"),
    ("--threads", "0", "--threads must be >= 1"),
])
def test_the_sb3_comparison_refuses_bad_flags_before_it_needs_torch(flag, value, words, capsys):
    # a flag let through ends in "needs torch" (return 2, no SystemExit) where torch is missing,
    # and where it is installed, in one short update (320 frames) that returns 0
    frames = [] if flag == "--frames" else ["--frames", "320"]
    with pytest.raises(SystemExit) as stop:
        sb3_atari.main([flag, value, *frames])
    assert stop.value.code == 2
    assert words in capsys.readouterr().err.splitlines()[-1]


def test_atari_envs_take_any_seed_the_config_allows():
    cfg = atari_config()
    envs = environments.make_envs(PONG, cfg, 2)
    obs = envs.reset([2 ** 32 - 2, 2 ** 32 - 1])
    assert obs.shape == (2, 4, environments.frame_size(cfg), environments.frame_size(cfg))
    envs.close()


@pytest.mark.parametrize("env_id, words", [
    ("ALE/Pong-v4", ["only the ALE/<Game>-v5 ids", "ALE/Pong-v5"]),
    ("ALE/NoSuchGame-v5", ["ALE/NoSuchGame-v5", "pprint_registry"]),
    # ale-py's ids without the prefix (registered with ALE/'s, or never: Breakout-v5)
    ("Pong-v4", ["Pong-v4: only the ALE/<Game>-v5 ids", "use ALE/Pong-v5"]),
    ("PongNoFrameskip-v4", ["only the ALE/<Game>-v5 ids", "use ALE/Pong-v5"]),
    ("Breakout-v5", ["only the ALE/<Game>-v5 ids", "use ALE/Breakout-v5"]),
    # the game's registered spelling, and no made-up id where none is named
    ("ALE/pong", ["only the ALE/<Game>-v5 ids", "use ALE/Pong-v5"]),
    ("ALE/", ["only the ALE/<Game>-v5 ids", "pprint_registry"]),
])
def test_cli_refuses_atari_ids_it_cannot_run(env_id, words, capsys, tmp_path):
    refused(["--env", env_id, "--results-dir", str(tmp_path / "out"), "--no-plot"], capsys, *words)
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_bad_cnn_name(capsys, tmp_path):
    refused(["--env", PONG, "--set", "cnn=resnet", "--results-dir", str(tmp_path / "out")],
            capsys, "cnn must be a3c, nature or small")
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_bad_trunk_activation(capsys, tmp_path):
    refused(["--env", PONG, "--set", "trunk_activation=tanh", "--results-dir", str(tmp_path / "out")],
            capsys, "trunk_activation must be relu or elu")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("activation", ["relu", "elu"])
def test_the_trunk_uses_the_configured_activation_in_every_layer(activation):
    cfg = atari_config(workers=1, trunk_activation=activation)
    spec = pong_spec(cfg)
    sess, global_net, _ = build_session(spec, cfg)
    ops = [op.type for op in sess.graph.get_operations() if op.name.startswith("global/trunk/")]
    convolutions = len(networks.CNN_LAYERS[cfg.cnn][0])
    assert ops.count({"relu": "Relu", "elu": "Elu"}[activation]) == convolutions + 1, "and the fc"
    assert ops.count({"relu": "Elu", "elu": "Relu"}[activation]) == 0
    sess.close()


def test_a_run_saved_before_trunk_activation_existed_is_read_as_the_relu_net_it_trained(tmp_path):
    saved = dataclasses.asdict(config_module.config_for(PONG))
    assert saved.pop("trunk_activation") == "elu", "today's preset"
    assert config_module.from_dict(saved).trunk_activation == "relu"
    assert config_module.from_dict({**saved, "trunk_activation": "elu"}).trunk_activation == "elu"
    # what --resume and --eval read: a run folder's config.json without the field
    (tmp_path / "config.json").write_text(json.dumps({"env": PONG, "config": saved}))
    env_id, cfg = checkpoints.read_run(str(tmp_path))
    assert (env_id, cfg.trunk_activation) == (PONG, "relu")


def test_every_trunk_activation_the_config_accepts_has_an_op():
    assert set(networks.TRUNK_ACTIVATION_OPS) == set(config_module.TRUNK_ACTIVATIONS)


def test_returns_bootstrap_from_the_cnn_values_of_exactly_the_rows_they_need():
    """The CNN net computes V(s') only where an episode ended or the rollout does: the returns
    must be those of V(s') on every row."""
    cfg = atari_config(workers=1, envs_per_worker=3, n_steps=4, gamma=0.9, cnn="a3c")
    spec = pong_spec(cfg)
    sess, _, (worker,) = build_session(spec, cfg)
    sess.run(worker.pull)
    rng = np.random.default_rng(8)
    T, E = 4, 3
    next_obs = rng.integers(0, 256, (T * E, 4, 84, 84), dtype=np.uint8)
    rewards = rng.normal(size=(T, E)).astype(np.float32)
    ended = np.array([[0, 1, 0], [0, 0, 0], [1, 0, 0], [0, 0, 1]], np.float32)
    terminated = np.array([[0, 1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]], np.float32)  # env 0: cut
    got = sess.run(worker.returns, {worker.next_obs: next_obs, worker.rewards: rewards,
                                    worker.ended: ended, worker.terminated: terminated})
    values = sess.run(worker.value, {worker.obs: next_obs}).reshape(T, E)
    want = np.zeros((T, E))
    following = values[-1]
    for t in reversed(range(T)):
        bootstrap = ended[t] * values[t] + (1 - ended[t]) * following
        want[t] = rewards[t] + 0.9 * (1 - terminated[t]) * bootstrap
        following = want[t]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(values).max() > 1e-3, "values that matter"
    sess.close()


def test_throughput_variants_keep_list_values_whole_and_bad_ones_are_refused_before_timing(
        tmp_path, capsys, monkeypatch):
    import throughput

    def must_not_time(*args, **kwargs):
        raise AssertionError("a bad --variant or --set must be refused before anything is timed")

    for name in ("measure", "bare_atari", "bare_loop", "git_commit"):
        monkeypatch.setattr(throughput, name, must_not_time)

    assert throughput.variant_sets("actor_hidden=64,64,use_lstm=true") == ["actor_hidden=64,64",
                                                                           "use_lstm=true"]
    assert throughput.variant_sets("") == []
    for variant, says in (("workers=4", "set by the grid"), ("no_such_key=1", "unknown config key"),
                          ("use_lstm=maybe", "bad value"), ("gamma=2", "gamma must be in")):
        with pytest.raises(SystemExit) as exit_info:
            throughput.main(["--envs", PONG, "--workers", "2", "--envs-per-worker", "2",
                             "--variant", variant, "--out", str(tmp_path / "out")])
        assert exit_info.value.code == 2
        assert says in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # --set alone is checked the same way
        throughput.main(["--envs", PONG, "--set", "seed=3", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "--set: seed is set by the grid" in capsys.readouterr().err
    for flag in ("--workers", "--envs-per-worker", "--repeats"):  # a grid value that cannot run
        with pytest.raises(SystemExit) as exit_info:
            throughput.main(["--envs", PONG, flag, "0", "--out", str(tmp_path / "out")])
        assert exit_info.value.code == 2 and f"{flag} must be >= 1" in capsys.readouterr().err
    for env_id, says in (("Nope-v0", "cannot make environment 'Nope-v0'"),  # were tracebacks
                         ("FrozenLake-v1", "observation space Discrete(16) is not supported")):
        with pytest.raises(SystemExit) as exit_info:
            throughput.main(["--envs", PONG, env_id, "--out", str(tmp_path / "out")])
        assert exit_info.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists(), "refused before anything was timed or written"


def test_greedy_play_presses_fire_after_a_lost_life_where_the_game_needs_it():
    """In Breakout a ball is served only on FIRE: an argmax that never picks it would stand
    still after its first lost life until the game's frame limit. The envs of greedy play (the
    trials, --eval) press FIRE for it, so a game of NOOPs ends with every life lost; training's
    envs leave the actions alone."""
    cfg = atari_config(max_episode_steps=4000)

    def noop_game(greedy):
        envs = environments.make_envs("ALE/Breakout-v5", cfg, 1, greedy=greedy)
        try:
            envs.reset([3])
            for step in range(1, 4001):
                _, _, terminated, truncated = envs.step([0])
                if terminated[0] or truncated[0]:
                    return step, bool(terminated[0])
        finally:
            envs.close()

    steps, lost_every_life = noop_game(greedy=True)
    assert lost_every_life and steps < 2000, steps
    assert noop_game(greedy=False) == (4000, False), "cut at the limit, the game still going"
    pong = environments.make_envs(PONG, cfg, 1, greedy=True)  # Pong has FIRE but no lives to lose
    try:
        pong.reset([3])
        for _ in range(200):
            pong.step([0])
            assert not pong.life_lost.any() and not pong.standing_still.any()
    finally:
        pong.close()


def test_greedy_play_leaves_the_agents_actions_alone_while_the_game_moves():
    """SpaceInvaders has FIRE (it shoots) and lives; its invaders rest every other step, so a
    still frame alone is no sign of waiting. FIRE replaces random play only in the long freezes
    before a lost life or the game's end (the cannon's explosion)."""
    cfg = atari_config(repeat_action_probability=0.25)
    envs = environments.make_envs("ALE/SpaceInvaders-v5", cfg, 1, greedy=True)
    rng = np.random.default_rng(0)
    try:
        envs.reset([1])
        pressed, freezes_end = [], []
        for step in range(1500):
            if envs.life_lost[0] or envs.standing_still[0]:
                pressed.append(step)
            _, _, terminated, truncated = envs.step(rng.integers(0, envs.action_space.n, 1))
            if envs.life_lost[0] or terminated[0] or truncated[0]:
                freezes_end.append(step)
    finally:
        envs.close()
    assert pressed, "the explosions are long freezes"
    assert all(any(0 <= end - step <= 30 for end in freezes_end) or step - 1 in freezes_end
               for step in pressed), (pressed, freezes_end)


def test_greedy_play_presses_fire_again_when_sticky_actions_swallowed_it():
    """Sticky actions replace an action by the previous one frame by frame: a FIRE repeated away
    on all 4 frames of its step leaves Breakout waiting (0.4% of presses at 0.25; 32% at 0.75,
    used here). Greedy play presses FIRE again once nothing on the screen has moved for
    STILL_STEPS steps, so every game of NOOPs still ends with every life lost, long before its
    frame limit."""
    cfg = atari_config(max_episode_steps=1000, repeat_action_probability=0.75)
    envs = environments.make_envs("ALE/Breakout-v5", cfg, 8, greedy=True)
    try:
        envs.reset(list(range(8)))
        ended = np.zeros(8, bool)
        for _ in range(1000):
            _, _, terminated, truncated = envs.step([0] * 8)
            assert not truncated[~ended].any(), "a game stood still to its frame limit"
            ended |= terminated
            if ended.all():
                break
        assert ended.all()
    finally:
        envs.close()


def test_the_best_agent_trials_play_breakout_with_fire_after_a_lost_life(tmp_path):
    """The trials ask for greedy envs (what the test above checks), training's workers do not."""
    breakout = "ALE/Breakout-v5"
    cfg = atari_config(best_trial_episodes=1)
    probe = environments.make_envs(breakout, cfg, 1)
    spec = environments.env_spec(probe, breakout)
    probe.close()
    graph = sessions.tf.Graph()
    with graph.as_default():
        global_net, _ = a3c.build_graph(spec, cfg)
        _, best = checkpoints_and_best(str(tmp_path), cfg, breakout, global_net, spec)
    try:
        assert best.trial_envs.fire_after_life_loss
    finally:
        best.close()
    training = environments.make_envs(breakout, cfg, 1)
    try:
        assert not training.fire_after_life_loss
    finally:
        training.close()


def test_the_scoreboard_stops_a_run_started_in_the_background_at_its_stop(tmp_path, capsys,
                                                                          monkeypatch):
    """A shell's `cmd &` starts it with SIGINT ignored, and its runs inherit that: the
    scoreboard's stop (here 10 s of training) must still end the run, saved and resumable. (The
    run is of a variant: the preset with values changed, in a folder of its own.)"""
    import signal
    import threading
    monkeypatch.setattr(atari_scoreboard, "NOT_TRAINED", atari_scoreboard.NOT_TRAINED + ("workers",))
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    done = threading.Event()
    try:
        worker = threading.Thread(target=lambda: (atari_scoreboard.train(  # (2 workers: its
            str(tmp_path), PONG, 1, (18.0, 10 / 3600), workers=2, variant="lstm"),  # first
            done.set()), daemon=True)                                   # games end sooner)
        worker.start()
        worker.join(timeout=150)
    finally:
        signal.signal(signal.SIGINT, before)
    if not done.is_set():  # (the run ignored its stop: end it, and fail)
        os.system(f"pkill -TERM -f 'results-dir {tmp_path}'")
        worker.join(timeout=60)
        pytest.fail("the run went on past its stop")
    assert atari_scoreboard.run_folder(str(tmp_path), PONG, 1) is None, "not the preset's row"
    run_dir = atari_scoreboard.run_folder(str(tmp_path), PONG, 1, "lstm")
    assert run_dir.startswith(str(tmp_path / "lstm" / "ALE_Pong-v5"))
    assert checkpoints.read_run(run_dir)[1].use_lstm, "the variant's --set reached the run"
    assert glob.glob(os.path.join(run_dir, "checkpoints", "model-*.index")), "saved at the stop"
    assert atari_scoreboard.progress(run_dir)["hours"] >= 10 / 3600
    # a variant's run never stands for the preset's row, wherever it lies
    shutil.copytree(run_dir, tmp_path / "ALE_Pong-v5" / os.path.basename(run_dir))
    assert atari_scoreboard.run_folder(str(tmp_path), PONG, 1) is None
    with pytest.raises(SystemExit) as refusal:
        atari_scoreboard.main(["report", "--runs", str(tmp_path / "lstm"), "--no-save"])
    assert refusal.value.code == 2 and "the folder of a variant's runs" in capsys.readouterr().err


def test_the_scoreboard_tells_rows_apart_by_their_values_and_folders_not_by_budget(tmp_path):
    """Pong's rows of its earlier 40M-frame budget are a variant (max_steps): a run's budget is
    no part of what it trained (a resume may lengthen it), so a Pong run of any budget in the
    preset's folder is the preset's row, and one under 40M/ the 40M row, finished at 40M frames."""
    preset_run = write_run_folder(tmp_path / "preset", PONG, max_steps=2000)
    lstm_run = write_run_folder(tmp_path / "lstm", PONG, use_lstm=True, max_steps=2000)
    assert atari_scoreboard.of_variant(preset_run, PONG, "")
    assert atari_scoreboard.of_variant(preset_run, PONG, "40M")
    assert not atari_scoreboard.of_variant(lstm_run, PONG, "")
    assert not atari_scoreboard.of_variant(lstm_run, PONG, "40M")
    assert atari_scoreboard.budget(PONG) == config_module.config_for(PONG).max_steps == 12_500_000
    assert atari_scoreboard.budget(PONG, "40M") == 10_000_000
    assert atari_scoreboard.budget("ALE/SpaceInvaders-v5", "lstm") == 10_000_000
    assert atari_scoreboard.set_values("40M") == ["max_steps=10000000"]
    # Breakout's and SpaceInvaders' presets have the LSTM: their feed-forward runs are the
    # variant, Pong's LSTM runs
    assert [config_module.config_for(game).use_lstm for game in
            (PONG, "ALE/Breakout-v5", "ALE/SpaceInvaders-v5")] == [False, True, True]
    breakout_runs = {name: write_run_folder(tmp_path / f"breakout-{name}", "ALE/Breakout-v5",
                                            use_lstm=name == "lstm") for name in ("lstm", "ff")}
    assert atari_scoreboard.of_variant(breakout_runs["lstm"], "ALE/Breakout-v5", "")
    assert not atari_scoreboard.of_variant(breakout_runs["ff"], "ALE/Breakout-v5", "")
    assert atari_scoreboard.of_variant(breakout_runs["ff"], "ALE/Breakout-v5", "feed-forward")
    assert not atari_scoreboard.of_variant(breakout_runs["lstm"], "ALE/Breakout-v5", "feed-forward")
    # only folders named as a3c.py names runs count: a copy or a note would sort after them all
    runs = tmp_path / "runs" / "ALE_Pong-v5"
    runs.mkdir(parents=True)
    real = write_run_folder(runs / "20270101T000000Z-s1", PONG)
    (runs / "backup-s1").mkdir()
    (runs / "notes-s1").write_text("")
    assert atari_scoreboard.run_folder(str(tmp_path / "runs"), PONG, 1) == real
    again = write_run_folder(runs / "20270101T000000Z-s1-2", PONG)  # (a3c.py's within one second)
    assert atari_scoreboard.run_folder(str(tmp_path / "runs"), PONG, 1) == again
    for n in (9, 10):  # by number, not as text ("-10" < "-9")
        write_run_folder(runs / f"20270101T000000Z-s1-{n}", PONG)
    assert atari_scoreboard.run_folder(str(tmp_path / "runs"), PONG, 1).endswith("-s1-10")
    # a run of 40M frames (no game at +18) finished the 40M row's budget, not the preset's
    with open(tmp_path / "preset" / "episodes.csv", "w") as f:
        f.write(",".join(runlog.EPISODE_COLUMNS) + "\n")
        for index in range(150):
            f.write(f"0,{index + 1},{(index + 1) * 10_000_000 // 150},{index + 1.0},0,1000,5.0,1.0,0.5\n")
    stop = (18.0, 2.0)
    assert atari_scoreboard.finished(preset_run, stop, atari_scoreboard.budget(PONG, "40M"))
    assert not atari_scoreboard.finished(preset_run, stop, atari_scoreboard.budget(PONG))
    # a run of an episode budget: unfinished by steps, resumed with the row's budget in steps
    episodes_run = write_run_folder(tmp_path / "episodes", PONG, max_steps=None, max_episodes=100)
    (tmp_path / "episodes" / "episodes.csv").write_text(",".join(runlog.EPISODE_COLUMNS) + "\n")
    assert not atari_scoreboard.finished(episodes_run, stop)
    assert atari_scoreboard.a3c_command(str(tmp_path), PONG, 1, 8, "", episodes_run)[-4:] == [
        "--max-steps", "12500000", "--max-episodes", "0"]
    for name, steps in (("40M", 10_000_000), ("longer", 20_000_000)):  # its own budget, or more
        assert atari_scoreboard.a3c_command(str(tmp_path), PONG, 1, 8, "40M", write_run_folder(
            tmp_path / name, PONG, max_steps=steps))[2:] == ["--no-plot", "--resume",
                                                             str(tmp_path / name)]


def test_the_scoreboard_never_trains_an_earlier_presets_rows(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(atari_scoreboard.subprocess, "Popen", None)  # nothing may train
    (tmp_path / "runs").mkdir()
    (tmp_path / "atari_runs.json").write_text(json.dumps({f"{PONG} 2": {
        "run": None, "cells": ["20.0M"] + ["x"] * (atari_scoreboard.CELLS - 1), "curve": None,
        "finished": True, "gif": False}}))
    assert atari_scoreboard.main(["run", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path),
                                  "--games", PONG, "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{PONG} seed 2: finished (its row is kept" in out
    assert f"{PONG} seed 2 (40M): a row of an earlier preset, not trained again" in out
    assert not os.listdir(tmp_path / "runs")


@pytest.mark.parametrize("argv, words", [
    (["run", "--seeds", "9"], ["no row of the scoreboard has seed 9", "ALE/Pong-v5 1, 2, 3"]),
    (["run", "--games", "ALE/SpaceInvaders-v5", "--seeds", "2"], ["seed 2 of ALE/Space"]),
    (["run", "--games", "ALE/Breakout-v5", "--seeds", "1", "7"], ["has seed 7 of ALE/Breakout"]),
    (["run", "--games", "Pong"], ["not on the scoreboard: Pong", "its games: ALE/Pong-v5"]),
    (["report", "--seeds", "2"], ["report --seeds would rewrite atari.md", "--no-save"]),
    (["run", "--no-save"], ["--no-save is for report", "drop it"]),  # (it trained 50M frames)
])
def test_the_scoreboard_refuses_seeds_it_has_no_row_of_in_one_line(argv, words, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setattr(atari_scoreboard.subprocess, "Popen", None)  # nothing may train
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit) as refusal:
        atari_scoreboard.main(argv + ["--runs", str(tmp_path / "runs"), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert refusal.value.code == 2 and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err
    assert sorted(os.listdir(tmp_path)) == ["runs"] and not os.listdir(tmp_path / "runs")


def test_a_run_that_reached_its_stop_stays_finished_though_its_last_games_fell_below(tmp_path):
    """Games that end while a stopped run saves can take its last mean-100 under the goal
    (Pong seed 3 ended at 17.99 after reaching 18.02): `run` must not resume it."""
    running = [-21.0] * 150 + [18.02, 17.99]
    with open(tmp_path / "episodes.csv", "w") as f:
        f.write(",".join(runlog.EPISODE_COLUMNS) + "\n")
        for index, mean in enumerate(running):
            f.write(f"0,{index + 1},{(index + 1) * 1000},{index + 1.0},0,1000,{mean},1.0,0.5\n")
    assert atari_scoreboard.stop_reached(str(tmp_path), (18.0, 2.0))
    assert not atari_scoreboard.stop_reached(str(tmp_path), (18.5, 2.0))
    assert atari_scoreboard.stop_reached(str(tmp_path), (18.5, 152 / 3600))  # (its hours)


@pytest.mark.parametrize("damage", ["worker,episode\nx,y\n", "cut", "zeros", "no line end", ""])
def test_the_scoreboard_refuses_a_damaged_episodes_csv_in_one_line_and_writes_nothing(
        damage, tmp_path, capsys, monkeypatch):
    whole = ",".join(runlog.EPISODE_COLUMNS) + "\n" + "0,1,1000,1.0,0,1000,1.0,1.0,0.5\n"
    text = {"cut": whole + "0,2,20", "zeros": whole + "\0" * 200_000,
            "no line end": whole[:-1]}.get(damage, damage)
    folder = tmp_path / "runs" / "ALE_Pong-v5" / "20260101T000000Z-s1"
    folder.parent.mkdir(parents=True)
    write_run_folder(folder, PONG)
    (folder / "episodes.csv").write_text(text)
    (folder / "checkpoints").mkdir()  # (one `run` would resume)
    (folder / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-100"\n')
    monkeypatch.setattr(atari_scoreboard.subprocess, "Popen", None)  # `run` must not train it
    out = tmp_path / "results"
    out.mkdir()
    for what in (["report", "--out", str(out)], ["report", "--no-save", "--out", str(out)],
                 ["run", "--games", PONG, "--out", str(out)]):  # (out: no kept row stands over it)
        with pytest.raises(SystemExit) as refusal:
            atari_scoreboard.main(what[:1] + ["--runs", str(tmp_path / "runs")] + what[1:])
        assert refusal.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and len(err) < 600, "one line, no usage: " + err
        assert "episodes.csv" in err and "move that run folder out of --runs" in err
    import curve  # bench/curve.py, the one-run table: the same refusal
    assert curve.main([str(folder), "--name", "c", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "episodes.csv" in err and "Traceback" not in err
    assert os.listdir(out) == []


def test_the_curve_table_says_n_a_for_a_mean_over_more_games_than_ran_and_refuses_bad_names(
        tmp_path, capsys):
    """A name with a folder in it ended in a traceback, an empty one wrote hidden files; a run of
    fewer than 20 games showed its means as nan."""
    import curve
    folder = write_run_folder(tmp_path / "run", PONG)
    pong_csv(folder, 1000)
    out = tmp_path / "out"
    for name in ("", "a/b", ".md"):
        with pytest.raises(SystemExit) as refusal:
            curve.main([folder, "--name", name, "--out", str(out)])
        assert refusal.value.code == 2 and "is no file name" in capsys.readouterr().err
    assert not out.exists()
    assert curve.main([folder, "--name", "c", "--out", str(out)]) == 0
    table = (out / "c.md").read_text()
    assert "| 4,000 | 0.00 h | 4,000 | n/a | n/a | none | none |" in table and "nan" not in table


def test_the_curve_of_a_run_without_trials_or_frames_names_what_it_had(tmp_path):
    """A best agent picked without trial games was said to score "over 0" of them; a CartPole
    run's settings listed the Atari ones (cnn, sticky actions)."""
    import curve
    summary, _ = train("CartPole-v1", tmp_path / "runs", max_episodes=120, best_trial_episodes=0)
    out = tmp_path / "out"
    assert curve.main([summary["run_dir"], "--name", "c", "--levels", "20", "--out", str(out)]) == 0
    table = (out / "c.md").read_text()
    assert "no trials: its mean-100 " in table and "over 0" not in table
    assert re.search(r"actor \d+(x\d+)* at [\d.e-]+, critic \d+(x\d+)* at ", table), table
    assert "sticky" not in table and "cnn" not in table


def test_report_stopped_by_ctrl_c_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt  # (where a Ctrl-C lands while report evaluates)
    monkeypatch.setattr(atari_scoreboard, "write_report", interrupted)
    assert atari_scoreboard.main(["report", "--runs", str(tmp_path), "--no-save"]) == 130
    assert capsys.readouterr().err.strip() == "report stopped by Ctrl-C; run it again"


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT"])
def test_a_stop_that_comes_as_the_scoreboard_starts_its_run_stops_the_run_too(stop, tmp_path,
                                                                             monkeypatch):
    """A session's SIGTERM or a Ctrl-C that reaches the scoreboard while Popen starts a3c.py must
    not leave that run training unseen in its own session: it is stopped, and the scoreboard
    says so in one line."""
    import signal
    import subprocess
    started, real_popen = [], subprocess.Popen

    def popen_then_stop(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        os.kill(os.getpid(), getattr(signal, stop))  # (as Popen returns)
        return started[-1]

    monkeypatch.setattr(atari_scoreboard.subprocess, "Popen", popen_then_stop)
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, atari_scoreboard.on_sigterm)  # (as `run` has it)
    try:
        with pytest.raises(SystemExit) as stopped:
            atari_scoreboard.train(str(tmp_path), PONG, 1, (18.0, 1.0), workers=2)
    finally:  # (its stop ignores both from then on, as a scoreboard about to exit)
        for number, handler in before.items():
            signal.signal(number, handler)
        leaked = [child for child in started if child.poll() is None]
        for child in leaked:  # (end it, and fail below)
            child.kill()
            child.wait()
    assert len(started) == 1 and not leaked, "the run went on training after the scoreboard stopped"
    assert stopped.value.code == atari_scoreboard.INTERRUPTED


def test_the_scoreboard_stopped_by_ctrl_c_during_its_imports_says_so_in_one_line(tmp_path):
    """Its imports take seconds (TensorFlow): a Ctrl-C then ends it with a line, not a traceback
    through them, and nothing written."""
    from test_checkpoints import ctrl_c_while_starting
    code, err = ctrl_c_while_starting(atari_scoreboard.__file__, "report", "--runs", str(tmp_path),
                                      "--out", str(tmp_path))
    assert code == 130, err
    assert err.strip() == "atari_scoreboard.py: interrupted while starting: nothing was written", err
    assert os.listdir(tmp_path) == []


def test_the_scoreboard_stopped_by_ctrl_c_then_sigterm_lets_its_run_save_and_says_so(tmp_path):
    """A user's Ctrl-C (to the terminal's whole process group) and a session's SIGTERM right
    after it: one line that says how to go on, no traceback, and the run saved."""
    import signal
    import subprocess
    import sys
    import time
    scoreboard = subprocess.Popen(
        [sys.executable, atari_scoreboard.__file__, "run", "--runs", str(tmp_path), "--games", PONG,
         "--out", str(tmp_path)],  # (results/ keeps Pong seed 1 as finished)
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not glob.glob(str(tmp_path / "ALE_Pong-v5" / "*" / "episodes.csv")):
            assert scoreboard.poll() is None and time.monotonic() < deadline, "no run started"
            time.sleep(0.5)
        time.sleep(3)  # (its workers are playing)
        os.killpg(scoreboard.pid, signal.SIGINT)
        time.sleep(1)  # (were it passed on, a second signal past SAME_STOP_S would skip the save)
        scoreboard.send_signal(signal.SIGTERM)
        out, err = scoreboard.communicate(timeout=120)
    finally:  # (a run left behind would train for hours; it has a session of its own)
        os.system(f"pkill -KILL -f 'results-dir {tmp_path}'")
        try:
            os.killpg(scoreboard.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert "Traceback" not in err, err
    assert scoreboard.returncode == 130, err
    assert "stopped by Ctrl-C; `run` again continues the scoreboard" in err.splitlines()[-1]
    run_dir = atari_scoreboard.run_folder(str(tmp_path), PONG, 1)
    assert glob.glob(os.path.join(run_dir, "checkpoints", "model-*.index")), "saved at the stop"


def test_a_games_gif_is_of_its_first_finished_row_and_named_for_it(tmp_path):
    """A variant's run measured here must not replace the GIF of the game's first row, kept
    from an earlier report (the file is named for its row; the caption says whose agent)."""
    board = [atari_scoreboard.Entry("ALE/SpaceInvaders-v5", 1),
             atari_scoreboard.Entry("ALE/SpaceInvaders-v5", 1, variant="lstm"),
             atari_scoreboard.Entry(PONG, 1, (18.0, 2.0)), atari_scoreboard.Entry(PONG, 2, (18.0, 2.0))]
    preset, lstm, pong_1, pong_2 = board
    assert [atari_scoreboard.gif_name(entry) for entry in board] == [
        "atari_SpaceInvaders_s1.gif", "atari_SpaceInvaders_s1_lstm.gif", "atari_Pong_s1.gif",
        "atari_Pong_s2.gif"]
    measured = {lstm: ("folder", True), pong_1: ("folder", False)}  # (Pong 1 still training)
    records = {preset.key: {"finished": True}, pong_2.key: {"finished": True}}
    choices = lambda: atari_scoreboard.gif_choices(measured, records, str(tmp_path), board)
    assert choices() == {"ALE/SpaceInvaders-v5": lstm, PONG: pong_1}  # no kept GIF: made here
    for entry in (preset, pong_2):
        (tmp_path / atari_scoreboard.gif_name(entry)).write_bytes(b"GIF89a")
    assert choices() == {"ALE/SpaceInvaders-v5": preset, PONG: pong_2}
    records[pong_2.key]["finished"] = False  # a kept run still training: the one here goes first
    assert choices()[PONG] == pong_1


def test_a_failed_eval_does_not_replace_the_eval_kept_for_the_same_run(tmp_path, capsys):
    runs = tmp_path / "runs" / "ALE_Pong-v5"
    runs.mkdir(parents=True)
    folder = write_run_folder(runs / "20270101T000000Z-s1", PONG)  # (no checkpoints: no eval)
    with open(os.path.join(folder, "episodes.csv"), "w") as f:
        f.write(",".join(runlog.EPISODE_COLUMNS) + "\n")
        for index in range(3):
            f.write(f"0,{index + 1},{(index + 1) * 1000},{index + 1.0},-21,1000,-21.0,1.0,0.5\n")
    board = [atari_scoreboard.Entry(PONG, 1, (18.0, 2.0))]
    kept = {"run": "20270101T000000Z-s1", "cells": ["x"] * 9 + ["-20.5", "-19.5"], "curve": None,
            "finished": False, "gif": False}
    dashed = {**kept, "cells": ["x"] * 9 + ["-20.5", "—"]}  # (kept before the sampled eval)
    for records, evals in (({}, ("none:", "none:")), ({board[0].key: kept}, ("-20.5", "-19.5")),
                           ({board[0].key: dashed}, ("-20.5", "none:"))):
        table = atari_scoreboard.report(str(tmp_path / "runs"), str(tmp_path), False, records, board)
        cells = [cell.strip() for cell in table.splitlines()[2].strip("|").split("|")]
        for index, want in zip((atari_scoreboard.BEST_EVAL, atari_scoreboard.FINAL_SAMPLED), evals):
            shown = cells[2 + index]  # a failed eval's own error, or exactly the kept value
            assert shown.startswith(want) if want == "none:" else shown == want, table
        # a run short of its budget and stop says so: not "never" reached, not yet
        assert "| 0.0M (unfinished) |" in table and "| not yet | not yet |" in table
    assert "the eval kept for this run in atari_runs.json stays" in capsys.readouterr().err


def pong_csv(folder, steps):
    with open(os.path.join(folder, "episodes.csv"), "w") as f:
        f.write(",".join(runlog.EPISODE_COLUMNS) + "\n")
        f.write(f"0,1,{steps},1.0,-21,1000,-21.0,1.0,0.5\n")


def test_the_scoreboard_says_which_run_folders_no_row_looks_in(tmp_path, capsys):
    """SpaceInvaders' LSTM runs went under RUNS/lstm/ while the LSTM was its variant: once its
    preset had the LSTM no row looked there, and `run` would train the row anew without a word."""
    (tmp_path / "lstm" / "ALE_SpaceInvaders-v5").mkdir(parents=True)
    (tmp_path / "ALE_SpaceInvaders-v5").mkdir()
    write_run_folder(tmp_path / "lstm" / "ALE_SpaceInvaders-v5" / "20270101T000000Z-s1",
                     "ALE/SpaceInvaders-v5")
    write_run_folder(tmp_path / "ALE_SpaceInvaders-v5" / "20270101T000000Z-s1",
                     "ALE/SpaceInvaders-v5")  # (a folder of a row: no word here)
    atari_scoreboard.say_rowless_folders(str(tmp_path), ["ALE/SpaceInvaders-v5", PONG])
    said = capsys.readouterr().err.splitlines()
    assert said == [f"{tmp_path / 'lstm' / 'ALE_SpaceInvaders-v5'}: no row of the scoreboard "
                    f"runs ALE/SpaceInvaders-v5 with the variant lstm (its rows: 1, 1 "
                    f"(feed-forward)); its runs are left out (docs/atari.md says where a row's "
                    f"runs go)"]


def test_a_report_of_some_games_names_only_the_variants_of_their_rows(tmp_path, capsys):
    assert atari_scoreboard.main(["report", "--runs", str(tmp_path), "--games", "ALE/Breakout-v5",
                                  "--no-save"]) == 0
    header = capsys.readouterr().out.split("\n\n")[1]
    assert "feed-forward: use_lstm=false" in header and "40M" not in header.split("changed:")[1]


def test_a_row_counts_only_folders_that_trained_its_values_and_says_which_it_left_out(
        tmp_path, capsys):
    runs = tmp_path / "ALE_Pong-v5"
    runs.mkdir()
    real = write_run_folder(runs / "20270101T000000Z-s1", PONG)
    other = write_run_folder(runs / "20270101T000001Z-s1", PONG, shared_lr=1e-3,
                             max_steps=5, checkpoint_every_s=1.0)  # (the last two: not compared)
    assert atari_scoreboard.run_folder(str(tmp_path), PONG, 1) == real
    assert f"{other} is not a run of the row ALE/Pong-v5 seed 1: shared_lr=0.001 (the row's: " \
        "0.002); left out" in capsys.readouterr().err
    write_run_folder(runs / "20270101T000002Z-s1", PONG, max_steps=5, checkpoint_every_s=1.0,
                     pin_threads=True, seed=7)
    assert atari_scoreboard.run_folder(str(tmp_path), PONG, 1).endswith("000002Z-s1")
    # nor the fields a CNN's run does not use (the MLPs', sigma's): a change to a classic-control
    # default must not drop every Atari run; a config.json from before lstm_input_hidden existed
    newest = write_run_folder(runs / "20270101T000003Z-s1", PONG, actor_lr=1.0, use_sde=True)
    saved = json.loads((runs / "20270101T000003Z-s1" / "config.json").read_text())
    del saved["config"]["lstm_input_hidden"]
    (runs / "20270101T000003Z-s1" / "config.json").write_text(json.dumps(saved))
    assert atari_scoreboard.run_folder(str(tmp_path), PONG, 1) == newest


def test_a_new_run_is_not_stopped_by_the_stop_an_older_folder_of_its_row_reached(tmp_path,
                                                                                 monkeypatch):
    """`run` starts a new run beside an older folder (a kept row stands over it): until a3c.py
    has made its folder, the row's newest is the older one, whose stop is not the new run's."""
    runs = tmp_path / "ALE_Pong-v5"
    runs.mkdir()
    pong_csv(write_run_folder(runs / "20270101T000000Z-s1", PONG), 1000)  # wall 1 s: past the stop
    monkeypatch.setattr(atari_scoreboard, "POLL_S", 0.2)
    monkeypatch.setattr(atari_scoreboard, "a3c_command",  # (a3c.py's stand-in: makes no folder)
                        lambda *args: ["sleep", "1.5"])
    atari_scoreboard.train(str(tmp_path), PONG, 1, (18.0, 1e-7), resume=False)  # (status 0)


def test_a_run_in_its_last_hundredth_is_finished_as_a3c_would_not_resume_it(tmp_path):
    """Past it its rates are annealed below 1%: a3c.py refuses the resume
    (checkpoints.resume_point), so `run` would fail on the row at every try and never reach the
    next. At exactly 1% a3c.py still resumes it."""
    folder = write_run_folder(tmp_path / "run", PONG)
    steps = atari_scoreboard.budget(PONG)
    for fraction, done in ((0.98, False), (1 - checkpoints.LEAST_RATE_FRACTION, False),
                           (0.995, True), (1.0, True)):
        pong_csv(folder, int(fraction * steps))
        assert atari_scoreboard.finished(folder, (18.0, 2.0), steps) == done


def test_run_starts_a_new_run_where_report_measures_the_kept_one_over_an_older_folder(
        tmp_path, capsys, monkeypatch):
    """A kept row still training (its folder on another machine) and, here, a folder that started
    before it: report keeps the kept row, so resuming the older folder would train hours that no
    report shows."""
    runs, out = tmp_path / "runs", tmp_path / "out"
    (runs / "ALE_Pong-v5").mkdir(parents=True)
    out.mkdir()
    older = write_run_folder(runs / "ALE_Pong-v5" / "20270101T000000Z-s1", PONG)
    pong_csv(older, 1000)
    os.makedirs(os.path.join(older, "checkpoints"))
    open(os.path.join(older, "checkpoints", "checkpoint"), "w").close()
    kept = {"run": "20270202T000000Z-s1", "cells": ["8.0M"] + ["x"] * 9, "curve": None,
            "finished": False, "gif": False}
    (out / "atari_runs.json").write_text(json.dumps({f"{PONG} 1": kept}))
    monkeypatch.setattr(atari_scoreboard.subprocess, "Popen", None)  # nothing may train
    with pytest.raises(TypeError):
        atari_scoreboard.main(["run", "--runs", str(runs), "--games", PONG, "--seeds", "1",
                               "--out", str(out)])
    said = capsys.readouterr().out
    assert "started before the run kept in atari_runs.json" in said and "a new run starts" in said
    assert "--env ALE/Pong-v5 --seed 1" in said and "--resume" not in said


def test_every_kept_row_is_a_row_of_the_scoreboard():
    """results/atari_runs.json's keys are renamed by hand when rows change (Breakout's LSTM
    became its preset): a key no row has would be a row lost from the table."""
    kept = atari_scoreboard.load_records(os.path.join(atari_scoreboard.ROOT, "results"))
    assert kept and set(kept) <= {entry.key for entry in atari_scoreboard.SCOREBOARD}


def test_a_row_kept_before_the_sampled_eval_existed_loads_with_a_dash_there(tmp_path):
    row = {"run": "20270101T000000Z-s1", "cells": ["8.0M"] + ["x"] * 8 + ["-20.5"], "curve": None,
           "finished": True, "gif": False}  # (its ten cells: the eval of the best last)
    (tmp_path / "atari_runs.json").write_text(json.dumps({f"{PONG} 1": row}))
    kept = atari_scoreboard.load_records(str(tmp_path))[f"{PONG} 1"]["cells"]
    assert len(kept) == atari_scoreboard.CELLS
    assert kept[atari_scoreboard.BEST_EVAL] == "-20.5"
    assert kept[atari_scoreboard.FINAL_SAMPLED] == "—"
    (tmp_path / "atari_runs.json").write_text(json.dumps({f"{PONG} 1": {**row, "cells": ["8.0M"]}}))
    with pytest.raises(atari_scoreboard.UsageError):
        atari_scoreboard.load_records(str(tmp_path))


def test_report_refuses_an_out_folder_that_is_not_there_even_without_saving(tmp_path, capsys):
    """--no-save still reads the kept rows in --out: a mistyped one would show every kept row
    as not run."""
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit) as refusal:
        atari_scoreboard.main(["report", "--runs", str(tmp_path / "runs"), "--no-save",
                               "--out", str(tmp_path / "typo")])
    err = capsys.readouterr().err
    assert refusal.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "typo is not a folder" in err and "atari_runs.json" in err
