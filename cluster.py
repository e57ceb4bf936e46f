"""Past one process: the cluster a run spans, the state its processes share besides the global net,
and `--cluster local:N`, which starts and supervises a whole cluster on this machine.

TensorFlow's own distributed runtime carries everything (tf.compat.v1.train.Server, ClusterSpec,
replica_device_setter); remote.py builds the A3C graphs on it. What lives here is not A3C: reading a
cluster file, free loopback ports, the ps task's loop, the control variables every process reads,
and the launcher that starts the ps and worker processes and makes sure none outlives it.

Security: TensorFlow's gRPC servers have no authentication and no encryption, and each listens
on every interface of its machine (TensorFlow binds 0.0.0.0:port whatever host the cluster names;
local:N names 127.0.0.1, the tasks reach each other there). A cluster must run on a trusted
private network.
"""
from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import typing

JOBS = ("ps", "worker")
CHIEF_SILENCE_S = 8.0    # a chief whose heartbeat stalls this long is taken for dead (the ps
PS_CHIEF_SILENCE_S = 14.0  # waits longer: the other workers' last calls go to it)
CALL_TIMEOUT_MS = 60_000  # a call to the ps tasks that takes longer fails (a lost machine, a partition)
PS_WAIT_S = 60.0         # how long a worker process waits for the ps tasks to answer at start
CHIEF_WAIT_S = 300.0     # how long a non-chief worker process waits for the chief to set up
WORKER_SILENCE_S = 6.0   # the chief reports a worker process that has not pushed for this long
STOP_GRACE_S = 60.0      # a stopped cluster process exits by force after this long
LAUNCHER_GRACE_S = 90.0  # the launcher's wait for the chief to finish after a stop, then SIGKILL
PS_ORPHAN_S = 75.0       # a local:N ps whose launcher died serves on this long at most for the
                         # chief's final saves (the chief exits by force after STOP_GRACE_S)
LAUNCHER_GONE = getattr(signal, "SIGUSR1", None)  # a local:N ps's parent-death signal (run_ps)
EPISODE_QUEUE_CAPACITY = 100_000

# run/control on ps task 0, int64: what the chief tells every other process; RUN_ID is drawn
# anew by each chief that sets the run up, so that a worker process sees a new chief at once
READY, DONE, HEARTBEAT, SHUTDOWN, RUN_ID = range(5)


class ClusterError(Exception):
    """A cluster that cannot be used as given (bad file, index out of range, port in use)."""


class Cluster(typing.NamedTuple):
    """The cluster a process belongs to, and its own place in it."""
    spec: dict   # TensorFlow's cluster dict: {"ps": ["host:port", ...], "worker": [...]}
    job: str     # "ps" or "worker"
    task: int

    @property
    def is_chief(self) -> bool:
        return self.job == "worker" and self.task == 0

    @property
    def shape(self) -> dict:
        return {job: len(self.spec[job]) for job in JOBS}

    @property
    def address(self) -> str:
        return self.spec[self.job][self.task]


def parse_local(value: str) -> typing.Optional[int]:
    """N of "local:N", None for anything else (a cluster file, or inline JSON)."""
    if not value.startswith("local:"):
        return None
    count = value[len("local:"):]
    if not count.isdigit() or not 1 <= int(count) <= 64:
        raise ClusterError(f"--cluster {value}: N in local:N must be a number of worker "
                           f"processes from 1 to 64, e.g. local:2")
    return int(count)


def read_cluster_spec(value: str) -> dict:
    """The cluster dict of a cluster file's path (or of inline JSON, which the launcher hands its
    processes), checked: one "ps" and one "worker" list of distinct "host:port" strings."""
    where = "the inline cluster" if value.lstrip().startswith("{") else value
    try:
        if value.lstrip().startswith("{"):
            spec = json.loads(value)
        else:
            with open(value) as f:
                spec = json.load(f)
    except OSError as exc:
        raise ClusterError(f"cannot read the cluster file {value}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ClusterError(f"{where} is not JSON ({exc.msg}, line {exc.lineno}); write "
                           f'{{"ps": ["host:port"], "worker": ["host:port", ...]}}') from None
    except ValueError:  # not UTF-8
        raise ClusterError(f"{where} is not a JSON text file; write "
                           f'{{"ps": ["host:port"], "worker": ["host:port", ...]}}') from None
    if not isinstance(spec, dict) or set(spec) != set(JOBS):
        raise ClusterError(f'{where} must be a dict with exactly the jobs "ps" and "worker", '
                           f'e.g. {{"ps": ["10.0.0.1:2222"], "worker": ["10.0.0.1:2223"]}}')
    seen = set()
    for job in JOBS:
        tasks = spec[job]
        if not isinstance(tasks, list) or not tasks:
            raise ClusterError(f'{where}: "{job}" must be a non-empty list of "host:port" strings')
        for address in tasks:
            host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
            if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
                raise ClusterError(f'{where}: {job} address {address!r} is not "host:port"')
            if address in seen:
                raise ClusterError(f"{where}: {address} is listed twice; each task needs its own port")
            seen.add(address)
    return spec


def cluster_for(value: str, job: typing.Optional[str], task: typing.Optional[int]) -> Cluster:
    """This process's Cluster from --cluster FILE --job JOB --task I."""
    if job is None or task is None:
        raise ClusterError("a cluster file needs --job (ps or worker) and --task (this "
                           "process's index in that job's list); --cluster local:N needs neither")
    spec = read_cluster_spec(value)
    if not 0 <= task < len(spec[job]):
        raise ClusterError(f"--task {task} is out of range: the cluster has {len(spec[job])} "
                           f"{job} task(s), numbered from 0")
    return Cluster(spec, job, task)


def check_port_free(cluster: Cluster) -> None:
    """ClusterError if this task's port is taken here: TensorFlow's own error would come only
    when its server starts, as a C++ abort on some versions."""
    port = int(cluster.address.rpartition(":")[2])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            raise ClusterError(f"port {port} of {cluster.job} task {cluster.task} "
                               f"({cluster.address}) is in use on this machine; free it or "
                               f"give the task another port in the cluster file") from None


def answers(address: str, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections at host:port."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_for_ps(cluster: Cluster, timeout_s: float = PS_WAIT_S) -> None:
    """Return once every ps task accepts connections. A TensorFlow session would instead wait
    forever ("CreateSession still waiting for response from worker"), whatever its timeouts."""
    deadline = time.time() + timeout_s
    missing = list(cluster.spec["ps"])
    while missing:
        missing = [address for address in missing if not answers(address)]
        if missing and time.time() > deadline:
            raise ClusterError(f"no ps task answers at {', '.join(missing)} after {timeout_s:.0f} s; "
                               f"start it (--job ps --task N) with the same cluster file")
        if missing:
            time.sleep(0.5)


class LoopbackPorts:
    """`count` ports free on 127.0.0.1, held bound (not listening) until close(): while held,
    the kernel hands none of them out by itself (to a bind to port 0 or a connection's own port)
    and a bind without SO_REUSEADDR fails, yet a task's TensorFlow server, which binds with
    SO_REUSEADDR, takes its own (and check_port_free's probe passes). Closing them as soon as
    they are found would leave each free for seconds, until its process has imported
    TensorFlow. (A program that binds one on purpose with SO_REUSEADDR still can.)"""

    def __init__(self, count: int, hold: bool = sys.platform.startswith("linux")):
        """hold: keep them bound (Linux). Elsewhere they are closed at once: on BSD and macOS a
        socket bound to 127.0.0.1 may take connections meant for the server on the wildcard
        address, and Windows binds differently (not verified there)."""
        self.sockets = []
        try:
            for _ in range(count):
                held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self.sockets.append(held)
                held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                held.bind(("127.0.0.1", 0))
        except BaseException:
            self.close()
            raise
        self.ports = [held.getsockname()[1] for held in self.sockets]
        if not hold:
            self.close()

    def close(self) -> None:
        for held in self.sockets:
            held.close()

    def __enter__(self) -> list:
        return self.ports

    def __exit__(self, *exc_info) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# The shared control state (TensorFlow from here on: imported by sessions.py before these are used)
# ---------------------------------------------------------------------------------------------

class Control(typing.NamedTuple):
    """Variables on ps task 0 that every process of a run builds under the same names, so that
    they are one and the same there (between-graph replication shares variables by name)."""
    flags: object        # int64 [5]: READY, DONE, HEARTBEAT, SHUTDOWN, RUN_ID (set by the chief)
    config: object       # string: {"env": ..., "config": ...} of the run, for the other workers
    totals: object       # int64 [3]: env steps, episodes, env steps of finished episodes
    pushes: object       # int64 [worker tasks]: pushes each worker process has made
    anneal_start: object  # float64 [2]: AnnealStart of this part of the run
    finished: object     # int64 [worker tasks]: 1 once a worker process has sent its last rows
    episodes: object     # FIFOQueue of finished episodes' rows, drained by the chief


EPISODE_ROW_TYPES = ("int32", "int32", "float64", "int64", "float32", "float32", "int64")
# process, worker, return, length, entropy, grad_norm, env_steps when it ended


def control_variables(tf, workers: int) -> Control:
    v1 = tf.compat.v1
    zeros = v1.zeros_initializer()
    with v1.device("/job:ps/task:0"):
        return Control(
            flags=v1.get_variable("run/control", [5], tf.int64, zeros, trainable=False),
            config=v1.get_variable("run/config", [], tf.string, v1.constant_initializer(""),
                                   trainable=False),
            totals=v1.get_variable("run/totals", [3], tf.int64, zeros, trainable=False),
            pushes=v1.get_variable("run/pushes", [workers], tf.int64, zeros, trainable=False),
            anneal_start=v1.get_variable("run/anneal_start", [2], tf.float64, zeros,
                                         trainable=False),
            finished=v1.get_variable("run/finished", [workers], tf.int64, zeros, trainable=False),
            episodes=v1.FIFOQueue(EPISODE_QUEUE_CAPACITY, [getattr(tf, t) for t in EPISODE_ROW_TYPES],
                                  shapes=[[]] * len(EPISODE_ROW_TYPES), shared_name="run/episodes",
                                  name="run/episodes"))


def start_server(tf, cluster: Cluster):
    check_port_free(cluster)
    try:
        return tf.compat.v1.train.Server(tf.compat.v1.train.ClusterSpec(cluster.spec),
                                         job_name=cluster.job, task_index=cluster.task)
    except Exception as exc:
        raise ClusterError(f"cannot start the {cluster.job} {cluster.task} server at "
                           f"{cluster.address}: {str(exc).strip().splitlines()[0]}") from None


def ps_session(tf, cluster: Cluster, graph, timeout_ms: typing.Optional[int] = None,
               one_task: bool = False):
    """A session whose graph runs on the ps tasks, through ps task 0's own master.

    Through this process's own master a call to the ps costs several times as much of this
    process's CPU, even for one scalar op: the master splits each step between its own task and
    the ps and drives the ps's part over gRPC (docs/implementation.md). So every op of these
    graphs sits on a ps task, and only the ps tasks are asked for.
    timeout_ms: how long a call may take, CALL_TIMEOUT_MS unless given (a gRPC session applies
    this to every call; a callable's own run options are not read).
    A call whose ops all sit on ps task 0 (one_task: the graph's do, whatever the cluster; or the
    cluster has one ps task) runs as one part there, so one the ps refuses as a repeat
    (REPEATED_REQUEST) ran nothing, and this session sends it again."""
    if one_task:
        # (an op placed nowhere runs where the master is: ps task 0)
        placed = {op.device: tf.DeviceSpec.from_string(op.device)
                  for op in graph.get_operations() if op.device}
        elsewhere = [device for device, where in placed.items() if (where.job, where.task) != ("ps", 0)]
        if elsewhere:
            raise ValueError(f"one_task: the graph has ops on {sorted(elsewhere)}, not only on "
                             f"/job:ps/task:0; a refused call's other parts may have run")
    one_part = one_task or len(cluster.spec["ps"]) == 1
    session_type = resending_session_type(tf) if one_part else tf.compat.v1.Session
    return session_type(f"grpc://{cluster.spec['ps'][0]}", graph=graph,
                        config=tf.compat.v1.ConfigProto(
                            device_filters=["/job:ps"], device_count={"GPU": 0},
                            operation_timeout_in_ms=timeout_ms or CALL_TIMEOUT_MS))


# A TensorFlow defect (2.21): a master names each call's RunGraph request from 32 random bits,
# and every task refuses a name among its last 100,000, before anything runs; so about one call
# in 43,000 is refused once a run has made ~100k (docs/implementation.md, results/ps_repeats.md).
# A refused call that ran as one part ran nothing and is sent again; with several ps tasks the
# other tasks' parts of it may have run, so there the refusal ends the run (resume it), as any
# worker's error does.
REPEATED_REQUEST = "The same RunGraph (Worker) request was received twice"
REPEAT_TRIES = 4  # a call refused again is one in 43,000 again; four in a row is a different bug


class Resends:
    """How many calls this process has sent again after a refusal (bench/ps_repeats.py and the
    note a cluster process leaves when it exits read it)."""
    lock = threading.Lock()
    count = 0

    @classmethod
    def add(cls) -> None:
        with cls.lock:
            cls.count += 1


def resend_repeats(tf, call, args, kwargs):
    """call(*args, **kwargs), sent again when a ps task refuses it as a repeat."""
    for tries_left in reversed(range(REPEAT_TRIES)):
        try:
            return call(*args, **kwargs)
        except tf.errors.AbortedError as error:
            if tries_left == 0 or REPEATED_REQUEST not in str(error):
                raise
            Resends.add()


@functools.lru_cache(maxsize=None)
def resending_session_type(tf):
    """tf.compat.v1.Session whose calls are sent again when a ps task refuses them as repeats:
    through run() (and so make_callable with a feed list, and Saver) and the C++ callables of
    _make_callable_from_options (session_callable's); built on first use, as this module
    imports no TensorFlow."""
    class ResendingSession(tf.compat.v1.Session):
        def run(self, *args, **kwargs):
            return resend_repeats(tf, super().run, args, kwargs)

        def _make_callable_from_options(self, callable_options):
            call = super()._make_callable_from_options(callable_options)
            return lambda *args, **kwargs: resend_repeats(tf, call, args, kwargs)
    return ResendingSession


class ChiefWatch:
    """Reads the chief's flags; says when it has stopped (DONE, SHUTDOWN) or gone silent. Its
    heartbeat beats from the moment it opens the run until it shuts it down, so silence counts
    in every state after the first beat."""

    def __init__(self, tf, sess, control: Control, silence_s: float = CHIEF_SILENCE_S):
        self.read = lambda: sess.run(control.flags)
        self.errors = tf.errors
        self.silence_s = silence_s
        self.heartbeat, self.changed = None, time.time()
        self.run_id = None  # the run this process joined

    def state(self) -> str:
        """'waiting' (no chief yet), 'running', 'done', 'shutdown', 'silent', or 'lost' (ps gone)."""
        try:
            flags = self.read()
        except self.errors.FailedPreconditionError:  # not initialised: no chief yet
            return "waiting"
        except self.errors.OpError:  # unavailable, aborted, deadline exceeded: ps task 0 is gone
            return "lost"
        if flags[SHUTDOWN]:
            return "shutdown"
        now = time.time()
        if flags[HEARTBEAT] != self.heartbeat:
            self.heartbeat, self.changed = flags[HEARTBEAT], now
        if flags[HEARTBEAT] and now - self.changed > self.silence_s:
            return "silent"
        if self.run_id is not None and flags[RUN_ID] != self.run_id:
            return "restarted"
        if flags[DONE]:
            return "done"
        if flags[READY] and self.run_id is None:
            self.run_id = flags[RUN_ID]
        return "running" if flags[READY] else "waiting"


def run_ps(tf, cluster: Cluster, say) -> int:
    """A ps task: serve the variables until the chief shuts the run down (0) or goes silent or
    a ps task it depends on goes away (1). Server.join() would block forever.

    The ps of --cluster local:N gets LAUNCHER_GONE when its launcher dies (even by SIGKILL),
    while the worker processes get SIGTERM: it serves on until the chief, stopping, has brought
    the run home and shut it down, or goes silent (PS_ORPHAN_S at most; at once if no chief has
    opened a run), so that the chief's last collection and checkpoint find it there."""
    orphaned = []
    if LAUNCHER_GONE is not None:
        signal.signal(LAUNCHER_GONE, lambda signum, frame: orphaned.append(time.time()))
    server = start_server(tf, cluster)
    graph = tf.Graph()
    with graph.as_default():
        control = control_variables(tf, len(cluster.spec["worker"]))
    sess = ps_session(tf, cluster, graph, one_task=True)
    say(f"ps task {cluster.task} serving at {cluster.address}")
    watch = ChiefWatch(tf, sess, control, PS_CHIEF_SILENCE_S)
    while True:
        state = watch.state()
        if state == "shutdown":
            return 0
        if state == "lost":
            say("ps: lost ps task 0 (it holds the run's control state); stopping")
            return 1
        if state == "silent":
            say(f"ps: the chief (worker task 0) has been silent for {PS_CHIEF_SILENCE_S:.0f} s; "
                f"stopping (resume the run from the chief's last checkpoint)")
            return 1
        if orphaned and (state == "waiting" or time.time() - orphaned[0] > PS_ORPHAN_S):
            say("ps: the cluster's launcher is gone and the chief did not shut the run down; "
                "stopping (resume the run from the chief's last checkpoint)")
            return 1
        time.sleep(0.5)


# ---------------------------------------------------------------------------------------------
# --cluster local:N: one ps and N worker processes on this machine
# ---------------------------------------------------------------------------------------------

def without_flags(argv: list, flags: tuple) -> list:
    """argv with each of these flags (as "--flag VALUE" or "--flag=VALUE") taken out."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            skip = "=" not in arg
            continue
        kept.append(arg)
    return kept


def parent_death_signal(signum=signal.SIGTERM):
    """For a child, between fork and exec: signum when the launcher dies, even by SIGKILL
    (Linux's PR_SET_PDEATHSIG; elsewhere nothing). libc is loaded here, in the parent: a child
    of a threaded process must not load libraries."""
    if signum is None:
        return None
    try:
        import ctypes
        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, int(signum))


def launch_local(script: str, argv: list, workers: int, say, sync: bool = False) -> int:
    """Start a ps and `workers` worker processes of `script` on free 127.0.0.1 ports, each with
    argv (less --cluster) plus its place in the cluster; show the chief's output, report the
    others' ends; on Ctrl-C or SIGTERM stop the workers (the chief saves its checkpoint), then
    the ps. Returns the chief's exit status. No child outlives this process. A ps that fails
    stops the run (1) at once; so does a worker process with sync (--sync: every round needs
    it), joined or not, rather than after the chief's patience. The ports stay held
    (LoopbackPorts) until the launch ends, so none is taken before its task binds it."""
    with LoopbackPorts(1 + workers) as ports:
        spec = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
        return supervise_local(spec, [sys.executable, script, *without_flags(
            argv, ("--cluster", "--job", "--task")), "--cluster", json.dumps(spec)], say, sync)


def supervise_local(spec: dict, base: list, say, sync: bool) -> int:
    """launch_local's children (base + --job JOB --task I for each task of spec), until the
    chief ends."""
    workers = len(spec["worker"])
    children = {}  # (job, task) -> Popen
    # if the launcher dies, the workers stop (the chief saves its checkpoint) and the ps serves
    # them until the chief has shut the run down (run_ps)
    die_with_parent = {"worker": parent_death_signal(), "ps": parent_death_signal(LAUNCHER_GONE)}

    def start(job, task):
        quiet = not (job == "worker" and task == 0)  # one progress line: the chief's
        children[job, task] = subprocess.Popen(
            [*base, "--job", job, "--task", str(task)], start_new_session=True,
            stdout=subprocess.DEVNULL if quiet else None, preexec_fn=die_with_parent[job])

    stopping = []  # why: a signal's name, or a failed worker process of a --sync run

    def on_signal(signum, frame):
        stopping.append(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        start("ps", 0)
        for task in range(workers):
            start("worker", task)
        reported = set()
        stop_sent, failed = None, False
        while True:
            chief = children["worker", 0]
            if stopping and stop_sent is None:
                if not failed:
                    say(f"a3c.py: stopping the cluster ({stopping[0]}): the chief writes its "
                        f"checkpoint, then every process ends")
                for (job, task), child in children.items():
                    if job == "worker" and child.poll() is None:
                        child.send_signal(signal.SIGTERM)
                stop_sent = time.time()
            for key, child in children.items():
                if key != ("worker", 0) and key not in reported and child.poll() is not None:
                    reported.add(key)
                    if child.returncode != 0 and chief.poll() is None and not stopping:
                        # every process needs the ps; a --sync round needs every worker process
                        ends_run = key[0] == "ps" or sync
                        after = ("; the other workers go on" if not ends_run else
                                 f"; the {'run needs it' if key[0] == 'ps' else 'synchronous rounds need it'}"
                                 f": stopping the run (the chief writes its checkpoint if training "
                                 f"had begun; --resume RUN_DIR --cluster local:{workers} goes on "
                                 f"from there)")
                        say(f"a3c.py: {key[0]} process {key[1]} exited with status "
                            f"{child.returncode}{after}")
                        if ends_run:
                            failed = True
                            stopping.append(f"{key[0]} process {key[1]} failed")
            if chief.poll() is not None:  # a signal's death as the shell reports it
                code = chief.returncode
                if code not in (0, 1, 2, 130) and not (stopping and code == -signal.SIGTERM):
                    say(f"a3c.py: the chief (worker process 0) exited with status {code}; the run "
                        f"folder keeps its last checkpoint (--resume RUN_DIR --cluster local:{workers})")
                if failed:
                    return 1
                return 130 if stopping and code != 0 else (128 - code if code < 0 else code)
            if stop_sent is not None and time.time() - stop_sent > LAUNCHER_GRACE_S:
                say("a3c.py: the chief did not finish within "
                    f"{LAUNCHER_GRACE_S:.0f} s of the stop; killing the cluster")
                return 1 if failed else 130
            time.sleep(0.2)
    finally:
        stop_all(children, say)
        for s, handler in previous.items():
            signal.signal(s, handler)


def stop_all(children: dict, say) -> None:
    """Workers first (SIGTERM: a clean stop), the ps last (it serves their final pulls); what is
    still there after a grace period is killed."""
    for job in ("worker", "ps"):
        group = [c for (j, _), c in children.items() if j == job and c.poll() is None]
        if job == "ps":  # it ends by itself once the chief has shut the run down
            for child in group:
                try:
                    child.wait(3.0)
                except subprocess.TimeoutExpired:
                    pass
            group = [c for c in group if c.poll() is None]
        for child in group:
            try:
                child.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + (20.0 if job == "worker" else 5.0)
        for child in group:
            try:
                child.wait(max(deadline - time.time(), 0.1))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def become_launcher(script: str, argv: list, workers: int, sync: bool) -> None:
    """Replace this process, which has TensorFlow loaded (~600 MB) to check the command line, by
    the launcher, which needs none of it: same pid, so Ctrl-C and SIGTERM still reach it."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "--launch", str(workers),
                              "sync" if sync else "async", script, *argv])


if __name__ == "__main__" and len(sys.argv) >= 5 and sys.argv[1] == "--launch":
    sys.exit(launch_local(sys.argv[4], sys.argv[5:], int(sys.argv[2]),
                          lambda text: print(text, file=sys.stderr, flush=True),
                          sync=sys.argv[3] == "sync"))
