"""Checkpoints of the global net, and --eval of a trained run."""
import glob
import json
import os
import shutil
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from dataclasses import replace as dataclasses_replace
from PIL import Image

import a3c
import best_agent
import checkpoints
import config
import console
import environments
import evaluation
import runlog
import sessions
from envs import InterruptingEnv, InterruptsTheFinalTrialsEnv, RecordingEnv
from graphs import checkpoints_and_best
from test_training import read_rows, refused, run_cli, train


@pytest.fixture(scope="module")
def trained_run_and_console(tmp_path_factory):
    """A short CartPole run (~500 episodes) that checkpoints every 0.2 s and keeps the newest 2;
    after the first trial for its best checkpoint (from episode 100), the rate limit holds the
    others back until the end of the run, whose last candidates are tried then."""
    summary, console = train("CartPole-v1", tmp_path_factory.mktemp("runs"), max_episodes=None,
                             max_steps=12_000, checkpoint_every_s=0.2, keep_checkpoints=2,
                             log_every_s=0.2, best_checkpoint_every_s=3600)
    return summary, console


@pytest.fixture(scope="module")
def trained_run(trained_run_and_console):
    return trained_run_and_console[0]["run_dir"]


def test_the_summary_names_the_best_checkpoint_written_at_the_end(trained_run_and_console):
    summary, console = trained_run_and_console
    assert summary["best_checkpoint"] == os.path.join(summary["run_dir"], "checkpoints", "best")
    with open(os.path.join(summary["best_checkpoint"], best_agent.BEST_INFO)) as f:
        info = json.load(f)
    assert console.splitlines()[-2] == (
        f"best agent: deterministic return {info['score']:.1f} over 50 trial episodes, the net "
        f"of episode {info['episode']:,} (mean-100 {info['mean_100']:.1f}); its checkpoint "
        f"(what --eval plays) is in {summary['best_checkpoint']}")
    rows = runlog.read_episodes(os.path.join(summary["run_dir"], "episodes.csv"))
    assert info["episode"] >= 100 and info["trial_episodes"] == 50
    assert info["mean_100"] == pytest.approx(rows["running_return"][info["episode"] - 1], abs=1e-4)
    assert 8.0 <= info["score"] <= 500.0, "CartPole returns lie in [8, 500]"
    assert checkpoints.latest_checkpoint(summary["best_checkpoint"]).endswith(info["checkpoint"])


def test_the_best_checkpoint_plays_its_trial_score_again(trained_run):
    """What best/ holds is the very net that scored best.json's score in its trials."""
    env_id, cfg = checkpoints.read_run(trained_run)
    folder = os.path.join(trained_run, checkpoints.CHECKPOINT_FOLDER, best_agent.BEST_FOLDER)
    with open(os.path.join(folder, best_agent.BEST_INFO)) as f:
        info = json.load(f)
    env = environments.make_envs(env_id, cfg, 1)
    spec = environments.env_spec(env, env_id)
    graph = sessions.tf.Graph()
    with graph.as_default():
        net = a3c.ACNet("global", spec, cfg)
        saver = sessions.v1.train.Saver(var_list=net.params)
    with sessions.v1.Session(graph=graph) as sess:
        saver.restore(sess, checkpoints.latest_checkpoint(folder))
        greedy = best_agent.GreedyPlayer(sess, net, 1, spec.obs_dtype)
        returns, _ = best_agent.play_episodes(env, greedy, info["trial_episodes"], False,
                                              first_seed=best_agent.TRIAL_SEED)
    env.close()
    assert np.mean(returns) == pytest.approx(info["score"], rel=1e-6)


def test_a_short_run_says_it_has_no_best_checkpoint(tmp_path):
    summary, console = train("A3CTest/Countdown-v0", tmp_path, max_episodes=20)
    assert console.splitlines()[-2] == "no best checkpoint: fewer than 100 episodes, so no full mean-100"
    assert not os.path.exists(os.path.join(summary["run_dir"], "checkpoints", "best"))


def test_a_run_keeps_its_newest_checkpoints(trained_run):
    folder = os.path.join(trained_run, checkpoints.CHECKPOINT_FOLDER)
    indexes = glob.glob(os.path.join(folder, "model-*.index"))
    assert 1 <= len(indexes) <= 2
    latest = sessions.v1.train.latest_checkpoint(folder)
    assert latest is not None and latest + ".index" in indexes
    assert latest.endswith("-12000") or int(latest.rsplit("-", 1)[1]) >= 12_000, "the final save"


def test_eval_plays_the_deterministic_policy_and_records_an_animation(trained_run, capsys):
    assert a3c.main(["--eval", trained_run, "--episodes", "3", "--record"]) == 0
    first = capsys.readouterr().out
    assert "CartPole-v1" in first and "over 3 episodes" in first
    with Image.open(os.path.join(trained_run, "episode.gif")) as gif:
        frames = gif.n_frames
        first_frame = np.asarray(gif.convert("RGB"), np.int16)
    assert frames > 1

    def differs(seed):  # from the first frame of an episode started from seed, in pixels
        env = gym.make("CartPole-v1", render_mode="rgb_array")
        env.reset(seed=seed)
        drawn = env.render().astype(np.int16)
        env.close()
        assert first_frame.shape == drawn.shape
        return (np.abs(first_frame - drawn).max(axis=-1) > 32).mean()
    # the first episode's seed: the frame the GIF starts with, its colours kept
    assert differs(best_agent.EVAL_SEED) < 1e-4 < differs(best_agent.EVAL_SEED + 1)  # (0 and 1.8e-3 here)
    again = a3c.evaluate(trained_run, episodes=3)
    assert again["returns"] == a3c.evaluate(trained_run, episodes=3)["returns"], "deterministic"


def test_eval_cuts_an_episode_of_an_env_without_a_time_limit_and_says_so(tmp_path, monkeypatch,
                                                                         capsys):
    """A deterministic policy may never end an episode of an env without a time limit (a
    balancing task, a module:Env-v0 registered without one): --eval must not play it forever."""
    summary, _ = train("A3CTest/Endless-v0", tmp_path, max_episodes=None, max_steps=400,
                       best_trial_episodes=0)
    monkeypatch.setattr(best_agent, "TRIAL_STEP_LIMIT", 300)  # (27,000 in play: ALE's limit)
    capsys.readouterr()
    result = a3c.evaluate(summary["run_dir"], episodes=2, checkpoint="latest")
    assert result["returns"] == [300.0, 300.0]
    err = capsys.readouterr().err
    assert "2 of the 2 episodes were still going after 300 steps and were cut there" in err


def test_eval_plays_an_episode_to_the_envs_own_time_limit_past_the_cap(tmp_path, monkeypatch,
                                                                         capsys):
    summary, _ = train("A3CTest/EndlessTo400-v0", tmp_path, max_episodes=None, max_steps=400,
                       best_trial_episodes=0)
    monkeypatch.setattr(best_agent, "TRIAL_STEP_LIMIT", 300)  # below the env's 400
    capsys.readouterr()
    result = a3c.evaluate(summary["run_dir"], episodes=1, checkpoint="latest")
    assert result["returns"] == [400.0] and "cut there" not in capsys.readouterr().err


def test_the_best_agent_trials_play_an_episode_to_the_envs_own_time_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(best_agent, "TRIAL_STEP_LIMIT", 300)  # below the env's 400
    summary, _ = train("A3CTest/EndlessTo400-v0", tmp_path, max_episodes=110, best_trial_episodes=1)
    with open(os.path.join(summary["run_dir"], "checkpoints", "best", "best.json")) as f:
        assert json.load(f)["score"] == 400.0


class RecordedSampledPlayer(best_agent.SampledPlayer):
    """A SampledPlayer that keeps the fraction each one was made with (the tests below put it
    into evaluation.py)."""
    made = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordedSampledPlayer.made.append(
            args[6] if len(args) > 6 else kwargs.get("lr_fraction", 1.0))


def test_eval_stochastic_samples_the_policy_and_replays_the_same_draws(trained_run, capsys,
                                                                       monkeypatch):
    monkeypatch.setattr(evaluation, "SampledPlayer", RecordedSampledPlayer)
    RecordedSampledPlayer.made = []
    assert a3c.main(["--eval", trained_run, "--episodes", "4", "--stochastic"]) == 0
    assert "stochastic policy of" in capsys.readouterr().out
    sampled = a3c.evaluate(trained_run, episodes=4, stochastic=True)
    assert len(RecordedSampledPlayer.made) == 2, "a SampledPlayer played"
    greedy = a3c.evaluate(trained_run, episodes=4)
    assert sampled["policy"] == "stochastic" and greedy["policy"] == "deterministic"
    assert sampled["returns"] == a3c.evaluate(trained_run, episodes=4, stochastic=True)["returns"]
    assert len(RecordedSampledPlayer.made) == 3 and sampled["returns"] != greedy["returns"]


def test_eval_stochastic_narrows_sigma_as_training_had_at_the_checkpoint(tmp_path, monkeypatch):
    """Pendulum's preset narrows sigma with the annealed rates (final_sigma_scale): the latest
    checkpoint and best.json hold the fraction, and --eval --stochastic plays with it."""
    summary, _ = train("Pendulum-v1", tmp_path, max_episodes=None, max_steps=30_000,
                       best_checkpoint_every_s=3600, checkpoint_every_s=0.1, keep_checkpoints=100)
    run_dir = summary["run_dir"]
    latest = checkpoints.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    assert sessions.v1.train.load_variable(latest, checkpoints.LR_FRACTION_VARIABLE) == 0.0, \
        "annealed to its end"
    periodic = [path[:-len(".index")] for path in glob.glob(
        os.path.join(run_dir, "checkpoints", "model-*.index")) if path[:-len(".index")] != latest]
    assert periodic, "checkpoints saved during the run"
    for path in periodic:  # each at the fraction of its moment (a rollout's steps either way)
        steps = int(path.rsplit("-", 1)[1])
        assert sessions.v1.train.load_variable(path, checkpoints.LR_FRACTION_VARIABLE) == \
            pytest.approx(1 - steps / 30_000, abs=0.02), path
    best = best_agent.read_best_info(os.path.join(run_dir, "checkpoints", "best"))
    # the net is copied at or after the moment of the mean-100 it is labelled with (later when a
    # round holds the copy lock, or the host is loaded): its fraction is that moment's or less
    assert 0.0 <= best["lr_fraction"] <= 1 - best["env_steps"] / 30_000 + 0.02
    monkeypatch.setattr(evaluation, "SampledPlayer", RecordedSampledPlayer)
    RecordedSampledPlayer.made = []
    a3c.evaluate(run_dir, episodes=1, stochastic=True, checkpoint="latest")
    a3c.evaluate(run_dir, episodes=1, stochastic=True)
    assert RecordedSampledPlayer.made == [0.0, pytest.approx(best["lr_fraction"])]
    # resumed without annealing: its checkpoints hold 1 (sigma as trained since), an earlier
    # one keeps its own, whatever the run's config now says
    assert a3c.main(["--resume", run_dir, "--set", "anneal_lr=false", "--max-steps", "33000",
                     "--no-plot"]) == 0
    RecordedSampledPlayer.made = []
    a3c.evaluate(run_dir, episodes=1, stochastic=True, checkpoint="latest")
    a3c.evaluate(run_dir, episodes=1, stochastic=True, checkpoint=latest)
    assert RecordedSampledPlayer.made == [1.0, 0.0]


def player_of_a_new_net(env_id, **fields):
    """(session, net, spec, env) of an untrained global net for env_id: its sigma or logits as
    initialised, so that sampled actions spread."""
    cfg = dataclasses_replace(config.config_for(env_id), **fields)
    env = environments.make_envs(env_id, cfg, 1)
    spec = environments.env_spec(env, env_id)
    graph = sessions.tf.Graph()
    graph.seed = 0
    with graph.as_default():
        net = a3c.ACNet("global", spec, cfg)
        init = sessions.v1.global_variables_initializer()
    sess = sessions.v1.Session(graph=graph)
    sess.run(init)
    return sess, net, spec, env


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_the_sampled_player_draws_actions_the_greedy_player_does_not(env_id):
    sess, net, spec, env = player_of_a_new_net(env_id, use_sde=False)
    obs = env.reset([0])
    greedy = best_agent.GreedyPlayer(sess, net, 1, spec.obs_dtype)
    sampled = best_agent.SampledPlayer(sess, net, 1, spec.obs_dtype, noise_every=5, seed=0)
    greedy_actions = np.array([greedy(obs) for _ in range(50)])
    sampled_actions = np.array([sampled(obs) for _ in range(50)])
    sess.close()
    env.close()
    assert len(np.unique(greedy_actions)) == 1
    assert len(np.unique(sampled_actions)) > 1
    low, high = ((0, spec.n_actions - 1) if spec.action_low is None
                 else (spec.action_low, spec.action_high))  # the env's actions, as it gets them
    assert np.all(sampled_actions >= low) and np.all(sampled_actions <= high)


def test_the_sampled_player_draws_gsde_noise_every_n_steps_and_at_each_start():
    sess, net, spec, env = player_of_a_new_net("Pendulum-v1", use_sde=True)
    obs = env.reset([0])
    sampled = best_agent.SampledPlayer(sess, net, 1, spec.obs_dtype, noise_every=3, seed=0)
    blocks, matrices = [], []
    for _ in range(30):
        block = [float(sampled(obs)[0, 0]) for _ in range(3)]
        blocks.append(block)
        matrices.append(sampled.matrix)
    sampled(obs)  # a block begun: start() draws anew all the same
    begun = sampled.matrix
    sampled.start()
    sampled(obs)
    restarted = sampled.matrix
    sampled(obs)
    twin = best_agent.SampledPlayer(sess, net, 1, spec.obs_dtype, noise_every=3, seed=0)
    other = best_agent.SampledPlayer(sess, net, 1, spec.obs_dtype, noise_every=3, seed=1)
    twin(obs), other(obs)
    sess.close()
    env.close()
    assert all(not np.array_equal(a, b) for a, b in zip(matrices, matrices[1:]))
    assert not np.array_equal(restarted, begun) and sampled.matrix is restarted
    assert np.array_equal(twin.matrix, matrices[0])
    assert not np.array_equal(other.matrix, matrices[0])
    # one matrix, the same state: nearly the same action (the floor's noise alone); a new one
    # moves it
    within = np.median([max(block) - min(block) for block in blocks])
    assert within < 0.1 < np.std([block[0] for block in blocks]) / 5


def test_the_sampled_player_narrows_sigma_with_the_fraction_it_is_given():
    sess, net, spec, env = player_of_a_new_net("Pendulum-v1", use_sde=False, initial_sigma=0.2)
    assert net.policy.uses_schedule, "Pendulum's preset: final_sigma_scale < 1"
    obs = env.reset([0])
    spread = {fraction: np.std([best_agent.SampledPlayer(
        sess, net, 1, spec.obs_dtype, noise_every=5, seed=0, lr_fraction=fraction)(obs)[0, 0]
        for _ in range(400)]) for fraction in (1.0, 0.0)}
    sess.close()
    env.close()
    scale = config.config_for("Pendulum-v1").final_sigma_scale
    assert spread[0.0] / spread[1.0] == pytest.approx(scale, rel=0.25)


def greedy_returns_from_the_checkpoint_by_hand(checkpoint, activation, episodes):
    """CartPole played with argmax of the actor's logits, computed in NumPy from the weights."""
    import gymnasium as gym

    def weight(name):
        return sessions.v1.train.load_variable(checkpoint, f"global/actor/{name}")
    returns = []
    env = gym.make("CartPole-v1")
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)
        total, done = 0.0, False
        while not done:
            pre_activation = obs.astype(np.float32) @ weight("mlp/h0/w") + weight("mlp/h0/b")
            hidden = {"relu": lambda x: np.maximum(x, 0), "tanh": np.tanh}[activation](pre_activation)
            action = int(np.argmax(hidden @ weight("logits/w") + weight("logits/b")))
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    return returns


def test_eval_plays_exactly_the_policy_stored_in_the_checkpoint(trained_run):
    result = a3c.evaluate(trained_run, episodes=3)
    assert result["returns"] == greedy_returns_from_the_checkpoint_by_hand(
        result["checkpoint"], checkpoints.read_run(trained_run)[1].hidden_activation, 3)


def test_a_restore_brings_back_the_global_net_its_rmsprop_slots_and_the_step_count(
        trained_run_and_console):
    summary = trained_run_and_console[0]
    trained_run = summary["run_dir"]
    env_id, cfg = checkpoints.read_run(trained_run)
    spec = environments.env_spec(environments.make_env(env_id, cfg), env_id)
    graph = sessions.tf.Graph()
    with graph.as_default():
        global_net, _ = a3c.build_graph(spec, cfg)
        saved, best = checkpoints_and_best(trained_run, cfg, env_id, global_net, spec)
        init = sessions.v1.global_variables_initializer()
    sess = sessions.v1.Session(graph=graph)
    sess.run(init)
    latest = checkpoints.latest_checkpoint(saved.folder)
    names = [v.op.name for v in saved.shared]
    slots = [name for name in names if "RMSProp" in name]
    params = [name for name in names if name.startswith("global/") and name not in slots]
    assert len(params) == 8 and len(slots) == 2 * len(params), names  # mean square, momentum
    fresh = dict(zip(names, sess.run(saved.shared)))
    steps, wall_s, lr_fraction = saved.restore(sess)
    assert steps == int(latest.rsplit("-", 1)[1])
    # the final checkpoint holds the run's clock as it stopped, where a resume goes on from
    assert wall_s == pytest.approx(summary["wall_s"])
    assert lr_fraction == sessions.v1.train.load_variable(latest, checkpoints.LR_FRACTION_VARIABLE)
    restored = dict(zip(names, sess.run(saved.shared)))
    sess.close()
    best.close()
    for name in names:
        stored = sessions.v1.train.load_variable(latest, name)
        assert np.array_equal(restored[name], stored), name
    assert all(not np.array_equal(fresh[n], restored[n]) for n in names if n.startswith("global/"))


def test_a_resume_goes_on_at_no_higher_a_rate_than_its_checkpoint_was_trained_at(trained_run):
    """The fraction in force only falls, while the one worked out again from the CSV can come out
    higher (an episode budget converted with a mean episode length that grew): the rates jumped
    up at the resume."""
    _, cfg = checkpoints.read_run(trained_run)
    earlier = checkpoints.read_run_info(trained_run)
    latest = checkpoints.latest_checkpoint(os.path.join(trained_run, "checkpoints"))
    steps = int(latest.rsplit("-", 1)[1])
    saved = float(sessions.v1.train.load_variable(latest, checkpoints.LR_FRACTION_VARIABLE))
    longer = dataclasses_replace(cfg, max_steps=2 * cfg.max_steps)
    assert cfg.anneal_lr and cfg.anneal_steps  # (the schedule is the same: only the budget grew)
    worked_out = checkpoints.resume_point(trained_run, longer, earlier, steps).anneal_start
    assert worked_out.lr_fraction == pytest.approx(saved, abs=0.01) and saved < 1
    held = checkpoints.resume_point(trained_run, longer, earlier, steps, 0.0, saved / 2)
    assert held.anneal_start.lr_fraction == pytest.approx(saved / 2)


def test_eval_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    refused(["--eval", str(tmp_path / "missing")], capsys, "not a readable run folder")


@pytest.mark.parametrize("saved, words", [
    ({}, "its config.json has no 'config' entry"),
    ({"config": {}}, "its config.json has no 'env' entry"),
])
def test_eval_names_what_a_config_json_lacks(saved, words, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(saved))
    refused(["--eval", str(tmp_path)], capsys, "not a readable run folder", words)


@pytest.mark.parametrize("edit, words", [
    (lambda saved: saved.update(env=5), "its env is 5, not an env id"),
    (lambda saved: saved.update(resumed="x"), "its resumed entry is not the list of resumes"),
    (lambda saved: saved.update(resumed=[{"anneal_start": {"lr_fraction": "half"}}]),
     "its resumed entry is not the list of resumes"),
    (lambda saved: saved["config"].update(workers=2.5), "workers must be of type int, got 2.5"),
    (lambda saved: saved["config"].update(use_lstm=1), "use_lstm must be of type bool, got 1"),
])
@pytest.mark.parametrize("flag", ["--eval", "--resume"])
def test_a_config_json_edited_to_values_of_the_wrong_type_is_refused(edit, words, flag, trained_run,
                                                                      tmp_path, capsys):
    """They crashed --eval or --resume with a traceback (an int env id, a resumed entry that is
    no list, a float worker count: a3c.py writes none of them)."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    with open(run / "config.json") as f:
        saved = json.load(f)
    edit(saved)
    (run / "config.json").write_text(json.dumps(saved))
    before = sorted(os.listdir(run))
    refused([flag, str(run)] + (["--max-steps", "99999999"] if flag == "--resume" else []),
            capsys, "not a readable run folder", words)
    assert sorted(os.listdir(run)) == before


def test_a_config_json_with_an_empty_list_of_resumes_resumes(trained_run, tmp_path):
    """(An annealed run's resume read the last of them: IndexError.)"""
    run = str(copy_run(trained_run, tmp_path / "run"))
    with open(os.path.join(run, "config.json")) as f:
        saved = json.load(f)
    assert saved["config"]["anneal_lr"]
    saved["resumed"] = []
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump(saved, f)
    assert a3c.main(["--resume", run, "--max-steps", "13000", "--no-plot"]) == 0


def test_eval_refuses_a_run_without_checkpoints(trained_run, tmp_path, capsys):
    empty_run = tmp_path / "run"
    empty_run.mkdir()
    (empty_run / "config.json").write_text(open(os.path.join(trained_run, "config.json")).read())
    refused(["--eval", str(empty_run)], capsys, "no checkpoint")


def copy_run(trained_run, destination):
    shutil.copytree(trained_run, destination)
    return destination


def test_a_moved_run_folder_can_still_be_evaluated_and_resumed(tmp_path, capsys):
    summary, _ = train("CartPole-v1", tmp_path / "first", max_episodes=10)
    moved = str(tmp_path / "elsewhere" / "run")
    shutil.move(summary["run_dir"], moved)
    assert not os.path.exists(summary["run_dir"])
    assert a3c.main(["--eval", moved, "--episodes", "1"]) == 0
    assert a3c.main(["--resume", moved, "--max-episodes", "20", "--no-plot"]) == 0
    assert len(read_rows(moved)) == 21
    with open(os.path.join(moved, checkpoints.CHECKPOINT_FOLDER, "checkpoint")) as f:
        assert str(tmp_path) not in f.read(), "the index names its files relative to itself"


def test_a_resume_told_to_keep_fewer_checkpoints_keeps_that_many(trained_run, tmp_path):
    """TensorFlow's Saver deletes one old checkpoint a save: a resume with keep_checkpoints
    lowered from 2 to 1 kept both older ones as well."""
    run = str(copy_run(trained_run, tmp_path / "run"))
    folder = os.path.join(run, checkpoints.CHECKPOINT_FOLDER)
    assert len(glob.glob(os.path.join(folder, "model-*.index"))) == 2
    assert a3c.main(["--resume", run, "--max-steps", "14000", "--set", "keep_checkpoints=1",
                     "--no-plot"]) == 0
    (kept,) = glob.glob(os.path.join(folder, "model-*.index"))
    assert kept[:-len(".index")] == checkpoints.latest_checkpoint(folder)
    assert glob.glob(os.path.join(folder, "model-*.data-*")) == [
        kept.replace(".index", ".data-00000-of-00001")]
    state = sessions.v1.train.get_checkpoint_state(folder)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        os.path.basename(kept)[:-len(".index")]]


def test_eval_refuses_a_corrupt_checkpoint(trained_run, tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    for data in glob.glob(os.path.join(run, checkpoints.CHECKPOINT_FOLDER, "**", "*.data-*"), recursive=True):
        with open(data, "wb") as f:
            f.write(b"not a checkpoint")
    refused(["--eval", str(run)], capsys, "cannot restore")


def test_a_lost_checkpoint_index_is_named_with_the_newest_checkpoint_to_play(trained_run,
                                                                           tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    folder = os.path.join(run, checkpoints.CHECKPOINT_FOLDER)
    os.remove(os.path.join(folder, "checkpoint"))
    newest = max(glob.glob(os.path.join(folder, "model-*.index")),
                 key=lambda path: int(path.rsplit("-", 1)[1].split(".")[0]))[:-len(".index")]
    shutil.copy(newest + ".index", os.path.join(folder, "model-7 (copy).index"))  # a stray file
    more = ["--max-steps", "12500", "--no-plot"]  # (the run trained 12,000 env steps)
    for argv in (["--resume", str(run), *more],
                 ["--eval", str(run), "--checkpoint", "latest"]):
        refused(argv, capsys, "checkpoints/checkpoint is missing",
                f"--eval {run} --checkpoint {newest} plays the newest")
    assert a3c.main(["--eval", str(run), "--checkpoint", newest, "--episodes", "1"]) == 0
    with open(os.path.join(folder, "checkpoint"), "w") as f:  # what the message says to resume
        f.write(f'model_checkpoint_path: "{os.path.basename(newest)}"\n')
    assert a3c.main(["--resume", str(run), *more]) == 0


def test_eval_refuses_a_checkpoint_of_another_network_shape(trained_run, tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    path = os.path.join(run, "config.json")
    with open(path) as f:
        saved = json.load(f)
    trained_with = saved["config"]["actor_hidden"]
    saved["config"]["actor_hidden"] = [7]
    with open(path, "w") as f:
        json.dump(saved, f)
    refused(["--eval", str(run)], capsys, "cannot restore", "the config builds [4, 7]")
    saved["config"]["actor_hidden"] = [*trained_with, 8]  # a layer it never had
    with open(path, "w") as f:
        json.dump(saved, f)
    refused(["--eval", str(run)], capsys, "cannot restore", "it has no global/actor/mlp/h1/w, "
            "which the config builds")


@pytest.mark.parametrize("flag", ["--eval", "--resume"])
def test_a_config_json_with_a_value_the_config_refuses_is_refused_in_one_line(trained_run, flag,
                                                                              tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    path = os.path.join(run, "config.json")
    with open(path) as f:
        saved = json.load(f)
    saved["config"]["trunk_activation"] = "tanh"
    with open(path, "w") as f:
        json.dump(saved, f)
    before = {name: open(os.path.join(run, name)).read() for name in ("config.json", "episodes.csv")}
    refused([flag, str(run)], capsys, "not a readable run folder", "trunk_activation must be")
    assert before == {name: open(os.path.join(run, name)).read() for name in before}


def test_resume_refuses_a_checkpoint_of_another_env(trained_run, tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    path = os.path.join(run, "config.json")
    with open(path) as f:
        saved = json.load(f)
    saved["env"] = "A3CTest/Countdown-v0"
    with open(path, "w") as f:
        json.dump(saved, f)
    refused(["--resume", str(run), "--max-steps", "99999999", "--no-plot"], capsys,
            "trained on CartPole-v1, not A3CTest/Countdown-v0")


@pytest.mark.parametrize("stop_signals, gap_s, mode", [
    (["SIGINT"], 0, []), (["SIGTERM"], 0, []), (["SIGINT", "SIGINT"], 0.5, []),
    (["SIGINT", "SIGINT"], 0.0, []),  # GNU timeout -s INT: the process, then its group
    (["SIGTERM"], 0, ["--sync"])],  # no worker is left at the barrier
    ids=["ctrl-c", "sigterm", "ctrl-c-twice", "one-stop-delivered-twice", "sigterm-sync"])
def test_a_signal_stops_a_real_run_cleanly_with_everything_saved(stop_signals, gap_s, mode,
                                                                  tmp_path):
    """Past its handler, SIGTERM is a Ctrl-C (KeyboardInterrupt in the main thread), and so is
    SIGHUP: see test_a_hangup_is_handled_as_sigterm_is. A second Ctrl-C stops at once, unless
    it comes with the first (console.SAME_STOP_S): then it is the same stop."""
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    process = subprocess.Popen(
        [sys.executable, os.path.join(root, "a3c.py"), "--env", "CartPole-v1", "--workers", "2",
         "--max-steps", "100000000", "--no-plot", "--results-dir", str(tmp_path),
         "--set", "log_every_s=0.5", *mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # wait until training is under way
        if line.startswith("episodes"):
            break
    started = time.time()
    try:
        for name in stop_signals:
            process.send_signal(getattr(signal, name))
            time.sleep(gap_s)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()  # (a run that ignored its stop must not train on after the test)
    assert time.time() - started < 20  # (with the other pytest process on the same cores)
    assert "Traceback" not in err
    assert out.startswith("interrupted:") or "interrupted twice" in err
    # (a second Ctrl-C that comes once the clean stop has ended, as Python shuts down, ends the
    # process by the signal itself: all was saved by then)
    assert process.returncode == 130 or (process.returncode == -signal.SIGINT and len(
        stop_signals) == 2 and out.startswith("interrupted:")), (process.returncode, err)
    (run_dir,) = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*"))
    assert len(read_rows(run_dir)) > 1  # the header and at least one episode
    if gap_s < console.SAME_STOP_S:  # a second Ctrl-C skips the plot; the CSV is there either way
        assert "interrupted twice" not in err
        assert os.path.exists(os.path.join(run_dir, "rewards.png"))
        assert sessions.v1.train.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER))


def test_the_suite_gives_its_runs_ctrl_c_though_it_was_started_with_sigint_ignored():
    """Started by a non-interactive shell's `cmd &`, pytest ignores SIGINT, and a run it spawned
    would inherit that: the Ctrl-C tests above would then fail. conftest takes SIGINT back."""
    import signal
    import subprocess
    import sys
    from conftest import take_back_ctrl_c

    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # (conftest did, on import)
    handler_in_a_child = [sys.executable, "-c", "import signal; h = signal.getsignal(signal."
                          "SIGINT); print(h.name if isinstance(h, signal.Handlers) else h.__name__)"]
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # (as `cmd &` starts pytest)
    try:
        ignored = subprocess.run(handler_in_a_child, capture_output=True, text=True).stdout
        take_back_ctrl_c()
        taken_back = subprocess.run(handler_in_a_child, capture_output=True, text=True).stdout
    finally:
        signal.signal(signal.SIGINT, before)
    assert ignored.strip() == "SIG_IGN"  # (what the Ctrl-C tests' runs would have had)
    assert taken_back.strip() == "default_int_handler"


def test_a_hangup_is_handled_as_sigterm_is(capsys):
    """A closed terminal or dropped ssh session stops a run as SIGTERM does: by the handler that
    raises Ctrl-C's KeyboardInterrupt, which the test above follows through a real run."""
    import signal

    saved = {number: signal.getsignal(number)
             for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        for number in saved:
            signal.signal(number, signal.SIG_DFL)
        refused(["--eval", "no-such-run", "--episodes", "0"], capsys, "--episodes")  # (main ran)
        handler = signal.getsignal(signal.SIGHUP)
        assert handler is signal.getsignal(signal.SIGTERM) is a3c.stop_like_ctrl_c
        assert signal.getsignal(signal.SIGINT) is a3c.stop_like_ctrl_c
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGHUP, None)
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def test_a_non_finite_gradient_stops_training_and_the_checkpoint_stays_finite(tmp_path):
    import numpy as np

    with pytest.raises(console.WorkerError, match="non-finite loss or gradient at global env step"):
        train("A3CTest/NaNReward-v0", tmp_path, max_steps=1_000_000, max_episodes=None)
    (run_dir,) = glob.glob(os.path.join(tmp_path, "A3CTest_NaNReward-v0", "*"))
    checkpoint = sessions.v1.train.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER))
    assert checkpoint is not None
    names = [name for name, _ in sessions.v1.train.list_variables(checkpoint)]
    assert any(name.startswith("global/actor") for name in names)
    for name in names:
        if name != checkpoints.ENV_ID_VARIABLE:
            assert np.all(np.isfinite(sessions.v1.train.load_variable(checkpoint, name))), name


def test_resume_continues_the_counters_the_csv_and_the_plot(tmp_path, capsys):
    summary, _ = train("CartPole-v1", tmp_path, max_episodes=40)
    run_dir = summary["run_dir"]
    stopped = checkpoints.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER))
    wall_at_stop = float(sessions.v1.train.load_variable(stopped, checkpoints.WALL_VARIABLE))
    assert a3c.main(["--resume", run_dir, "--max-episodes", "80", "--no-plot"]) == 0
    rows = read_rows(run_dir)[1:]
    # the clock goes on from the checkpoint's, not from the last row before the stop
    assert float(rows[40][3]) >= wall_at_stop > 0
    assert [int(r[1]) for r in rows] == list(range(1, 81))
    steps = [int(r[2]) for r in rows]
    walls = [float(r[3]) for r in rows]
    assert steps == sorted(steps) and walls == sorted(walls)
    assert steps[40] > steps[39] >= summary["env_steps"] - 1000
    with open(os.path.join(run_dir, "config.json")) as f:
        saved = json.load(f)
    assert saved["config"]["max_episodes"] == 80 and len(saved["resumed"]) == 1
    latest = checkpoints.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER))
    assert int(latest.rsplit("-", 1)[1]) >= steps[-1]
    assert len(runlog.read_episodes(os.path.join(run_dir, "episodes.csv"))["episode"]) == 80


@pytest.mark.parametrize("argv, words", [
    ([], ["already used its budget (12,000 env steps", "done); raise --max-steps"]),
    (["--max-episodes", "100000"], ["12,000 env steps", "raise --max-steps"]),  # not the raised one
    (["--max-episodes", "99", "--set", "gamma=0.5"], ["cannot change gamma"]),
    (["--max-episodes", "99", "--set", "hidden_activation=relu"], ["cannot change hidden_activation"]),
    (["--max-episodes", "99", "--workers", "3"], ["its own --env, --workers and --seed",
                                                  "(the run has --workers 2, not 3)"]),
    (["--max-episodes", "99", "--env", "Pendulum-v1"], ["(the run has --env CartPole-v1, not "
                                                       "Pendulum-v1)"]),
    (["--max-episodes", "99", "--env", "Pendulum-v1", "--seed", "9"],
     ["(the run has --env CartPole-v1, not Pendulum-v1; --seed 1, not 9)"]),
    (["--eval", "."], ["--eval plays RUN_DIR's agent", "--resume is for training"]),
])
def test_resume_refuses_what_would_change_the_run_and_writes_nothing(argv, words, trained_run,
                                                                      capsys):
    entries = sorted(os.listdir(trained_run))
    before = {name: open(os.path.join(trained_run, name)).read()
              for name in ("episodes.csv", "config.json")}
    refused(["--resume", trained_run, "--no-plot"] + argv, capsys, *words)
    for name, text in before.items():
        assert open(os.path.join(trained_run, name)).read() == text
    assert sorted(os.listdir(trained_run)) == entries


def test_resume_takes_the_original_command_line_back(trained_run, tmp_path, capsys):
    """Its own env, workers, seed and config values change nothing, so they are no refusal."""
    run = str(copy_run(trained_run, tmp_path / "again"))
    with open(os.path.join(run, "config.json")) as f:
        own = json.load(f)["config"]
    steps = int(checkpoints.latest_checkpoint(os.path.join(run, "checkpoints")).rsplit("-", 1)[1])
    assert a3c.main(["--resume", run, "--env", "CartPole-v1", "--workers", str(own["workers"]),
                     "--seed", str(own["seed"]), "--set", f"gamma={own['gamma']}", "--no-plot",
                     "--max-steps", str(steps + 1000)]) == 0
    assert "resumed at" in capsys.readouterr().out


def test_a_run_saved_under_an_id_without_its_version_resumes_with_that_id(tmp_path, capsys):
    """--env CartPole means CartPole-v1 since ids are completed; a run saved before that as
    "CartPole" was refused its own --env ("the run has --env CartPole, not CartPole-v1")."""
    summary, _ = train("CartPole", tmp_path / "runs", max_episodes=10)  # (as a3c.py once did)
    run = summary["run_dir"]
    assert checkpoints.read_run(run)[0] == "CartPole"
    assert a3c.main(["--resume", run, "--env", "CartPole", "--max-episodes", "20",
                     "--no-plot"]) == 0
    assert "resumed at" in capsys.readouterr().out and len(read_rows(run)) == 21
    refused(["--resume", run, "--env", "Acrobot", "--no-plot"], capsys,
            "(the run has --env CartPole, not Acrobot-v1)")


def test_a_run_killed_with_sigkill_resumes_from_its_last_periodic_checkpoint(tmp_path, capsys):
    import signal
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    process = subprocess.Popen(
        [sys.executable, os.path.join(root, "a3c.py"), "--env", "CartPole-v1", "--workers", "2",
         "--max-steps", "100000000", "--no-plot", "--results-dir", str(tmp_path),
         "--set", "log_every_s=0.3", "--set", "checkpoint_every_s=0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    progress_lines = 0
    for line in process.stdout:
        progress_lines += line.startswith("episodes")
        if progress_lines == 3:  # at least two periodic checkpoints are written by now
            break
    best_info = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*", "checkpoints", "best", "best.json"))
    deadline = time.time() + 60
    while not best_info and time.time() < deadline:  # and a best agent, once a trial has ended
        time.sleep(0.1)
        best_info = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*", "checkpoints", "best",
                                           "best.json"))
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    (run_dir,) = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*"))
    before = len(read_rows(run_dir)) - 1
    assert before > 0

    assert before > 100 and a3c.main(["--eval", run_dir, "--episodes", "1"]) == 0
    assert "the best checkpoint (deterministic return" in capsys.readouterr().out, "readable after kill -9"

    header, *counted = read_rows(run_dir)
    steps_column = header.index("env_steps")
    restored = checkpoints.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    restored_steps = int(restored.rsplit("-", 1)[1])  # (the CSV may end before it: episodes ran on)
    lost = max(restored_steps, *(int(row[steps_column]) for row in counted)) - restored_steps
    assert a3c.main(["--resume", run_dir, "--max-episodes", str(before + 30), "--no-plot"]) == 0
    said = capsys.readouterr().out
    assert (f"the net is its last checkpoint's, {lost:,} env steps earlier" in said) == (lost > 0), said
    rows = read_rows(run_dir)[1:]
    assert [int(r[1]) for r in rows] == list(range(1, before + 31))


def test_a_resumed_part_draws_new_seeds_for_its_envs_and_graph(tmp_path, capsys):
    RecordingEnv.seeds.clear()
    summary, _ = train("A3CTest/Recording-v0", tmp_path, max_episodes=8)
    first = set(RecordingEnv.seeds)
    RecordingEnv.seeds.clear()
    assert a3c.main(["--resume", summary["run_dir"], "--max-episodes", "16", "--no-plot"]) == 0
    second = set(RecordingEnv.seeds)
    assert len(first) == len(second) == 4 and not first & second
    with open(os.path.join(summary["run_dir"], "config.json")) as f:
        saved = json.load(f)
    (resumed,) = saved["resumed"]
    assert resumed["seed"] == checkpoints.part_seed(1, 1) != 1 and saved["config"]["seed"] == 1
    assert resumed["seed"] * 1000 in second


def test_resume_continues_the_anneal_on_the_schedule_of_its_budget(tmp_path, capsys):
    """A run resumed with a longer budget goes on where a run started with that budget would
    be: a finished run (its rate at 0) given twice the episodes resumes at half the base rate.
    The refusal stays only where the rate would stay at 0: a schedule of anneal_steps already
    past, which a larger budget does not lengthen."""
    summary, _ = train("A3CTest/Countdown-v0", tmp_path, max_episodes=40, anneal_lr=True)
    run_dir = summary["run_dir"]
    half_way = str(copy_run(run_dir, tmp_path / "half-way"))
    constant_rate = str(copy_run(run_dir, tmp_path / "constant-rate"))
    with open(os.path.join(constant_rate, "config.json")) as f:
        constant = json.load(f)
    constant["config"].update(anneal_lr=False, anneal_steps=10)
    with open(os.path.join(constant_rate, "config.json"), "w") as f:
        json.dump(constant, f)
    before = {name: open(os.path.join(constant_rate, name)).read()
              for name in ("config.json", "episodes.csv")}
    refused(["--resume", constant_rate, "--max-episodes", "120", "--no-plot",
             "--set", "anneal_lr=true"], capsys, "annealed to 0.0% of their base",
            "--set anneal_steps=N", "--set anneal_lr=false")
    assert before == {name: open(os.path.join(constant_rate, name)).read() for name in before}
    # a longer budget that is still too short is refused with the least that would do
    too_short = str(copy_run(run_dir, tmp_path / "too-short"))
    steps = checkpoints.latest_checkpoint(os.path.join(too_short, checkpoints.CHECKPOINT_FOLDER))
    steps = max(int(steps.rsplit("-", 1)[1]),
                int(runlog.read_episodes(os.path.join(too_short, "episodes.csv"))["env_steps"][-1]))
    least = -(-steps * 100 // 99)
    refused(["--resume", too_short, "--max-episodes", "0", "--max-steps", str(least - 1),
             "--no-plot"], capsys, "learning rates are annealed to", f"--max-steps at least {least:,}")
    assert a3c.main(["--resume", too_short, "--max-episodes", "0", "--max-steps", str(least),
                     "--no-plot"]) == 0
    capsys.readouterr()

    def used_of(budget, folder):  # the anneal's progress under that budget, where it stopped
        rows = runlog.read_episodes(os.path.join(folder, "episodes.csv"))
        steps = checkpoints.latest_checkpoint(os.path.join(folder, checkpoints.CHECKPOINT_FOLDER))
        steps = max(int(steps.rsplit("-", 1)[1]), int(rows["env_steps"][-1]))
        cfg = dataclasses_replace(checkpoints.read_run(folder)[1], max_episodes=budget)
        return runlog.anneal_used(cfg, len(rows["episode"]), int(rows["length"].sum()), steps)

    def resumed_at(folder, budget):
        assert a3c.main(["--resume", folder, "--max-episodes", str(budget), "--no-plot"]) == 0
        out = capsys.readouterr().out
        with open(os.path.join(folder, "config.json")) as f:
            return out, json.load(f)["resumed"][-1]["anneal_start"]

    used = used_of(80, run_dir)
    assert 0.5 <= used < 0.6
    had_best = best_agent.best_kept(run_dir)
    out, start = resumed_at(run_dir, 80)  # finished at rate 0; twice the budget
    assert f"learning rates at {1 - used:.0%} of their base" in out
    assert "up from the 0% it had reached" in out, "the jump is said"
    assert ("its best agent stays in checkpoints/best/" in out) == had_best, "only where it has one"
    assert start == pytest.approx({"lr_fraction": 1 - used, "budget_used": used})

    # as if the run had been stopped half-way through a budget of 80 episodes: resumed with
    # 160, it goes on at the rate a run of 160 episodes has there, not at 80's
    with open(os.path.join(half_way, "config.json")) as f:
        saved = json.load(f)
    saved["config"]["max_episodes"] = 80
    with open(os.path.join(half_way, "config.json"), "w") as f:
        json.dump(saved, f)
    used = used_of(160, half_way)
    assert 0.25 <= used < 0.3
    out, start = resumed_at(half_way, 160)
    assert f"learning rates at {1 - used:.0%} of their base" in out
    assert start == pytest.approx({"lr_fraction": 1 - used, "budget_used": used}), \
        "not the ~0.5 where the budget of 80 had got to"


def test_the_worker_trains_at_the_annealed_rate_the_log_gives(tmp_path):
    from graphs import build_session

    import config as config_module
    cfg = dataclasses_replace(config_module.Config(), workers=1, envs_per_worker=2, n_steps=5,
                              actor_hidden=(8,), critic_hidden=(8,), max_episodes=6, anneal_lr=True)
    env_id = "A3CTest/Countdown-v0"
    spec = environments.env_spec(environments.make_env(env_id, cfg), env_id)
    moved = {}
    for fraction in (0.0, 1.0):
        sess, global_net, (net,) = build_session(spec, cfg)
        worker = a3c.Worker(0, net, env_id, spec, cfg)
        worker.prepare(sess, cfg.seed)
        params = global_net.actor_params + global_net.critic_params
        before = sess.run(params)
        empty = {name: np.zeros(0) for name in runlog.EPISODE_COLUMNS}
        history = runlog.RunHistory(empty, 0, runlog.AnnealStart(fraction, 0.0))
        writer = sessions.v1.summary.FileWriter(str(tmp_path / str(fraction)))
        log = runlog.EpisodeLog(str(tmp_path), cfg, writer, history)
        worker.work(sessions.v1.train.Coordinator(), log)
        moved[fraction] = any(not np.array_equal(b, a) for b, a in zip(before, sess.run(params)))
        log.close()
        writer.close()
        sess.close()
        worker.close()
    assert moved == {0.0: False, 1.0: True}


def ctrl_c_while_starting(script: str, *args: str, stop_signal: str = "SIGINT",
                          ignoring_sigint: bool = False, ready: str = None) -> tuple[int, str]:
    """(exit status, stderr) of `python script args` given a Ctrl-C (or stop_signal) inside its
    imports (conftest gives the process SIGINT's default; ignoring_sigint: started as a shell
    starts a background job): once it catches the signal named by ready (a3c.py's SIGTERM, put
    in with its quiet SIGINT: Python catches SIGINT from its own start), else 0.8 s after it
    starts."""
    import signal
    import subprocess
    import sys
    import time

    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN) if ignoring_sigint else None
    try:  # (an ignored signal stays ignored across exec: no preexec_fn, unsafe with threads)
        process = subprocess.Popen([sys.executable, script, *args], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
    finally:
        if ignoring_sigint:
            signal.signal(signal.SIGINT, ignored)
    try:
        status, deadline = f"/proc/{process.pid}/status", time.time() + 20
        while ready is not None and os.path.exists(status) and time.time() < deadline:
            with open(status) as f:
                caught = [int(line.split()[1], 16) for line in f if line.startswith("SigCgt:")]
            if caught and caught[0] >> (getattr(signal, ready) - 1) & 1:
                break
            time.sleep(0.01)
        else:
            time.sleep(0.8)  # past Python's start, inside the imports
        process.send_signal(getattr(signal, stop_signal))
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    return process.returncode, err


@pytest.mark.parametrize("stop_signal, ignoring_sigint", [
    ("SIGINT", False), ("SIGTERM", False), ("SIGTERM", True)])
def test_ctrl_c_while_tensorflow_loads_stops_in_one_line(stop_signal, ignoring_sigint, tmp_path):
    """`import tensorflow` takes seconds: a Ctrl-C then ends the process with a line, not a
    traceback through the imports; and a SIGTERM as a Ctrl-C, as later in the run (it ended the
    process silently, with status 143), also in a background job (which ignores SIGINT)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code, err = ctrl_c_while_starting(os.path.join(root, "a3c.py"), "--env", "CartPole-v1",
                                      "--no-plot", "--max-steps", "2000", "--results-dir",
                                      str(tmp_path / "runs"), stop_signal=stop_signal,
                                      ignoring_sigint=ignoring_sigint, ready="SIGTERM")
    assert code == 130, err
    assert err.strip() == "a3c.py: interrupted while starting: nothing was written", err
    assert not (tmp_path / "runs").exists()


def test_one_ctrl_c_in_the_last_trials_of_a_finished_run_still_writes_its_files(tmp_path):
    """A run that reached its budget plays its last trials (up to 60 s, silent): a Ctrl-C there
    is the user's first, so the trials get 10 s and every file is written, as during training."""
    InterruptsTheFinalTrialsEnv.armed, InterruptsTheFinalTrialsEnv.interrupts_left = False, 1
    try:
        summary, _ = train("A3CTest/InterruptsTheFinalTrials-v0", tmp_path, max_episodes=120)
    except console.Interrupted as exc:  # (a KeyboardInterrupt: it would end the whole session)
        pytest.fail(f"one Ctrl-C stopped the finished run at once: {exc}")
    assert InterruptsTheFinalTrialsEnv.interrupts_left == 0, "no Ctrl-C came in the last trials"
    assert summary["interrupted"]
    run_dir = summary["run_dir"]
    assert os.path.getsize(os.path.join(run_dir, "rewards.png")) > 10_000
    saved = checkpoints.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    assert int(saved.rsplit("-", 1)[1]) == summary["env_steps"]
    with open(os.path.join(run_dir, "checkpoints", "best", "best.json")) as f:
        assert json.load(f)["episode"] >= 100
    assert len(read_rows(run_dir)) == 1 + 120


@pytest.mark.parametrize("where", ["stopping the workers", "the final checkpoint"])
def test_one_ctrl_c_while_a_finished_run_stops_still_writes_its_final_checkpoint(where, tmp_path,
                                                                                 monkeypatch):
    """A SIGTERM (a batch scheduler's) or Ctrl-C that lands while a run that reached its budget
    joins its workers or writes its last checkpoint is the user's first: as one in training,
    the step is done and every file written, not "stopped at once" with the last minutes lost."""
    cls, name = (a3c.Team, "stop") if where == "stopping the workers" else (
        checkpoints.Checkpoints, "save")
    real, calls = getattr(cls, name), []

    def interrupted_once(self, *args):
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(self, *args)
    monkeypatch.setattr(cls, name, interrupted_once)
    try:
        summary, _ = train("A3CTest/Countdown-v0", tmp_path, max_episodes=120)
    except console.Interrupted as exc:  # (a KeyboardInterrupt: it would end the whole session)
        pytest.fail(f"one Ctrl-C stopped the finished run at once: {exc}")
    assert len(calls) == 2 and summary["interrupted"]
    saved = checkpoints.latest_checkpoint(os.path.join(summary["run_dir"], "checkpoints"))
    assert int(saved.rsplit("-", 1)[1]) == summary["env_steps"]
    assert os.path.getsize(os.path.join(summary["run_dir"], "rewards.png")) > 10_000
    assert len(read_rows(summary["run_dir"])) == 1 + 120


def test_a_resume_of_a_run_that_is_still_training_is_refused_and_changes_nothing(tmp_path):
    """Two trainers in one folder interleave episodes.csv and checkpoints/: the run is lost."""
    import signal
    import subprocess
    import sys

    a3c_py = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "a3c.py")
    training = subprocess.Popen([sys.executable, a3c_py, "--env", "CartPole-v1", "--workers", "2",
                                 "--max-steps", "10000000", "--max-episodes", "0", "--set",
                                 "checkpoint_every_s=1", "--no-plot", "--results-dir",
                                 str(tmp_path)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not glob.glob(str(tmp_path / "CartPole-v1" / "*" / "checkpoints" / "model-*.index")):
            assert training.poll() is None and time.time() < deadline, "no checkpoint came"
            time.sleep(0.2)
        run_dir = glob.glob(str(tmp_path / "CartPole-v1" / "*"))[0]
        with open(os.path.join(run_dir, "config.json")) as f:
            info_before = f.read()
        resume = subprocess.run([sys.executable, a3c_py, "--resume", run_dir, "--max-steps",
                                 "10000001", "--no-plot"], capture_output=True, text=True,
                                timeout=60)  # (a second trainer would run for minutes)
        assert resume.returncode == 2, resume.stderr
        assert resume.stdout == "" and len(resume.stderr.strip().splitlines()) == 1, resume.stderr
        assert "is being trained by another process" in resume.stderr
        with open(os.path.join(run_dir, "config.json")) as f:
            assert f.read() == info_before  # (a resume rewrites it first thing)
        assert training.poll() is None, "the first run still trains"
    finally:
        training.send_signal(signal.SIGTERM)
        training.wait(timeout=60)


def test_a_run_folder_that_cannot_be_locked_is_trained_unlocked_with_a_warning(
        tmp_path, monkeypatch, capsys):
    """Some network file systems have no flock (ENOLCK): that is no other process's run."""
    import errno

    def no_locks(file, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
    monkeypatch.setattr(checkpoints.fcntl, "flock", no_locks)
    lock = checkpoints.RunFolderLock()
    lock.take(str(tmp_path))
    lock.release()
    err = capsys.readouterr().err
    assert "cannot lock" in err and "another process" in err


def test_a_run_started_with_stderr_closed_trains_and_writes_its_files(tmp_path):
    """`2>&-`: fd 2 closed. The start-up's copies of stderr (the quiet Ctrl-C, the quiet
    TensorFlow import) must not crash on it; the run trains and writes its files."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, os.path.join(root, "a3c.py"), "--env", "CartPole-v1",
                           "--workers", "2", "--max-steps", "400", "--no-plot", "--results-dir",
                           str(tmp_path)], stdout=subprocess.PIPE, text=True, timeout=120,
                          preexec_fn=lambda: os.close(2))
    assert done.returncode == 0, done.stdout
    run_dir = done.stdout.strip().splitlines()[-1].split("results in ")[-1]
    with open(os.path.join(run_dir, "episodes.csv")) as f:
        assert f.readline().startswith("worker,episode,env_steps")


@pytest.mark.parametrize("trial_episodes", [0, 5])
def test_ctrl_c_during_set_up_says_nothing_was_trained(trial_episodes, tmp_path, capsys):
    # the probe, one env (a trial env if there are trials, else a worker's), then Ctrl-C
    InterruptingEnv.make_count = 3
    try:
        code, err = run_cli(["--env", "A3CTest/Interrupting-v0", "--workers", "2",
                             "--max-episodes", "10", "--no-plot", "--results-dir", str(tmp_path),
                             "--set", f"best_trial_episodes={trial_episodes}"], capsys)
    finally:
        InterruptingEnv.make_count = 0
    assert code == 130
    assert "before training started: nothing was trained" in err and "twice" not in err
    # the run folder it had made is not left behind, empty (a --resume of it was refused as
    # "not a readable run folder")
    assert "was not kept" in err, err
    assert os.listdir(os.path.join(tmp_path, "A3CTest_Interrupting-v0")) == []


def test_a_new_run_whose_set_up_fails_removes_its_folder_and_no_other(tmp_path, capsys,
                                                                         monkeypatch):
    neighbour = tmp_path / "CartPole-v1" / "20260101T000000Z-s1"
    neighbour.mkdir(parents=True)
    (neighbour / "config.json").write_text("{}")

    def failing(*args, **kwargs):
        raise RuntimeError("set-up failed")
    monkeypatch.setattr(a3c, "EpisodeLog", failing)  # (made after config.json is written)
    with pytest.raises(RuntimeError, match="set-up failed"):
        a3c.train("CartPole-v1", config.Config(workers=1, envs_per_worker=1, max_steps=100),
                  str(tmp_path), show_plot=False)
    assert os.listdir(tmp_path / "CartPole-v1") == [neighbour.name]
    assert os.listdir(neighbour) == ["config.json"]


def test_ctrl_c_as_pybind11_rewrites_it_during_the_graphs_build_says_nothing_was_trained(
        tmp_path, capsys, monkeypatch):
    """A Ctrl-C that lands while TensorFlow's C++ handles an error of its own comes out of
    pybind11 as this RuntimeError (seen once in 22 Ctrl-Cs 2.5-4 s into a resume, inside
    tf.gradients); it was a traceback and exit status 1."""
    def interrupted(*args, **kwargs):
        raise RuntimeError("pybind11::error_already_set: MISMATCH of original and normalized "
                           "active exception types: ORIGINAL InvalidArgumentError REPLACED BY "
                           "KeyboardInterrupt: ")
    monkeypatch.setattr(a3c, "n_step_returns", interrupted)  # (while each ACNet is built)
    code, err = run_cli(["--env", "CartPole-v1", "--workers", "2", "--max-episodes", "10",
                         "--no-plot", "--results-dir", str(tmp_path)], capsys)
    assert code == 130, err
    assert err.startswith("a3c.py: interrupted during set-up, before training started: nothing "
                          "was trained") and len(err.splitlines()) == 1, err


PYBIND11_CTRL_C = ("pybind11::error_already_set: MISMATCH of original and normalized active "
                   "exception types: ORIGINAL NotFoundError REPLACED BY KeyboardInterrupt: ")


@pytest.mark.parametrize("ctrl_c_in", ["the restore", "the last step of set-up"])
def test_ctrl_c_during_a_resumes_set_up_keeps_the_run_as_it_was(ctrl_c_in, trained_run, tmp_path,
                                                                capsys, monkeypatch):
    """In the restore, pybind11's rewrite of a Ctrl-C (seen once) said the checkpoint was corrupt,
    exit 2; later, after config.json had been rewritten for the new part, the interrupted resume
    left the new budget and a part that never ran in it."""
    run = copy_run(trained_run, tmp_path / "run")
    before = {name: open(os.path.join(run, name)).read() for name in ("config.json", "episodes.csv")}
    if ctrl_c_in == "the restore":
        def interrupted(*args, **kwargs):
            raise RuntimeError(PYBIND11_CTRL_C)
        monkeypatch.setattr(checkpoints.v1.train, "list_variables", interrupted)
    else:
        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt
        monkeypatch.setattr(a3c, "EpisodeLog", interrupted)  # made after config.json is written
    code, err = run_cli(["--resume", str(run), "--max-steps", "30000", "--no-plot"], capsys)
    assert code == 130, err
    assert err.startswith("a3c.py: interrupted during set-up, before training started; ") and (
        "corrupt" not in err and len(err.splitlines()) == 1), err
    assert before == {name: open(os.path.join(run, name)).read() for name in before}


def test_ctrl_c_during_eval_says_nothing_was_written(tmp_path, capsys):
    summary, _ = train("A3CTest/Interrupting-v0", tmp_path, max_episodes=4)
    InterruptingEnv.step_interrupts = True
    try:
        code, err = run_cli(["--eval", summary["run_dir"]], capsys)
    finally:
        InterruptingEnv.step_interrupts = False
    assert code == 130
    assert err == "a3c.py: interrupted: evaluation stopped; nothing was written"


def test_ctrl_c_on_the_plot_window_closes_it_and_the_run_ends_normally(tmp_path, capsys,
                                                                       monkeypatch):
    import matplotlib.pyplot as plt

    def interrupted_show(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setenv("DISPLAY", ":0")  # a display is there, so the window is shown ...
    monkeypatch.setattr(plt, "show", interrupted_show)  # ... and Ctrl-C'ed while it is open
    code, err = run_cli(["--env", "A3CTest/Countdown-v0", "--workers", "2", "--max-episodes", "4",
                         "--results-dir", str(tmp_path)], capsys)
    assert code == 0 and "interrupted" not in err


@pytest.mark.parametrize("display, argv, words", [
    (None, ["--render", "--record"], ["--render and --record do not go together"]),
    (None, ["--render"], ["--render needs a display and none is set"]),
    # one a closed ssh -X or tmux session left behind: pygame's window crashed the process
    (":4093", ["--render"], ["--render needs a display and the one named (:4093) does not answer",
                             "--record"]),
])
def test_eval_refuses_to_render_where_it_cannot(display, argv, words, trained_run, capsys,
                                                 monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    if display is not None:
        monkeypatch.setenv("DISPLAY", display)
    refused(["--eval", trained_run] + argv, capsys, *words)


class BreakingConsole:
    """A console that, while training runs, moves the run's checkpoint folder away and puts a
    file in its place (as a folder moved or a full disk would), and puts it back later."""

    def __init__(self, break_at, mend_at):
        self.lines, self.break_at, self.mend_at, self.run_dir = 0, break_at, mend_at, None

    def write(self, text):
        if "results in " in text and self.run_dir is None:
            self.run_dir = text.rsplit("results in ", 1)[1].strip()
        if text.startswith("episodes"):
            self.lines += 1
            folder = os.path.join(self.run_dir, checkpoints.CHECKPOINT_FOLDER)
            if self.lines == self.break_at:
                os.rename(folder, folder + ".away")
                open(folder, "w").close()
            if self.lines == self.mend_at:
                os.remove(folder)
                os.rename(folder + ".away", folder)

    def flush(self):
        pass


@pytest.mark.parametrize("mend_at", [4, None], ids=["mended", "broken-to-the-end"])
def test_a_failing_checkpoint_save_warns_and_training_goes_on(mend_at, tmp_path, capfd):
    import dataclasses

    import config as config_module
    cfg = dataclasses.replace(config_module.config_for("CartPole-v1"), workers=2, envs_per_worker=2,
                              actor_hidden=(16,), critic_hidden=(16,), max_episodes=None,
                              max_steps=10_000, log_every_s=0.05, checkpoint_every_s=0.05)
    console = BreakingConsole(break_at=2, mend_at=mend_at)
    summary = a3c.train("CartPole-v1", cfg, str(tmp_path), show_plot=False, out=console)
    err = capfd.readouterr().err
    assert summary["env_steps"] >= 10_000 and not summary["interrupted"]
    assert console.lines > (mend_at or 2), "training outlasted the break (and the mend)"
    assert "could not write a periodic checkpoint" in err
    assert os.path.exists(summary["plot"]) and len(read_rows(summary["run_dir"])) > 20
    if mend_at is None:
        assert "could not write the final checkpoint" in err
    else:
        latest = checkpoints.latest_checkpoint(os.path.join(summary["run_dir"], checkpoints.CHECKPOINT_FOLDER))
        assert int(latest.rsplit("-", 1)[1]) >= 10_000


class FailingConsole:
    """A console that raises something no console should, once training is under way."""

    def write(self, text):
        if text.startswith("episodes"):
            raise RuntimeError("the console broke")

    def flush(self):
        pass


def test_a_failing_driver_stops_and_joins_every_worker_before_closing_anything(tmp_path):
    import dataclasses

    import config as config_module
    cfg = dataclasses.replace(config_module.config_for("CartPole-v1"), workers=3, envs_per_worker=2,
                              actor_hidden=(16,), critic_hidden=(16,), max_episodes=None,
                              max_steps=10**9, log_every_s=0.2)
    with pytest.raises(console.WorkerError, match="the driver raised RuntimeError: the console broke"):
        a3c.train("CartPole-v1", cfg, str(tmp_path), show_plot=False, out=FailingConsole())
    assert not [t for t in threading.enumerate() if t.name.startswith("worker_")]
    (run_dir,) = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*"))
    assert checkpoints.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER))
    assert os.path.exists(os.path.join(run_dir, "rewards.png"))


def start_training_process(tmp_path, max_steps, **popen):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.Popen(
        [sys.executable, os.path.join(root, "a3c.py"), "--env", "CartPole-v1", "--workers", "2",
         "--max-steps", str(max_steps), "--no-plot", "--results-dir", str(tmp_path),
         "--set", "log_every_s=0.05"], stdout=subprocess.PIPE, text=True, **popen)


def assert_trained_to(tmp_path, steps):
    (run_dir,) = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*"))
    latest = checkpoints.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER))
    assert int(latest.rsplit("-", 1)[1]) >= steps
    assert os.path.exists(os.path.join(run_dir, "rewards.png"))


@pytest.mark.parametrize("stderr_too", [False, True], ids=["stdout", "stdout-and-stderr"])
def test_a_run_piped_into_head_trains_to_its_end(stderr_too, tmp_path):
    import subprocess

    process = start_training_process(
        tmp_path, 5_000, stderr=subprocess.STDOUT if stderr_too else subprocess.PIPE)
    process.stdout.readline()  # what `| head -1` reads before it exits
    process.stdout.close()
    err = "" if stderr_too else process.stderr.read()
    assert process.wait(timeout=120) == 0, err
    if not stderr_too:
        assert "Traceback" not in err and "Exception ignored" not in err
        assert "the console went away; training goes on" in err
    assert_trained_to(tmp_path, 5_000)


def test_a_run_started_with_sighup_ignored_keeps_training_after_a_hangup(tmp_path):
    import signal
    import subprocess

    process = start_training_process(
        tmp_path, 5_000, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # what nohup does
    process.stdout.readline()
    process.send_signal(signal.SIGHUP)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert out.splitlines()[-3].startswith("done:")
    assert_trained_to(tmp_path, 5_000)


@pytest.mark.parametrize("damage, words", [
    ("removed", []), ("a cut last line", ["cut off"]), ("its last line end cut", ["cut off"]),
    ("emptied", ["empty"]), ("a cut header", ["cut off"]), ("a row of 10 cells", ["line"]),
    ("a tail of NULs", ["cut off"])])
def test_resume_refuses_a_folder_without_its_whole_csv(damage, words, trained_run, tmp_path,
                                                       capsys):
    """A kill mid-write cuts the CSV's last line (in any cell, or just its line end); resuming
    after it would glue the next row to it and lose that episode from every later read."""
    run = copy_run(trained_run, tmp_path / "run")
    path = os.path.join(run, "episodes.csv")
    with open(path, "rb") as f:
        whole = f.read()
    damaged = {"removed": None, "a cut last line": whole + b"0,999,12",
               "its last line end cut": whole[:-4], "emptied": b"",
               "a cut header": whole[:20], "a row of 10 cells": whole + whole.splitlines(True)[-1]
               .replace(b",", b",1,", 1), "a tail of NULs": whole + b"\0" * 200_000}[damage]
    if damaged is None:
        os.remove(path)
    else:
        with open(path, "wb") as f:
            f.write(damaged)
    steps = max(int(line.split(b",")[2]) for line in whole.splitlines()[1:]) + 1000
    refused(["--resume", str(run), "--max-steps", str(steps), "--no-plot"], capsys,  # (short:
            "cannot read", "episodes.csv", *words)  # the code before its fix trained this far)
    assert damaged is None or open(path, "rb").read() == damaged, "the folder is left as it was"


def test_eval_refuses_to_record_an_env_that_draws_no_frames(tmp_path, capsys):
    summary, _ = train("A3CTest/Countdown-v0", tmp_path, max_episodes=4)
    refused(["--eval", summary["run_dir"], "--record"], capsys, "cannot record", "rgb_array")


def test_a_checkpoint_written_before_rmsprop_slots_were_saved_still_resumes(trained_run, tmp_path,
                                                                          capfd):
    run = copy_run(trained_run, tmp_path / "run")
    folder = os.path.join(run, checkpoints.CHECKPOINT_FOLDER)
    latest = checkpoints.latest_checkpoint(folder)
    steps = int(latest.rsplit("-", 1)[1])
    with sessions.tf.Graph().as_default():  # the same checkpoint as an older version wrote it
        kept = [sessions.v1.Variable(sessions.v1.train.load_variable(latest, name), name=name)
                for name, _ in sessions.v1.train.list_variables(latest)
                if "RMSProp" not in name and name != checkpoints.WALL_VARIABLE]
        with sessions.v1.Session() as sess:
            sess.run(sessions.v1.global_variables_initializer())
            for old in glob.glob(os.path.join(folder, "*")):
                if os.path.isfile(old):
                    os.remove(old)
            sessions.v1.train.Saver(kept).save(sess, os.path.join(folder, "model"), global_step=steps)
    assert a3c.main(["--resume", str(run), "--max-steps", str(steps + 2000), "--no-plot"]) == 0
    assert "holds no RMSProp averages" in capfd.readouterr().err
    resumed = checkpoints.latest_checkpoint(folder)
    assert any("RMSProp" in name for name, _ in sessions.v1.train.list_variables(resumed))


def best_agent_fixture(tmp_path, copy_lock=None, **overrides):
    """A graph whose global net plays PickOne-v0 (return 1 or 0 by which logit is larger), its
    Checkpoints, a session and an EpisodeLog to feed mean-100s by hand."""
    import config as config_module

    settings = dict(workers=1, actor_hidden=(4,), critic_hidden=(4,), max_episodes=None,
                    max_steps=10**9, best_trial_episodes=3)
    cfg = config_module.Config(**{**settings, **overrides})
    env_id = "A3CTest/PickOne-v0"
    spec = environments.env_spec(environments.make_env(env_id, cfg), env_id)
    graph = sessions.tf.Graph()
    with graph.as_default():
        global_net, _ = a3c.build_graph(spec, cfg)
        _, best = checkpoints_and_best(str(tmp_path), cfg, env_id, global_net, spec, copy_lock)
        init = sessions.v1.global_variables_initializer()
    sess = sessions.v1.Session(graph=graph)
    sess.run(init)
    best.prepare(sess)
    writer = sessions.v1.summary.FileWriter(str(tmp_path / "events"))
    log = runlog.EpisodeLog(str(tmp_path), cfg, writer)
    (bias,) = [v for v in global_net.actor_params if v.op.name == "global/actor/logits/b"]

    def prefer(action):  # the deterministic policy picks `action` in every state
        bias.load(np.array([5.0, 0.0] if action == 0 else [0.0, 5.0], np.float32), sess)

    def play(returns):  # episodes of the stochastic policy, as the workers would log them
        for episode_return in returns:
            log.add_steps(10)
            log.record(0, episode_return, 10, 0.0, 0.0)

    def on_disk():
        path = checkpoints.latest_checkpoint(best.folder)
        with open(os.path.join(best.folder, best_agent.BEST_INFO)) as f:
            info = json.load(f)
        assert info["checkpoint"] == os.path.basename(path)
        return info, sessions.v1.train.load_variable(path, bias.op.name)

    def close():
        best.close()
        log.close()
        writer.close()
        sess.close()
    return best, sess, log, prefer, play, on_disk, close


def never():
    return False


def test_the_best_checkpoint_is_the_candidate_that_played_best_in_its_trials(tmp_path):
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    prefer(0)
    play([1.0] * 99)
    assert best.try_candidate(sess, log, never) is None, "no full mean-100 yet: no candidate"
    assert not os.path.exists(best.folder)
    play([1.0])
    assert best.try_candidate(sess, log, never) is True, "the first candidate is the best so far"
    info, stored_bias = on_disk()
    assert (info["score"], info["trial_episodes"], info["mean_100"], info["episode"],
            info["env_steps"]) == (0.0, 3, 1.0, 100, 1000)
    np.testing.assert_array_equal(stored_bias, [5.0, 0.0])

    prefer(1)  # a better net, but the mean-100 has not risen: no candidate, nothing written
    play([0.0])
    assert best.try_candidate(sess, log, never) is None
    assert on_disk()[0]["episode"] == 100

    play([50.0])  # a new best mean-100: the net of this moment plays 1 in its trials and wins
    assert best.try_candidate(sess, log, never)
    info, stored_bias = on_disk()
    assert (info["score"], info["episode"], info["env_steps"]) == (1.0, 102, 1020)
    assert info["mean_100"] == pytest.approx((98 * 1.0 + 0.0 + 50.0) / 100)
    np.testing.assert_array_equal(stored_bias, [0.0, 5.0])

    prefer(0)  # a higher mean-100 whose net plays worse: tried, not kept
    play([90.0])
    assert best.try_candidate(sess, log, never) is False, "tried, not kept"
    assert best.best_tried == pytest.approx(log.best()[0]), "it was tried"
    info, stored_bias = on_disk()
    assert info["episode"] == 102
    np.testing.assert_array_equal(stored_bias, [0.0, 5.0])

    best.try_final(sess, log)  # the final net plays 0 as well: best/ stays
    assert on_disk()[0]["episode"] == 102
    assert len(glob.glob(os.path.join(best.folder, "model-*.index"))) == 1, "only the best is kept"
    close()


def test_a_kill_between_the_best_agents_files_and_its_label_leaves_the_earlier_best_whole(
        tmp_path, monkeypatch):
    """best.json names a whole checkpoint at every instant: a write cut off after the new agent's
    files (a kill: here best.json's replacement fails) leaves the earlier agent and its label,
    which --eval plays and a resumed run keeps; the next write removes the orphan."""
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    prefer(0)
    play([1.0] * 100)
    assert best.try_candidate(sess, log, never)
    first, _ = on_disk()

    def killed(path, text):
        raise OSError("killed before best.json was replaced")
    monkeypatch.setattr(best_agent, "write_atomically", killed)
    prefer(1)
    play([50.0])
    best.try_candidate(sess, log, never)  # its write fails after the files (a warning)
    assert best_agent.read_best_info(best.folder) == first, "the earlier best, still labelled"
    path, _ = best_agent.pick_checkpoint(str(tmp_path), "best")
    assert os.path.basename(path) == first["checkpoint"]
    folder, _ = best_agent.pick_checkpoint(str(tmp_path), best.folder)  # --checkpoint .../best
    assert folder == path
    bias = sessions.v1.train.load_variable(path, "global/actor/logits/b")
    np.testing.assert_array_equal(bias, [5.0, 0.0])  # what --eval plays: the labelled agent

    monkeypatch.undo()
    play([60.0])
    assert best.try_candidate(sess, log, never)
    info, stored_bias = on_disk()
    np.testing.assert_array_equal(stored_bias, [0.0, 5.0])
    assert glob.glob(os.path.join(best.folder, "model-*.index")) == [
        os.path.join(best.folder, info["checkpoint"] + ".index")], "the earlier ones are removed"
    close()


def test_the_progress_line_says_how_many_episodes_its_running_mean_is_over(tmp_path):
    _, _, log, _, play, _, close = best_agent_fixture(tmp_path)
    assert "mean-100 return      n/a | best mean-100 n/a" in console.progress_line(log.progress())
    play([1.0] * 37)
    assert "mean-37 return" in console.progress_line(log.progress())
    play([1.0] * 70)
    assert "mean-100 return" in console.progress_line(log.progress())
    close()
    # a small negative mean is 0.0, as in --eval's line, not -0.0 (MountainCarContinuous's)
    line = console.progress_line(dict(best_running=-0.04, window=100, running=-0.03, episodes=9,
                                      env_steps=9, steps_per_s=1.0, wall_s=1.0))
    assert "return      0.0 | best mean-100 0.0 |" in line and "-0.0" not in line
    assert console.tenths(-0.06) == "-0.1" and console.tenths(np.float64(-0.04)) == "0.0"
    assert console.tenths(np.float64(0.15)) == f"{0.15:.1f}", "rounded as every other number"


def test_the_final_net_is_tried_even_below_the_best_mean_100(tmp_path):
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    prefer(0)
    play([1.0] * 100)
    assert best.try_candidate(sess, log, never) is True
    prefer(1)
    play([-100.0])  # the mean-100 falls, but the final net plays better than the best
    best.try_final(sess, log)
    info, stored_bias = on_disk()
    assert (info["episode"], info["score"]) == (101, 1.0)
    assert info["mean_100"] == pytest.approx(log.progress()["running"])
    np.testing.assert_array_equal(stored_bias, [0.0, 5.0])
    close()


def test_trials_are_paid_for_in_cpu_time_summed_over_the_run_not_in_wall_time():
    """Mid-run, a trial waits for the GIL most of its wall time while the workers train on: a
    slow one (0.25 s of its own CPU while the process used 2 s, 8 workers) costs 0.25 s, and
    the next trial may start once the process has used ten times that since the schedule
    began, not after ten times its wall time (longer than a whole Pendulum run)."""
    cpu = [0.0]
    schedule = best_agent.TrialSchedule(min_interval_s=1.0, workers=8, cpu_share=0.1,
                                 cpu_clock=lambda: cpu[0])
    assert schedule.allows(now=100.0), "the first trial needs no budget"
    schedule.paid(started=100.0, own_cpu_s=0.25, process_cpu_s=2.0)
    cpu[0] = 3.0
    assert not schedule.allows(now=100.5), "at most one trial per min_interval_s"
    assert schedule.allows(now=102.5)
    cpu[0] = 2.0
    assert not schedule.allows(now=102.5), "0.25 s is over a tenth of 2 s of CPU"
    cpu[0] = 3.0
    # its games stepped in other threads: a ninth of the process's 18 s, 2 s, not its own 0.1 s
    schedule.paid(started=102.5, own_cpu_s=0.1, process_cpu_s=18.0)
    cpu[0] = 22.0
    assert not schedule.allows(now=200.0), "2.25 s of trials is over a tenth of 22 s"
    cpu[0] = 23.0
    assert schedule.allows(now=200.0)


def test_the_credit_a_plateau_saves_up_buys_two_dear_trials_not_a_long_burst():
    cpu = [0.0]
    schedule = best_agent.TrialSchedule(min_interval_s=0.0, workers=8, cpu_share=0.1,
                                 cpu_clock=lambda: cpu[0])
    assert schedule.allows(now=0.0)
    schedule.paid(started=0.0, own_cpu_s=2.0, process_cpu_s=2.0)  # the dearest trial: 2 s
    cpu[0] = 1000.0  # a long plateau: 100 s of budget, 98 of it unspent
    back_to_back = 0
    while schedule.allows(now=1.0) and back_to_back < 100:
        schedule.paid(started=1.0, own_cpu_s=1.0, process_cpu_s=1.0)
        back_to_back += 1
    assert back_to_back == 5, "a credit of 2 x 2 s: trials at 96, 97, 98, 99 and 100 s spent"


def test_the_trial_thread_pays_its_own_cpu_time_and_the_process_share_it_played_in(tmp_path):
    """run_trials hands the schedule the trial's thread CPU time and the process's CPU time
    over the trial, the latter larger while another thread computes beside it."""
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(
        tmp_path, best_trial_episodes=3000)
    coord = sessions.v1.train.Coordinator()
    paid = []

    class Recording(best_agent.TrialSchedule):
        def paid(self, started, own_cpu_s, process_cpu_s):
            paid.append((started, own_cpu_s, process_cpu_s))
            coord.request_stop()

    burning = threading.Event()

    def burn():  # BLAS releases the GIL: CPU time of the process, not of the trial's thread
        matrix = np.random.default_rng(0).random((300, 300))
        while not coord.should_stop():
            matrix = np.tanh(matrix @ matrix)
            burning.set()
    burner = threading.Thread(target=burn, daemon=True)
    burner.start()
    assert burning.wait(10)
    prefer(1)
    play([1.0] * 100)
    before = time.time()
    best.run_trials(sess, coord, log, Recording(min_interval_s=0.0, workers=1, cpu_share=0.1))
    burner.join(10)
    (started, own_cpu_s, process_cpu_s), = paid
    assert before <= started <= time.time()
    assert 0.0 < own_cpu_s < process_cpu_s
    assert on_disk()[0]["score"] == 1.0, "the trial played and its candidate was kept"
    close()


def test_a_candidate_waits_while_the_schedule_says_no_and_is_tried_once_it_says_yes(tmp_path):
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    coord = sessions.v1.train.Coordinator()
    open_now, tried = threading.Event(), []

    class Gate(best_agent.TrialSchedule):
        def allows(self, now):
            return open_now.is_set()

        def paid(self, started, own_cpu_s, process_cpu_s):
            tried.append(started)

    prefer(1)
    play([1.0] * 100)
    thread = threading.Thread(target=best.run_trials,
                              args=(sess, coord, log, Gate(min_interval_s=0.0, workers=1, cpu_share=0.1)))
    thread.start()
    time.sleep(0.5)  # ten turns of the trial loop
    assert best.pending is not None and not tried and not os.path.exists(best.folder)
    open_now.set()
    deadline = time.time() + 10
    while not tried and time.time() < deadline:
        time.sleep(0.02)
    coord.request_stop()
    thread.join(10)
    assert len(tried) == 1 and best.pending is None, "tried once; no new rise, no new candidate"
    assert on_disk()[0]["score"] == 1.0
    close()


def test_the_candidate_is_the_net_at_the_rise_even_when_its_trial_waits(tmp_path):
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    prefer(1)
    play([1.0] * 100)
    assert best.take_if_risen(sess, log)  # copied now, at the rise ...
    prefer(0)  # ... while the global net moves on before the trial
    play([0.0] * 3)
    assert best.try_pending(sess, never)
    info, stored_bias = on_disk()
    assert (info["episode"], info["env_steps"], info["score"]) == (100, 1000, 1.0)
    np.testing.assert_array_equal(stored_bias, [0.0, 5.0])
    close()


def test_the_candidate_is_copied_only_between_sync_rounds(tmp_path):
    """--sync gives the copy its rounds' lock (train does: test_sync checks it), which the last
    worker of a round holds while it applies the round's update; a round that does not end
    within the copy's wait leaves the copy to be asked for again."""
    round_lock = threading.Condition()
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path, round_lock)
    try:
        applying, applied = threading.Event(), threading.Event()

        def apply(lr_fraction):  # the round's update, held until the test lets it finish
            applying.set()
            return applied.wait(10)

        rounds = a3c.UpdateRound(1, apply, round_lock)
        prefer(1)
        play([1.0] * 100)
        worker = threading.Thread(target=rounds.join, args=(sessions.v1.train.Coordinator(), 1.0))
        worker.start()
        assert applying.wait(10)
        assert not best.take_if_risen(sess, log, wait_s=0.2) and best.pending is None
        copier = threading.Thread(target=best.take_if_risen, args=(sess, log), kwargs={"wait_s": 10})
        copier.start()
        copier.join(0.3)
        assert copier.is_alive(), "waits for the round's update"
        applied.set()
        worker.join(10)
        copier.join(10)
        assert best.pending is not None and best.pending["mean_100"] == 1.0
    finally:
        close()


def test_a_resumed_best_scored_another_way_is_scored_again(tmp_path):
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    prefer(1)
    play([1.0] * 100)
    assert best.try_candidate(sess, log, never)
    info, _ = on_disk()
    close()
    # as an earlier version wrote it: no trial score, only the mean-100 (here below the score)
    old = {k: info[k] for k in ("mean_100", "episode", "env_steps", "checkpoint")}
    old["mean_100"] = 0.25
    with open(os.path.join(best.folder, best_agent.BEST_INFO), "w") as f:
        json.dump(old, f)
    resumed, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    assert resumed.best_score == 1.0, "played again, not taken as its mean-100"
    prefer(0)
    play([1.0] * 100)  # a higher mean-100 whose net plays 0: it must not replace the best
    assert resumed.try_candidate(sess, log, never) is False
    close()


def test_a_tie_in_the_trials_goes_to_the_candidate_with_the_higher_mean_100(tmp_path):
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    prefer(1)
    play([1.0] * 100)
    assert best.try_candidate(sess, log, never) is True
    play([2.0])  # a higher mean-100, and its net plays as well: the newer one is kept
    assert best.try_candidate(sess, log, never) is True
    assert on_disk()[0]["episode"] == 101
    play([-500.0])
    best.try_final(sess, log)  # the final net plays as well too, but its mean-100 is lower
    assert on_disk()[0]["episode"] == 101
    close()


def test_a_trial_cut_short_by_the_end_of_training_keeps_the_best_it_had(tmp_path):
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    prefer(1)
    play([1.0] * 100)
    assert best.try_candidate(sess, log, lambda: True) is False, "stopped before it played"
    assert best.unwritten is None and not os.path.exists(best.folder)
    close()


def test_a_candidate_whose_trial_the_end_of_training_cut_short_is_tried_at_the_end(tmp_path):
    """The net at the last rise of the mean-100 waits in its copy: try_final plays it before the
    final net, rather than losing it because its first trial was cut short."""
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path)
    prefer(1)
    play([1.0] * 100)
    assert best.try_candidate(sess, log, lambda: True) is False, "stopped before it played"
    prefer(0)  # the global net moves on and ends playing 0
    play([0.5])
    best.try_final(sess, log)
    info, stored_bias = on_disk()
    assert (info["episode"], info["score"]) == (100, 1.0), "the candidate at the rise"
    np.testing.assert_array_equal(stored_bias, [0.0, 5.0])
    close()


def test_without_trials_the_best_is_the_net_at_the_best_mean_100(tmp_path):
    best, sess, log, prefer, play, on_disk, close = best_agent_fixture(tmp_path, best_trial_episodes=0)
    prefer(1)
    play([1.0] * 100)
    assert best.try_candidate(sess, log, never)
    prefer(0)  # plays worse, but its mean-100 is higher: without trials that is all that counts
    play([9.0])
    assert best.try_candidate(sess, log, never)
    info, stored_bias = on_disk()
    assert info["score"] == info["mean_100"] == pytest.approx(1.08) and info["episode"] == 101
    np.testing.assert_array_equal(stored_bias, [5.0, 0.0])
    assert best_agent.describe_best(info) == "best mean-100 1.1 at episode 101"
    close()


@pytest.mark.parametrize("best_folder", ["missing", "empty"])
def test_eval_of_a_run_without_a_readable_best_checkpoint_plays_its_latest(best_folder, trained_run,
                                                                           tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    folder = os.path.join(run, checkpoints.CHECKPOINT_FOLDER, best_agent.BEST_FOLDER)
    shutil.rmtree(folder)
    if best_folder == "empty":  # a first best write cut short by kill -9 or a full disk
        os.makedirs(folder)
    assert a3c.main(["--eval", str(run), "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "the latest checkpoint (the run has no best one)" in out
    assert checkpoints.latest_checkpoint(os.path.join(run, checkpoints.CHECKPOINT_FOLDER)) in out


def test_a_run_with_full_windows_but_no_best_checkpoint_says_why(tmp_path):
    import config as config_module
    cfg = config_module.Config(max_episodes=None, max_steps=10**9)
    writer = sessions.v1.summary.FileWriter(str(tmp_path))
    log = runlog.EpisodeLog(str(tmp_path), cfg, writer)
    for _ in range(100):
        log.record(0, 1.0, 1, 0.0, 0.0)
    best = best_agent.BestCheckpoint.__new__(best_agent.BestCheckpoint)  # what __init__ finds in an empty folder
    best.folder, best.on_disk = str(tmp_path / "best"), None
    assert best.describe(log).startswith("no best checkpoint: none could be written")
    log.close()
    writer.close()


def test_eval_plays_the_best_checkpoint_unless_told_otherwise(trained_run, capsys):
    best_folder = os.path.join(trained_run, checkpoints.CHECKPOINT_FOLDER, best_agent.BEST_FOLDER)
    with open(os.path.join(best_folder, best_agent.BEST_INFO)) as f:
        info = json.load(f)
    assert a3c.main(["--eval", trained_run, "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert f"the best checkpoint (deterministic return {info['score']:.1f} over 50 trial" in out
    assert checkpoints.latest_checkpoint(best_folder) in out
    assert a3c.main(["--eval", trained_run, "--episodes", "1", "--checkpoint", "latest"]) == 0
    out = capsys.readouterr().out
    latest = checkpoints.latest_checkpoint(os.path.join(trained_run, checkpoints.CHECKPOINT_FOLDER))
    assert "the latest checkpoint" in out and latest in out
    assert a3c.main(["--eval", trained_run, "--episodes", "1", "--checkpoint", latest]) == 0
    assert f"deterministic policy of the checkpoint given, {latest}: return" in (
        capsys.readouterr().out)  # (its path once: it was named twice)
    assert a3c.main(["--eval", trained_run, "--episodes", "1", "--checkpoint", latest + ".index"]) == 0
    assert latest in capsys.readouterr().out, "a file of the checkpoint names it too"
    assert a3c.main(["--eval", trained_run, "--episodes", "1", "--checkpoint", best_folder]) == 0
    assert (f"deterministic policy of the checkpoint folder given, "
            f"{checkpoints.latest_checkpoint(best_folder)}: return") in capsys.readouterr().out


def test_eval_refuses_another_runs_checkpoint_and_plays_a_loose_copy(trained_run, tmp_path,
                                                                      capsys):
    """A checkpoint in another run folder would be played with this run's config and recorded
    into this folder: refused, naming the run it belongs to. A copy outside any run plays."""
    other = tmp_path / "other-run"
    other.mkdir()
    shutil.copy(os.path.join(trained_run, "config.json"), other)
    latest = checkpoints.latest_checkpoint(os.path.join(trained_run, checkpoints.CHECKPOINT_FOLDER))
    best_folder = os.path.join(trained_run, checkpoints.CHECKPOINT_FOLDER, best_agent.BEST_FOLDER)
    for given in (latest, best_folder):
        refused(["--eval", str(other), "--checkpoint", given, "--record"], capsys,
                f"is a checkpoint of the run {os.path.realpath(trained_run)}, not of {other}")
        assert os.listdir(other) == ["config.json"], "nothing written"
    refused(["--eval", str(other), "--checkpoint", trained_run], capsys,  # (it said "no checkpoint")
            f"--checkpoint {trained_run} is another run's folder: play that run with --eval")
    refused(["--eval", trained_run, "--checkpoint", ""], capsys, "--checkpoint is empty")
    assert a3c.main(["--eval", trained_run, "--episodes", "1", "--checkpoint", trained_run]) == 0
    assert "the best checkpoint (deterministic return" in capsys.readouterr().out, "its own: best"
    loose = tmp_path / "loose" / "checkpoints-kept"  # (a project's config.json above it: no run)
    loose.mkdir(parents=True)
    (tmp_path / "config.json").write_text("{}")
    for part in glob.glob(latest + ".*"):
        shutil.copy(part, loose)
    copy = str(loose / os.path.basename(latest))
    assert a3c.main(["--eval", str(other), "--episodes", "1", "--checkpoint", copy]) == 0
    assert f"the checkpoint given, {copy}: return" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["--eval", "{run}", "--checkpoint", "{run}/nothing-here"],
     ["no such checkpoint", "e.g. {run}/checkpoints/model-"]),  # one of the run's own
    (["--resume", "{run}", "--checkpoint", "latest", "--max-steps", "99999999"],
     ["--checkpoint picks what --eval plays"]),
])
def test_checkpoint_choices_that_do_not_fit_are_refused(argv, words, trained_run, capsys):
    refused([arg.format(run=trained_run) for arg in argv] + ["--no-plot"], capsys,
            *[word.format(run=trained_run) for word in words])
