"""MuJoCo locomotion (gymnasium[mujoco]): normalize_obs's statistics, shared by the workers,
saved, restored and frozen; a short real HalfCheetah run end to end."""
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image

import a3c
import best_agent
import checkpoints
import config as config_module
import environments
import sessions
from console import UsageError
from graphs import build_session
from test_training import assert_refused, refused, train

import mujoco_vs_sb3
from conftest import ROOT

CHEETAH = "HalfCheetah-v5"
# short episodes (a full one is 1,000 steps), so that a short run has a mean-100 and a best agent
SHORT = dict(normalize_obs=True, max_episode_steps=100, best_trial_episodes=2,
             best_checkpoint_every_s=0.0, best_trial_cpu_share=1.0)


def test_the_statistics_of_pushed_observations_are_numpys_mean_and_variance():
    """Two workers push rollouts of known observations (far from mean 0, variance 1): the global
    net's statistics then give numpy's mean and variance of all of them, each worker's pull
    brings them back, and every net normalises with them, clipped to obs_clip."""
    cfg = dataclasses.replace(config_module.config_for(CHEETAH), workers=2, envs_per_worker=2,
                              n_steps=5, actor_hidden=(8,), critic_hidden=(8,), normalize_obs=True,
                              obs_clip=3.0)
    spec = environments.probe_spec(CHEETAH, cfg)
    sess, global_net, nets = build_session(spec, cfg)
    rng = np.random.default_rng(0)
    T, E, dims = cfg.n_steps, cfg.envs_per_worker, spec.obs_shape[0]
    centres, spreads = rng.uniform(-50, 50, dims), rng.uniform(0.01, 20, dims)
    pushed = []
    for push in range(3):
        net = nets[push % 2]
        obs = (centres + spreads * rng.standard_normal((T * E, dims))).astype(np.float32)
        pushed.append(obs)
        feed = {net.obs: obs, net.actions: rng.uniform(-1, 1, (T * E, spec.n_actions)),
                net.next_obs: obs, net.rewards: np.zeros((T, E)), net.terminated: np.zeros((T, E)),
                net.ended: np.zeros((T, E))}
        sess.run(net.push_and_pull, feed)
    everything = np.concatenate(pushed).astype(np.float64)
    count, total, squares = sess.run(global_net.obs_statistics)
    assert count == len(everything)
    np.testing.assert_allclose(total / count, everything.mean(0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(squares / count - (total / count) ** 2, everything.var(0), rtol=1e-6)
    # the last pusher pulled them; the other has the ones of its own last push
    last, other = nets[0], nets[1]
    for mine, glob in zip(sess.run(last.obs_statistics), sess.run(global_net.obs_statistics)):
        np.testing.assert_array_equal(mine, glob)
    assert sess.run(other.obs_statistics)[0] == 2 * T * E
    probe = (centres + spreads * rng.standard_normal((4, dims)) * 5).astype(np.float32)
    expected = np.clip((probe - everything.mean(0)) / np.sqrt(everything.var(0) + 1e-8), -3, 3)
    for net in (global_net, last):
        np.testing.assert_allclose(sess.run(net.features, {net.obs: probe}), expected,
                                   rtol=1e-4, atol=1e-4)
    assert np.abs(expected).max() == 3.0, "some values were clipped"
    sess.close()


@pytest.mark.parametrize("sync", [False, True])
def test_a_refused_push_adds_nothing_to_the_statistics(sync):
    """A rollout with a non-finite observation fails the finite check, so its gradients are not
    applied (or stored): nor are its observations counted (a NaN mean would poison every later
    normalised input)."""
    cfg = dataclasses.replace(config_module.config_for(CHEETAH), workers=1, envs_per_worker=2,
                              n_steps=3, actor_hidden=(8,), critic_hidden=(8,),
                              sync_updates=sync)
    spec = environments.probe_spec(CHEETAH, cfg)
    sess, global_net, (net,) = build_session(spec, cfg)
    T, E, dims = cfg.n_steps, cfg.envs_per_worker, spec.obs_shape[0]
    obs = np.ones((T * E, dims), np.float32)
    obs[2, 3] = np.nan
    feed = {net.obs: obs, net.actions: np.zeros((T * E, spec.n_actions)), net.next_obs: obs,
            net.rewards: np.zeros((T, E)), net.terminated: np.zeros((T, E)),
            net.ended: np.zeros((T, E))}
    with pytest.raises(sessions.tf.errors.InvalidArgumentError, match="non-finite"):
        sess.run(net.store_gradients if sync else net.push, feed)
    count, total, squares = sess.run(global_net.obs_statistics)
    assert count == 0 and not total.any() and not squares.any()
    sess.close()


def test_without_observations_yet_a_net_sees_them_as_they_are():
    cfg = dataclasses.replace(config_module.config_for(CHEETAH), workers=1, actor_hidden=(8,),
                              critic_hidden=(8,), normalize_obs=True)
    spec = environments.probe_spec(CHEETAH, cfg)
    sess, global_net, _ = build_session(spec, cfg)
    probe = np.linspace(-5, 5, 2 * spec.obs_shape[0], dtype=np.float32).reshape(2, -1)
    np.testing.assert_allclose(sess.run(global_net.features, {global_net.obs: probe}), probe,
                               rtol=1e-6)
    sess.close()


@pytest.fixture(scope="module")
def cheetah_run(tmp_path_factory):
    """A short HalfCheetah run with normalize_obs (episodes cut at 100 steps), whose best agent
    is tried on 2 episodes."""
    summary, _ = train(CHEETAH, tmp_path_factory.mktemp("cheetah"), max_episodes=None,
                       max_steps=16_000, **SHORT)
    return summary["run_dir"]


def test_a_halfcheetah_run_saves_the_statistics_of_every_observation_it_trained_on(cheetah_run):
    checkpoint = checkpoints.latest_checkpoint(os.path.join(cheetah_run, "checkpoints"))
    steps = int(checkpoint.rsplit("-", 1)[1])
    count = sessions.v1.train.load_variable(checkpoint, "global/obs_norm/count")
    assert count == steps >= 16_000


def test_the_best_agent_restored_plays_its_trial_score_again_with_its_statistics(cheetah_run):
    """The trials played the live net (statistics copied with the parameters); restored from
    best/, the same net on the same start states scores exactly that again, and without its
    statistics it would not."""
    env_id, cfg = checkpoints.read_run(cheetah_run)
    folder = os.path.join(cheetah_run, checkpoints.CHECKPOINT_FOLDER, best_agent.BEST_FOLDER)
    with open(os.path.join(folder, best_agent.BEST_INFO)) as f:
        info = json.load(f)
    # the trial's own envs and start states, in a session with the trainer's settings: a default
    # Session's graph rewrites round the actions differently, and MuJoCo's contacts once
    # carried that past a tolerance of 1e-4
    envs = environments.make_envs(env_id, cfg, info["trial_episodes"], greedy=True)
    one_env = environments.make_envs(env_id, cfg, 1, greedy=True)
    spec = environments.env_spec(envs, env_id)
    graph = sessions.tf.Graph()
    with graph.as_default():
        net = a3c.ACNet("global", spec, cfg)
        saver = sessions.v1.train.Saver(var_list=net.net_variables)
        forget = sessions.v1.variables_initializer(net.obs_statistics)
    with sessions.open_session(graph, None) as sess:  # the trainer's session settings
        saver.restore(sess, checkpoints.latest_checkpoint(folder))
        assert sess.run(net.obs_statistics)[0] > 0
        trial_way = best_agent.play_trial(
            envs, best_agent.GreedyPlayer(sess, net, len(envs), spec.obs_dtype), spec.obs_dtype)
        returns, _ = best_agent.play_episodes(  # --eval's: one episode after another
            one_env, best_agent.GreedyPlayer(sess, net, 1, spec.obs_dtype), len(envs), False,
            first_seed=best_agent.TRIAL_SEED)
        sess.run(forget)
        without_statistics = best_agent.play_trial(
            envs, best_agent.GreedyPlayer(sess, net, len(envs), spec.obs_dtype), spec.obs_dtype)
    envs.close()
    one_env.close()
    scores = [trial_way, float(np.mean(returns)), without_statistics]
    assert scores[:2] == pytest.approx([info["score"]] * 2, rel=1e-9, abs=1e-9), scores
    # without them the net sees other inputs and plays other actions (its return is as small
    # as the trained one's after 16k steps, so only its being another number is asserted)
    assert without_statistics != pytest.approx(info["score"], rel=1e-4, abs=1e-4), scores


def test_eval_and_resume_of_a_halfcheetah_run_use_its_statistics(cheetah_run, capsys):
    """--eval restores them and plays the same again; a net that only plays (--eval's, the best
    agent's) has no op that changes them; --resume goes on counting."""
    first = a3c.evaluate(cheetah_run, episodes=2, checkpoint="latest")
    assert a3c.evaluate(cheetah_run, episodes=2, checkpoint="latest")["returns"] == first["returns"]
    _, cfg = checkpoints.read_run(cheetah_run)
    graph = sessions.tf.Graph()
    with graph.as_default():
        net = a3c.ACNet("global", environments.probe_spec(CHEETAH, cfg), cfg)
    assert len(net.obs_statistics) == 3
    initializers = {v.initializer for v in net.obs_statistics}
    writers = [op for op in graph.get_operations() if op.type.startswith(("Assign", "ResourceApply"))
               and "obs_norm" in " ".join(i.name for i in op.inputs) and op not in initializers]
    assert writers == []
    assert a3c.main(["--resume", cheetah_run, "--max-steps", "24000", "--no-plot"]) == 0
    capsys.readouterr()
    resumed = checkpoints.latest_checkpoint(os.path.join(cheetah_run, "checkpoints"))
    assert sessions.v1.train.load_variable(resumed, "global/obs_norm/count") == int(
        resumed.rsplit("-", 1)[1]) >= 24_000


@pytest.mark.parametrize("argv, words", [
    (["--set", "normalize_obs=maybe"], ["normalize_obs"]),
    (["--set", "obs_clip=0"], ["obs_clip must be > 0"]),
    (["--set", "obs_clip=-1"], ["obs_clip must be > 0"]),
    (["--env", "ALE/Pong-v5", "--set", "normalize_obs=true"], ["normalize_obs is for flat"]),
    (["--cluster", "local:2", "--set", "normalize_obs=true"], ["normalize_obs", "--cluster"]),
])
def test_bad_normaliser_settings_are_refused(argv, words, tmp_path, capsys):
    assert_refused(["--env", CHEETAH, *argv] if "--env" not in argv else argv, capsys, tmp_path,
                   *words)


def test_a_mujoco_or_atari_id_given_with_its_module_is_run_as_the_id_itself(tmp_path, capsys):
    """"gymnasium.envs.mujoco:Hopper-v5" trained without Hopper's preset (no normalize_obs), and
    its --record could not draw: they go by the id, and an id without its version ("Hopper") by
    the version gymnasium makes of it. A plugin's id keeps its module, which --eval
    and --resume must import again."""
    assert environments.canonical_env_id("ale_py:ALE/Pong-v5") == "ALE/Pong-v5"
    # gymnasium's classic-control envs too: with their module they trained without their presets
    assert [environments.canonical_env_id(env_id) for env_id in (
        "gymnasium.envs.classic_control:CartPole-v1", "gymnasium:Pendulum-v1")] == [
        "CartPole-v1", "Pendulum-v1"]
    assert environments.canonical_env_id("no_such_module:Hopper-v5") == "no_such_module:Hopper-v5"
    # an id without its version is the highest one, as gym.make makes it (it had no preset)
    # (and a plugin's keeps its module; ale-py's ids outside ALE/ are refused as typed, once
    # ALE/Pong has registered them too)
    assert [environments.canonical_env_id(env_id) for env_id in
            ("Hopper", "CartPole", "ALE/Pong", "Pong", "Hopper-v4", "NoSuchEnv", "ALE/NoSuchGame",
             "gymnasium.envs.classic_control:CartPole")] == [
        "Hopper-v5", "CartPole-v1", "ALE/Pong-v5", "Pong", "Hopper-v4", "NoSuchEnv",
        "ALE/NoSuchGame", "CartPole-v1"]
    assert [environments.canonical_env_id(env_id) for env_id in
            ("ale_py:Pong", "ale_py:Pong-v4", "ale_py:")] == ["Pong", "Pong-v4", "ale_py:"]
    for outside in ("Pong", "Pong-v4", "PongNoFrameskip-v4", "PongNoFrameskip"):  # (refused
        # so, not as "image observations ...", nor with "use None")
        with pytest.raises(UsageError, match=f"^{outside}: only the ALE/<Game>-v5 ids .* use "
                                             f"ALE/Pong-v5$"):
            environments.make_env(outside, config_module.Config())
    # a run saved as "Hopper" before ids were completed records as MuJoCo (in its own process)
    assert environments.is_mujoco("Hopper") and not environments.is_mujoco("CartPole")
    assert a3c.main(["--env", "gymnasium.envs.mujoco:Hopper", "--workers", "1", "--max-steps",
                     "200", "--set", "envs_per_worker=1", "--set", "best_trial_episodes=0",
                     "--no-plot", "--results-dir", str(tmp_path)]) == 0
    assert "the Hopper-v5 preset" in capsys.readouterr().out
    (run_dir,) = [os.path.join(tmp_path, "Hopper-v5", run) for run in
                  os.listdir(os.path.join(tmp_path, "Hopper-v5"))]
    with open(os.path.join(run_dir, "config.json")) as f:
        saved = json.load(f)
    assert saved["env"] == "Hopper-v5"
    assert saved["config"]["normalize_obs"] and saved["config"]["reward_scale"] == 0.1


@pytest.mark.filterwarnings("ignore:.*Overriding environment Acrobot-v1")
def test_a_plugins_own_env_keeps_its_module_whatever_it_is_named(tmp_path, monkeypatch):
    """Its module must be imported again by --eval and --resume: a plugin's env whose entry point
    says mujoco, or one with a MuJoCo env's name, is not gymnasium's (which dropped its module)."""
    (tmp_path / "a3c_test_mujoco_plugin.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('A3CTestMyAnt-v0', entry_point='a3c_test_mujoco_plugin.mujoco:Ant')\n"
        "gymnasium.register('A3CTestHopper-v5', entry_point=gymnasium.spec('Hopper-v5').entry_point)\n"
        "gymnasium.register('Ant-v99', entry_point='a3c_test_mujoco_plugin:Ant')\n"
        # gymnasium's own id and entry point, made another env: a fresh process makes gymnasium's
        "gymnasium.register('Acrobot-v1', entry_point=gymnasium.spec('Acrobot-v1').entry_point,"
        " max_episode_steps=50)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ("A3CTestMyAnt-v0", "A3CTestHopper-v5", "Ant-v99", "Acrobot-v1")
    acrobot = gym.spec("Acrobot-v1")
    try:
        for name in names:
            plugin_id = f"a3c_test_mujoco_plugin:{name}"
            assert environments.canonical_env_id(plugin_id) == plugin_id
    finally:  # (Ant-v99 would make the tests' Ant-v5 "out of date")
        for name in names:
            gym.registry.pop(name, None)
        gym.registry["Acrobot-v1"] = acrobot
        sys.modules.pop("a3c_test_mujoco_plugin", None)


def test_making_mujoco_envs_writes_no_log_file_and_no_deprecation_warnings(tmp_path, monkeypatch,
                                                                           capfd):
    """MuJoCo 3.3+ warns of an attribute of gymnasium's own model files for every env made, to
    stderr and into MUJOCO_LOG.TXT in the current folder: 32 times for 8 workers x 4 envs."""
    monkeypatch.chdir(tmp_path)
    envs = environments.make_envs("Walker2d-v5", config_module.Config(), 2)
    envs.close()
    assert os.listdir(tmp_path) == []
    assert "settotalmass" not in capfd.readouterr().err


@pytest.mark.parametrize("display", [None, ":4093"])
def test_eval_records_a_gif_of_a_mujoco_agent_on_a_machine_without_a_display(cheetah_run,
                                                                            monkeypatch, capsys,
                                                                            display):
    """MuJoCo draws through OpenGL: with no display --record picks EGL by itself, and also where
    DISPLAY names an X server that is not there (a dropped ssh -X session)."""
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)  # (set first, so that the test's end restores what was there)
    if display:
        monkeypatch.setenv("DISPLAY", display)
    out = io.StringIO()
    result = a3c.evaluate(cheetah_run, episodes=1, record=True, checkpoint="latest", out=out)
    assert result["replayed_returns"] == result["returns"], "the GIF shows the episode played"
    said = out.getvalue().splitlines()  # the score before the drawing, which takes a while
    assert "return" in said[0] and "drawing the first episode" in said[1]
    assert said[-1].endswith(f"animation in {result['animation']}")
    with Image.open(result["animation"]) as gif:
        assert gif.size == (480, 480)
        assert np.asarray(gif.convert("RGB")).std() > 10, "a picture, not a blank frame"
        shown_ms = 0  # (the GIF writer merges repeated frames into one shown longer)
        for index in range(gif.n_frames):
            gif.seek(index)
            shown_ms += gif.info["duration"]
    # every step of the episode (max_episode_steps) at the env's pace: 20 a second (render_fps)
    assert shown_ms == 100 * 50
    warned = capsys.readouterr().err  # a display skipped is said, not silent
    assert ("failed: recording offscreen with EGL" in warned) == bool(display)


@pytest.mark.parametrize("chosen, display, drawn_with", [
    (None, False, "egl"), ("", False, "egl"), (" EGL", True, "egl"), ("glfw", False, "glfw"),
    (None, True, None)])
def test_the_drawing_process_gets_egl_without_a_display_and_mujoco_gl_in_lower_case(
        chosen, display, drawn_with, monkeypatch):
    """gymnasium's MuJoCo viewer compares MUJOCO_GL in lower case (MuJoCo itself takes "EGL")."""
    from recording import child_environment
    monkeypatch.setenv("MUJOCO_GL", "")
    if chosen is None:
        monkeypatch.delenv("MUJOCO_GL")
    else:
        monkeypatch.setenv("MUJOCO_GL", chosen)
    assert child_environment(display).get("MUJOCO_GL") == drawn_with


def test_a_mujoco_gl_that_cannot_load_is_refused_in_one_line_before_any_env_is_made():
    """mujoco loads the OpenGL backend MUJOCO_GL names as it is imported, training or not: a
    fresh process, as this one has imported mujoco already."""
    code = ("import config, environments\n"
            "try:\n    environments.make_envs('Hopper-v5', config.Config(), 1)\n"
            "except environments.UsageError as exc:\n    print(exc)\n    raise SystemExit(2)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "MUJOCO_GL": "no-such-backend"}, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    [said] = done.stdout.splitlines()
    assert "cannot load MuJoCo" in said and "MUJOCO_GL=no-such-backend" in said and "unset it" in said


def test_eval_that_cannot_draw_mujoco_frames_says_so_in_one_line(cheetah_run, monkeypatch, capsys):
    monkeypatch.setenv("MUJOCO_GL", "no-such-backend")
    if os.path.exists(os.path.join(cheetah_run, "episode.gif")):  # (the test above's)
        os.remove(os.path.join(cheetah_run, "episode.gif"))
    refused(["--eval", cheetah_run, "--record"], capsys, "HalfCheetah-v5 cannot draw its frames",
            "MUJOCO_GL", "EGL")
    assert not os.path.exists(os.path.join(cheetah_run, "episode.gif"))


@pytest.mark.parametrize("frames_per_s, shown", [(125, {20, 30}), (20, {50}), (15, {60, 70})])
def test_a_gif_keeps_its_envs_pace_in_frame_times_a_browser_shows(frames_per_s, shown, tmp_path):
    """Hopper and Walker2d run 125 steps a second: a GIF frame under 20 ms is shown for 100, so
    every third is kept; 2 s of play stays 2 s."""
    from recording import save_animation
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(frames_per_s * 2)]
    with Image.open(save_animation(frames, str(tmp_path / "a.gif"), frames_per_s)) as gif:
        durations = []
        for index in range(gif.n_frames):
            gif.seek(index)
            durations.append(gif.info["duration"])
    assert set(durations) == shown and abs(sum(durations) - 2000) <= 20


def test_the_sb3_comparison_takes_only_runs_of_the_preset_and_says_which_it_left_out(
        cheetah_run, tmp_path, capsys):
    """bench/mujoco_vs_sb3.py compares runs made with the env's preset as config.py has it: a run
    of other settings (here the short test run) is named on stderr, not silently dropped."""
    assert mujoco_vs_sb3.our_runs([cheetah_run]) == []
    assert f"left out {cheetah_run}: not run with {CHEETAH}'s preset" in capsys.readouterr().err
    as_preset = tmp_path / "as_preset"
    shutil.copytree(cheetah_run, as_preset)
    saved = json.loads((as_preset / "config.json").read_text())
    saved["config"] = json.loads(json.dumps(dataclasses.asdict(config_module.config_for(CHEETAH))))
    (as_preset / "config.json").write_text(json.dumps(saved))
    [run] = mujoco_vs_sb3.our_runs([str(as_preset)])
    assert (run["env"], run["dir"]) == (CHEETAH, str(as_preset)) and run["env_steps"] > 10_000
    assert capsys.readouterr().err == ""
