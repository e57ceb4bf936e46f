"""What a cluster costs: the trainer in one process against the same trainer on TensorFlow's
distributed runtime (1 ps + worker processes on loopback gRPC), on Pendulum-v1.

    python bench/cluster.py throughput --repeats 3   # one process vs local:1 vs local:2 (~8 min)
    python bench/cluster.py capacity                 # pushes/s one ps absorbs, 1-4 worker processes,
                                                     # and the same with the net on 2 ps tasks
    python bench/cluster.py learning --seeds 1 2 3   # local:2 to mean-100 -200 (~6 min)

Every run is a3c.py in processes of its own, started as a user would (`--cluster local:N`, or a
cluster file and one command per process where the ps is sharded). While it trains, this script
samples every process of the run from /proc twice a second: CPU time and resident memory.
Reported: env steps/s in the steady state (between the chief's progress lines from its 3rd
second on, so start-up is not in it), pushes/s (env steps per push: n_steps x envs per
worker), CPU utilisation of all the run's processes over that window (of the machine's cores),
the ps tasks' CPU seconds per push, and the peak of the run's total RSS. Writes
results/cluster_<mode>.md (and a plot) unless --no-save. Run it alone.
"""
from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import config as config_module  # noqa: E402  (plain Python: no TensorFlow in this process)
from console import OneLineParser  # noqa: E402

A3C = os.path.join(ROOT, "a3c.py")
ENV = "Pendulum-v1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
PROGRESS = re.compile(r"env steps\s+([\d,]+) .*\|\s+(\d+) s$")


def run_processes(marker: str) -> dict:
    """pid -> (role, cpu seconds, rss bytes) of every process whose command line holds marker."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\x00")
            if marker not in args:
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
        role = args[args.index("--job") + 1] if "--job" in args else "main"
        found[int(pid)] = (role, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, rss)
    return found


def sampled_run(commands: list, marker: str, cwd: str, seconds: float, budget_s: float) -> dict:
    """Start the commands (the first prints the progress lines), sample their processes until
    the first exits; return the steady-state figures."""
    errors = open(os.path.join(cwd, "stderr"), "w")
    procs = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.PIPE if i == 0 else subprocess.DEVNULL,
                              stderr=errors) for i, c in enumerate(commands)]
    os.set_blocking(procs[0].stdout.fileno(), False)
    lines, samples, text = [], [], ""
    start = time.time()
    try:
        while (procs[0].poll() is None and time.time() - start < budget_s
               and not (lines and lines[-1][2] - 3 >= seconds)):
            time.sleep(0.5)
            try:
                chunk = os.read(procs[0].stdout.fileno(), 1 << 20).decode(errors="replace")
            except BlockingIOError:
                chunk = ""
            text += chunk
            for line in chunk.splitlines():
                match = PROGRESS.search(line)
                if match:
                    lines.append((time.time(), int(match.group(1).replace(",", "")),
                                  int(match.group(2))))
            samples.append((time.time(), run_processes(marker)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
    steady = [line for line in lines if line[2] >= 3]
    if len(steady) < 2:
        with open(os.path.join(cwd, "stderr")) as f:
            raise SystemExit(f"too few progress lines: {text[-2000:]}\n{f.read()[-2000:]}")
    (t0, steps0, _), (t1, steps1, _) = steady[0], steady[-1]

    def cpu_at(when, role=None):
        t, processes = min(samples, key=lambda s: abs(s[0] - when))
        return sum(cpu for r, cpu, _ in processes.values() if role is None or r == role)
    return dict(steps_per_s=(steps1 - steps0) / (t1 - t0), window_s=t1 - t0,
                cpu_s=cpu_at(t1) - cpu_at(t0), ps_cpu_s=cpu_at(t1, "ps") - cpu_at(t0, "ps"),
                peak_rss=max(sum(rss for _, _, rss in p.values()) for _, p in samples))


def free_ports(count: int) -> list:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def commands_for(setting: dict, common: list, folder: str) -> list:
    """The command lines of one setting: one process, local:N, or a sharded cluster file."""
    python = sys.executable
    if setting["processes"] == 0:
        return [[python, A3C, *common]]
    if setting["ps"] == 1:
        return [[python, A3C, *common, "--cluster", f"local:{setting['processes']}"]]
    ports = free_ports(setting["ps"] + setting["processes"])
    spec = {"ps": [f"127.0.0.1:{p}" for p in ports[:setting["ps"]]],
            "worker": [f"127.0.0.1:{p}" for p in ports[setting["ps"]:]]}
    path = os.path.join(folder, "cluster.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    chief = [[python, A3C, *common, "--cluster", path, "--job", "worker", "--task", "0"]]
    others = [[python, A3C, *common, "--cluster", path, "--job", job, "--task", str(task)]
              for job in ("ps", "worker") for task in range(len(spec[job]))
              if (job, task) != ("worker", 0)]
    return chief + others


def describe(setting: dict) -> str:
    if setting["processes"] == 0:
        return "one process"
    return f"local:{setting['processes']}" if setting["ps"] == 1 else (
        f"{setting['ps']} ps + {setting['processes']} worker processes")


def run_config(sets: list):
    """The Pendulum preset with the runs' --set overrides: what the trainer runs with."""
    import dataclasses
    return dataclasses.replace(config_module.config_for(ENV), **config_module.parse_overrides(sets))


def measure(settings: list, workers: int, repeats: int, seconds: float, sets: list) -> list:
    cfg = run_config(sets)
    per_push = cfg.n_steps * cfg.envs_per_worker
    rows = []
    for setting in settings:
        runs = []
        for repeat in range(repeats):
            with tempfile.TemporaryDirectory() as folder:
                marker = os.path.join(folder, "results")
                common = ["--env", ENV, "--workers", str(workers), "--no-plot", "--results-dir", marker,
                          "--max-episodes", "0", "--max-steps", "100000000", "--set", "log_every_s=1",
                          "--set", "best_trial_episodes=0", *[a for s in sets for a in ("--set", s)]]
                figures = sampled_run(commands_for(setting, common, folder), marker, folder,
                                      seconds, seconds + 120)
            runs.append(figures)
            print(f"{describe(setting)} run {repeat + 1}: {figures['steps_per_s']:,.0f} env steps/s",
                  flush=True)
        median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        pushes = median["steps_per_s"] / per_push
        rows.append(dict(setting=describe(setting), runs=runs, **median, pushes_per_s=pushes,
                         ps_cpu_per_push_ms=1e3 * median["ps_cpu_s"] / max(pushes * median["window_s"], 1e-9),
                         cpu_share=median["cpu_s"] / median["window_s"] / os.cpu_count()))
    return rows


def table(rows: list, base: float) -> str:
    out = [f"| setting | env steps/s | min..max | × {rows[0]['setting']} | pushes/s | CPU | ps CPU ms / push "
           "| peak RSS MB (all processes) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        speeds = [run["steps_per_s"] for run in r["runs"]]
        out.append(f"| {r['setting']} | {r['steps_per_s']:,.0f} | {min(speeds):,.0f}..{max(speeds):,.0f} "
                   f"| {r['steps_per_s'] / base:.2f} | {r['pushes_per_s']:,.0f} | {r['cpu_share']:.0%} "
                   f"| {r['ps_cpu_per_push_ms']:.3f} | {r['peak_rss'] / 2**20:,.0f} |")
    return "\n".join(out)


def learning_run(seed: int, processes: int, workers: int, sets: list) -> dict:
    """One Pendulum run to its preset's budget (1,000 episodes): when its mean-100 first reached
    the target, in episodes and env steps, and where it ended."""
    import csv

    from targets import TARGETS
    target, budget = TARGETS[ENV]
    with tempfile.TemporaryDirectory() as folder:
        results = os.path.join(folder, "results")
        command = [sys.executable, A3C, "--env", ENV, "--workers", str(workers), "--seed", str(seed),
                   "--no-plot", "--results-dir", results, "--max-episodes", str(budget),
                   *[a for s in sets for a in ("--set", s)]]
        if processes:
            command += ["--cluster", f"local:{processes}"]
        started = time.time()
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
        [path] = [os.path.join(root, "episodes.csv") for root, _, files in os.walk(results)
                  if "episodes.csv" in files]
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    running = [float(r["running_return"]) for r in rows]
    reached = next((i for i, value in enumerate(running) if i >= 99 and value >= target), None)
    return dict(seed=seed, episodes=len(rows), wall_s=time.time() - started,
                reached_episode=None if reached is None else reached + 1,
                reached_steps=None if reached is None else int(rows[reached]["env_steps"]),
                final=running[-1], processes=sorted({r.get("process", "0") for r in rows}))


def learning(seeds: list, workers: int, sets: list) -> str:
    from targets import TARGETS
    target, budget = TARGETS[ENV]
    lines = ["| seed | setting | reached (episode / env steps) | final mean-100 | wall s (whole run) |",
             "| --- | --- | --- | --- | --- |"]
    ratios = []
    for seed in seeds:
        threaded = learning_run(seed, 0, 2 * workers, sets)
        cluster = learning_run(seed, 2, workers, sets)
        for name, run in ((f"one process, {2 * workers} threads", threaded),
                          (f"local:2, {workers} threads each", cluster)):
            reached = ("not reached" if run["reached_steps"] is None
                       else f"{run['reached_episode']:,} / {run['reached_steps']:,}")
            lines.append(f"| {seed} | {name} | {reached} | {run['final']:.1f} | {run['wall_s']:.0f} |")
            print(lines[-1], flush=True)
        if threaded["reached_steps"] and cluster["reached_steps"]:
            ratios.append(cluster["reached_steps"] / threaded["reached_steps"])
    summary = (f"\nEnv steps to the target, local:2 over one process: "
               + ", ".join(f"{r:.2f}" for r in ratios) + (f" (median {statistics.median(ratios):.2f})"
                                                           if ratios else "") + "\n")
    return (f"Target: mean-100 >= {target:.0f} within {budget:,} episodes; both settings run "
            f"{2 * workers} worker threads in all, seeds {', '.join(map(str, seeds))} side by side.\n\n"
            + "\n".join(lines) + "\n" + summary)


def main(argv=None) -> None:
    parser = OneLineParser(prog="bench/cluster.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["throughput", "capacity", "learning"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--workers", type=int, default=4, help="threads per process (default 4)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="training time per run")
    parser.add_argument("--set", action="append", default=[], help="config overrides for every run")
    parser.add_argument("--tag", default="")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    command = f"python bench/cluster.py {' '.join(sys.argv[1:] if argv is None else argv)}"
    if args.mode == "learning":
        text = f"# Cluster learning: {ENV}\n\n`{command}` on {os.cpu_count()} cores.\n\n"
        text += learning(args.seeds, args.workers, args.set)
        print(text)
        if not args.no_save:
            with open(os.path.join(ROOT, "results", f"cluster_learning{args.tag}.md"), "w") as f:
                f.write(text)
        return
    if args.mode == "throughput":
        settings = [dict(processes=0, ps=1), dict(processes=1, ps=1), dict(processes=2, ps=1)]
    else:
        settings = ([dict(processes=n, ps=1) for n in (1, 2, 3, 4)]
                    + [dict(processes=n, ps=2) for n in (2, 4)])
    rows = measure(settings, args.workers, args.repeats, args.seconds, args.set)
    base = rows[0]["steps_per_s"]
    cfg = run_config(args.set)
    text = (f"# Cluster {args.mode}: {ENV}\n\n`{command}`"
            f" on {os.cpu_count()} cores; {args.workers} worker threads per process, "
            f"{cfg.envs_per_worker} envs each, {cfg.n_steps} steps per rollout "
            f"({cfg.n_steps * cfg.envs_per_worker} env steps per push); best-agent trials off; "
            f"medians of {args.repeats} runs of ~{args.seconds:.0f} s, steady state "
            f"(from the chief's 3rd second).\n\n{table(rows, base)}\n")
    print(text)
    if not args.no_save:
        with open(os.path.join(ROOT, "results", f"cluster_{args.mode}{args.tag}.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
