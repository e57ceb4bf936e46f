"""The study: synchronous vs asynchronous updates, 1 to 16 workers, lr / sqrt(workers), and
batched vs one env per worker, on Pendulum-v1 and CartPole-v1, checked here rather than repeated.

    python bench/study.py            # every setting, seeds 1-5: ~50 min on 2 cores
    python bench/study.py --quick    # every setting, one seed, short budgets: a ~4 min smoke run

Each run is the trainer with the env's default preset and the setting's overrides, one run at a
time (two at once on 2 cores measure each other), seed after seed with every setting of a seed
next to each other, so that a drift in the host's speed hits all settings alike. Seeds 1-5:
nothing was tuned on them. A run's budget is the target's episode budget (Pendulum -200 within
1,000 episodes, CartPole 475 within 1,500); CartPole's also stops at 150k env steps, so that the
study fits in an hour (the preset's seeds 1-9 reached 475 at 96k-141k; once the agent balances,
every episode is 500 steps, and the rest of 1,500 episodes would take 400k more). For the same
reason the runs play no best-agent trials (best_trial_episodes=0): they choose the checkpoint
--eval plays, not what is learned, and cost ~5-10% of the env steps/s.

Writes results/study.md (its tables and verdicts come from these runs, never typed by hand) and
results/study_<env>_<part>.png (the median mean-100 of each setting with its seeds' min..max,
against env steps and against wall seconds). --quick writes study_quick* instead.
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import a3c  # noqa: E402
import checkpoints  # noqa: E402
import runlog  # noqa: E402
import sessions  # noqa: E402
import config as config_module  # noqa: E402
from console import OneLineParser  # noqa: E402
from targets import TARGETS  # noqa: E402

ENVS = ("Pendulum-v1", "CartPole-v1")
SEEDS = (1, 2, 3, 4, 5)
CARTPOLE_STEPS = 150_000  # see above
OLD_CARTPOLE_TARGET = 195.0  # CartPole-v0's "solved", for the blog's claim
ABOUT_300 = 330  # "about 300 episodes": within a tenth


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    parts: tuple  # which of the study's questions it answers (1-4)
    workers: int
    envs: str  # "preset" (the preset's envs per worker), "same total", or a number
    sync: bool = False
    scale_lr: bool = False

    def overrides(self, preset) -> dict:
        if self.envs == "preset":
            envs = preset.envs_per_worker
        elif self.envs == "same total":  # the preset's 8 workers' envs, shared among these workers
            envs = max(1, preset.envs_per_worker * 8 // self.workers)
        else:
            envs = int(self.envs)
        return dict(workers=self.workers, envs_per_worker=envs, sync_updates=self.sync,
                    scale_lr_with_workers=self.scale_lr)


BASE = Setting("async, 8 workers (the preset)", (1, 2, 3, 4), 8, "preset")
SETTINGS = [
    BASE,
    Setting("sync, 8 workers", (1,), 8, "preset", sync=True),
    *[Setting(f"async, {w} workers, preset envs each", (2,), w, "preset") for w in (1, 2, 4, 16)],
    *[Setting(f"async, {w} workers, same total envs", (2,), w, "same total") for w in (1, 2, 4, 16)],
    *[Setting(f"async, {w} workers, lr / sqrt({w})", (3,), w, "preset", scale_lr=True)
      for w in (2, 8, 16)],
    Setting("async, 8 workers, 1 env each (classic)", (4,), 8, "1"),
]
PARTS = {1: "asynchronous vs synchronous updates, 8 workers",
         2: "1 to 16 workers",
         3: "learning rate fixed vs divided by sqrt(workers)",
         4: "one env per worker (classic A3C) vs the batched preset, 8 workers"}


def first_reach(rows: dict, target: float):
    """Index of the first episode whose full mean-100 window reached target, or None."""
    full = np.arange(len(rows["episode"])) >= runlog.RUNNING_WINDOW - 1
    hits = np.nonzero(full & (rows["running_return"] >= target))[0]
    return int(hits[0]) if len(hits) else None


def budget(env_id: str, quick: bool) -> dict:
    episodes = TARGETS[env_id][1] if not quick else {"Pendulum-v1": 200, "CartPole-v1": 300}[env_id]
    steps = None if env_id != "CartPole-v1" else (CARTPOLE_STEPS if not quick else 30_000)
    return dict(max_episodes=episodes, max_steps=steps)


def run_one(env_id: str, setting: Setting, seed: int, workdir: str, quick: bool) -> dict:
    preset = config_module.config_for(env_id, sync=setting.sync)  # --sync has its own values
    cfg = dataclasses.replace(preset, seed=seed, **budget(env_id, quick), **setting.overrides(preset),
                              best_trial_episodes=0)  # no best-agent trials: see the docstring
    summary = a3c.train(env_id, cfg, workdir, show_plot=False, out=io.StringIO())
    rows = runlog.read_episodes(os.path.join(summary["run_dir"], "episodes.csv"))
    target = TARGETS[env_id][0]
    result = dict(env=env_id, setting=setting.name, seed=seed, workers=cfg.workers,
                  envs_per_worker=cfg.envs_per_worker, steps_per_s=summary["steps_per_s"],
                  wall_s=summary["wall_s"], env_steps=summary["env_steps"],
                  episodes=summary["episodes"], final=float(rows["running_return"][-1]),
                  interrupted=summary["interrupted"], max_steps=cfg.max_steps,
                  curve=[rows[k].tolist() for k in ("env_steps", "wall_s", "running_return")])
    for name, level in (("hit", target), ("hit_old", OLD_CARTPOLE_TARGET)):
        hit = first_reach(rows, level)
        result[name] = None if hit is None else dict(
            episode=int(rows["episode"][hit]), env_steps=int(rows["env_steps"][hit]),
            wall_s=float(rows["wall_s"][hit]))
    return result


# --- the tables -----------------------------------------------------------------------------

def spread(values, spec="{:,.0f}") -> str:
    """median [min-max] of the seeds that reached the target."""
    if not values:
        return "never"
    return (f"{spec.format(np.median(values))} [{spec.format(min(values))}-"
            f"{spec.format(max(values))}]")


def legacy_cap(r: dict):
    """The step cap of a run saved before results recorded it (full budgets)."""
    return CARTPOLE_STEPS if r["env"] == "CartPole-v1" else None


def summarise(runs: list) -> dict:
    hits = [r["hit"] for r in runs if r["hit"] is not None]
    # misses that the env-step cap ended (before the episode budget ran out)
    capped = sum(r["hit"] is None and r.get("max_steps", legacy_cap(r)) is not None
                 and r["env_steps"] >= r.get("max_steps", legacy_cap(r)) for r in runs)
    return dict(reached=len(hits), seeds=len(runs), capped=capped,
                steps=[h["env_steps"] for h in hits], episodes=[h["episode"] for h in hits],
                wall=[h["wall_s"] for h in hits], final=float(np.median([r["final"] for r in runs])),
                speed=float(np.median([r["steps_per_s"] for r in runs])),
                old_episodes=[r["hit_old"]["episode"] for r in runs if r["hit_old"] is not None],
                # a seed that never reached it counts as infinitely late
                wall_or_never=float(np.median([math.inf if r["hit"] is None else r["hit"]["wall_s"]
                                               for r in runs])),
                steps_or_never=float(np.median([math.inf if r["hit"] is None else r["hit"]["env_steps"]
                                                for r in runs])))


def table(env_id: str, settings: list, by_setting: dict) -> str:
    lines = ["| setting | workers x envs | seeds that reached it | env steps to it | episodes to it | "
             "wall s to it | final mean-100 (median) | env steps/s (median) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for setting in settings:
        runs = by_setting[setting.name]
        s = summarise(runs)
        capped = f" ({s['capped']} cut by the step cap)" if s["capped"] else ""
        lines.append(f"| {setting.name} | {runs[0]['workers']} x {runs[0]['envs_per_worker']} | "
                     f"{s['reached']} of {s['seeds']}{capped} | {spread(s['steps'])} | "
                     f"{spread(s['episodes'])} | {spread(s['wall'], '{:.1f}')} | {s['final']:.1f} | "
                     f"{s['speed']:,.0f} |")
    return "\n".join(lines)


# --- the plots ------------------------------------------------------------------------------

def plot(env_id: str, settings: list, by_setting: dict, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, setting in enumerate(settings):
        runs = by_setting[setting.name]
        for ax, axis in zip(axes, (0, 1)):  # 0: env steps, 1: wall seconds
            end = min(r["curve"][axis][-1] for r in runs)
            grid = np.linspace(0, end, 200)
            curves = []
            for r in runs:
                x, y = np.array(r["curve"][axis]), np.array(r["curve"][2])
                full = np.arange(len(y)) >= runlog.RUNNING_WINDOW - 1
                curves.append(np.interp(grid, x[full], y[full], left=np.nan) if full.any()
                              else np.full_like(grid, np.nan))
            curves = np.array(curves)
            known = ~np.isnan(curves).any(axis=0)
            colour = colours[k % len(colours)]
            ax.plot(grid[known], np.median(curves[:, known], axis=0), color=colour, linewidth=1.8,
                    label=setting.name)
            ax.fill_between(grid[known], curves[:, known].min(0), curves[:, known].max(0),
                            color=colour, alpha=0.15)
    target = TARGETS[env_id][0]
    for ax, label in zip(axes, ("env steps", "wall seconds")):
        ax.axhline(target, color="black", linestyle="--", linewidth=0.8)
        ax.set_xlabel(label)
        ax.set_ylabel("mean-100 return (median; band: min..max over seeds)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{env_id}: {title}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# --- the verdicts ---------------------------------------------------------------------------

def fmt_wall(value: float) -> str:
    return "never (median)" if not math.isfinite(value) else f"{value:.1f} s"


def fmt_steps(value: float) -> str:
    return "never (median)" if not math.isfinite(value) else f"{value:,.0f}"


MARGIN = 0.1  # a difference in median env steps smaller than this is called noise


def better_than(a: dict, b: dict):
    """True if summary a learned clearly better than b, False if clearly worse, None if neither:
    more seeds reached the target, or as many in over MARGIN fewer median env steps."""
    if a["reached"] != b["reached"]:
        return a["reached"] > b["reached"]
    if not a["reached"]:
        return None
    ratio = a["steps_or_never"] / b["steps_or_never"]
    return True if ratio < 1 - MARGIN else False if ratio > 1 + MARGIN else None


def verdicts(results: list) -> str:
    def runs(env_id, setting):
        return [r for r in results if r["env"] == env_id and r["setting"] == setting.name]

    def find(**fields):
        return next(s for s in SETTINGS if all(getattr(s, k) == v for k, v in fields.items()))

    out = []
    # 1. "A3C with 8 threads solves CartPole in about 300 episodes"
    cart = [(setting, summarise(runs("CartPole-v1", setting)))
            for setting in (BASE, find(workers=8, envs="1"))]
    lines = []
    for setting, s in cart:
        old = spread(s["old_episodes"]) if s["old_episodes"] else "never"
        lines.append(f"{setting.name}: mean-100 >= 195 (v0's \"solved\") at episode {old} "
                     f"({len(s['old_episodes'])} of {s['seeds']} seeds), >= 475 (v1's) at "
                     f"{spread(s['episodes'])} ({s['reached']} of {s['seeds']})")
    holds = [f"{setting.name} at {level}" for setting, s in cart
             for level, episodes in ((195, s["old_episodes"]), (475, s["episodes"]))
             if len(episodes) == s["seeds"] and np.median(episodes) <= ABOUT_300]
    out.append("**\"A3C with 8 threads solves CartPole in about 300 episodes.\"** "
               + "; ".join(lines) + ". "
               + (f"It holds (median at most {ABOUT_300} episodes, every seed there) for "
                  + " and ".join(holds) + " only." if holds else
                  f"It holds at neither threshold here: no median is at most {ABOUT_300} episodes "
                  f"with every seed there."))

    # 2. lr / sqrt(N)
    lines, helps, hurts = [], [], []
    for env_id in ENVS:
        for w in (2, 8, 16):
            fixed = summarise(runs(env_id, BASE if w == 8 else find(workers=w, envs="preset",
                                                                      scale_lr=False, sync=False)))
            scaled = summarise(runs(env_id, find(workers=w, scale_lr=True)))
            lines.append(f"{env_id} at {w} workers: reached on {fixed['reached']} / "
                         f"{scaled['reached']} of {fixed['seeds']} seeds, median env steps to it "
                         "(over all seeds, a miss counted as never) "
                         f"{fmt_steps(fixed['steps_or_never'])} / {fmt_steps(scaled['steps_or_never'])}, "
                         f"final mean-100 {fixed['final']:.0f} / {scaled['final']:.0f}")
            where = f"{env_id} at {w}"
            better = better_than(scaled, fixed)
            if better is not None:
                (helps if better else hurts).append(where)
    out.append("**\"More threads need a smaller learning rate: lr = base / sqrt(N).\"** "
               "(each pair: fixed / divided) " + "; ".join(lines) + ". Dividing did better "
               f"(more seeds reached the target, or as many in over {MARGIN:.0%} fewer median env "
               "steps) at: " + (", ".join(helps) or "none") + "; worse at: "
               + (", ".join(hurts) or "none") + "; elsewhere no clear difference. (The presets' "
               "rates were tuned at 8 workers.)")

    # 3. async vs sync in wall time
    lines = []
    for env_id in ENVS:
        a, s = (summarise(runs(env_id, x)) for x in (BASE, find(sync=True)))
        lines.append(f"{env_id}: async {fmt_wall(a['wall_or_never'])} ({a['reached']} of "
                     f"{a['seeds']} seeds, {a['speed']:,.0f} env steps/s), sync "
                     f"{fmt_wall(s['wall_or_never'])} ({s['reached']} of {s['seeds']}, "
                     f"{s['speed']:,.0f} env steps/s); env steps to it "
                     f"{fmt_steps(a['steps_or_never'])} and {fmt_steps(s['steps_or_never'])}")
    sooner = [env_id for env_id in ENVS
              if summarise(runs(env_id, BASE))["wall_or_never"]
              < (1 - MARGIN) * summarise(runs(env_id, find(sync=True)))["wall_or_never"]]
    alike = []
    for env_id in ENVS:  # the same batching on both sides: one env per worker
        a, s = (summarise(runs(env_id, x)) for x in (find(workers=8, envs="1"), find(sync=True)))
        alike.append(f"{env_id}: async {fmt_wall(a['wall_or_never'])} ({a['reached']} of "
                     f"{a['seeds']} seeds, {a['speed']:,.0f} env steps/s), sync "
                     f"{fmt_wall(s['wall_or_never'])} ({s['reached']} of {s['seeds']}, "
                     f"{s['speed']:,.0f} env steps/s)")
    out.append("**\"Asynchronous updates reach a given score sooner in wall time than synchronous "
               "ones.\"** Median wall seconds to the target over all seeds (a miss counted as "
               "never), 8 workers, each mode with its preset: " + "; ".join(lines) + ". "
               f"Async was sooner by over {MARGIN:.0%} on {' and '.join(sooner) or 'neither env'}"
               f"{'' if len(sooner) == len(ENVS) else ' only' if sooner else ''}. With the same "
               "batching on both sides (one env per worker: async's classic setting against "
               "sync's preset): " + "; ".join(alike) + ".")

    # 4. more threads, faster in wall time?
    lines = []
    for env_id in ENVS:
        for envs, label in (("preset", "the preset's envs each"), ("same total", "the same total envs")):
            cells, walls = [], {}
            for w in (1, 2, 4, 8, 16):
                setting = BASE if w == 8 else find(workers=w, envs=envs, scale_lr=False, sync=False)
                s = summarise(runs(env_id, setting))
                walls[w] = s["wall_or_never"]
                cells.append(f"{w}: {fmt_wall(s['wall_or_never'])} at {s['speed']:,.0f} env steps/s")
            fastest = min(walls, key=walls.get)
            close = [w for w in walls if walls[w] <= (1 + MARGIN) * walls[fastest]]
            verdict = ("no median reached it" if not math.isfinite(walls[fastest]) else
                       f"fastest at {fastest} worker{'s' if fastest > 1 else ''}" if len(close) == 1
                       else f"within {MARGIN:.0%} of the fastest at {', '.join(map(str, close))} "
                            f"workers")
            lines.append(f"{env_id}, {label} ({', '.join(cells)}): {verdict}")
    out.append("**\"More threads learn faster in wall time.\"** Median wall seconds to the target "
               "by workers (over all seeds, a miss counted as never): " + "; ".join(lines) + ".")
    return "\n\n".join(out)


def main(argv=None) -> int:
    parser = OneLineParser(prog="bench/study.py", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--quick", action="store_true", help="one seed, short budgets (~5 min)")
    parser.add_argument("--seeds", nargs="+", type=int, help=f"default {' '.join(map(str, SEEDS))}")
    parser.add_argument("--out", default="results")
    parser.add_argument("--report-only", action="store_true", help="write the report again from "
                        "the runs the last study saved (<out>/<name>_runs/runs.json), running nothing")
    args = parser.parse_args(argv)
    seeds = args.seeds or ([1] if args.quick else list(SEEDS))
    name = "study_quick" if args.quick else "study"
    saved = os.path.join(args.out, f"{name}_runs", "runs.json")  # a folder: git ignores it
    if args.report_only:
        with open(saved) as f:
            record = json.load(f)
        results, elapsed, command = record["results"], record["elapsed_s"], record["command"]
        seeds = sorted({r["seed"] for r in results})
    else:
        command = " ".join(["python bench/study.py"] + (argv if argv is not None else sys.argv[1:]))
        os.makedirs(os.path.dirname(saved), exist_ok=True)
        results, elapsed = run_all(seeds, args.quick, lambda record: save(saved, command, *record))
    write_report(results, elapsed, command, seeds, args.quick, args.out, name)
    return 0


def save(path: str, command: str, results: list, elapsed: float) -> None:
    """The runs so far, replaced whole after every run (a study cut short keeps what it ran)."""
    with open(path + ".partial", "w") as f:
        json.dump({"command": command, "elapsed_s": elapsed, "results": results}, f)
    os.replace(path + ".partial", path)


def run_all(seeds: list, quick: bool, keep) -> tuple:
    """(every run's result, the seconds they took); keep((results, seconds)) after each run."""
    started = time.time()
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for env_id in ENVS:
            for seed in seeds:
                for setting in SETTINGS:
                    r = run_one(env_id, setting, seed, workdir, quick)
                    if r["interrupted"]:  # a Ctrl-C ends the study; the runs before it are kept
                        raise KeyboardInterrupt
                    results.append(r)
                    keep((results, time.time() - started))
                    hit = r["hit"]
                    print(f"{env_id} seed {seed} {setting.name}: "
                          + ("never reached" if hit is None else
                             f"reached at episode {hit['episode']}, {hit['env_steps']:,} env steps, "
                             f"{hit['wall_s']:.1f} s")
                          + f"; final {r['final']:.1f}; {r['steps_per_s']:,.0f} steps/s; "
                          f"{r['wall_s']:.0f} s", flush=True)
    return results, time.time() - started


def write_report(results: list, elapsed: float, command: str, seeds: list, quick: bool, out: str,
                 name: str) -> None:
    os.makedirs(out, exist_ok=True)
    text = [f"# The study: A3C and A2C, 1 to 16 workers, lr / sqrt(N), batching", "",
            f"`{command}`: {len(results)} runs, {elapsed / 60:.0f} minutes on this machine "
            f"({os.cpu_count()} CPUs); seeds {', '.join(map(str, seeds))} (nothing was tuned on "
            f"them); versions {sessions.versions()}.", "",
            "Every run is `a3c.py` with the env's preset and the setting's overrides. Budgets: "
            + "; ".join(f"{env_id} {b['max_episodes']:,} episodes"
                        + (f" or {b['max_steps']:,} env steps" if b["max_steps"] else "")
                        for env_id, b in ((e, budget(e, quick)) for e in ENVS))
            + ". Targets: mean-100 " + ", ".join(f"{e} {TARGETS[e][0]:g}" for e in ENVS)
            + ". The sync setting adds the env's --sync values (config.py's SYNC_PRESETS: "
            + "; ".join(f"{e} {config_module.SYNC_PRESETS.get(e, {})}" for e in ENVS)
            + "). A run that CartPole's step cap ended before its episode budget, short of the "
            "target, counts as not reaching it; the tables say how many were cut so. "
            "Columns to the target are median [min-max] over the seeds that reached it; "
            "\"same total envs\" shares the preset's 8 workers' envs among the workers, \"preset "
            "envs each\" gives every worker the preset's number.", ""]
    text += ["## Verdicts", "", verdicts(results), ""]
    for env_id in ENVS:
        by_setting = {s.name: [r for r in results if r["env"] == env_id and r["setting"] == s.name]
                      for s in SETTINGS}
        text += [f"## {env_id}", ""]
        for part, title in PARTS.items():
            settings = [s for s in SETTINGS if part in s.parts]
            png = f"{name}_{checkpoints.file_name(env_id)}_{part}.png"
            plot(env_id, settings, by_setting, os.path.join(out, png), title)
            text += [f"### {part}. {title}", "", table(env_id, settings, by_setting), "",
                     f"![{env_id}: {title}]({png})", ""]
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write("\n".join(text))
    print(f"wrote {os.path.join(out, name + '.md')}; the runs took {elapsed / 60:.1f} min")


if __name__ == "__main__":
    sys.exit(main())
