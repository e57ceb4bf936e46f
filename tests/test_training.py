"""End-to-end: real training runs on real gymnasium environments, and the command line."""
import csv
import dataclasses
import glob
import io
import json
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import a3c
import best_agent
import checkpoints
import console
import environments
import runlog
import sessions
import cpus
import config as config_module
from config import Config
from envs import BoxActionEnv, RecordingEnv, ShiftedDiscreteEnv
from graphs import build_session

TINY = dict(workers=2, envs_per_worker=2, n_steps=5, actor_hidden=(16,), critic_hidden=(16,),
            log_every_s=0.5)


def train(env_id, tmp_path, **fields):
    cfg = dataclasses.replace(config_module.config_for(env_id), **{**TINY, **fields})
    out = io.StringIO()
    summary = a3c.train(env_id, cfg, str(tmp_path), show_plot=False, out=out)
    return summary, out.getvalue()


def read_rows(run_dir):
    with open(os.path.join(run_dir, "episodes.csv"), newline="") as f:
        return list(csv.reader(f))


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_a_short_run_writes_every_output(env_id, tmp_path):
    summary, console = train(env_id, tmp_path, max_episodes=12, max_steps=None)
    run_dir = summary["run_dir"]
    assert os.path.dirname(os.path.dirname(run_dir)) == str(tmp_path)
    assert os.path.basename(os.path.dirname(run_dir)) == env_id
    assert os.path.basename(run_dir).endswith("-s1")

    with open(os.path.join(run_dir, "config.json")) as f:
        saved = json.load(f)
    assert saved["env"] == env_id
    assert set(saved["config"]) == set(config_module.field_names())
    assert saved["config"]["workers"] == 2
    assert {"tensorflow", "gymnasium", "numpy"} <= set(saved["versions"])

    rows = read_rows(run_dir)
    assert rows[0][:9] == runlog.EPISODE_COLUMNS
    body = rows[1:]
    assert len(body) == 12, "exactly max_episodes rows"
    assert [int(r[1]) for r in body] == list(range(1, 13))
    steps = [int(r[2]) for r in body]
    assert steps == sorted(steps) and steps[-1] <= summary["env_steps"]
    assert {r[0] for r in body} <= {"0", "1"}
    if env_id == "Pendulum-v1":
        # every Pendulum episode lasts 200 steps, so worker 0 alone would need 1,200 steps before
        # worker 1 ends one; CartPole's short episodes let worker 0 finish all 12 (seen once)
        assert {r[0] for r in body} == {"0", "1"}, "each thread runs its own worker"
    for r in body:
        assert np.isfinite([float(x) for x in r[3:]]).all()
    if env_id == "Pendulum-v1":
        assert all(int(r[5]) == 200 for r in body), "Pendulum is cut at 200 steps"
        assert all(float(r[4]) <= 0 for r in body), "logged returns are raw, not (r + 8) / 8"

    assert glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    assert os.path.getsize(os.path.join(run_dir, "rewards.png")) > 10_000
    assert "mean-100" in console and run_dir in console.splitlines()[-1]


class TracedWorker(a3c.Worker):
    """The real worker, noting each rollout's finished episodes and each push's statistics."""

    def rollout(self):
        finished = super().rollout()
        self.trace.append(finished)
        return finished

    def push_and_pull(self, lr_fraction):
        stats = super().push_and_pull(lr_fraction)
        self.pushes.append(stats)
        return stats


def test_each_episode_logs_the_mean_statistics_of_exactly_the_pushes_that_trained_on_it(tmp_path):
    # Countdown episodes last 10 steps: 25-step rollouts end two or three of them per env, and
    # an episode's steps fall in one to two pushes
    cfg = dataclasses.replace(Config(), **{**TINY, "workers": 1, "n_steps": 25, "max_episodes": 16})
    env_id = "A3CTest/Countdown-v0"
    spec = environments.env_spec(environments.make_env(env_id, cfg), env_id)
    sess, _, (net,) = build_session(spec, cfg)
    worker = TracedWorker(0, net, env_id, spec, cfg)
    worker.trace, worker.pushes = [], []
    worker.prepare(sess, cfg.seed)
    writer = sessions.v1.summary.FileWriter(str(tmp_path))
    log = runlog.EpisodeLog(str(tmp_path), cfg, writer)
    worker.work(sessions.v1.train.Coordinator(), log)
    log.close()
    writer.close()
    sess.close()

    expected, first_push = [], [0] * cfg.envs_per_worker  # the push of each env's episode's first step
    for push, finished in enumerate(worker.trace):
        for k, _, length in finished:
            assert length == 10
            spanned = np.array(worker.pushes[first_push[k]:push + 1])
            expected.append(spanned.mean(axis=0))
            first_push[k] = push  # the next episode starts within this rollout
    rows = read_rows(str(tmp_path))[1:]
    assert len(rows) == 16 and len(expected) >= 16
    logged = np.array([[float(r[7]), float(r[8])] for r in rows])
    np.testing.assert_allclose(logged, np.array(expected[:16]), rtol=1e-5)
    assert len({tuple(p) for p in worker.pushes}) == len(worker.pushes), "pushes differ"


def test_reward_scaling_changes_learning_only_never_the_logged_return(tmp_path):
    summary, _ = train("A3CTest/Countdown-v0", tmp_path, max_episodes=20, reward_scale=5.0,
                       reward_shift=3.0)
    returns = [float(r[4]) for r in read_rows(summary["run_dir"])[1:]]
    assert returns == [10.0] * 20
    assert all(int(r[5]) == 10 for r in read_rows(summary["run_dir"])[1:])


def test_continuous_actions_reaching_the_env_respect_asymmetric_bounds(tmp_path):
    BoxActionEnv.received.clear()
    train("A3CTest/BoxAction-v0", tmp_path, max_steps=2000, max_episodes=None, sigma_floor=1.0,
          initial_sigma=2.0)
    actions = np.array(BoxActionEnv.received)
    low, high = BoxActionEnv.action_space.low, BoxActionEnv.action_space.high
    assert actions.shape[0] >= 2000 and actions.shape[1] == 3
    assert np.all(actions >= low) and np.all(actions <= high)
    assert np.any(actions == low) and np.any(actions == high), "wide samples are clipped to bounds"


def test_worker_threads_run_where_the_run_records_they_ran(tmp_path):
    RecordingEnv.affinity.clear()
    summary, console = train("A3CTest/Recording-v0", tmp_path, workers=3, max_episodes=12)
    with open(os.path.join(summary["run_dir"], "config.json")) as f:
        recorded = json.load(f)["cpus"]
    layout = cpus.cpu_layout(dataclasses.replace(Config(), workers=3))
    assert set(RecordingEnv.affinity) == {"worker_0", "worker_1", "worker_2"}
    if layout is None:  # one CPU: nothing to pin
        assert recorded is None and "TensorFlow's ops run on" not in console
        assert all(mask == os.sched_getaffinity(0) for mask in RecordingEnv.affinity.values())
    else:
        assert recorded == {"workers": sorted(layout.workers), "tensorflow_ops": sorted(layout.ops)}
        assert f"worker threads share CPU {min(layout.workers)}" in console
        assert all(mask == layout.workers for mask in RecordingEnv.affinity.values())


def test_a_discrete_space_that_starts_elsewhere_gets_actions_from_its_start(tmp_path):
    ShiftedDiscreteEnv.received.clear()
    train("A3CTest/ShiftedDiscrete-v0", tmp_path, max_episodes=30)
    assert set(ShiftedDiscreteEnv.received) == {-1, 0, 1}


def test_an_env_id_with_a_module_imports_that_module_first(tmp_path, monkeypatch, capsys):
    (tmp_path / "a3c_plugin_envs.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('PluginCountdown-v0', entry_point='envs:CountdownEnv')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _ = run_cli(["--env", "a3c_plugin_envs:PluginCountdown-v0", "--workers", "2",
                       "--max-episodes", "6", "--no-plot", "--results-dir", str(tmp_path / "runs")],
                      capsys)
    assert code == 0
    (run_dir,) = glob.glob(os.path.join(tmp_path, "runs", "a3c_plugin_envs_PluginCountdown-v0", "*"))
    assert [r[4] for r in read_rows(run_dir)[1:]] == ["10"] * 6
    assert a3c.main(["--eval", run_dir, "--episodes", "1"]) == 0


def test_max_episode_steps_cuts_episodes_at_that_length(tmp_path):
    summary, _ = train("CartPole-v1", tmp_path, max_episodes=40, max_episode_steps=7)
    lengths = [int(r[5]) for r in read_rows(summary["run_dir"])[1:]]
    assert max(lengths) == 7 and lengths.count(7) > 30  # random CartPole lasts ~22 steps


def test_a_failing_worker_stops_every_thread_and_reaches_the_user(tmp_path):
    cpus = os.sched_getaffinity(0)
    with pytest.raises(console.WorkerError, match="worker_1 raised RuntimeError: the simulator crashed"):
        train("A3CTest/Failing-v0", tmp_path, workers=3, envs_per_worker=1,
              max_steps=10_000_000, max_episodes=None)
    assert not [t for t in threading.enumerate() if t.name.startswith("worker_")]
    assert os.sched_getaffinity(0) == cpus, "pinning the workers left this thread alone"
    (run_dir,) = glob.glob(os.path.join(tmp_path, "A3CTest_Failing-v0", "*"))
    assert len(read_rows(run_dir)) > 1, "episodes finished before the crash are kept"
    assert os.path.exists(os.path.join(run_dir, "rewards.png"))
    assert checkpoints.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER)), "state is saved"


def test_a_stop_ends_a_long_rollout_at_once(tmp_path, capsys):
    """A stop (here worker_1's crash on its 30th step) reaches a worker in the middle of its
    rollout: worker_0's 2M steps would take a minute or more, and the driver would give up on it
    after 30 s, leaving the run's files open."""
    import time
    started = time.monotonic()
    with pytest.raises(console.WorkerError, match="worker_1 raised RuntimeError"):
        train("A3CTest/Failing-v0", tmp_path, workers=2, envs_per_worker=1, n_steps=2_000_000,
              max_steps=10_000_000, max_episodes=None, best_trial_episodes=0)
    assert time.monotonic() - started < 20
    assert "did not stop" not in capsys.readouterr().err
    assert not [t for t in threading.enumerate() if t.name.startswith("worker_")]


def test_the_episode_log_counts_exactly_under_many_threads(tmp_path):
    import tensorflow as tf
    writer = tf.compat.v1.summary.FileWriter(str(tmp_path))
    log = runlog.EpisodeLog(str(tmp_path), Config(max_episodes=None, max_steps=10**9), writer)

    def hammer(worker):
        for _ in range(500):
            log.add_steps(3)
            log.record(worker, 1.0, 3, 0.5, 1.0)

    threads = [threading.Thread(target=hammer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    writer.close()
    assert log.env_steps == 8 * 500 * 3 and log.episodes == 8 * 500
    episodes = [int(r[1]) for r in read_rows(str(tmp_path))[1:]]
    assert sorted(episodes) == list(range(1, 4001))


def test_runs_never_overwrite_or_delete_earlier_runs(tmp_path):
    keep = tmp_path / "CartPole-v1" / "mine.txt"
    keep.parent.mkdir()
    keep.write_text("notes")
    first, _ = train("CartPole-v1", tmp_path, max_episodes=3)
    second, _ = train("CartPole-v1", tmp_path, max_episodes=3)
    assert first["run_dir"] != second["run_dir"]
    assert keep.read_text() == "notes"
    for run in (first, second):
        assert len(read_rows(run["run_dir"])) == 4


def test_a_seeded_single_worker_learns_cartpole(tmp_path):
    summary, _ = train("CartPole-v1", tmp_path, workers=1, envs_per_worker=4, seed=7, actor_lr=1e-3,
                       critic_lr=3e-3, actor_hidden=(64,), critic_hidden=(64,), max_episodes=None,
                       max_steps=40_000)
    returns = np.array([float(r[4]) for r in read_rows(summary["run_dir"])[1:]])
    first, last = returns[:30].mean(), returns[-30:].mean()
    assert first < 40, "a fresh policy is near random (about 22)"
    assert last > first + 60, f"mean return of the last 30 episodes {last:.0f} vs first {first:.0f}"


# --- the command line ------------------------------------------------------------------------

def run_cli(argv, capsys):
    code = a3c.main(argv)
    captured = capsys.readouterr()
    return code, captured.err.strip()


def refused(argv, capsys, *words):
    """The command line refuses argv: exit status 2 and one line of error naming every word,
    and nothing else (not the preset line a run starts with)."""
    code = a3c.main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2 and captured.out == "", captured.out
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err


def assert_refused(argv, capsys, tmp_path, *words):
    refused(argv + ["--results-dir", str(tmp_path / "out"), "--no-plot"], capsys, *words)
    assert not (tmp_path / "out").exists(), "nothing written"


def test_cli_refuses_a_results_dir_it_cannot_write_before_it_starts(capsys, tmp_path):
    (tmp_path / "a-file").write_text("")
    refused(["--env", "CartPole-v1", "--set", "cnn=nature",  # (refused: its warning unsaid)
             "--results-dir", str(tmp_path / "a-file" / "runs")], capsys,
            "a-file is not a folder", "--results-dir")
    assert (tmp_path / "a-file").read_text() == ""


def test_a_results_dir_that_only_the_folder_making_refuses_prints_no_preset_line(capsys):
    """/proc can look writable (to root) and still take no folder: one line, no preset line."""
    refused(["--env", "CartPole-v1", "--results-dir", "/proc/a3c-no-such-folder"], capsys,
            "/proc/a3c-no-such-folder", "--results-dir")
    assert not os.path.exists("/proc/a3c-no-such-folder")
    # (as another user the pre-check refuses /proc first, which says no preset line either)


def test_a_results_dir_inside_a_run_folder_is_refused(capsys, tmp_path):
    """A new run inside an earlier run's folder (or its checkpoints/) would mix two runs' files."""
    run = tmp_path / "CartPole-v1" / "20260101T000000Z-s1"
    (run / "checkpoints" / "best").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    for inside in (run, run / "checkpoints", run / "checkpoints" / "best" / "new"):
        refused(["--env", "CartPole-v1", "--results-dir", str(inside)], capsys,
                f"is inside the run folder {run}")
    assert sorted(os.listdir(run)) == ["checkpoints", "config.json"]
    assert os.listdir(run / "checkpoints" / "best") == []


def test_cli_refuses_an_unknown_environment(capsys, tmp_path):
    assert_refused(["--env", "NoSuchEnv-v9"], capsys, tmp_path, "NoSuchEnv-v9", "pprint_registry")


def test_cli_refuses_a_retired_version_in_one_line_without_gymnasiums_warning(capsys, tmp_path):
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert_refused(["--env", "Taxi-v3"], capsys, tmp_path, "Taxi-v3", "Taxi-v4")
    assert not [warning for warning in said if "out of date" in str(warning.message)]


def test_unversioned_and_module_ids_are_made_as_gymnasium_makes_them(tmp_path, monkeypatch):
    from environments import make_env
    monkeypatch.setattr(environments, "WARNINGS_PASSED_ON", set())  # (whatever ran before)
    (tmp_path / "a3c_test_envs.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('A3CModuleTest-v0', 'gymnasium.envs.classic_control:CartPoleEnv')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = config_module.config_for("CartPole-v1")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")
        for env_id in ("CartPole", "a3c_test_envs:A3CModuleTest-v0", "CartPole"):
            env = make_env(env_id, cfg)
            assert env.observation_space.shape == (4,)
            env.close()
    assert len([warning for warning in said if "CartPole-v1" in str(warning.message)]) == 1


def test_an_env_made_many_times_warns_once_as_python_does():
    """32 envs of one id (8 workers x 4) must not repeat its warnings 32 times."""
    from environments import make_env
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")
        for _ in range(3):
            make_env("CartPole-v0", config_module.config_for("CartPole-v0")).close()
    assert len([warning for warning in said if "out of date" in str(warning.message)]) == 1


@pytest.mark.parametrize("env_id, words", [
    ("A3CTest/MultiDiscrete-v0", ["MultiDiscrete", "action space"]),
    ("A3CTest/Image-v0", ["image observations", "(84, 84, 3)"]),
    ("FrozenLake-v1", ["observation space Discrete"]),
])
def test_cli_refuses_unsupported_spaces_naming_env_and_space(env_id, words, capsys, tmp_path):
    assert_refused(["--env", env_id], capsys, tmp_path, env_id, *words)


@pytest.mark.parametrize("argv, words", [
    (["--set", "no_such_key=1"], ["unknown config key 'no_such_key'"]),
    (["--set", "gamma=abc"], ["gamma", "abc"]),
    (["--set", "gamma"], ["KEY=VALUE"]),
    (["--set", "gamma=1.5"], ["gamma must be in (0, 1]"]),
    (["--workers", "0"], ["workers must be >= 1"]),
    (["--workers", "1000000"], ["workers must be <= 1024", "--cluster"]),  # (set-up would hang)
    (["--set", "workers=1e20"], ["workers must be <= 1024"]),
    (["--set", "n_steps=1e12"], ["n_steps must be at most 2,147,483,647"]),  # (int32 in the graph)
    (["--max-steps", "1e30"], ["max_steps must be at most 9,223,372,036,854,775,807"]),
    (["--max-steps", "9" * 400], ["max_steps must be at most"]),  # (past float's range)
    (["--max-steps", "-5"], ["--max-steps -5: must be >= 0"]),
    (["--max-episodes", "0", "--max-steps", "0"], ["never ends"]),
    (["--set", "max_episodes=0", "--set", "max_steps=none"], ["never ends"]),
    (["--seed", "-1"], ["seed must be in [0, 2**32 - 1]"]),
    (["--set", "seed=4294967296"], ["seed must be in"]),
    (["--set", "entropy_beta=nan"], ["entropy_beta must be a finite number"]),
    (["--set", "reward_shift=nan"], ["reward_shift must be a finite number"]),
    (["--set", "initial_sigma=nan"], ["initial_sigma must be a finite number"]),
    (["--set", "sigma_floor=1e-50"], ["sigma_floor must be of a size float32 holds"]),
    (["--set", "reward_scale=1e40"], ["reward_scale must be of a size float32 holds"]),
    (["--set", "final_sigma_scale=0"], ["final_sigma_scale must be in (0, 1]"]),
    (["--set", "hidden_activation=elu"], ["hidden_activation must be relu or tanh"]),
    (["--set", "final_sigma_scale=1.5"], ["final_sigma_scale must be in (0, 1]"]),
    (["--set", "lstm_units=0"], ["lstm_units must be >= 1"]),
    (["--set", "lstm_input_hidden=64,0"], ["lstm_input_hidden needs layer sizes >= 1"]),
    (["--set", "best_trial_cpu_share=0"], ["best_trial_cpu_share must be in (0, 1]"]),
    (["--set", "log_every_s=inf"], ["log_every_s must be a finite number"]),
    (["--set", "checkpoint_every_s=inf"], ["checkpoint_every_s must be a finite number"]),
    (["--max-episodes", "5", "--set", "max_episodes=9"], ["max_episodes is set twice",
                                                          "--max-episodes 5"]),
    (["--set", "workers=2", "--set", "workers=3"], ["workers is set twice"]),
    (["--sync", "--set", "scale_lr_with_workers=true"], ["scale_lr_with_workers", "sync_updates",
                                                          "drop one of the two"]),
    (["--episodes", "3"], ["--episodes goes with --eval"]),
    (["--stochastic"], ["--stochastic goes with --eval"]),
    (["--eval", ".", "--set", "gamma=0.5", "--max-steps", "3"], ["--max-steps, --set, --results-dir are for training"]),
])
def test_cli_refuses_bad_values_in_one_line(argv, words, capsys, tmp_path):
    assert_refused(["--env", "CartPole-v1"] + argv, capsys, tmp_path, *words)


@pytest.mark.parametrize("argv, words", [
    (["--envs", "Nope-v0"], ["cannot make environment 'Nope-v0'"]),
    (["--envs", "CartPole-v1", "Nope-v0", "--set", "max_episodes=2"], ["'Nope-v0'"]),
    (["--envs", "CartPole-v1", "--seeds", "-1"], ["CartPole-v1 seed -1", "seed must be in"]),
    (["--envs", "CartPole", "--seeds", "-1"], ["CartPole-v1 seed -1"]),  # (its preset: -v1's)
    (["--envs", "CartPole-v1", "--versus", "nope=1"], ["unknown config key 'nope'"]),
    (["--envs", "CartPole-v1", "--set", "actor_hidden=64,,64"], ["bad value for actor_hidden"]),
    (["--envs", "CartPole-v1", "--frames", "nan"], ["--frames must be a number"]),
])
def test_the_learning_benchmark_refuses_bad_runs_in_one_line_before_any_trains(
        argv, words, capsys, tmp_path):
    import learning

    assert learning.main(argv + ["--seeds", "1"] * ("--seeds" not in argv) +
                         ["--keep-runs", str(tmp_path / "runs"), "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err
    for word in words:
        assert word in captured.err
    assert not (tmp_path / "runs").exists() and list(tmp_path.iterdir()) == []


BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


@pytest.mark.parametrize("script", sorted(name for name in os.listdir(BENCH)
                                          if name.endswith(".py") and name != "targets.py"))
def test_every_benchmark_refuses_an_unknown_flag_in_one_line_that_names_it(script, capsys, monkeypatch):
    import importlib.util
    import inspect

    # loaded under its own name: bench/cluster.py must not replace cluster.py in sys.modules
    spec = importlib.util.spec_from_file_location(f"bench_{script[:-3]}", os.path.join(BENCH, script))
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # (dataclasses look their module up)
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the path each script puts bench/ on
    spec.loader.exec_module(module)
    monkeypatch.setattr("sys.argv", [script, "--bogus"])
    with pytest.raises(SystemExit) as refusal:
        module.main(["--bogus"]) if inspect.signature(module.main).parameters else module.main()
    err = capsys.readouterr().err.strip()
    assert refusal.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"bench/{script}: error:") and f"python bench/{script} --help" in err


def test_the_ps_benchmark_refuses_a_bad_flag_before_tensorflow_speaks():
    # a fresh process: TensorFlow's import writes its start-up lines to stderr, once per process
    refusal = subprocess.run([sys.executable, os.path.join(BENCH, "ps_repeats.py"), "--bogus"],
                             capture_output=True, text=True, timeout=120)
    assert refusal.returncode == 2 and refusal.stdout == ""
    assert len(refusal.stderr.strip().splitlines()) == 1, refusal.stderr


def test_cli_rejects_malformed_flags_with_exit_2_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (a flag let through would train into ./results)
    for argv, flag in ((["--workers", "many"], "--workers"), (["--no-such-flag"], "--no-such-flag")):
        with pytest.raises(SystemExit) as exit_info:
            a3c.main(argv)
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and flag in err and "--help" in err
        assert len(err.splitlines()) == 1, err
    refused(["--max-steps", "lots"], capsys, "--max-steps lots", "bad value for max_steps")
    refused(["--max-episodes", "-5"], capsys, "--max-episodes -5: must be >= 0")
    # argparse would keep the last of a flag given twice: one of them is a mistake
    for argv, flag in ((["--max-episodes", "3", "--max-episodes", "5"], "--max-episodes"),
                       (["--max-steps", "1e4", "--max-steps=500"], "--max-steps"),
                       (["--results-dir", "a", "--results-dir", "b"], "--results-dir")):
        with pytest.raises(SystemExit) as exit_info:
            a3c.main(argv)
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and f"{flag} is given twice" in err, err
        assert len(err.splitlines()) == 1, err
    # no abbreviations: local:N passes its argv on with --cluster, where --clus would stay too
    with pytest.raises(SystemExit) as exit_info:
        a3c.main(["--env", "Pendulum-v1", "--clus", "local:2"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "unrecognized arguments: --clus" in err, err


def test_an_empty_results_dir_is_refused_not_taken_for_results(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(["--env", "CartPole-v1", "--results-dir", ""], capsys, "--results-dir is empty")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, words", [
    (["--env", ""], ["--env is empty", "give a gymnasium id"]),  # (trained Pendulum-v1)
    (["--env", " ", "--max-steps", "10"], ["--env is empty"]),
    (["--env", "ALE/Pong-v5 "], ["has spaces around it", "give 'ALE/Pong-v5'"]),
    (["--resume", ""], ["--resume is empty"]),
    (["--eval", ""], ["--eval is empty"]),
])
def test_an_empty_env_or_run_folder_is_refused_not_taken_for_the_default(argv, words, capsys,
                                                                         tmp_path):
    refused(argv + ["--results-dir", str(tmp_path / "out")] * (argv[0] == "--env"), capsys,
            *words)
    assert list(tmp_path.iterdir()) == []


def test_results_dir_is_refused_where_no_new_run_folder_is_made(capsys, tmp_path):
    """--eval and --resume write into RUN_DIR itself: a --results-dir there would be ignored."""
    refused(["--eval", str(tmp_path), "--results-dir", str(tmp_path / "out")], capsys,
            "--results-dir is for training")
    refused(["--resume", str(tmp_path), "--results-dir", str(tmp_path / "out")], capsys,
            "--resume goes on writing into RUN_DIR", "drop --results-dir")
    assert not (tmp_path / "out").exists()


def test_cli_runs_a_job_and_a_worker_error_exits_non_zero(capsys, tmp_path):
    code = a3c.main(["--env", "CartPole-v1", "--workers", "2", "--max-episodes", "4", "--no-plot",
                     "--seed", "5", "--set", "actor_hidden=8,8", "--set", "cnn=nature",
                     "--results-dir", str(tmp_path)])
    assert code == 0
    # the run's first line names the preset and the fields it set, so an edited default that
    # the preset overrides (CartPole's n_steps) shows at once; then what was set to no effect
    first, second, third = capsys.readouterr().out.splitlines()[:3]
    assert first == config_module.describe_preset("CartPole-v1") + (
        " (the command line sets max_episodes instead)") and "n_steps" in first
    assert second.startswith("a3c.py: warning: --set cnn changes nothing in this run")
    assert third.startswith("training CartPole-v1 with 2 workers x 2 envs for 4 episodes;"), third
    (run_dir,) = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*-s5"))
    with open(os.path.join(run_dir, "config.json")) as f:
        assert json.load(f)["config"]["actor_hidden"] == [8, 8]

    code, err = run_cli(["--env", "A3CTest/Failing-v0", "--workers", "2", "--max-steps", "100000",
                         "--set", "envs_per_worker=1", "--no-plot", "--results-dir", str(tmp_path)],
                        capsys)
    assert code == 1
    assert "worker_1" in err and "the simulator crashed" in err


def test_a_failing_best_agent_trial_stops_the_run_naming_it_and_the_run_is_kept(tmp_path,
                                                                               monkeypatch):
    """The trials' thread runs beside the workers under the same Coordinator: what it raises
    stops the run as a worker's error does, with the checkpoint and the CSV written."""
    def broken(best, sess, coord, log, schedule):
        raise RuntimeError("the trial envs broke")
    monkeypatch.setattr(best_agent.BestCheckpoint, "run_trials", broken)
    with pytest.raises(console.WorkerError, match="the best-agent trials raised RuntimeError: "
                                                  "the trial envs broke"):
        train("CartPole-v1", tmp_path, max_episodes=10**6)
    (run_dir,) = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*"))
    assert checkpoints.latest_checkpoint(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER))
    assert read_rows(run_dir)[0][0] == "worker"
    assert not [t for t in threading.enumerate() if t.name.startswith("worker_")]


def test_flags_and_set_mean_the_same_and_zero_budgets_mean_no_limit():
    args = a3c.parse_args(["--env", "CartPole-v1", "--max-episodes", "0", "--set", "max_steps=500",
                           "--workers", "3"])
    by_flags = a3c.config_from_args(args)
    args = a3c.parse_args(["--env", "CartPole-v1", "--set", "max_episodes=0",
                           "--max-steps", "500", "--set", "workers=3"])
    assert a3c.config_from_args(args) == by_flags
    assert (by_flags.max_episodes, by_flags.max_steps, by_flags.workers) == (None, 500, 3)
    args = a3c.parse_args(["--env", "CartPole-v1", "--max-episodes", "none", "--max-steps", "5e2",
                           "--workers", "3"])  # as --set max_episodes=none max_steps=5e2 reads
    assert a3c.config_from_args(args) == by_flags


def test_set_parses_every_kind_of_field():
    assert config_module.parse_value("actor_hidden", "64,64") == (64, 64)
    assert config_module.parse_value("max_steps", "none") is None
    assert config_module.parse_value("max_steps", "0") is None
    assert config_module.parse_value("max_episode_steps", "0") == 0  # not a budget: refused later
    assert config_module.parse_value("max_steps", "1e5") == 100000
    assert config_module.parse_value("scale_lr_with_workers", "true") is True
    assert config_module.parse_value("gamma", "0.9") == 0.9
    with pytest.raises(ValueError):
        config_module.parse_value("n_steps", "2.5")


def test_presets_exist_and_other_envs_get_the_defaults():
    for env_id in ("Pendulum-v1", "CartPole-v1", "Acrobot-v1"):
        assert env_id in config_module.PRESETS
        config_module.config_for(env_id).validate()
    assert config_module.config_for("MountainCar-v0") == Config()


def test_the_annealed_learning_rate_falls_with_every_step_not_in_waves_of_episodes(tmp_path):
    import tensorflow as tf
    # Pendulum's shape: 64 envs whose 200-step episodes all end together; 1,000 episodes
    cfg = Config(max_episodes=1000, anneal_lr=True)
    writer = tf.compat.v1.summary.FileWriter(str(tmp_path))
    log = runlog.EpisodeLog(str(tmp_path), cfg, writer)
    fractions = []
    while log.episodes < 1000:
        log.add_steps(64 * 4)  # one rollout of 4 steps in each of 64 envs
        if log.env_steps % (64 * 200) == 0:
            for _ in range(64):
                log.record(0, -200.0, 200, 1.0, 1.0)
        fractions.append(log.lr_fraction())
    log.close()
    writer.close()
    fractions = np.array(fractions)
    after_first_wave = fractions[50:]  # the mean episode length is known from the first wave on
    falling = np.diff(after_first_wave)
    assert np.all(falling[after_first_wave[1:] > 0] < 0), "lower after every rollout"
    steps = 64 * 4 * np.arange(1, len(fractions) + 1)
    np.testing.assert_allclose(after_first_wave, np.clip(1 - steps[50:] / 200_000, 0, 1), atol=1e-9)
    assert fractions[-1] == 0.0


def test_with_anneal_steps_the_rate_follows_env_steps_whatever_the_episodes(tmp_path):
    import tensorflow as tf
    cfg = Config(max_episodes=1500, anneal_lr=True, anneal_steps=10_000)
    writer = tf.compat.v1.summary.FileWriter(str(tmp_path))
    log = runlog.EpisodeLog(str(tmp_path), cfg, writer)
    for _ in range(1000):  # 1,000 short episodes: two thirds of the episode budget
        log.add_steps(2)
        log.record(0, 2.0, 2, 0.0, 0.0)
    assert log.lr_fraction() == pytest.approx(0.8)
    log.add_steps(9_000)
    assert log.lr_fraction() == 0.0
    log.close()
    writer.close()


def test_a_resumed_run_anneals_on_from_the_rate_it_reached(tmp_path):
    import tensorflow as tf
    cfg = Config(max_episodes=1500, anneal_lr=True)
    rows = {"episode": np.arange(1, 1001), "length": np.full(1000, 200),
            "env_steps": np.arange(1, 1001) * 200, "wall_s": np.arange(1, 1001) * 0.1,
            "return": np.full(1000, -150.0), "running_return": np.full(1000, -150.0)}
    history = runlog.RunHistory(rows, 196_000, runlog.AnnealStart(0.02, 196_000 / 300_000))
    writer = tf.compat.v1.summary.FileWriter(str(tmp_path))
    log = runlog.EpisodeLog(str(tmp_path), cfg, writer, history)
    fractions = []
    while log.env_steps < 300_000:
        fractions.append(log.lr_fraction())
        log.add_steps(64 * 4)
    log.close()
    writer.close()
    assert fractions[0] == pytest.approx(0.02), "not the 0.35 a 1,500-episode schedule has there"
    assert np.all(np.diff(fractions) <= 0) and fractions[-1] < 1e-3
    np.testing.assert_allclose(fractions[200], 0.02 * (300_000 - 196_000 - 200 * 256) / 104_000,
                               rtol=1e-6)


def test_a_resumed_run_s_clock_goes_on_from_its_checkpoint_not_its_last_episode(tmp_path):
    """Time a run trained after its last finished episode counts: the checkpoint keeps it."""
    import tensorflow as tf
    rows = {"episode": np.arange(1, 11), "length": np.full(10, 200),
            "env_steps": np.arange(1, 11) * 200, "wall_s": np.arange(1, 11) * 0.1,
            "return": np.full(10, -150.0), "running_return": np.full(10, -150.0)}
    writer = tf.compat.v1.summary.FileWriter(str(tmp_path))
    for checkpoint_wall_s, at_least in ((60.0, 60.0), (0.0, 1.0)):  # 0: a checkpoint without it
        history = runlog.RunHistory(rows, 2_500, runlog.AnnealStart(), wall_s=checkpoint_wall_s)
        log = runlog.EpisodeLog(str(tmp_path), Config(), writer, history)
        assert at_least <= log.wall() < at_least + 30
        log.close()
    writer.close()


def test_budget_used_follows_whichever_limit_is_nearer(tmp_path):
    import tensorflow as tf
    writer = tf.compat.v1.summary.FileWriter(str(tmp_path))
    log = runlog.EpisodeLog(str(tmp_path), Config(max_episodes=10, max_steps=1000), writer)
    assert log.budget_used() == 0.0
    log.add_steps(250)
    assert log.budget_used() == pytest.approx(0.25)
    for _ in range(5):
        log.record(0, 1.0, 1, 0.0, 0.0)
    assert log.budget_used() == pytest.approx(0.5)
    for _ in range(7):  # episodes past the budget are not recorded
        log.record(0, 1.0, 1, 0.0, 0.0)
    assert log.episodes == 10 and log.budget_used() == pytest.approx(1.0)
    log.close()
    writer.close()
    assert len(read_rows(str(tmp_path))) == 11


def test_counts_read_as_english():
    from console import counted
    assert [counted(1, "episode"), counted(8, "env"), counted(1000, "episode")] == [
        "1 episode", "8 envs", "1,000 episodes"]


@pytest.mark.parametrize("budget, told", [
    (dict(max_episodes=1, max_steps=None), "1 episode"),
    (dict(max_episodes=None, max_steps=12_500_000), "12,500,000 env steps"),
    (dict(max_episodes=1000, max_steps=1), "1,000 episodes or 1 env step, whichever comes first"),
])
def test_a_run_says_its_budget_as_it_starts(budget, told):
    """(Pong's preset's 50M frames were seen only in config.py: the preset's line names fields.)"""
    assert runlog.describe_budget(dataclasses.replace(config_module.Config(), **budget)) == told
    pong = config_module.config_for("ALE/Pong-v5")
    assert runlog.describe_budget(pong, environments.FRAME_SKIP) == "12,500,000 env steps (50M frames)"
