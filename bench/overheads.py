"""Two fixed costs a user pays outside the training loop: starting a process, and --record.

    python bench/overheads.py            # ~2 minutes; writes results/overheads.md
    python bench/overheads.py --repeats 3 --no-save

Start: the CPU time of `import a3c` in a fresh process, as a3c.py imports TensorFlow (its eager
load of Keras skipped) beside TensorFlow imported first, which a3c then leaves as it is (Keras
loaded): the two interleaved, --repeats of each, medians. Every process a run starts pays it: a
cluster's, and the ~40 the tests start.

--record: the CPU time per frame of writing a CartPole episode's frames to a GIF, with PIL's
default reduction of each RGB frame to 256 colours (median cut) and with the fast octree that
save_animation uses, on the same frames.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import throughput  # noqa: E402  (git_commit, save_results)
from console import OneLineParser  # noqa: E402

TIMED_IMPORT = ("import time; started = time.process_time(); {before}import a3c; "
                "import sys; print(time.process_time() - started, 'keras' in sys.modules)")
STARTS = {"a3c.py imports TensorFlow (Keras skipped)": "",
          "TensorFlow imported first (Keras loaded)": "import tensorflow; "}


def start_cpu(before: str) -> tuple[float, bool]:
    """CPU seconds of `import a3c` in a fresh process (and whether Keras got loaded)."""
    out = subprocess.run([sys.executable, "-c", TIMED_IMPORT.format(before=before)], cwd=ROOT,
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": ROOT}).stdout.split()
    return float(out[-2]), out[-1] == "True"


def gif_cpu_per_frame(frames: int) -> dict:
    """CPU milliseconds per frame of a GIF of `frames` CartPole frames, each reduction."""
    import gymnasium as gym
    import numpy as np
    from PIL import Image

    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env.reset(seed=0)
    drawn = []
    for step in range(frames):
        drawn.append(np.asarray(env.render()))
        _, _, terminated, truncated, _ = env.step(step % 2)
        if terminated or truncated:
            env.reset()
    env.close()
    reductions = {"median cut (PIL's default)": lambda frame: Image.fromarray(frame),
                  "fast octree (save_animation)": lambda frame: Image.fromarray(frame).quantize(
                      method=Image.Quantize.FASTOCTREE)}
    costs = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, reduce in reductions.items():
            started = time.process_time()
            images = [reduce(frame) for frame in drawn]
            images[0].save(os.path.join(folder, "episode.gif"), format="GIF", save_all=True,
                           append_images=images[1:], duration=33, loop=0)
            costs[name] = (time.process_time() - started) / frames * 1e3
    return costs


def main() -> None:
    parser = OneLineParser(prog="bench/overheads.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    commit = throughput.git_commit()

    starts = {name: [] for name in STARTS}
    keras = {}
    for _ in range(args.repeats):  # interleaved: a slower spell of the host hits both
        for name, before in STARTS.items():
            cpu, keras[name] = start_cpu(before)
            starts[name].append(cpu)
            print(f"{name}: {cpu:.2f} CPU-s", flush=True)
    gif = gif_cpu_per_frame(args.frames)

    lines = ["| start of a process | `import a3c`: CPU-s, median | min..max | Keras loaded |",
             "| --- | --- | --- | --- |"]
    for name, values in starts.items():
        lines.append(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f}.."
                     f"{max(values):.2f} | {'yes' if keras[name] else 'no'} |")
    lines += ["", "| --record: each RGB frame to 256 colours | CPU ms per frame | a 500-step "
              "episode: s |", "| --- | --- | --- |"]
    for name, ms in gif.items():
        lines.append(f"| {name} | {ms:.1f} | {ms * 500 / 1e3:.1f} |")
    table = "\n".join(lines)
    print(table)
    if not args.no_save:
        throughput.save_results(
            "overheads", "Fixed costs outside the training loop: a process's start, --record",
            commit, table, setting=f", {args.repeats} fresh processes of each start "
            f"(interleaved), {args.frames} CartPole frames (600x400) per GIF")


if __name__ == "__main__":
    main()
