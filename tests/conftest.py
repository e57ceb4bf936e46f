"""One process-wide TensorFlow import for the whole suite (importing it costs ~8 s)."""
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import a3c  # noqa: E402,F401  (first: TensorFlow is imported with the trainer's settings, oneDNN)
import envs  # noqa: E402,F401  (registers the A3CTest/* environments)
