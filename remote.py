"""Push and pull across processes (--cluster): the global net on TensorFlow's ps tasks as a
worker process sees it (RemoteGlobal), the counters a worker process's threads share
(ClusterLog), what the chief does for the cluster (ChiefLink), and how another worker process
joins the chief's run and follows it to its end (run_to_join, follow_the_chief). Launching and
supervising the processes is cluster.py's."""
from __future__ import annotations

import json
import threading
import time
import typing
from collections import deque

import numpy as np

import cluster as cluster_module
import config as config_module
from config import Config
from console import UsageError, WorkerError, attempt, first_line, warn
from environments import EnvSpec, canonical_env_id
from networks import make_optimizers, mean_gradient_update, optimizer_groups
from runlog import AnnealStart, EpisodeLog, budget_used, falling_lr_fraction
from sessions import close_remote_session, session_callable, tf, v1


WAIT_FOR_ROUND_MS = 7 * 24 * 3600 * 1000  # a cluster's --sync round: no clock (see round_for)


class RemoteGlobal:
    """A worker process's view of a cluster run's shared state: the global net and its RMSProp
    slots on the ps tasks (spread over them by replica_device_setter), and the run's counters
    and episode queue on ps task 0 (cluster.Control).

    Acting never crosses the network: the worker nets live in the process's own plain session,
    as in one process (a call through the distributed master costs far more, even for local
    ops: docs/implementation.md).
    A push is three calls: the clipped gradients are computed locally, applied on the ps in one
    gRPC call that brings the new parameters and the global counters back, and the parameters
    are put into the worker net locally; its next step acts with them. That gRPC call goes to
    ps task 0's own master (cluster.ps_session), which runs it where the variables are."""

    def __init__(self, net_class, spec: EnvSpec, cfg: Config, cluster, server):
        """net_class: ACNet, whose global net is built here on the ps tasks; server: this
        process's own, kept alive with it."""
        self.cluster, self.server = cluster, server
        self.sync = cfg.sync_updates
        self.log = None  # the process's ClusterLog, set once the chief's counters are known
        self.graph = tf.Graph()
        with self.graph.as_default():
            # variables round-robin over the ps tasks; every other op on ps task 0 (see below)
            setter = v1.train.replica_device_setter(ps_tasks=len(cluster.spec["ps"]),
                                                    worker_device="/job:ps/task:0")
            with v1.device(setter):
                self.net = net_class("global", spec, cfg)
                groups = optimizer_groups(self.net, spec, cfg)
            # Every op of a push sits on the ps task of the variable it serves, the fed gradients
            # and the fetched parameters too: the master then sends each ps task one request
            # that carries its feeds and brings its fetches back, instead of one RPC per tensor
            # between this worker task and the ps.
            ps_0 = "/job:ps/task:0"
            self.lr_fraction = self.net.lr_fraction  # (on ps task 0, as every op but a variable)
            self.grads = []
            for group in groups:
                grads = []
                for p in group:
                    with v1.device(p.device):
                        grads.append(v1.placeholder(p.dtype.base_dtype, p.shape))
                self.grads.append(grads)
            # each update sits on its variable's task; the slots are named as in one process's
            # graph, so that a checkpoint reads the same
            optimizers = make_optimizers(spec, cfg, self.lr_fraction)
            if cfg.sync_updates:  # a push adds this process's gradients to the round's sums
                apply = self._build_rounds(cfg, cluster, groups, optimizers)
            else:
                with v1.device(ps_0):
                    apply = tf.group(*[optimizer.apply_gradients(zip(grads, group)) for optimizer,
                                       grads, group in zip(optimizers, self.grads, groups)])
            self.control = cluster_module.control_variables(tf, len(cluster.spec["worker"]))
            with v1.device(ps_0):
                self.counts = v1.placeholder(tf.int64, [3], "counts")  # env steps, episodes, their steps
                self.add_counts = tf.identity(self.control.totals.assign_add(self.counts))
                with tf.control_dependencies([apply]):  # (identity: a resource assign's value)
                    totals = tf.identity(self.control.totals.assign_add(self.counts))
            self.params_now = self._params_after(None)
            if cfg.sync_updates:
                self._build_round_calls(cluster, totals)
            else:
                with v1.device(ps_0), tf.control_dependencies([apply]):
                    mark = self._count_push(cluster.task)
                push = [*self._params_after(apply), totals, mark]
            with v1.device(ps_0):
                self.row_feeds = [v1.placeholder(getattr(tf, t), [None])
                                  for t in cluster_module.EPISODE_ROW_TYPES]
                self.enqueue = self.control.episodes.enqueue_many(self.row_feeds)
                self.finished_value = v1.placeholder(tf.int64, [])
                self.set_finished = v1.scatter_update(self.control.finished, [cluster.task],
                                                      tf.reshape(self.finished_value, [1]))
                self.variables = v1.global_variables()
        self.sess = cluster_module.ps_session(tf, cluster, self.graph)
        # --sync: the calls that wait in a round have a session of their own, without the
        # timeout of every other call (see round_for)
        self.round_sess = (cluster_module.ps_session(tf, cluster, self.graph, WAIT_FOR_ROUND_MS)
                           if self.sync else None)
        # --sync: a round's parameters and the chief's downloads both write this process's
        # global net (ChiefLink.download); one at a time, so that a download read before a
        # round cannot put older parameters back after it
        self.local_params_lock = threading.RLock()  # (a checkpoint's save holds it to download)
        self.round_seconds, self.last_round_at = deque(maxlen=20), None  # the chief's, recent
        self.rounds_applied = 0  # the chief's: rounds whose update it has applied
        if not cfg.sync_updates:
            flat = [g for group in self.grads for g in group]
            self.push = session_callable(self.sess, push, [*flat, self.lr_fraction, self.counts])

    def _params_after(self, op) -> list:
        """The global parameters as read after op (None: whenever), each read on its ps task."""
        params = []
        for p in self.net.params:
            with v1.device(p.device), tf.control_dependencies([] if op is None else [op]):
                params.append(tf.identity(p))
        return params

    def _count_push(self, task: int):
        """One more push (--sync: arrival) of worker process `task`, which the chief watches."""
        return tf.identity(v1.scatter_add(self.control.pushes, [task], tf.constant([1], tf.int64)))

    def _build_rounds(self, cfg: Config, cluster, groups: list, optimizers: list):
        """--sync on a cluster: where the worker processes' rounds meet, on the ps tasks. Each
        process adds the sum of its workers' gradients to the round's sums (beside each
        parameter; returned: the op that adds them) and arrives, with its worker count, in a
        queue; the chief takes all of the processes' arrivals, applies the sums over the
        workers' count (mean_gradient_update, as in one process) and releases each process
        with a token in a queue of its own, after which the process reads the parameters.

        TensorFlow's queues block in C++ without holding the GIL, and nothing here times a
        wait out: a cancelled dequeue_many drops what it had taken. A stop releases every
        waiter instead with a token that says stop (release_rounds). Each process's part of a
        round is one call to the ps (the chief's, two); see _build_round_calls."""
        ps_0 = "/job:ps/task:0"
        processes = len(cluster.spec["worker"])
        self.sums, adds = [], []
        for group, grads in zip(groups, self.grads):
            sums = []
            for p, grad in zip(group, grads):
                with v1.device(p.device):  # not saved: the chief's checkpoints hold global/ only
                    total = v1.get_variable(f"sync/{p.op.name}", p.shape, p.dtype.base_dtype,
                                            v1.zeros_initializer(), trainable=False)
                    adds.append(total.assign_add(grad, read_value=False))
                sums.append(total)
            self.sums.append(sums)
        with v1.device(ps_0):
            # a run leaves at most 2 entries per process in arrivals (its own and a stop) and
            # 3 in a token queue: with room for far more, an enqueue never waits
            capacity = 16 + 4 * processes
            self.arrivals = v1.FIFOQueue(capacity, [tf.int32, tf.int64], shapes=[[], []],
                                         shared_name="run/sync_arrivals", name="run/sync_arrivals")
            self.tokens = [v1.FIFOQueue(capacity, [tf.int64], shapes=[[]],
                                        shared_name=f"run/sync_token_{task}",
                                        name=f"run/sync_token_{task}")
                           for task in range(processes)]
            self.threads = v1.placeholder(tf.int64, [], "threads")  # a process's workers
            self.workers_arrived = v1.placeholder(tf.float32, [], "workers_arrived")
            applied = mean_gradient_update(optimizers, groups, self.sums, self.workers_arrived,
                                           cfg.clip_norm)
        zeroed = []
        for total in (t for sums in self.sums for t in sums):
            with v1.device(total.device), tf.control_dependencies([applied]):
                zeroed.append(total.assign(tf.zeros(total.shape, total.dtype), read_value=False))
        with v1.device(ps_0):
            go, stop = tf.constant(1, tf.int64), tf.constant(0, tf.int64)
            with tf.control_dependencies(zeroed):
                self.release_round = tf.group(*[queue.enqueue(go) for queue in self.tokens])
            self.release_own = self.tokens[cluster.task].enqueue(stop)
            self.release_all = tf.group(
                self.arrivals.enqueue_many([tf.fill([processes], -1),
                                            tf.zeros([processes], tf.int64)]),
                *[queue.enqueue(stop) for queue in self.tokens])
            # what an earlier run on these ps tasks left in the queues: the chief empties them
            self.drain_rounds = tf.group(*[queue.dequeue_up_to(queue.size())
                                           for queue in [self.arrivals, *self.tokens]])
        return tf.group(*adds)

    def _build_round_calls(self, cluster, totals) -> None:
        """What a process fetches in its part of a round (--sync): the global counters after
        its counts, and
          a worker process other than the chief: its token, and the parameters after it, in
            the call that brings its gradients (arrive_and_wait);
          the chief: every process's arrival, in the call that brings its own (arrive_and_take),
            then, in a second call, its token after the round is applied and released, and the
            parameters (apply_and_release)."""
        processes = len(cluster.spec["worker"])
        own_queue = self.tokens[cluster.task]
        with v1.device("/job:ps/task:0"):
            with tf.control_dependencies([totals]):  # arrives once its gradients are in
                arrive = self.arrivals.enqueue([cluster.task, self.threads])
            with tf.control_dependencies([arrive]):  # counts only arrivals really queued
                totals = tf.identity(totals)
                mark = self._count_push(cluster.task)
            with tf.control_dependencies([mark]):
                token = own_queue.dequeue()
                arrived = self.arrivals.dequeue_many(processes)  # (tasks, their workers)
            self.arrive_and_wait = [totals, token, *self._params_after(token)]
            self.arrive_and_take = [totals, *arrived]
            with tf.control_dependencies([self.release_round]):
                token = own_queue.dequeue()
            self.apply_and_release = [token, *self._params_after(token)]

    def round_for(self, sess, global_net, workers: int, chief: bool = True):
        """UpdateRound's apply for --sync on a cluster, run by the last of this process's
        workers to arrive: their gradients' sum and the process's counts and episodes go to
        the ps tasks; the chief, once every process has arrived, applies the round; every
        process waits for its token and puts the new parameters into its own global net, from
        which its workers pull. False: the run stopped before the round was applied."""
        local_sums = session_callable(sess, [g for sums in global_net.gradient_sums for g in sums], [])
        fed, assign = global_net.fed
        put = session_callable(sess, [assign], fed)
        # the waits end when the round is applied or a stop releases them, not on a clock (a
        # timed-out dequeue_many would drop what it took); the chief ends a run whose worker
        # process is gone (ChiefLink.check_rounds)
        feeds = [*(g for group in self.grads for g in group), self.threads, self.counts]
        arrive = session_callable(self.round_sess,
                                  self.arrive_and_take if chief else self.arrive_and_wait, feeds)
        apply = session_callable(self.sess, self.apply_and_release,
                                 [self.workers_arrived, self.lr_fraction])
        threads = np.int64(workers)
        processes = len(self.cluster.spec["worker"])

        def round_(lr_fraction) -> bool:
            counts, rows = self.log.take()
            if rows:
                self.send(rows)
            totals, *answer = arrive(*local_sums(), threads, counts)
            self.log.settle(totals, counts)
            if chief:
                tasks, workers_each = answer
                if (tasks < 0).any():  # released by a stop
                    return False
                if sorted(tasks.tolist()) != list(range(processes)):  # a bug, or a stray process
                    raise RuntimeError(f"a synchronous round's arrivals came from worker "
                                       f"processes {sorted(tasks.tolist())}, not each of 0-{processes - 1} "
                                       f"once; nothing of it was applied")
                # the update and its put under the lock the chief's saves download the ps's net
                # in: a checkpoint never holds variables of two rounds
                with self.local_params_lock:
                    token, *params = apply(np.float32(workers_each.sum()), lr_fraction)
                    self.rounds_applied += 1
                    now = time.time()
                    if self.last_round_at is not None:  # (the first waited for the others to join)
                        self.round_seconds.append(now - self.last_round_at)
                    self.last_round_at = now
                    if token == 1:
                        put(*params)
                return token == 1
            token, *params = answer
            if token != 1:
                return False
            with self.local_params_lock:
                put(*params)
            return True
        return round_

    def release_rounds(self, every_process: bool) -> None:
        """Wake whatever waits in a round (this process's own token; the chief: every process's,
        and its own wait for arrivals) with a stop; a ps that is gone needs nothing."""
        try:
            self.sess.run(self.release_all if every_process else self.release_own,
                          options=v1.RunOptions(timeout_in_ms=5000))
        except tf.errors.OpError:
            pass

    def pull_into(self, sess, net) -> None:
        """The global parameters as the ps holds them now, into a worker net."""
        fed, assign = net.fed
        sess.run(assign, dict(zip(fed, self.sess.run(self.params_now))))

    def update_for(self, net, sess, scheduled: list):
        """Worker.update for a cluster: the same feeds and the entropy and the gradient norm as
        in one process, but no next actions (they come from the net just pulled)."""
        rollout_feeds = net.rollout_feeds
        flat_grads = [g for grads in net.clipped_grads for g in grads]
        gradients = session_callable(sess, [*flat_grads, net.entropy, net.checked_grad_norm],
                                     [*rollout_feeds, *scheduled])
        fed, assign = net.fed
        put = session_callable(sess, [assign], fed)
        rollout_count, state_count, schedule_count = (len(rollout_feeds), len(net.current_state),
                                                      len(scheduled))

        def update(*feeds):
            schedule = feeds[len(feeds) - 1 - schedule_count:len(feeds) - 1]
            *grads, entropy, grad_norm = gradients(*feeds[:rollout_count], *schedule)
            counts, rows = self.log.take()
            *params, totals, _ = self.push(*grads, feeds[-1], counts)
            if rows:
                self.send(rows)
            self.log.settle(totals, counts)
            put(*params)
            return entropy, grad_norm
        del state_count  # the current state is carried by the worker: the next act call reads it
        return update

    def send(self, rows: list) -> None:
        """Finished episodes' rows into the queue the chief drains."""
        columns = [np.array(column, getattr(np, t))
                   for column, t in zip(zip(*rows), cluster_module.EPISODE_ROW_TYPES)]
        self.sess.run(self.enqueue, dict(zip(self.row_feeds, columns)))

    def flush(self) -> None:
        """What the process's threads counted but did not push yet (the last rollouts'
        episodes), to the ps, and a mark that this process has sent all it had: a worker
        process calls this when its threads have stopped (the chief waits for the marks)."""
        counts, rows = self.log.take()
        if rows:
            self.send(rows)
        if counts.any():
            self.log.settle(self.sess.run(self.add_counts, {self.counts: counts}), counts)
        self.mark_finished(1)

    def mark_finished(self, value: int) -> None:
        self.sess.run(self.set_finished, {self.finished_value: value})

    def close(self) -> None:
        close_remote_session(self.sess)
        if self.round_sess is not None:
            close_remote_session(self.round_sess)


class ClusterLog:
    """What a worker process's threads share in a cluster run, where one process has EpisodeLog:
    the global counters as the last push brought them back, the env steps and episodes not
    pushed yet, and finished episodes' rows, which go to the chief through the ps's queue."""

    def __init__(self, cfg: Config, process: int, totals, anneal_start: AnnealStart):
        self.cfg, self.process = cfg, process
        # --sync: a round needs every process, so only the chief ends the run at the budget
        # (its stop releases the others); one that stopped on its own would stall the rest
        self.budget_is_the_chiefs = cfg.sync_updates and process != 0
        self.lock = threading.Lock()
        self.totals = np.array(totals, np.int64)  # env steps, episodes, env steps of those
        self.pending = np.zeros(3, np.int64)
        self.in_flight = np.zeros(3, np.int64)  # taken by pushes not answered yet
        self.rows = []
        self.anneal_start = anneal_start
        self.lr_fraction_now = anneal_start.lr_fraction

    @property
    def env_steps(self) -> int:
        return int(self.totals[0] + self.pending[0] + self.in_flight[0])

    def add_steps(self, count: int) -> None:
        with self.lock:
            self.pending[0] += count

    def record(self, worker: int, episode_return: float, length: int, entropy: float,
               grad_norm: float) -> None:
        with self.lock:
            self.rows.append((self.process, worker, episode_return, length, entropy, grad_norm,
                              self.totals[0] + self.pending[0] + self.in_flight[0]))
            self.pending[1:] += (1, length)

    def take(self) -> tuple:
        """(the counts not pushed yet, the rows not sent yet), both handed over to a push."""
        with self.lock:
            counts, rows = self.pending.copy(), self.rows
            self.in_flight += counts
            self.pending[:] = 0
            self.rows = []
            return counts, rows

    def settle(self, totals, counts) -> None:
        """The global totals a push brought back, which include its counts."""
        with self.lock:
            self.in_flight -= counts
            self.totals = np.maximum(self.totals, totals)

    def budget_used(self) -> float:
        """From what the ps has confirmed and what is not pushed yet, not what is in flight: a
        push's answer counts its siblings' in-flight pushes too, so counting them here could
        stop the process short of the budget."""
        if self.budget_is_the_chiefs:
            return 0.0
        with self.lock:
            seen = self.totals + self.pending
        return budget_used(self.cfg, int(seen[1]), int(seen[0]))

    def lr_fraction(self) -> float:
        with self.lock:
            steps, episodes, finished = self.totals + self.pending + self.in_flight
            self.lr_fraction_now = falling_lr_fraction(self.cfg, self.lr_fraction_now, int(episodes),
                                                       int(finished), int(steps), self.anneal_start)
            return self.lr_fraction_now


class ChiefLink:
    """What the chief (worker task 0) does for the cluster beyond its own workers: set up the
    ps tasks' state from its own (fresh or restored) global net; keep that local copy fresh,
    since checkpoints and the best-agent trials read it; collect every process's episodes into
    the one episodes.csv; beat the heart the other processes watch; report worker processes
    that stop pushing; and, at the end, tell the others that the run is over."""

    def __init__(self, remote: RemoteGlobal, local_shared: list):
        """Built in the chief's own graph; local_shared: its variables, of which the global net
        and its slots (global/...) are the ps's too."""
        self.remote = remote
        local = {v.op.name: v for v in local_shared if v.op.name.startswith("global/")}
        on_ps = {v.op.name: v for v in remote.variables if v.op.name.startswith("global/")}
        if set(local) != set(on_ps):  # both graphs come from the same code: a bug if not
            raise RuntimeError(f"the ps graph's variables differ from the chief's: "
                               f"{sorted(set(local) ^ set(on_ps))[:3]}")
        names = sorted(local)
        param_names = {p.op.name for p in remote.net.params}
        self.params = [n for n in names if n in param_names]
        self.local = [local[n] for n in names]
        self.feeds = [v1.placeholder(local[n].dtype.base_dtype, local[n].shape) for n in names]
        self.put_local = [v.assign(f) for v, f in zip(self.local, self.feeds)]
        with remote.graph.as_default():
            control = remote.control
            self.remote_vars = [on_ps[n] for n in names]
            self.remote_feeds = [v1.placeholder(v.dtype.base_dtype, v.shape) for v in self.remote_vars]
            self.put_remote = [v.assign(f) for v, f in zip(self.remote_vars, self.remote_feeds)]
            self.init = v1.variables_initializer(remote.variables)
            self.flag_index = v1.placeholder(tf.int32, [])
            self.flag_value = v1.placeholder(tf.int64, [])
            self.set_flag = v1.scatter_update(control.flags, self.flag_index, self.flag_value)
            self.beat = v1.scatter_add(control.flags, cluster_module.HEARTBEAT, tf.constant(1, tf.int64))
            self.start_values = [v1.placeholder(tf.string, []), v1.placeholder(tf.int64, [3]),
                                 v1.placeholder(tf.float64, [2])]
            self.set_start = tf.group(control.config.assign(self.start_values[0]),
                                      control.totals.assign(self.start_values[1]),
                                      control.anneal_start.assign(self.start_values[2]))
            self.queue_size = control.episodes.size()
            self.take_count = v1.placeholder(tf.int32, [])
            self.dequeue = control.episodes.dequeue_up_to(self.take_count)
            self.read_state = [control.totals, control.pushes, control.finished]
        self.param_positions = [names.index(n) for n in self.params]
        self.last_pushes, self.last_change, self.silent = None, {}, set()
        self.first_arrival, self.told_waiting = None, False  # --sync: see check_rounds
        self.next_param_sync = 0.0
        self.heart_stops = threading.Event()
        self.heart = None
        self.ps_lost = False  # the ps stopped answering: no more calls to it at the end
        # False once the ps's net cannot be brought home (it is gone, or the end's collection
        # failed): a checkpoint then saves the last copy there is
        self.fetching = True

    def start(self, sess, run_config: str, totals, anneal_start: AnnealStart) -> None:
        """Put this process's global net, slots and counters on the ps tasks and open the run."""
        remote = self.remote.sess
        remote.run(self.init)
        left = int(remote.run(self.queue_size))  # rows of an earlier run on a ps that outlived it
        if left:
            remote.run(self.dequeue, {self.take_count: left})
        if self.remote.sync:
            remote.run(self.remote.drain_rounds)
        values = sess.run(self.local)
        remote.run(self.put_remote, dict(zip(self.remote_feeds, values)))
        remote.run(self.set_start, dict(zip(self.start_values, [
            run_config, np.array(totals, np.int64), np.array(anneal_start, np.float64)])))
        self.flag(cluster_module.RUN_ID, int(np.random.SeedSequence().generate_state(1)[0]))
        # the heartbeat the others and the ps tasks watch: a thread of its own, beating from
        # now until shutdown (through the rest of the set-up and the final saves too)
        remote.run(self.beat)

        def beat():
            while not self.heart_stops.wait(0.5):
                try:
                    self.remote.sess.run(self.beat)
                except Exception:  # a slow or lost ps: tick finds out; beat on while it may
                    pass
        self.heart = threading.Thread(target=beat, name="chief_heartbeat", daemon=True)
        self.heart.start()

    def open(self) -> None:
        """Let the other worker processes in."""
        self.flag(cluster_module.READY, 1)

    def flag(self, index: int, value: int) -> None:
        self.remote.sess.run(self.set_flag, {self.flag_index: index, self.flag_value: value})

    def download(self, sess, params_only: bool = False) -> None:
        """The ps tasks' global net (and slots) into the chief's local copy (nothing once they
        cannot be fetched)."""
        if not self.fetching:
            return
        positions = self.param_positions if params_only else range(len(self.local))
        with self.remote.local_params_lock:
            values = self.remote.sess.run([self.remote_vars[i] for i in positions])
            sess.run([self.put_local[i] for i in positions],
                     {self.feeds[i]: value for i, value in zip(positions, values)})

    def tick(self, sess, log: EpisodeLog, say) -> None:
        """Once per supervisor loop: episodes, counters, silent workers, and every 2 s the
        parameters the trials copy."""
        try:
            self.beat_and_collect(sess, log, say)
        except tf.errors.OpError as exc:
            self.ps_lost, self.fetching = True, False
            raise WorkerError(f"the ps tasks stopped answering ({first_line(exc)}); the final "
                              f"checkpoint holds the last global net the chief brought home "
                              f"(at most a few seconds old)") from None

    def beat_and_collect(self, sess, log: EpisodeLog, say) -> None:
        self.collect(log)
        now = time.time()
        if now >= self.next_param_sync:
            self.download(sess, params_only=True)
            self.next_param_sync = now + 2.0
        if self.remote.sync:
            self.check_rounds(*self.remote.sess.run(self.read_state[1:]), now, say)
            return
        pushes = self.remote.sess.run(self.read_state[1])
        for task in range(1, len(pushes)):
            if self.last_pushes is None or pushes[task] != self.last_pushes[task]:
                self.last_change[task] = now
                if task in self.silent:
                    self.silent.discard(task)
                    say(f"worker process {task} pushes again")
            elif (pushes[task] and task not in self.silent
                  and now - self.last_change.get(task, now) > cluster_module.WORKER_SILENCE_S):
                self.silent.add(task)
                say(f"worker process {task} has not pushed for "
                    f"{cluster_module.WORKER_SILENCE_S:.0f} s: it has stopped or stalls; the "
                    f"others go on (start it again with the same command to rejoin)")
        self.last_pushes = pushes

    def check_rounds(self, pushes, finished, now: float, say) -> None:
        """--sync: every round needs every worker process's gradients, so one that stops sending
        them stalls the run. It ends (WorkerError, with its checkpoint) at once when a worker
        process says it has stopped; when one that had sent before has not arrived in the round
        under way for WORKER_SILENCE_S (or five of the slowest recent rounds, if longer) after
        another process arrived in it; and after CHIEF_WAIT_S for one that never joined. While
        no process has arrived in the round under way, every one is playing its rollout: that is
        no silence, however long it takes. (pushes: arrivals so far, per worker process.)"""
        gone = [task for task in range(1, len(pushes)) if finished[task]]
        if gone:
            self.silent.update(gone)
            raise WorkerError(f"worker process {', '.join(map(str, gone))} has stopped, and a "
                              f"synchronous round needs every worker process, so the run stops "
                              f"here; {resume_hint()}")
        applied = self.remote.rounds_applied
        # the chief's own workers are not waited for here: they are in this process
        behind = [task for task in range(1, len(pushes)) if pushes[task] <= applied]
        if pushes.max() <= applied or not behind:  # the round under way has no one waiting yet
            self.first_arrival = None
            return
        if self.first_arrival is None or self.first_arrival[0] != applied:
            self.first_arrival = (applied, now)  # the first arrival seen in this round
        waited = now - self.first_arrival[1]
        # five times what the slowest recent rounds took, and what the fastest process took in
        # this one (processes of other speeds, or other --workers: round 2 has no history yet)
        started = self.remote.last_round_at
        fastest = self.first_arrival[1] - started if started is not None else 0.0
        patience = max([cluster_module.WORKER_SILENCE_S, 5 * fastest,
                        *(5 * t for t in self.remote.round_seconds)])
        names = ", ".join(str(task) for task in behind)
        if any(pushes[task] for task in behind):
            if waited >= patience:
                self.silent.update(behind)
                raise WorkerError(f"worker process {names} has sent no gradients for {waited:.0f} s "
                                  f"while the others waited, and a synchronous round needs every "
                                  f"worker process's, so the run stops here; {resume_hint()}")
            return
        if waited >= cluster_module.CHIEF_WAIT_S:
            self.silent.update(behind)
            raise WorkerError(f"worker process {names} did not join within {waited:.0f} s; a "
                              f"synchronous run needs every worker process of the cluster: start "
                              f"each with the same cluster file (--job worker --task N)")
        if waited >= patience and not self.told_waiting:
            self.told_waiting = True
            say(f"the synchronous rounds wait for worker process {names} to join")

    def collect(self, log: EpisodeLog) -> None:
        """The episodes in the queue into episodes.csv, and the global env step count."""
        waiting = int(self.remote.sess.run(self.queue_size))
        if waiting:
            process, worker, returns, lengths, entropy, norms, ended_at = self.remote.sess.run(
                self.dequeue, {self.take_count: waiting})
            for row in zip(process, worker, returns, lengths, entropy, norms, ended_at):
                log.record(int(row[1]), float(row[2]), int(row[3]), float(row[4]), float(row[5]),
                           process=int(row[0]), env_steps=int(row[6]))
        log.count_to(int(self.remote.sess.run(self.read_state[0])[0]))

    def finish(self, sess, log: EpisodeLog) -> bool:
        """Tell the other processes the run is over; once every one still pushing has sent its
        last episodes (15 s at most), collect them and bring the global net home for the
        checkpoint. If that fails, the checkpoint keeps the last copy brought home."""
        try:
            self.flag(cluster_module.DONE, 1)
            deadline = time.time() + 15.0
            while time.time() < deadline:
                _, pushes, finished = self.remote.sess.run(self.read_state)
                pushing = [task for task in range(1, len(pushes))
                           if pushes[task] and task not in self.silent]
                if all(finished[task] for task in pushing):
                    break
                time.sleep(0.2)
            self.collect(log)
            self.download(sess)
        except BaseException:
            self.fetching = False
            raise
        return True

    def shutdown(self) -> None:
        """The ps tasks may go: the chief has what it needs."""
        self.heart_stops.set()
        if self.heart is not None:
            self.heart.join(5.0)
        self.flag(cluster_module.SHUTDOWN, 1)


def start_cluster_task(cluster) -> "v1.train.Server":
    """This process's TensorFlow server, once every ps task answers (cluster.ClusterError: its
    port is taken, or no ps came within cluster.PS_WAIT_S)."""
    server = cluster_module.start_server(tf, cluster)
    cluster_module.wait_for_ps(cluster)
    return server


def resume_hint() -> str:
    return ("the chief's last checkpoint keeps the run: resume it on the chief's machine with "
            "--resume RUN_DIR and the same cluster")


class RunOver(Exception):
    """The chief ended the run before this worker process joined it: no error, nothing to do (a
    resume by a few steps can end before local:N's other processes have started)."""


class RunToJoin(typing.NamedTuple):
    """What a worker process other than the chief takes from the chief (through ps task 0)."""
    env_id: str
    cfg: Config          # the run's: the global net's, and its learning rates
    seed: int            # this process's, drawn from the run's and its task
    totals: np.ndarray   # the run's counters when it joins
    anneal_start: AnnealStart


def run_to_join(cluster, control, control_sess, watch, env_id: typing.Optional[str]):
    """Wait for the chief to open the run (None, told, if it does not within
    cluster.CHIEF_WAIT_S), then read it; RunOver where the chief has ended it already,
    UsageError where this process cannot join it."""
    deadline = time.time() + cluster_module.CHIEF_WAIT_S
    while (state := watch.state()) == "waiting":
        if time.time() > deadline:
            warn(f"the chief (worker task 0) did not open the run within "
                 f"{cluster_module.CHIEF_WAIT_S:.0f} s; start it with the same cluster file, then this")
            return None
        time.sleep(0.5)
    if state in ("done", "shutdown"):
        try:
            opened = control_sess.run(control.flags)[cluster_module.READY]
        except tf.errors.OpError:  # (the ps went as the run was shut down)
            opened = True
        if not opened:
            raise UsageError("the chief ended before it opened a run (its output says why); "
                             "nothing to join")
        raise RunOver("the chief had ended the run when this process came to join it (its output "
                      "says why; a resume by a few steps ends so before local:N's other "
                      "processes start); nothing to do")
    if state != "running":
        raise UsageError(f"the cluster's run is gone (the chief is {state}); nothing to join")
    run = json.loads(control_sess.run(control.config).decode())
    totals, anneal_start = control_sess.run([control.totals, control.anneal_start])
    if run["cluster"] != cluster.spec:
        raise UsageError(f"this process's cluster {json.dumps(cluster.spec)} is not the chief's "
                         f"{json.dumps(run['cluster'])}; give every process the same cluster file")
    if env_id is not None and env_id not in (run["env"], canonical_env_id(run["env"])):
        raise UsageError(f"--env {env_id}: the cluster's run trains {run['env']}; a worker "
                         f"process takes the chief's env and config (drop --env)")
    run_cfg = config_module.from_dict(run["config"])
    if run_cfg.sync_updates and control_sess.run(control.pushes)[cluster.task]:
        # its last round may still be in the queues on the ps: taking it back could misalign
        # the rounds; the chief ends the run when it goes silent
        raise UsageError(f"worker process {cluster.task} already took part in this synchronous "
                         f"(--sync) run, which cannot take a worker process back; once the chief "
                         f"has ended it, {resume_hint()}")
    seed = int(np.random.SeedSequence([run["seed"], cluster.task]).generate_state(1)[0])
    return RunToJoin(run["env"], run_cfg, seed, totals, AnnealStart(*anneal_start))


def follow_the_chief(team, remote: RemoteGlobal, watch, task: int, console) -> int:
    """A joined worker process's team (started) trains until the chief ends the run, goes
    silent or starts it anew, or Ctrl-C; then it stops, sends what it has and closes. Returns
    0 when the run is over, 1 if the chief or a ps task went away or a worker raised, 130 on
    Ctrl-C (or SIGTERM)."""
    outcome = "done"
    try:
        while not team.coord.wait_for_stop(0.5):
            state = watch.state()
            if state in ("done", "shutdown", "silent", "lost", "waiting", "restarted"):
                outcome = state
                team.coord.request_stop()
    except KeyboardInterrupt:
        outcome = "interrupted"
    error, stuck = team.stop(None if team.rounds is None else
                             lambda: remote.release_rounds(every_process=False))
    if outcome in ("done", "interrupted") and error is None and not stuck:
        attempt("send the last episodes to the chief", remote.flush)
    elif team.rounds is not None and outcome not in ("lost", "silent"):
        # --sync: the chief's rounds wait for this process until it says it has stopped
        attempt("tell the chief this process stopped", remote.mark_finished, 1)
    if stuck:  # closing what a running thread uses could crash the process
        warn(f"{', '.join(stuck)} did not stop within 30 s; leaving without closing")
    else:
        team.close()
        attempt("close the session with the ps tasks", remote.close)
    if outcome in ("waiting", "restarted"):
        warn("the chief (worker task 0) started the run anew; start this process again to join it")
        return 1
    if outcome == "silent":
        warn(f"the chief (worker task 0) has been silent for {cluster_module.CHIEF_SILENCE_S:.0f} s, "
             f"so this process stopped; {resume_hint()}")
        return 1
    if outcome == "lost" or error is not None:
        why = f"{first_line(error)}" if error is not None else "ps task 0 does not answer"
        warn(f"worker process {task} stopped: {why}; if a ps task or the chief went away, "
             f"{resume_hint()}")
        return 1
    console.say(f"worker process {task}: {'interrupted' if outcome == 'interrupted' else 'the run is over'}")
    return 130 if outcome == "interrupted" else 0
