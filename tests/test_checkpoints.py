"""Checkpoints of the global net, and --eval of a trained run."""
import glob
import json
import os

import pytest

import a3c
from test_training import read_rows, refused, train


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A short CartPole run that checkpoints every 0.2 s and keeps the newest 2."""
    summary, _ = train("CartPole-v1", tmp_path_factory.mktemp("runs"), max_episodes=None,
                       max_steps=12_000, checkpoint_every_s=0.2, keep_checkpoints=2,
                       log_every_s=0.2)
    return summary["run_dir"]


def test_a_run_keeps_its_newest_checkpoints(trained_run):
    folder = os.path.join(trained_run, a3c.CHECKPOINT_FOLDER)
    indexes = glob.glob(os.path.join(folder, "model-*.index"))
    assert 1 <= len(indexes) <= 2
    latest = a3c.v1.train.latest_checkpoint(folder)
    assert latest is not None and latest + ".index" in indexes
    assert latest.endswith("-12000") or int(latest.rsplit("-", 1)[1]) >= 12_000, "the final save"


def test_eval_plays_the_deterministic_policy_and_records_an_animation(trained_run, capsys):
    assert a3c.main(["--eval", trained_run, "--episodes", "3", "--record"]) == 0
    first = capsys.readouterr().out
    assert "CartPole-v1" in first and "over 3 episodes" in first
    assert os.path.getsize(os.path.join(trained_run, "episode.gif")) > 1000
    again = a3c.evaluate(trained_run, episodes=3)
    assert again["returns"] == a3c.evaluate(trained_run, episodes=3)["returns"], "deterministic"
    assert all(r >= 8 for r in again["returns"])


def test_eval_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    refused(["--eval", str(tmp_path / "missing")], capsys, "not a readable run folder")


def test_eval_refuses_a_run_without_checkpoints(trained_run, tmp_path, capsys):
    empty_run = tmp_path / "run"
    empty_run.mkdir()
    (empty_run / "config.json").write_text(open(os.path.join(trained_run, "config.json")).read())
    refused(["--eval", str(empty_run)], capsys, "no checkpoint")


def copy_run(trained_run, destination):
    import shutil
    shutil.copytree(trained_run, destination)
    return destination


def test_eval_refuses_a_corrupt_checkpoint(trained_run, tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    for data in glob.glob(os.path.join(run, a3c.CHECKPOINT_FOLDER, "*.data-*")):
        with open(data, "wb") as f:
            f.write(b"not a checkpoint")
    refused(["--eval", str(run)], capsys, "cannot restore")


def test_eval_refuses_a_checkpoint_of_another_network_shape(trained_run, tmp_path, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    path = os.path.join(run, "config.json")
    with open(path) as f:
        saved = json.load(f)
    saved["config"]["actor_hidden"] = [7]
    with open(path, "w") as f:
        json.dump(saved, f)
    refused(["--eval", str(run)], capsys, "cannot restore", "the config builds [4, 7]")


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


@pytest.mark.parametrize("stop_signals", [["SIGINT"], ["SIGTERM"], ["SIGINT", "SIGINT"]],
                         ids=["ctrl-c", "sigterm", "ctrl-c-twice"])
def test_a_signal_stops_a_real_run_cleanly_with_everything_saved(stop_signals, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    process = subprocess.Popen(
        [sys.executable, os.path.join(root, "a3c.py"), "--env", "CartPole-v1", "--workers", "2",
         "--max-steps", "100000000", "--no-plot", "--results-dir", str(tmp_path),
         "--set", "log_every_s=0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:  # wait until training is under way
        if line.startswith("episodes"):
            break
    started = time.time()
    for name in stop_signals:
        process.send_signal(getattr(signal, name))
        time.sleep(0.01)
    out, err = process.communicate(timeout=60)
    assert time.time() - started < 10
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert out.startswith("interrupted:") or "interrupted twice" in err
    (run_dir,) = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*"))
    assert len(read_rows(run_dir)) > 1  # the header and at least one episode
    if len(stop_signals) == 1:  # the second Ctrl-C skips the plot; the CSV is there either way
        assert os.path.exists(os.path.join(run_dir, "rewards.png"))
        assert a3c.v1.train.latest_checkpoint(os.path.join(run_dir, a3c.CHECKPOINT_FOLDER))


def test_a_non_finite_gradient_stops_training_and_the_checkpoint_stays_finite(tmp_path):
    import numpy as np

    with pytest.raises(a3c.WorkerError, match="non-finite loss or gradient at global env step"):
        train("A3CTest/NaNReward-v0", tmp_path, max_steps=1_000_000, max_episodes=None)
    (run_dir,) = glob.glob(os.path.join(tmp_path, "A3CTest_NaNReward-v0", "*"))
    checkpoint = a3c.v1.train.latest_checkpoint(os.path.join(run_dir, a3c.CHECKPOINT_FOLDER))
    assert checkpoint is not None
    names = [name for name, _ in a3c.v1.train.list_variables(checkpoint)]
    assert any(name.startswith("global/actor") for name in names)
    for name in names:
        if name != a3c.ENV_ID_VARIABLE:
            assert np.all(np.isfinite(a3c.v1.train.load_variable(checkpoint, name))), name


def test_resume_continues_the_counters_the_csv_and_the_plot(tmp_path, capsys):
    summary, _ = train("CartPole-v1", tmp_path, max_episodes=40)
    run_dir = summary["run_dir"]
    assert a3c.main(["--resume", run_dir, "--max-episodes", "80", "--no-plot"]) == 0
    rows = read_rows(run_dir)[1:]
    assert [int(r[1]) for r in rows] == list(range(1, 81))
    steps = [int(r[2]) for r in rows]
    walls = [float(r[3]) for r in rows]
    assert steps == sorted(steps) and walls == sorted(walls)
    assert steps[40] > steps[39] >= summary["env_steps"] - 1000
    with open(os.path.join(run_dir, "config.json")) as f:
        saved = json.load(f)
    assert saved["config"]["max_episodes"] == 80 and len(saved["resumed"]) == 1
    latest = a3c.latest_checkpoint(os.path.join(run_dir, a3c.CHECKPOINT_FOLDER))
    assert int(latest.rsplit("-", 1)[1]) >= steps[-1]
    assert len(a3c.read_episodes(os.path.join(run_dir, "episodes.csv"))["episode"]) == 80


@pytest.mark.parametrize("argv, words", [
    ([], ["already used its budget"]),
    (["--max-episodes", "99", "--set", "gamma=0.5"], ["cannot change gamma"]),
    (["--max-episodes", "99", "--workers", "3"], ["its own --env, --workers and --seed"]),
])
def test_resume_refuses_what_would_change_the_run_and_writes_nothing(argv, words, trained_run,
                                                                      capsys):
    before = {name: open(os.path.join(trained_run, name)).read()
              for name in ("episodes.csv", "config.json")}
    refused(["--resume", trained_run, "--no-plot"] + argv, capsys, *words)
    for name, text in before.items():
        assert open(os.path.join(trained_run, name)).read() == text


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
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    (run_dir,) = glob.glob(os.path.join(tmp_path, "CartPole-v1", "*"))
    before = len(read_rows(run_dir)) - 1
    assert before > 0

    assert a3c.main(["--resume", run_dir, "--max-episodes", str(before + 30), "--no-plot"]) == 0
    rows = read_rows(run_dir)[1:]
    assert [int(r[1]) for r in rows] == list(range(1, before + 31))
