"""--sync on a cluster: a round's arithmetic on loopback gRPC in this process, and real ps and
worker processes started by `--cluster local:2 --sync` (test_cluster.py's helpers)."""
import dataclasses
import os
import re
import signal
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import a3c
import checkpoints
import console
import environments
import networks
import remote
import runlog
import cluster
import config as config_module
from graphs import build_session
from test_cluster import (PENDULUM, command_line, csv_rows, ended_after, finish, launch, output,
                          processes_mentioning, wait_for)


def sync_cluster(**fields):
    """One ps and two worker processes' parts, in this process on loopback gRPC: for each
    worker task, its local graph (global net and worker nets), its session and its
    RemoteGlobal; task 0 has 2 workers, task 1 has 3. Every call to the ps but a round's
    waits has a 3 s limit, so that a round that waited on it would fail."""
    v1 = tf.compat.v1
    held = cluster.LoopbackPorts(3)  # until each task's server has bound its port
    ports = held.ports
    spec = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    servers = [cluster.start_server(tf, cluster.Cluster(spec, "ps", 0))]
    processes = []
    with held, pytest.MonkeyPatch.context() as patch:
        patch.setattr(cluster, "CALL_TIMEOUT_MS", 3000)
        for task, workers in enumerate((2, 3)):
            cfg = dataclasses.replace(config_module.config_for("Pendulum-v1", sync=True),
                                      workers=workers, actor_hidden=(8,), critic_hidden=(8,), **fields)
            env_spec = environments.probe_spec("Pendulum-v1", cfg)
            place = cluster.Cluster(spec, "worker", task)
            servers.append(cluster.start_server(tf, place))
            sess, global_net, nets = build_session(env_spec, cfg, cluster=True)
            on_ps = remote.RemoteGlobal(a3c.ACNet, env_spec, cfg, place, servers[-1])
            on_ps.log = remote.ClusterLog(cfg, task, (0, 0, 0), runlog.AnnealStart())
            processes.append(dict(sess=sess, global_net=global_net, nets=nets, remote=on_ps,
                                  cfg=cfg, spec=env_spec, round=on_ps.round_for(
                                      sess, global_net, workers, chief=task == 0)))
    chief = processes[0]["remote"]
    with chief.graph.as_default():
        chief.sess.run(v1.variables_initializer(chief.variables))
        fed = [v1.placeholder(p.dtype.base_dtype, p.shape) for p in chief.net.params]
        chief.put_params = lambda values: chief.sess.run(
            [p.assign(f) for p, f in zip(chief.net.params, fed)], dict(zip(fed, values)))
        chief.reset = v1.variables_initializer(chief.variables)
    return processes, servers


def fresh_rounds(processes):
    """The ps's variables (net, slots, counters, sums) as ChiefLink.start sets them up, and empty
    round queues: what another test left behind is gone."""
    chief = processes[0]["remote"]
    chief.sess.run([chief.drain_rounds, chief.reset])
    chief.put_params(processes[0]["sess"].run(processes[0]["global_net"].params))


def store_random_gradients(process, rng, scale):
    """Random stored gradients in each of a process's worker nets: [worker][group][param]."""
    stored = []
    for net in process["nets"]:
        values = [[scale * rng.normal(size=v.shape).astype(np.float32) for v in group]
                  for group in net.gradient_store]
        for group, arrays in zip(net.gradient_store, values):
            for variable, value in zip(group, arrays):
                variable.load(value, process["sess"])
        stored.append(values)
    return stored


def run_rounds(processes, lr_fraction=1.0, late_s=0.0):
    """Each process's round function in a thread of its own (the chief's waits for the other's
    arrival, the other for its token), the others starting late_s after the chief; their
    answers."""
    answers = {}

    def play(task):
        if task:
            time.sleep(late_s)
        answers[task] = processes[task]["round"](np.float32(lr_fraction))
    threads = [threading.Thread(target=play, args=(task,), daemon=True)
               for task in range(len(processes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30 + late_s)
    assert not any(thread.is_alive() for thread in threads), "a round was left waiting"
    return answers


@pytest.fixture(scope="module")
def sync_processes():
    processes, servers = sync_cluster(clip_norm=1.0)
    yield processes
    del servers  # (TensorFlow's servers live as long as this process)


def test_a_clusters_sync_round_applies_every_workers_mean_clipped_once_and_every_process_pulls_it(
        sync_processes):
    processes = sync_processes
    fresh_rounds(processes)
    rng = np.random.default_rng(5)
    chief = processes[0]["remote"]
    cfg, spec = processes[0]["cfg"], processes[0]["spec"]
    rates = networks.learning_rates(cfg, spec)
    mean_square = None
    # the first round's mean is under the clip, the second's over it (clipped as one batch's,
    # not process by process); the second's update is its own gradients' only (sums zeroed)
    for round_number, scale in enumerate((0.01, 1.0)):
        before = chief.sess.run(chief.params_now)
        stored = [w for process in processes for w in store_random_gradients(process, rng, scale)]
        processes[1]["remote"].log.add_steps(7)
        # worker process 1 comes 4 s late: longer than any other call to the ps may take
        assert run_rounds(processes, 0.5, late_s=4.0 * round_number) == {0: True, 1: True}
        after = chief.sess.run(chief.params_now)
        mean = [[np.mean([w[group][j] for w in stored], axis=0)  # over all 5 workers
                 for j in range(len(stored[0][group]))] for group in range(len(rates))]
        mean_square = mean_square or [[np.ones_like(g) for g in group] for group in mean]
        steps = []
        for group, rate in enumerate(rates):
            norm = np.sqrt(sum(np.sum(g ** 2) for g in mean[group]))
            assert (norm > cfg.clip_norm) == (scale == 1.0), "the clip binds in round 2 only"
            for j, g in enumerate(mean[group]):  # TF1's RMSProp: the mean square starts at 1
                g = g * min(1.0, cfg.clip_norm / norm)
                mean_square[group][j] = (cfg.rmsprop_decay * mean_square[group][j]
                                         + (1 - cfg.rmsprop_decay) * g ** 2)
                steps.append(0.5 * rate * g / np.sqrt(mean_square[group][j] + cfg.rmsprop_epsilon))
        groups = networks.optimizer_groups(chief.net, spec, cfg)
        by_name = dict(zip([p.name for group in groups for p in group], steps))
        for p, old, new in zip(chief.net.params, before, after):
            np.testing.assert_allclose(new, old - by_name[p.name], rtol=1e-4, atol=1e-6)
        for process in processes:  # each process's own global net, from which its workers pull
            for mine, ps in zip(process["sess"].run(process["global_net"].params), after):
                np.testing.assert_array_equal(mine, ps)
        totals = chief.sess.run(chief.control.totals)
        assert totals[0] == 7 * (round_number + 1), "a round brings every process's counts"


def test_a_sync_cluster_worker_draws_each_rollouts_first_actions_with_its_sde_noise(sync_processes):
    """On a cluster, --sync's pull_and_act (not the asynchronous update) draws the next
    rollout's first actions: it must be fed the new rollout's noise matrix too."""
    processes = sync_processes
    fresh_rounds(processes)
    process = processes[0]
    net, cfg = process["nets"][0], process["cfg"]
    assert cfg.use_sde, "Pendulum's preset explores with gSDE"
    worker = a3c.Worker(0, net, "Pendulum-v1", process["spec"], cfg)
    worker.prepare(process["sess"], seed=3, remote=process["remote"],
                   rounds=a3c.UpdateRound(len(process["nets"]), process["round"]))
    # a matrix of 1000s moves the sample by at least 1000 x sigma's start (|z| = 1, z >= 0)
    loud = (np.full_like(worker.noise[0], 1000.0),)
    sample, *_ = worker.pull_and_act(worker.obs, *worker.state, np.float32(1.0), *loud)
    mean = process["sess"].run(net.policy_after_pull.mean, {net.current_obs: worker.obs})
    assert np.all(np.abs(sample - mean) > 100.0)
    worker.close()


def test_a_stop_releases_a_clusters_sync_round_without_an_update(sync_processes):
    processes = sync_processes
    fresh_rounds(processes)
    chief = processes[0]["remote"]
    before = chief.sess.run(chief.params_now)
    answers = {}
    waiting = threading.Thread(target=lambda: answers.update(chief=processes[0]["round"](np.float32(1))),
                               daemon=True)
    waiting.start()
    waiting.join(2.0)
    assert waiting.is_alive(), "the chief waits for worker process 1's gradients"
    chief.release_rounds(every_process=True)
    waiting.join(5.0)
    assert not waiting.is_alive() and answers == {"chief": False}
    for old, new in zip(before, chief.sess.run(chief.params_now)):
        np.testing.assert_array_equal(old, new)
    # worker process 1's next round meets the stop the chief left for it: it does not wait
    assert run_rounds(processes[1:]) == {0: False}
    # and its own stop releases it from a round it waits in (the chief never comes)
    waiting = threading.Thread(target=lambda: answers.update(other=processes[1]["round"](np.float32(1))),
                               daemon=True)
    waiting.start()
    waiting.join(2.0)
    assert waiting.is_alive(), "worker process 1 waits for its token"
    processes[1]["remote"].release_rounds(every_process=False)
    waiting.join(5.0)
    assert not waiting.is_alive() and answers["other"] is False


def test_a_clusters_sync_round_is_applied_only_while_no_checkpoint_downloads_the_ps(
        sync_processes):
    """The chief's saves download the ps's net and slots holding its local copy's lock; the
    chief applies a round only under that lock, so a checkpoint never mixes two rounds."""
    processes = sync_processes
    fresh_rounds(processes)
    rng = np.random.default_rng(11)
    for process in processes:
        store_random_gradients(process, rng, 0.01)
    chief = processes[0]["remote"]
    before = chief.sess.run(chief.params_now)
    answers = {}
    with chief.local_params_lock:  # as a save does while it downloads
        rounds = threading.Thread(target=lambda: answers.update(run_rounds(processes)), daemon=True)
        rounds.start()
        time.sleep(2.0)  # both have arrived long since: only the lock holds the update back
        for held, now in zip(before, chief.sess.run(chief.params_now)):
            np.testing.assert_array_equal(held, now)
    rounds.join(30)
    assert answers == {0: True, 1: True}
    assert any(not np.array_equal(a, b) for a, b in zip(before, chief.sess.run(chief.params_now)))


def test_a_sync_round_with_a_process_twice_and_another_missing_is_refused(sync_processes):
    processes = sync_processes
    fresh_rounds(processes)
    chief = processes[0]["remote"]
    before = chief.sess.run(chief.params_now)
    with chief.graph.as_default():
        stray = chief.arrivals.enqueue([np.int32(1), np.int64(3)])
    for _ in range(2):  # worker process 1 twice, as a process that rejoined could
        chief.sess.run(stray)
    with pytest.raises(RuntimeError, match=r"from worker processes \[1, 1\], not each of 0-1"):
        processes[0]["round"](np.float32(1))
    for old, new in zip(before, chief.sess.run(chief.params_now)):
        np.testing.assert_array_equal(old, new)


def test_once_the_chiefs_last_collection_fails_its_checkpoints_keep_the_copy_it_had(
        sync_processes):
    """The chief's saves bring the ps's net home first (ChiefLink.download); once the end's
    collection has failed (the ps is going or gone), they save the last copy there is and ask
    the ps nothing more."""
    processes = sync_processes
    fresh_rounds(processes)
    chief, sess = processes[0]["remote"], processes[0]["sess"]
    with sess.graph.as_default():
        link = remote.ChiefLink(chief, tf.compat.v1.global_variables())
    rng = np.random.default_rng(8)

    def put_random_params():
        values = [rng.normal(size=p.shape).astype(np.float32) for p in chief.net.params]
        chief.put_params(values)
        return values

    fetched = put_random_params()
    link.download(sess)  # as a save does while the run goes on
    for mine, value in zip(sess.run(processes[0]["global_net"].params), fetched):
        np.testing.assert_array_equal(mine, value)

    class BrokenLog:  # the collection fails part-way, as with a ps that stops answering
        def record(self, *args, **kwargs):
            raise OSError("the collection broke")
        count_to = record
    link.silent.add(1)  # (so that finish does not wait for worker process 1's last episodes)
    with pytest.raises(OSError):
        link.finish(sess, BrokenLog())
    put_random_params()
    link.download(sess)  # the final save's: nothing more from the ps
    for mine, value in zip(sess.run(processes[0]["global_net"].params), fetched):
        np.testing.assert_array_equal(mine, value)


def test_a_sync_cluster_waits_however_long_a_round_is_played_and_ends_when_one_is_silent(
        sync_processes):
    """Silence is a process that has not arrived in the round under way while another has:
    after a round is applied every process plays its next rollout (equal arrival counts) for
    as long as that takes (a CNN on a loaded host: over WORKER_SILENCE_S), which is no silence."""
    processes = sync_processes
    fresh_rounds(processes)
    rng = np.random.default_rng(9)
    for process in processes:
        store_random_gradients(process, rng, 0.01)
    assert run_rounds(processes) == {0: True, 1: True}  # a round applied: both have arrived
    chief, sess = processes[0]["remote"], processes[0]["sess"]
    with sess.graph.as_default():
        link = remote.ChiefLink(chief, tf.compat.v1.global_variables())
    said, applied, none_finished = [], chief.rounds_applied, np.zeros(2, np.int64)
    # how long a process may keep the others waiting: WORKER_SILENCE_S, or longer after slow rounds
    silence = max([cluster.WORKER_SILENCE_S, *(5 * t for t in chief.round_seconds)])
    every_one_played = np.array([applied, applied])  # every arrival so far was applied
    for waited in (0.0, 2 * silence, 10 * silence):  # every process plays its next rollout
        link.check_rounds(every_one_played, none_finished, 1000.0 + waited, said.append)
    link.check_rounds(np.array([applied + 1, applied]), none_finished, 2000.0, said.append)
    link.check_rounds(np.array([applied + 1, applied]), none_finished, 2000.0 + silence / 2,
                      said.append)  # the chief's workers arrived; process 1 plays on
    with pytest.raises(console.WorkerError, match="worker process 1 has sent no gradients for"):
        link.check_rounds(np.array([applied + 1, applied]), none_finished, 2000.0 + silence,
                          said.append)
    assert said == [] and link.silent == {1}


@pytest.fixture(scope="module")
def sync_worker_lost(tmp_path_factory):
    """local:2 --sync on Pendulum with no budget: once worker process 1's episodes reach the
    chief's CSV it is killed (SIGKILL), which ends a synchronous run."""
    folder = str(tmp_path_factory.mktemp("sync_lost"))
    results = os.path.join(folder, "results")
    # two worker threads a process (the resumed runs' too): a round's stop must release the
    # thread that waits on the ps and the one that waits for it alike
    proc = launch([*PENDULUM[:2], "--workers", "2", *PENDULUM[4:], "--sync", "--cluster",
                   "local:2", "--results-dir", results, "--max-episodes", "0", "--max-steps",
                   "100000000", "--set", "best_trial_episodes=0"], folder)
    try:
        def process_1_played():
            assert proc.poll() is None, output(folder, "stderr")
            found = csv_rows(results)
            return found if found and (found[0]["process"] == 1).any() else None
        _, run_dir = wait_for(process_1_played, 150, "episodes of worker process 1")
        [worker_1] = [pid for pid in processes_mentioning(results)
                      if command_line(pid)[-4:] == ["--job", "worker", "--task", "1"]]
        time.sleep(1.5)  # a periodic checkpoint with both processes' rounds
        code, took = ended_after(proc, lambda: os.kill(worker_1, signal.SIGKILL))
    finally:
        if proc.poll() is None:
            proc.kill()
    return dict(code=code, took=took, run_dir=run_dir, left=processes_mentioning(results),
                stdout=output(folder, "stdout"), stderr=output(folder, "stderr"))


def test_a_lost_worker_process_ends_a_sync_cluster_run_with_its_checkpoint(sync_worker_lost):
    run = sync_worker_lost
    assert run["code"] == 1, run["stderr"]
    preset, training = run["stdout"].splitlines()[:2]  # the chief's: it set the run up
    # (--max-episodes 0: no episode limit, where the preset sets one)
    assert preset == config_module.describe_preset("Pendulum-v1", sync=True,
                                                   given={"max_episodes": None})
    assert "synchronous updates (A2C); the chief of a cluster" in training
    # the launcher stops it at once: the chief's own check (a silent process) would wait
    assert ("worker process 1 exited with status -9; the synchronous rounds need it: stopping "
            "the run" in run["stderr"])
    assert "--resume RUN_DIR --cluster local:2" in run["stderr"]
    # a round left waiting would hold the stop for the workers' 30 s of grace and more
    assert "has sent no gradients" not in run["stderr"], "stopped by the launcher, not by silence"
    assert run["took"] < cluster.WORKER_SILENCE_S + 20, "no round is left waiting"
    assert run["left"] == [], "no process of the cluster outlives its launcher"
    assert checkpoints.latest_checkpoint(os.path.join(run["run_dir"], "checkpoints"))


def test_a_sync_cluster_run_resumes_and_ends_at_its_budget_with_both_processes(
        sync_worker_lost, tmp_path):
    run_dir = sync_worker_lost["run_dir"]
    before = runlog.read_episodes(os.path.join(run_dir, "episodes.csv"))
    resumed_at = int(checkpoints.latest_checkpoint(os.path.join(run_dir, "checkpoints")).rsplit("-", 1)[1])
    budget = resumed_at + 4_000
    proc = launch(["--resume", run_dir, "--cluster", "local:2", "--no-plot", "--max-episodes", "0",
                   "--max-steps", str(budget)], str(tmp_path))
    code = finish(proc)
    stdout, stderr = output(tmp_path, "stdout"), output(tmp_path, "stderr")
    assert code == 0, stderr
    assert "synchronous updates (A2C)" in stdout.splitlines()[0] and "resumed at" in stdout
    assert "no gradients" not in stderr, "the budget ends every process's rounds together"
    after = runlog.read_episodes(os.path.join(run_dir, "episodes.csv"))
    assert set(after["process"][len(before["episode"]):]) == {0, 1}
    final = int(checkpoints.latest_checkpoint(os.path.join(run_dir, "checkpoints")).rsplit("-", 1)[1])
    assert budget <= final <= budget + 2 * 2 * 2 * 200, "a round or two past it at most"
    assert processes_mentioning(run_dir) == []


def test_only_the_chief_ends_a_sync_cluster_run_at_its_budget():
    """A worker process that stopped at the budget on its own would leave the others' round
    waiting for it: with --sync, its stop comes from the chief's."""
    cfg = dataclasses.replace(config_module.config_for("Pendulum-v1", sync=True), max_steps=1000,
                              max_episodes=None)
    past_it = (5000, 20, 4000)
    assert remote.ClusterLog(cfg, 0, past_it, runlog.AnnealStart()).budget_used() >= 1.0
    assert remote.ClusterLog(cfg, 1, past_it, runlog.AnnealStart()).budget_used() == 0.0
    unsynced = dataclasses.replace(cfg, sync_updates=False)
    assert remote.ClusterLog(unsynced, 1, past_it, runlog.AnnealStart()).budget_used() >= 1.0


def test_a_cluster_run_that_cannot_go_on_is_refused_before_any_process_starts(sync_worker_lost,
                                                                               capfd):
    run_dir = sync_worker_lost["run_dir"]
    code = a3c.main(["--resume", run_dir, "--cluster", "local:2", "--no-plot", "--max-episodes",
                     "0", "--max-steps", "1000"])  # (a process it started would write here too)
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("a3c.py")]
    assert code == 2
    assert len(said) == 1 and "already used its budget" in said[0], "no process started to say more"


def test_ctrl_c_stops_a_sync_cluster_run_with_every_process_and_a_checkpoint(sync_worker_lost, tmp_path):
    """Ctrl-C on local:N's launcher: each worker process gets SIGTERM and leaves its round (the
    chief's stop releases the others, each process's own releases itself)."""
    run_dir = sync_worker_lost["run_dir"]
    before = runlog.read_episodes(os.path.join(run_dir, "episodes.csv"))
    # (at the base rates: an earlier test may have annealed them to 0 at its budget)
    proc = launch(["--resume", run_dir, "--cluster", "local:2", "--no-plot", "--max-episodes", "0",
                   "--max-steps", "100000000", "--set", "anneal_lr=false"], str(tmp_path))
    try:
        def both_played_again():
            assert proc.poll() is None, output(tmp_path, "stderr")
            try:
                rows = runlog.read_episodes(os.path.join(run_dir, "episodes.csv"))
            except ValueError:  # a line read as it was written: the next look reads it whole
                return False
            return set(rows["process"][len(before["episode"]):]) == {0, 1}
        wait_for(both_played_again, 150, "episodes of both processes after the resume")
        code, took = ended_after(proc, lambda: proc.send_signal(signal.SIGINT))
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = output(tmp_path, "stderr")
    assert code == 130, stderr
    assert "stopping the cluster (SIGINT)" in stderr
    assert took < 28, "no round is left waiting"  # it would take the workers' 30 s of grace
    assert "no gradients" not in stderr
    assert re.search(r"^interrupted: episodes", output(tmp_path, "stdout"), re.M)
    assert processes_mentioning(run_dir) == []
