"""How often a ps refuses a call as a repeat of an earlier one, and whether the cluster's sessions
survive it: a TensorFlow defect that ended 4 of 13 synchronous cluster runs before they sent
such calls again (see REPEATED_REQUEST in cluster.py).

    python bench/ps_repeats.py               # 150 s of calls (~700k here), writes results/ps_repeats.md
    python bench/ps_repeats.py --seconds 30 --no-save

One process starts a ps task on a loopback port and calls it through cluster.ps_session and
sessions.session_callable, as a worker process does: one op that adds 1 to a variable on the ps, as fast as it goes. Reported:
the calls made, how many the ps refused (each was sent again by the session), where the first
refusal came, and whether the variable ends equal to the number of calls, i.e. whether every
call took effect exactly once (none lost to a refusal, none applied twice). Run it alone.
"""
from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from console import OneLineParser  # noqa: E402  (the standard library only)


def main() -> None:
    parser = OneLineParser(prog="bench/ps_repeats.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()  # before TensorFlow's import, whose start-up lines would come first

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import sessions
    import cluster as cluster_module

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    with cluster_module.LoopbackPorts(1) as [port]:
        cluster = cluster_module.Cluster({"ps": [f"127.0.0.1:{port}"]}, "ps", 0)
        server = cluster_module.start_server(tf, cluster)
    graph = tf.Graph()
    with graph.as_default(), v1.device("/job:ps/task:0"):
        counter = v1.get_variable("calls", initializer=tf.constant(0, tf.int64))
        add = counter.assign_add(tf.constant(1, tf.int64)).op
    sess = cluster_module.ps_session(tf, cluster, graph)
    sess.run(counter.initializer)
    call = sessions.session_callable(sess, [add], [])  # as the trainer makes its calls to the ps

    calls, first_refusal = 0, None
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        call()
        calls += 1
        if first_refusal is None and cluster_module.Resends.count:
            first_refusal = calls
    seconds = time.perf_counter() - start
    applied = int(sess.run(counter))
    refused = cluster_module.Resends.count
    sess.close()
    del server

    rows = [("seconds", f"{seconds:.0f}"),
            ("calls", f"{calls:,}"),
            ("calls/s", f"{calls / seconds:,.0f}"),
            ("refused as repeats, each sent again", f"{refused}"),
            ("first refusal at call", "-" if first_refusal is None else f"{first_refusal:,}"),
            ("refused per 100k calls", f"{100_000 * refused / calls:.1f}"),
            ("variable at the end", f"{applied:,}"),
            ("every call applied exactly once", "yes" if applied == calls else "NO")]
    table = "\n".join(["| | |", "|---|---|"] + [f"| {name} | {value} |" for name, value in rows])
    print(table)
    if not args.no_save:
        path = os.path.join(ROOT, "results", "ps_repeats.md")
        with open(path, "w") as f:
            f.write("# Calls a ps refuses as repeats (TensorFlow "
                    f"{tf.__version__}), sent again by cluster.ps_session\n\n"
                    "Written by `python bench/ps_repeats.py` (one process, one ps task on "
                    f"loopback, one op per call, {os.cpu_count()} cores). Why they happen: "
                    "REPEATED_REQUEST in cluster.py.\n\n" + table + "\n")
        print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
