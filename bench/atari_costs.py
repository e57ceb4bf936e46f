"""Where an Atari agent step's CPU time goes, and the ceiling that puts on the trainer's speed.

    python bench/atari_costs.py          # Pong, the preset; ~3 minutes; writes results/atari_costs.md
    python bench/atari_costs.py --envs-per-worker 8 32 --no-save   # ~8 minutes

One worker of the Atari preset runs in this process's main thread, alone, as Worker.work runs
it (rollout, then the push that also pulls and picks the next actions; not the episode
bookkeeping), and each part of that loop is also timed on its own: the ale-py vector env's step (its games on one C++ thread, a
fixed action), the act call, and the update call. Each figure is CPU time per agent step (one
game's step, 4 frames), process CPU seconds over the steps made, so that it also counts any
thread that spins while it waits. Then the trainer itself (8 workers, the preset without
best-agent trials, which the loop does not have) runs in a fresh process (bench/throughput.py's
measure: its steady-state rate; its CPU utilisation is the whole run's).

If every core did nothing but this loop's work, N cores would run N / (CPU time per agent step)
agent steps/s: that is the ceiling the trainer is compared with. Run it alone.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # bench/ is on the path already, as this script's folder

import config as config_module  # noqa: E402
from console import OneLineParser  # noqa: E402
import throughput  # noqa: E402  (its measure(): the trainer in a fresh process)

ENV_ID = "ALE/Pong-v5"
FRAMES_PER_STEP = 4


def cpu_per_call(call, calls: int) -> float:
    """Process CPU seconds per call of call(), after two warm-up calls."""
    call()
    call()
    start = time.process_time()
    for _ in range(calls):
        call()
    return (time.process_time() - start) / calls


def loop_costs(envs_per_worker: int, rollouts: int) -> dict:
    """CPU microseconds per agent step of one preset worker's loop and of its parts."""
    import numpy as np

    import a3c
    import environments
    import sessions

    cfg = dataclasses.replace(config_module.config_for(ENV_ID), workers=1,
                              envs_per_worker=envs_per_worker)
    T, E = cfg.n_steps, envs_per_worker
    spec = environments.probe_spec(ENV_ID, cfg)
    graph = sessions.tf.Graph()
    with graph.as_default():
        _, (net,) = a3c.build_graph(spec, cfg)
        init = sessions.v1.global_variables_initializer()
    sess = sessions.open_session(graph, None)  # the preset runs unpinned: ops in the calling thread
    sess.run(init)
    worker = a3c.Worker(0, net, ENV_ID, spec, cfg)
    worker.prepare(sess, seed=1)
    try:
        def one_rollout():
            worker.rollout()
            worker.push_and_pull(1.0)

        loop = cpu_per_call(one_rollout, rollouts) / (T * E)
        actions = np.zeros(E, np.int32)
        env = cpu_per_call(lambda: worker.envs.step(actions), rollouts * T) / E
        obs = worker.obs.copy()
        act = cpu_per_call(lambda: worker.act(obs, *worker.state, *worker.act_schedule),
                           rollouts * T) / E
        update = cpu_per_call(lambda: worker.push_and_pull(1.0), rollouts) / (T * E)
    finally:
        worker.close()
        sess.close()
    # per agent step: T env steps and T - 1 act calls per rollout (the update call picks the
    # first step's actions), and one update call
    parts = dict(env=env, act=act * (T - 1) / T, update=update)
    return dict(envs_per_worker=E, n_steps=T, loop=loop * 1e6,
                **{name: value * 1e6 for name, value in parts.items()},
                rest=(loop - sum(parts.values())) * 1e6)


def main() -> None:
    parser = OneLineParser(prog="bench/atari_costs.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs-per-worker", nargs="+", type=int, default=[8])
    parser.add_argument("--rollouts", type=int, default=60)
    parser.add_argument("--trainer-workers", type=int, default=8)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    commit = throughput.git_commit()  # the code about to be timed

    rows = []
    for envs_per_worker in args.envs_per_worker:
        costs = loop_costs(envs_per_worker, args.rollouts)
        ceiling = cores * 1e6 / costs["loop"]
        trainer = throughput.measure(ENV_ID, args.trainer_workers, envs_per_worker,
                                     throughput.steps_for(ENV_ID, args.trainer_workers,
                                                          envs_per_worker), 1,
                                     ["best_trial_episodes=0"])
        rows.append(dict(costs, ceiling=ceiling, trainer=trainer["steps_per_s"],
                         cpu=trainer["cpu"]))
        print(rows[-1], flush=True)

    header = ("| games per worker | n_steps | env step | act | update | the rest (Python, interleaving) | "
              f"one worker's loop | ceiling on {cores} cores: frames/s | trainer "
              f"({args.trainer_workers} workers): frames/s | trainer / ceiling | trainer CPU (whole run) |")
    lines = [header, "|" + " --- |" * (header.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['envs_per_worker']} | {r['n_steps']} | {r['env']:.0f} | {r['act']:.0f} | "
            f"{r['update']:.0f} | {r['rest']:.0f} | {r['loop']:.0f} | "
            f"{FRAMES_PER_STEP * r['ceiling']:,.0f} | {FRAMES_PER_STEP * r['trainer']:,.0f} | "
            f"{r['trainer'] / r['ceiling']:.2f} | {r['cpu']:.0%} |")
    table = "\n".join(lines)
    print(table)
    if not args.no_save:
        throughput.save_results(
            "atari_costs", "Where an Atari agent step's CPU time goes (Pong, the preset)", commit,
            table, about="CPU microseconds per agent step (one game's step, 4 frames), one worker's "
                  "loop in one thread, alone: its env step (ale-py's vector env, its games on "
                  "one C++ thread), its act calls, its update call (push, pull and the next "
                  "actions), and what the loop costs beyond them (Python, and the parts "
                  "slowing each other when interleaved). The ceiling: every core running "
                  "nothing but this loop. The trainer: the preset without best-agent trials, "
                  "one run in a fresh process right after, its steady-state rate.\n\n")


if __name__ == "__main__":
    main()
