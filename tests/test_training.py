"""End-to-end: real training runs on real gymnasium environments, and the command line."""
import csv
import dataclasses
import glob
import io
import json
import os
import threading

import numpy as np
import pytest

import a3c
import config as config_module
from config import Config
from envs import BoxActionEnv

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
    assert rows[0][:9] == a3c.EPISODE_COLUMNS
    body = rows[1:]
    assert len(body) == 12, "exactly max_episodes rows"
    assert [int(r[1]) for r in body] == list(range(1, 13))
    steps = [int(r[2]) for r in body]
    assert steps == sorted(steps) and steps[-1] <= summary["env_steps"]
    assert {r[0] for r in body} == {"0", "1"}, "each thread runs its own worker"
    for r in body:
        assert np.isfinite([float(x) for x in r[3:]]).all()
    if env_id == "Pendulum-v1":
        assert all(int(r[5]) == 200 for r in body), "Pendulum is cut at 200 steps"
        assert all(float(r[4]) <= 0 for r in body), "logged returns are raw, not (r + 8) / 8"

    assert glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    assert os.path.getsize(os.path.join(run_dir, "rewards.png")) > 10_000
    assert "mean-100" in console and run_dir in console.splitlines()[-1]


def test_episodes_shorter_than_a_rollout_get_the_statistics_of_the_push_that_trained_them(tmp_path):
    # Countdown episodes last 10 steps: a 25-step rollout ends two or three of them per env
    summary, _ = train("A3CTest/Countdown-v0", tmp_path, n_steps=25, max_episodes=12)
    body = read_rows(summary["run_dir"])[1:]
    entropy, grad_norm = (np.array([float(r[c]) for r in body]) for c in (7, 8))
    assert np.isfinite(entropy).all() and (entropy > 0).all()
    assert np.isfinite(grad_norm).all() and (grad_norm > 0).all()


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


def test_a_run_records_where_its_threads_ran(tmp_path):
    summary, console = train("A3CTest/Countdown-v0", tmp_path, workers=3, max_episodes=6)
    with open(os.path.join(summary["run_dir"], "config.json")) as f:
        recorded = json.load(f)["cpus"]
    layout = a3c.cpu_layout(dataclasses.replace(Config(), workers=3))
    if layout is None:  # one CPU: nothing to pin
        assert recorded is None and "TensorFlow's ops run on" not in console
    else:
        assert recorded == {"workers": sorted(layout.workers), "tensorflow_ops": sorted(layout.ops)}
        assert f"worker threads share CPU {min(layout.workers)}" in console


def test_a_failing_worker_stops_every_thread_and_reaches_the_user(tmp_path):
    cpus = os.sched_getaffinity(0)
    with pytest.raises(a3c.WorkerError, match="worker_1 raised RuntimeError: the simulator crashed"):
        train("A3CTest/Failing-v0", tmp_path, workers=3, envs_per_worker=1,
              max_steps=10_000_000, max_episodes=None)
    assert not [t for t in threading.enumerate() if t.name.startswith("worker_")]
    assert os.sched_getaffinity(0) == cpus, "pinning the workers left this thread alone"
    (run_dir,) = glob.glob(os.path.join(tmp_path, "A3CTest_Failing-v0", "*"))
    assert len(read_rows(run_dir)) > 1, "episodes finished before the crash are kept"
    assert os.path.exists(os.path.join(run_dir, "rewards.png"))
    assert a3c.latest_checkpoint(os.path.join(run_dir, a3c.CHECKPOINT_FOLDER)), "state is saved"


def test_the_episode_log_counts_exactly_under_many_threads(tmp_path):
    import tensorflow as tf
    writer = tf.compat.v1.summary.FileWriter(str(tmp_path))
    log = a3c.EpisodeLog(str(tmp_path), Config(max_episodes=None, max_steps=10**9), writer)

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
    """The command line refuses argv: exit status 2 and one line of error naming every word."""
    code, err = run_cli(argv, capsys)
    assert code == 2
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err


def assert_refused(argv, capsys, tmp_path, *words):
    refused(argv + ["--results-dir", str(tmp_path / "out"), "--no-plot"], capsys, *words)
    assert not (tmp_path / "out").exists(), "nothing written"


def test_cli_refuses_an_unknown_environment(capsys, tmp_path):
    assert_refused(["--env", "NoSuchEnv-v9"], capsys, tmp_path, "NoSuchEnv-v9", "pprint_registry")


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
    (["--max-steps", "-5"], ["--max-steps must be >= 0"]),
    (["--max-episodes", "0", "--max-steps", "0"], ["never ends"]),
])
def test_cli_refuses_bad_values_in_one_line(argv, words, capsys, tmp_path):
    assert_refused(["--env", "CartPole-v1"] + argv, capsys, tmp_path, *words)


def test_cli_rejects_malformed_flags_with_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        a3c.main(["--workers", "many"])
    assert exit_info.value.code == 2
    assert "--workers" in capsys.readouterr().err


def test_cli_runs_a_job_and_a_worker_error_exits_non_zero(capsys, tmp_path):
    code, _ = run_cli(["--env", "CartPole-v1", "--workers", "2", "--max-episodes", "4", "--no-plot",
                       "--seed", "5", "--set", "actor_hidden=8,8", "--results-dir", str(tmp_path)],
                      capsys)
    assert code == 0
    (run_dir,) = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*-s5"))
    with open(os.path.join(run_dir, "config.json")) as f:
        assert json.load(f)["config"]["actor_hidden"] == [8, 8]

    code, err = run_cli(["--env", "A3CTest/Failing-v0", "--workers", "2", "--max-steps", "100000",
                         "--set", "envs_per_worker=1", "--no-plot", "--results-dir", str(tmp_path)],
                        capsys)
    assert code == 1
    assert "worker_1" in err and "the simulator crashed" in err


def test_set_parses_every_kind_of_field():
    assert config_module.parse_value("actor_hidden", "64,64") == (64, 64)
    assert config_module.parse_value("max_steps", "none") is None
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


def test_budget_used_follows_whichever_limit_is_nearer(tmp_path):
    import tensorflow as tf
    writer = tf.compat.v1.summary.FileWriter(str(tmp_path))
    log = a3c.EpisodeLog(str(tmp_path), Config(max_episodes=10, max_steps=1000), writer)
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
