"""One process-wide TensorFlow import for the whole suite (importing it costs ~8 s)."""
import os
import signal
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the benchmark scripts some tests drive; last, as bench/cluster.py must not hide cluster.py
sys.path.append(os.path.join(ROOT, "bench"))


def take_back_ctrl_c() -> None:
    """A non-interactive shell's `cmd &` (a script, `bash -c`, some CI runners) starts pytest with
    SIGINT ignored, and the runs the tests spawn would inherit that, so the Ctrl-C tests could not
    stop them. A handled SIGINT is reset to its default in a child, an ignored one is not: handle
    it here."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


take_back_ctrl_c()

import a3c  # noqa: E402,F401  (first: TensorFlow is imported with the trainer's settings, oneDNN)
import envs  # noqa: E402,F401  (registers the A3CTest/* environments)

# CPU-s each module took in the two-process run (processes it started included), 2026-12-02:
# the README's command hands whole modules out in this order (--no-loadscope-reorder), the
# dearest first, so that the two pytest processes end together. A module not listed goes last.
DEAREST_FIRST = ["test_checkpoints",   # 176
                 "test_cluster",       # 145
                 "test_cluster_sync",  # 113
                 "test_atari",         # 61
                 "test_mujoco",        # (new; about 60)
                 "test_sync",          # 45
                 "test_training",      # 38
                 "test_graph",         # 17
                 "test_lstm",          # 16
                 "test_vectorised"]    # 6


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.stem
        return DEAREST_FIRST.index(name) if name in DEAREST_FIRST else len(DEAREST_FIRST)
    items.sort(key=rank)  # (stable: a module's own order stays)
