"""TensorFlow in graph mode: its quiet import, the sessions' settings, and the C++ callables that
every hot session call goes through (session_callable)."""
from __future__ import annotations

import os
import sys
import threading
import typing

import gymnasium as gym
import numpy as np

from cpus import CpuLayout


KERAS_LOADED_BY_TENSORFLOW = ("keras.src.optimizers", "tf_keras.src.optimizers")  # (Keras 3, 2)


def import_tensorflow_quietly():
    """Import TensorFlow without its C++ start-up lines (oneDNN, CUDA probing): they are written
    to stderr before any logging setting applies, so stderr is silenced for the import alone.

    oneDNN's CPU kernels are asked for (pip's TensorFlow turns them on by itself only on CPUs
    with AVX-512, AVX-VNNI or AMX): they made the Atari CNN's convolutions about twice as fast
    (docs/implementation.md); TF_ENABLE_ONEDNN_OPTS=0 turns them off. Where TensorFlow was imported
    first, its kernels are already chosen and nothing is changed.

    TensorFlow's import also loads Keras's optimizers eagerly (for SavedModel), which a3c never
    uses; it costs every process a run or the tests start (results/overheads.md). TensorFlow
    skips that load when the module cannot be imported, so it is marked unimportable for the
    import alone: Keras imports as usual afterwards, should anything want it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    skipped = []
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
        skipped = [name for name in KERAS_LOADED_BY_TENSORFLOW if name not in sys.modules]
    if sys.stderr is not None:
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # started with stderr closed (2>&-): the next file opened would become fd 2
        # and take every message TensorFlow's C++ writes there, so /dev/null holds fd 2 for good
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        sys.modules.update(dict.fromkeys(skipped))  # (None there: "cannot be imported")
        import tensorflow
    finally:
        for name in skipped:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
        os.dup2(saved, 2)
        os.close(saved)
    return tensorflow


tf = import_tensorflow_quietly()
tf.compat.v1.disable_eager_execution()
tf.get_logger().setLevel("ERROR")  # compat.v1 deprecation notices
v1 = tf.compat.v1
try:  # the options of the C++ callable beneath Session.make_callable (see session_callable)
    from tensorflow.core.protobuf.config_pb2 import CallableOptions
except ImportError:
    CallableOptions = None


def session_callable(sess, fetches: list, feeds: list):
    """A function of the feeds' values (NumPy arrays of exactly the placeholders' dtypes) that
    runs `fetches` in one session call and returns the values of the tensors among them.

    Session.make_callable hands every call that has feeds to Session.run, whose Python feed and
    fetch handling costs more than these graphs' ops and holds the GIL throughout. The C++
    callable beneath it (Session._make_callable_from_options) costs a small fraction of that and
    releases the GIL while the ops run, so worker threads overlap (docs/implementation.md). A
    TensorFlow without it gets make_callable: same results, slower.
    """
    tensors = [f for f in fetches if isinstance(f, tf.Tensor)]
    operations = [f for f in fetches if isinstance(f, tf.Operation)]
    make_from_options = getattr(sess, "_make_callable_from_options", None)
    if CallableOptions is None or make_from_options is None:
        slow = sess.make_callable(tensors + operations, feed_list=feeds)
        return lambda *values: slow(*values)[:len(tensors)]
    return make_from_options(CallableOptions(feed=[t.name for t in feeds],
                                             fetch=[t.name for t in tensors],
                                             target=[op.name for op in operations]))


def session_config(op_threads: int):
    """Grappler's graph rewrites are off: on these tiny graphs they cost more per call than they
    save, and memory. One thread per op: the graphs are too small to share out. op_threads < 0
    runs each call's ops in the thread that made it; > 0 gives the session its own pool.

    No GPU, even where TensorFlow has one (pip's `tensorflow` on Linux is a CUDA build): this
    trainer is CPU by design (a GPU would only add a copy to every tiny call), and a session
    that sees a GPU places what has no device of its own there and reserves most of its memory."""
    config = v1.ConfigProto(intra_op_parallelism_threads=1,
                            inter_op_parallelism_threads=op_threads,
                            use_per_session_threads=op_threads > 0,
                            device_count={"GPU": 0})
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def open_session(graph, layout: typing.Optional[CpuLayout]) -> "v1.Session":
    """A session running its ops in the calling thread (layout None), or in a pool of one thread
    per TensorFlow CPU of the layout, pinned there."""
    if layout is None:
        return v1.Session(graph=graph, config=session_config(-1))
    everywhere = os.sched_getaffinity(0)
    os.sched_setaffinity(0, layout.ops)  # the pool's threads start now and inherit these CPUs
    try:
        return v1.Session(graph=graph, config=session_config(len(layout.ops)))
    finally:
        os.sched_setaffinity(0, everywhere)


def close_remote_session(sess) -> None:
    """Close a session with the ps tasks; when they are gone, closing can wait on gRPC for good,
    so give up after a few seconds (the process is ending; leave() then exits at once)."""
    closing = threading.Thread(target=sess.close, name="close_remote", daemon=True)
    closing.start()
    closing.join(5.0)


def versions() -> dict:
    return {"python": sys.version.split()[0], "tensorflow": tf.__version__,
            "gymnasium": gym.__version__, "numpy": np.__version__}
