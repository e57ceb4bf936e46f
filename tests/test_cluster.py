"""--cluster: real ps and worker processes on loopback gRPC, started by `--cluster local:2`."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import a3c
import checkpoints
import console
import runlog
import sessions
import cluster
from test_training import refused

A3C = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "a3c.py")
# one worker thread a process: while a test waits on a clock (a silence, a restart) the
# processes left train on fewer cores, and the suite's other pytest process gets the rest
PENDULUM = ["--env", "Pendulum-v1", "--workers", "1", "--no-plot",
            "--set", "checkpoint_every_s=1", "--set", "log_every_s=1"]


def launch(argv, folder):
    """a3c.py argv in a process of its own, its output in folder/{stdout,stderr}."""
    return subprocess.Popen([sys.executable, A3C, *argv], cwd=folder,
                            stdout=open(os.path.join(folder, "stdout"), "w"),
                            stderr=open(os.path.join(folder, "stderr"), "w"))


def output(folder, name):
    with open(os.path.join(folder, name)) as f:
        return f.read()


def processes_mentioning(text):
    """Pids of the processes whose command line contains text."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text in f.read().decode(errors="replace") and int(pid) != os.getpid():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def command_line(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode(errors="replace").split("\x00")[:-1]


def wait_for(condition, timeout_s, what):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def csv_rows(results):
    paths = [os.path.join(root, "episodes.csv") for root, _, files in os.walk(results)
             if "episodes.csv" in files]
    if not paths:
        return None
    try:
        return runlog.read_episodes(paths[0]), os.path.dirname(paths[0])
    except (KeyError, ValueError):  # a row being written
        return None


def finish(proc, timeout_s=120):
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the launcher did not end")


def ended_after(proc, stop):
    """(proc's exit status, seconds from stop() to its end)."""
    stop()
    stopped = time.time()
    code = finish(proc)
    return code, time.time() - stopped


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """local:2 on Pendulum with no step budget: worker process 1 is killed (SIGKILL) once its
    episodes reach the chief's CSV; the run goes on; the chief reports it; the same command
    starts it again and it rejoins; then the launcher itself is killed (SIGKILL). (Ctrl-C on a
    launcher: test_cluster_sync's local:2 run.)"""
    folder = str(tmp_path_factory.mktemp("cluster"))
    results = os.path.join(folder, "results")
    proc = launch([*PENDULUM, "--cluster", "local:2", "--results-dir", results,
                   "--max-episodes", "0", "--max-steps", "100000000"], folder)
    again = None
    try:
        def process_1_played(after=-1.0):
            assert proc.poll() is None, output(folder, "stderr")
            found = csv_rows(results)
            return found if found and ((found[0]["process"] == 1)
                                       & (found[0]["wall_s"] > after)).any() else None
        _, run_dir = wait_for(process_1_played, 150, "episodes of worker process 1")
        resumed_beside = subprocess.run([sys.executable, A3C, "--resume", run_dir, "--max-steps",
                                         "100000001", "--cluster", "local:2", "--no-plot"],
                                        capture_output=True, text=True, timeout=60)
        rows, run_dir = wait_for(process_1_played, 150, "episodes of worker process 1")
        [worker_1] = [pid for pid in processes_mentioning(results)
                      if command_line(pid)[-4:] == ["--job", "worker", "--task", "1"]]
        command = command_line(worker_1)
        os.kill(worker_1, signal.SIGKILL)
        killed_at = float(rows["wall_s"][-1])
        wait_for(lambda: "worker process 1 has not pushed" in output(folder, "stdout"), 60,
                 "the chief's report of the silent worker process")
        silent_rows = csv_rows(results)[0]
        os.makedirs(os.path.join(folder, "again"))
        again = subprocess.Popen(command, cwd=os.path.join(folder, "again"),
                                 stdout=open(os.path.join(folder, "again", "stdout"), "w"),
                                 stderr=subprocess.STDOUT)
        rejoined_at = float(silent_rows["wall_s"][-1])
        wait_for(lambda: process_1_played(rejoined_at), 120, "episodes of the restarted process")
        proc.kill()
        code = finish(proc)
        killed = time.time()
        wait_for(lambda: not processes_mentioning(results), 90, "every process of the cluster to end")
        took = time.time() - killed
        again_code = again.wait(30)  # not the launcher's child: it ended when the chief said so
    finally:
        for p in (proc, again):
            if p is not None and p.poll() is None:
                p.kill()
    left = processes_mentioning(results)
    return dict(code=code, took=took, again_code=again_code, folder=folder, results=results, run_dir=run_dir,
                resumed_beside=resumed_beside,
                killed_at=killed_at, silent_rows=silent_rows, rejoined_at=rejoined_at, left=left,
                stderr=output(folder, "stderr"), stdout=output(folder, "stdout"),
                again=output(os.path.join(folder, "again"), "stdout"))


def test_a_local_resume_of_a_cluster_run_still_training_is_refused_before_its_processes_start(
        stopped_run):
    resumed = stopped_run["resumed_beside"]
    assert resumed.returncode == 2, resumed.stderr
    assert len(resumed.stderr.strip().splitlines()) == 1, resumed.stderr  # (no child's lines)
    assert "is being trained by another process" in resumed.stderr


def test_a_killed_launcher_leaves_no_process_and_its_ps_serves_the_chiefs_last_save(stopped_run):
    """SIGKILL to the launcher of local:2: the worker processes get SIGTERM and stop as on
    Ctrl-C, and the ps serves on until the chief has collected the last episodes and brought
    the global net home for its final checkpoint; then every process is gone."""
    assert stopped_run["code"] == -signal.SIGKILL
    assert stopped_run["left"] == [] and stopped_run["took"] < 75, stopped_run["stderr"]
    assert "could not" not in stopped_run["stderr"], "the chief's last collection reached the ps"
    assert re.search(r"^interrupted: episodes", stopped_run["stdout"], re.M), "the chief's summary"
    rows = runlog.read_episodes(os.path.join(stopped_run["run_dir"], "episodes.csv"))
    checkpoint = checkpoints.latest_checkpoint(os.path.join(stopped_run["run_dir"], "checkpoints"))
    assert int(checkpoint.rsplit("-", 1)[1]) >= rows["env_steps"].max()


def test_both_processes_episodes_land_in_the_chiefs_csv_and_global_counters(stopped_run):
    rows = runlog.read_episodes(os.path.join(stopped_run["run_dir"], "episodes.csv"))
    assert set(rows["process"]) == {0, 1}
    assert list(rows["episode"]) == list(range(1, len(rows["episode"]) + 1))
    checkpoint = checkpoints.latest_checkpoint(os.path.join(stopped_run["run_dir"], "checkpoints"))
    final_steps = int(checkpoint.rsplit("-", 1)[1])
    # the ps's counter took both processes' steps: more than the chief's own episodes and its
    # 8 envs' unfinished ones could hold
    assert final_steps >= rows["length"].sum()
    assert final_steps > rows["length"][rows["process"] == 0].sum() + 8 * 200
    with open(os.path.join(stopped_run["run_dir"], "config.json")) as f:
        assert json.load(f)["cluster"] == {"ps": 1, "worker": 2}


def test_killing_a_worker_process_leaves_the_others_training(stopped_run):
    assert "worker process 1 exited with status -9; the other workers go on" in stopped_run["stderr"]
    assert "worker process 1 has not pushed for 6 s" in stopped_run["stdout"], "the chief saw it"
    rows = stopped_run["silent_rows"]
    after = rows["wall_s"] > stopped_run["killed_at"] + 4
    assert after.sum() >= 16 and set(rows["process"][after]) == {0}  # two rounds of 8 envs


def test_a_worker_process_started_again_with_the_same_command_rejoins(stopped_run):
    assert "joined the run" in stopped_run["again"]
    assert "worker process 1 pushes again" in stopped_run["stdout"]
    rows = runlog.read_episodes(os.path.join(stopped_run["run_dir"], "episodes.csv"))
    assert (rows["process"][rows["wall_s"] > stopped_run["rejoined_at"]] == 1).any()
    assert stopped_run["again_code"] == 0, "it stops when the chief ends the run"


def test_a_cluster_run_is_resumed_only_with_the_same_shape(stopped_run, capsys):
    run_dir = stopped_run["run_dir"]
    refused(["--resume", run_dir, "--cluster", "local:3"], capsys,
            "on 1 ps and 2 worker processes", "on 1 ps and 3 worker processes")
    refused(["--resume", run_dir], capsys, "on 1 ps and 2 worker processes", "in one process")


def cluster_file(tmp_path, spec):
    path = tmp_path / "cluster.json"
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return str(path)


def test_a_worker_process_that_comes_after_the_chief_ended_the_run_says_so_and_exits_0(tmp_path):
    """A resume by a few steps can end before local:N's other worker processes join: they said
    "error: the cluster's run is over ... nothing to join" (status 2), and the launcher that one
    had failed. Here a real ps holds a run its chief has ended (the flags the chief sets), and a
    worker process starts then; a chief that ended before it opened a run is still an error."""
    v1 = tf.compat.v1
    with cluster.LoopbackPorts(3) as ports:
        spec = json.dumps({"ps": [f"127.0.0.1:{ports[0]}"],
                           "worker": [f"127.0.0.1:{port}" for port in ports[1:]]})
        ps_folder, worker_folder = tmp_path / "ps", tmp_path / "worker"
        ps_folder.mkdir(), worker_folder.mkdir()
        ps = launch(["--cluster", spec, "--job", "ps", "--task", "0"], str(ps_folder))
        worker = None
        try:
            graph = tf.Graph()
            with graph.as_default():
                control = cluster.control_variables(tf, 2)
                flags = v1.placeholder(tf.int64, [5])
                set_flags = v1.assign(control.flags, flags)
                initialise = v1.variables_initializer(
                    [control.flags, control.config, control.totals, control.pushes,
                     control.anneal_start, control.finished])
            with cluster.ps_session(tf, cluster.Cluster(json.loads(spec), "ps", 0), graph,
                                    timeout_ms=5000, one_task=True) as sess:
                def initialised():
                    try:
                        sess.run(initialise)
                        return True
                    except tf.errors.OpError:  # (the ps is still starting)
                        return False
                wait_for(initialised, 60, "the ps")
                ended = np.zeros(5, np.int64)
                ended[[cluster.DONE, cluster.RUN_ID]] = 1  # a chief that failed before its run
                sess.run(set_flags, {flags: ended})
                worker = launch(["--cluster", spec, "--job", "worker", "--task", "1"],
                                str(worker_folder))
                assert finish(worker) == 2
                assert "the chief ended before it opened a run" in output(str(worker_folder),
                                                                          "stderr")
                ended[cluster.READY] = 1  # one that opened it, then ended it
                sess.run(set_flags, {flags: ended})
                worker = launch(["--cluster", spec, "--job", "worker", "--task", "1"],
                                str(worker_folder))
                assert finish(worker) == 0, output(str(worker_folder), "stderr")
                ended[cluster.SHUTDOWN] = 1  # (the ps may go)
                sess.run(set_flags, {flags: ended})
            assert finish(ps, 60) == 0
        finally:
            for process in (ps, worker):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()
    assert "worker process 1: the chief had ended the run when this process came to join it" \
        in output(str(worker_folder), "stdout")
    assert "error" not in output(str(worker_folder), "stderr")


@pytest.mark.parametrize("spec, words", [
    ("{not json", ["is not JSON"]),
    ({"worker": ["127.0.0.1:2222"]}, ['"ps" and "worker"']),
    ({"ps": ["127.0.0.1:2222"], "worker": []}, ['"worker" must be a non-empty list']),
    ({"ps": ["localhost"], "worker": ["127.0.0.1:2223"]}, ["'localhost' is not \"host:port\""]),
    ({"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2222"]}, ["listed twice"]),
])
def test_a_malformed_cluster_file_is_refused(spec, words, tmp_path, capsys):
    out = tmp_path / "out"
    refused(["--cluster", cluster_file(tmp_path, spec), "--job", "worker", "--task", "0",
             "--results-dir", str(out)], capsys, *words)
    assert not out.exists()


def test_flags_that_do_not_fit_a_cluster_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where results/ would go
    path = cluster_file(tmp_path, {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]})
    refused(["--cluster", path, "--job", "worker", "--task", "1"], capsys, "--task 1 is out of range")
    refused(["--cluster", path, "--job", "worker"], capsys, "--task")
    refused(["--cluster", str(tmp_path / "missing.json"), "--job", "ps", "--task", "0"], capsys,
            "cannot read the cluster file")
    refused(["--job", "worker", "--task", "0"], capsys, "--cluster FILE")
    refused(["--cluster", "local:0"], capsys, "local:N")
    refused(["--cluster", "local:2", "--job", "ps"], capsys, "local:N starts every process")
    refused(["--eval", str(tmp_path), "--cluster", "local:2"], capsys, "drop --cluster")
    refused(["--eval", str(tmp_path), "--job", "worker", "--task", "0"], capsys, "--task")
    # checked before any process starts
    refused(["--cluster", "local:2", "--env", "NoSuchEnv-v9"], capsys, "NoSuchEnv-v9")
    refused(["--cluster", "local:2", "--set", "gamma=2"], capsys, "gamma")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("job", ["ps", "worker"])
def test_a_port_in_use_is_refused_before_anything_is_written(job, tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        addresses = {"ps": [f"127.0.0.1:{port + 1}"], "worker": [f"127.0.0.1:{port + 2}"]}
        addresses[job] = [f"127.0.0.1:{port}"]
        out = tmp_path / "out"
        refused(["--cluster", cluster_file(tmp_path, addresses), "--job", job, "--task", "0",
                 "--results-dir", str(out), "--no-plot"], capsys, f"port {port}", "in use")
        assert not out.exists()


# A stand-in for a3c.py under the launcher (the launcher is generic in its script): each task
# tries its port as another program would (a plain bind) and as its TensorFlow server does
# (SO_REUSEADDR), writes what happened to task_<job>_<task>, then plays its part: the task named
# by argv[2] fails once the chief is up, the chief ends by itself after argv[1] seconds, the
# others wait to be stopped.
TASK_SCRIPT = """
import json, os, signal, socket, sys, time
args = sys.argv[3:]
spec, job, task = json.loads(args[args.index("--cluster") + 1]), args[-3], int(args[-1])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(130 if job == "worker" else 0))
port = int(spec[job][task].rpartition(":")[2])
seen = {}
for name, reuse in (("plain", 0), ("reuse", 1)):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, reuse)
        try:
            s.bind(("", port))
            seen[name] = "bound"
        except OSError:
            seen[name] = "in use"
with open(f"task_{job}_{task}", "w") as f:
    json.dump(seen, f)
if f"{job}{task}" == sys.argv[2]:
    while not os.path.exists("task_worker_0"):
        time.sleep(0.05)
    sys.exit(3)
time.sleep(float(sys.argv[1]) if (job, task) == ("worker", 0) else 60)
"""


@pytest.mark.parametrize("sync, failing", [(True, "worker1"), (False, "worker1"), (False, "ps0")])
def test_local_ports_are_held_for_their_tasks_and_a_failure_the_run_cannot_go_on_without_stops_it(
        sync, failing, tmp_path, monkeypatch):
    """--cluster local:N holds its ports until the launch ends (nothing is handed one between the
    launcher's choice and the task's own bind, seconds later; the task's server binds it). A
    failed ps stops the run at once, and so does a failed worker process with --sync, joined or
    not: the chief would otherwise wait for it (CHIEF_WAIT_S, PS_WAIT_S). Without --sync the
    other workers go on."""
    script = tmp_path / "task.py"
    script.write_text(TASK_SCRIPT)
    monkeypatch.chdir(tmp_path)
    said = []
    stops = sync or failing == "ps0"
    chief_s = 30 if stops else 2
    started = time.time()
    code = cluster.launch_local(str(script), [str(chief_s), failing], 2, said.append, sync=sync)
    took = time.time() - started
    for job, task in (("ps", 0), ("worker", 0), ("worker", 1)):
        seen = json.loads((tmp_path / f"task_{job}_{task}").read_text())
        assert seen == {"plain": "in use", "reuse": "bound"}, (job, task, seen)
    job, task = failing[:-1], failing[-1]
    if stops:
        assert code == 1, said
        assert took < chief_s / 3, "stopped long before the chief's own end"
        needs = "the run needs it" if job == "ps" else "the synchronous rounds need it"
        assert any(f"{job} process {task} exited with status 3; {needs}: stopping the run"
                   in line for line in said), said
    else:
        assert code == 0, said  # the chief's own end
        assert took >= chief_s
        assert any("worker process 1 exited with status 3; the other workers go on" in line
                   for line in said), said
    assert processes_mentioning(str(script)) == []


@pytest.fixture(scope="module")
def chief_killed(tmp_path_factory):
    """A cluster file, one command per process; once worker process 1's episodes reach the
    chief's CSV, the chief is killed (SIGKILL): how the ps and worker process 1 end."""
    folder = str(tmp_path_factory.mktemp("chief_killed"))
    results = os.path.join(folder, "results")
    with cluster.LoopbackPorts(3) as ports:  # held until the processes have bound them
        path = os.path.join(folder, "cluster.json")
        with open(path, "w") as f:
            json.dump({"ps": [f"127.0.0.1:{ports[0]}"],
                       "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}, f)
        common = [*PENDULUM, "--cluster", path, "--results-dir", results, "--max-steps", "100000000"]

        def start(job, task, name):
            os.makedirs(os.path.join(folder, name))
            return launch([*common, "--job", job, "--task", str(task)], os.path.join(folder, name))
        procs = [start("ps", 0, "ps"), start("worker", 0, "chief"), start("worker", 1, "w1")]
        try:
            def process_1_played():
                assert procs[1].poll() is None, output(os.path.join(folder, "chief"), "stderr")
                return csv_rows(results) if csv_rows(results) and (
                    csv_rows(results)[0]["process"] == 1).any() else None
            _, run_dir = wait_for(process_1_played, 150, "episodes of worker process 1")
            time.sleep(1.5)  # a periodic checkpoint (every second) with both processes' steps
            procs[1].kill()
            died = time.time()
            codes = [procs[0].wait(40), procs[2].wait(40)]
            took = time.time() - died
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
    return dict(codes=codes, took=took, run_dir=run_dir, folder=folder,
                ps=output(os.path.join(folder, "ps"), "stdout"),
                w1=output(os.path.join(folder, "w1"), "stderr"))


def test_when_the_chief_dies_the_other_processes_stop_within_seconds(chief_killed):
    assert chief_killed["codes"] == [1, 1]
    assert chief_killed["took"] < cluster.PS_CHIEF_SILENCE_S + 14  # (a loaded machine)
    assert "silent" in chief_killed["ps"]
    assert "the chief (worker task 0) has been silent" in chief_killed["w1"]
    assert "--resume RUN_DIR" in chief_killed["w1"]


def test_a_cluster_run_resumes_from_the_chiefs_checkpoint_with_its_counters(chief_killed, capsys):
    """The killed chief's run, resumed on a new cluster of the same shape (a ps process; the
    chief in this process, worker process 1 not started)."""
    run_dir = chief_killed["run_dir"]
    before = runlog.read_episodes(os.path.join(run_dir, "episodes.csv"))
    checkpoint = checkpoints.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    steps_before = int(checkpoint.rsplit("-", 1)[1])
    assert steps_before > before["length"][before["process"] == 0].sum(), "both processes' steps"
    # it goes on from the checkpoint's count, or the CSV's if it recorded episodes after that
    resumed_at = int(max(steps_before, before["env_steps"].max()))
    held = cluster.LoopbackPorts(3)
    ports = held.ports
    spec = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    ps = subprocess.Popen([sys.executable, A3C, "--cluster", json.dumps(spec), "--job", "ps",
                           "--task", "0"], stdout=subprocess.DEVNULL)
    try:
        code = a3c.main(["--resume", run_dir, "--cluster", json.dumps(spec), "--job", "worker",
                         "--task", "0", "--no-plot", "--max-steps", "0",
                         "--max-episodes", str(len(before["episode"]) + 48)])
        assert ps.wait(20) == 0, "the chief shuts the ps down at the end"
    finally:
        held.close()
        if ps.poll() is None:
            ps.kill()
    console = capsys.readouterr()
    assert code == 0, console.err
    assert f"resumed at {resumed_at:,} env steps" in console.out
    after = runlog.read_episodes(os.path.join(run_dir, "episodes.csv"))
    # every episode of the budget, the last rollout's too (the chief sends its own last rows)
    assert len(after["episode"]) == len(before["episode"]) + 48
    new = after["env_steps"][len(before["episode"]):]
    assert new.min() >= resumed_at and new.max() <= resumed_at + 7 * 8 * 200  # 6 rounds of 8 envs
    assert set(after["process"][len(before["episode"]):]) == {0}
    summary = a3c.evaluate(run_dir, episodes=1, out=open(os.devnull, "w"))  # in one process
    assert np.isfinite(summary["mean"])


def test_an_error_from_the_ps_is_told_in_one_readable_line():
    """A ps's error names its task on a line of its own and may quote a whole request, tensors
    and all: the one line a worker's error is told in is the message, cut short."""
    exc = tf.errors.AbortedError(None, None, "From /job:ps/replica:0/task:0:\nThe same RunGraph "
                                 "(Worker) request was received twice. " + "send { tensor } " * 200)
    line = console.first_line(exc)
    assert line.startswith("The same RunGraph (Worker) request was received twice.")
    assert len(line) <= 304 and line.endswith(" ...")


@pytest.fixture
def refusals(monkeypatch):
    """A list: put an AbortedError message in it and the next call of any session raises it
    before running anything, as a ps does to a call it takes for a repeat of an earlier one (a
    real one comes about once in 43,000 calls, at random: bench/ps_repeats.py shows them); and
    the list of calls tried, refused or not."""
    v1 = tf.compat.v1
    messages, tries = [], []

    def maybe_refused():
        tries.append(1)
        if messages:
            raise tf.errors.AbortedError(None, None, messages.pop())

    real_run, real_make = v1.Session.run, v1.Session._make_callable_from_options

    def run(self, *args, **kwargs):
        maybe_refused()
        return real_run(self, *args, **kwargs)

    def make_callable(self, options):
        call = real_make(self, options)

        def maybe_refused_call(*args):
            maybe_refused()
            return call(*args)
        return maybe_refused_call

    monkeypatch.setattr(v1.Session, "run", run)
    monkeypatch.setattr(v1.Session, "_make_callable_from_options", make_callable)
    monkeypatch.setattr(cluster.Resends, "count", 0)
    return messages, tries


@pytest.fixture(scope="module")
def ps_specs():
    """Cluster dicts of one and of two ps tasks, their servers running in this process (they
    live until the process ends: TensorFlow cannot stop one)."""
    specs, servers = {}, []
    for ps_tasks in (1, 2):
        with cluster.LoopbackPorts(ps_tasks) as ports:
            specs[ps_tasks] = {"ps": [f"127.0.0.1:{port}" for port in ports]}
            servers += [cluster.start_server(tf, cluster.Cluster(specs[ps_tasks], "ps", task))
                        for task in range(ps_tasks)]
    specs["servers"] = servers
    return specs


def ps_counter(spec, one_task=False):
    """A ps_session on the cluster `spec`, with one op that adds 1 to a counter on ps task 0
    (set to 0 here); the session, the op and a reader of the counter."""
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.device("/job:ps/task:0"):
        counter = v1.get_variable("counter", initializer=tf.constant(0, tf.int64))
        add = counter.assign_add(tf.constant(1, tf.int64)).op
    sess = cluster.ps_session(tf, cluster.Cluster(spec, "worker", 0), graph, one_task=one_task)
    sess.run(counter.initializer)
    return sess, add, lambda: int(sess.run(counter))


REPEAT = ("From /job:ps/replica:0/task:0:\nThe same RunGraph (Worker) request was received "
          "twice. graph_handle: \"0000000000000001\" step_id: 1")


@pytest.mark.parametrize("through", ["callable", "run"])
def test_a_call_the_ps_refuses_as_a_repeat_is_sent_again_and_applied_once(through, refusals,
                                                                          ps_specs):
    """TensorFlow's masters name a call's request from 32 random bits, so a ps refuses about one
    call in 43,000 as a repeat of an earlier one (cluster.REPEATED_REQUEST), before running any
    of it; one in a sync round ended the run. With one ps task the session sends it again."""
    messages, tries = refusals
    sess, add, counter = ps_counter(ps_specs[1])
    try:
        call = sessions.session_callable(sess, [add], []) if through == "callable" else lambda: sess.run(add)
        tries.clear()
        messages.append(REPEAT)
        call()
        assert len(tries) == 2 and cluster.Resends.count == 1
        assert counter() == 1  # the refused call added nothing, the one sent again added 1
        messages.extend([REPEAT] * cluster.REPEAT_TRIES)  # refused every time: a different bug
        with pytest.raises(tf.errors.AbortedError, match="received twice"):
            call()
        assert counter() == 1 and not messages
    finally:
        sess.close()


@pytest.mark.parametrize("ps_tasks, one_task, message, sent_again", [
    (1, False, "From /job:ps/replica:0/task:0:\nSession handle is not found", False),
    # the master refusing a client's own retry of a call that may have run
    (1, False, "The same RunCallable (Master) request was received twice. request_id: 7", False),
    # several ps tasks: unless told that the graph sits on ps task 0 alone, the session cannot
    # know that a call ran as one part
    (2, False, REPEAT, False),
    (2, True, REPEAT, True),
])
def test_only_a_refused_call_that_ran_nothing_is_sent_again(ps_tasks, one_task, message,
                                                             sent_again, refusals, ps_specs):
    messages, tries = refusals
    sess, add, counter = ps_counter(ps_specs[ps_tasks], one_task)
    try:
        call = sessions.session_callable(sess, [add], [])
        messages.append(message)
        if sent_again:
            call()
        else:
            with pytest.raises(tf.errors.AbortedError, match=re.escape(message.split("\n")[-1][:20])):
                call()
        assert counter() == int(sent_again) and cluster.Resends.count == int(sent_again)
    finally:
        sess.close()


def test_a_session_told_its_graph_sits_on_ps_task_0_alone_checks_it(ps_specs):
    """The control variables every process reads do (their ops placed on ps task 0, a device
    of it, or nowhere); a variable on ps task 1 does not."""
    v1 = tf.compat.v1
    place = cluster.Cluster(ps_specs[2], "worker", 0)
    graph = tf.Graph()
    with graph.as_default():
        cluster.control_variables(tf, 2)
    cluster.ps_session(tf, place, graph, one_task=True).close()
    with graph.as_default(), v1.device("/job:ps/task:1"):
        v1.get_variable("elsewhere", initializer=1.0)
    with pytest.raises(ValueError, match="/job:ps/task:1"):
        cluster.ps_session(tf, place, graph, one_task=True)
