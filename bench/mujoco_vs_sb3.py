"""MuJoCo side by side: our runs beside Stable-Baselines3's A2C (bench/sb3_a2c.py --mujoco), per
env and seed, at equal env steps (1M) and at equal wall time.

    python bench/sb3_a2c.py --mujoco --jobs 2          # in the SB3 environment: its json
    python bench/learning.py --envs HalfCheetah-v5 Hopper-v5 Walker2d-v5 --seeds 1 2 3 \\
        --name mujoco --keep-runs RUNS                  # our 1M-step runs, kept
    python a3c.py --env HalfCheetah-v5 --seed 3 --max-steps 6000000 --results-dir LONGER
    python bench/mujoco_vs_sb3.py --runs RUNS LONGER

Reads the run folders under --runs (any depth; only runs with the env's preset, whatever their
seed and budget) and results/sb3_a2c_mujoco.json, plays the deterministic policy of each run's
best and final checkpoints over 20 episodes (a3c.py --eval), and writes
results/mujoco_vs_sb3.md unless --no-save. "At equal wall time" is, per env and seed, the run of
ours with the most env steps whose wall time is within SB3's for its steps. SB3's A2C steps one
env on one core (more cores do not make it faster); ours uses both.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import a3c  # noqa: E402
import config as config_module  # noqa: E402
import runlog  # noqa: E402
from console import OneLineParser, UsageError  # noqa: E402

EVAL_EPISODES = 20
# what a run may change and still be the preset's: its seed, budget and bookkeeping
FREE_FIELDS = {"seed", "max_steps", "max_episodes", "log_every_s", "checkpoint_every_s",
               "best_checkpoint_every_s", "keep_checkpoints"}
LSTM_FIELDS = {"lstm_units", "lstm_input_hidden"}  # nothing without use_lstm


def with_the_preset(env_id: str, saved: dict) -> bool:
    preset = dataclasses.asdict(config_module.config_for(env_id))
    free = FREE_FIELDS | (set() if preset["use_lstm"] else LSTM_FIELDS)
    return all(json.loads(json.dumps(value)) == saved.get(key)
               for key, value in preset.items() if key not in free)


def our_runs(roots: list[str]) -> list[dict]:
    """Every run folder under the roots made with its env's preset: env, seed, env steps, wall
    seconds."""
    runs = []
    for root in roots:
        for folder, _, files in os.walk(root):
            if "config.json" not in files or "episodes.csv" not in files:
                continue
            try:
                with open(os.path.join(folder, "config.json")) as f:
                    saved = json.load(f)
                rows = runlog.read_episodes(os.path.join(folder, "episodes.csv"))
                if not len(rows["episode"]):
                    continue
                if not with_the_preset(saved["env"], saved["config"]):
                    print(f"mujoco_vs_sb3.py: left out {folder}: not run with {saved['env']}'s "
                          f"preset as config.py has it now", file=sys.stderr)
                    continue
            except (OSError, ValueError, KeyError, TypeError) as exc:
                print(f"mujoco_vs_sb3.py: left out {folder}: {exc!r}", file=sys.stderr)
                continue
            runs.append(dict(dir=folder, env=saved["env"], seed=saved["config"]["seed"],
                             env_steps=int(rows["env_steps"][-1]), wall_s=float(rows["wall_s"][-1]),
                             last_100=float(rows["running_return"][-1])))
    return runs


def play(run, checkpoint: str):
    """The mean return of a run's checkpoint over EVAL_EPISODES, or None (no run, or it cannot
    be played: said on stderr)."""
    if run is None:
        return None
    try:
        return a3c.evaluate(run["dir"], episodes=EVAL_EPISODES, checkpoint=checkpoint,
                            out=io.StringIO())["mean"]
    except UsageError as exc:
        print(f"mujoco_vs_sb3.py: {run['dir']}: {exc}", file=sys.stderr)
        return None


CHECKPOINTS = ("best", "latest")


def scores_of(run) -> dict:
    """play() of a run's best and final checkpoints (None each for no run)."""
    return {checkpoint: play(run, checkpoint) for checkpoint in CHECKPOINTS}


def the_one(runs: list[dict], what: str):
    """The one run of a selection, None for none; several: refused, naming them."""
    if len(runs) > 1:
        raise UsageError(f"{len(runs)} runs are {what}: {', '.join(r['dir'] for r in runs)}; "
                         f"give --runs folders that hold one")
    return runs[0] if runs else None


def cell(value, spec="{:,.0f}") -> str:
    return "—" if value is None else spec.format(value)


def compare(sb3: list[dict], runs: list[dict]) -> str:
    lines = ["| env | seed | SB3 A2C: env steps | wall s (1 core) | eval of the final model | "
             "last-100 mean | ours at those steps: wall s (2 cores) | eval of the best | eval of "
             "the final model | last-100 mean | ours within SB3's wall: env steps | wall s | "
             "eval of the best | eval of the final model | higher than SB3's eval at equal wall: "
             "best / final |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    higher = {}
    for s in sb3:
        mine = [r for r in runs if r["env"] == s["env"] and r["seed"] == s["seed"]]
        same_steps = the_one([r for r in mine if abs(r["env_steps"] - s["steps"]) <= 0.05 * s["steps"]],
                             f"{s['env']} seed {s['seed']} at {s['steps']:,} steps")
        fitting = [r for r in mine if r["wall_s"] <= s["wall"]]
        most = max((r["env_steps"] for r in fitting), default=None)
        equal_wall = the_one([r for r in fitting if r["env_steps"] == most],
                             f"{s['env']} seed {s['seed']} within {s['wall']:.0f} s")
        at_steps = scores_of(same_steps)
        at_wall = at_steps if equal_wall is same_steps else scores_of(equal_wall)
        wins = [None if at_wall[c] is None else at_wall[c] > s["eval"] for c in CHECKPOINTS]
        higher.setdefault(s["env"], []).append(wins)
        lines.append(
            f"| {s['env']} | {s['seed']} | {s['steps']:,} | {s['wall']:,.0f} | {s['eval']:,.0f} | "
            f"{s['last_100']:,.0f} | "
            f"{cell(same_steps and same_steps['wall_s'])} | {cell(at_steps['best'])} | "
            f"{cell(at_steps['latest'])} | "
            f"{cell(same_steps and same_steps['last_100'])} | "
            f"{cell(equal_wall and equal_wall['env_steps'])} | "
            f"{cell(equal_wall and equal_wall['wall_s'])} | {cell(at_wall['best'])} | "
            f"{cell(at_wall['latest'])} | "
            + " / ".join("—" if w is None else "yes" if w else "no" for w in wins) + " |")
        print(lines[-1], flush=True)
    summary = "; ".join(
        f"{env_id}: {sum(w[0] is True for w in wins)} of {len(wins)} (best), "
        f"{sum(w[1] is True for w in wins)} of {len(wins)} (final)" for env_id, wins in higher.items())
    return "\n".join(lines) + f"\n\nOurs higher than SB3's eval at equal wall time: {summary}."


def main(argv=None) -> int:
    parser = OneLineParser(prog="bench/mujoco_vs_sb3.py", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--runs", nargs="+", required=True, help="folders holding our run folders")
    results = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")
    parser.add_argument("--sb3", default=os.path.join(results, "sb3_a2c_mujoco.json"))
    parser.add_argument("--out", default=os.path.join(results, "mujoco_vs_sb3.md"))
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    try:
        with open(args.sb3) as f:
            sb3 = json.load(f)
        for entry in sb3:
            [entry[key] for key in ("env", "seed", "steps", "wall", "eval", "last_100")]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"mujoco_vs_sb3.py: error: cannot read {args.sb3}: {exc!r} (bench/sb3_a2c.py "
              f"--mujoco writes it)", file=sys.stderr)
        return 2
    try:
        missing = [root for root in args.runs if not os.path.isdir(root)]
        if missing:
            raise UsageError(f"no such folder: {', '.join(missing)}")
        table = compare(sb3, our_runs(args.runs))
    except UsageError as exc:
        print(f"mujoco_vs_sb3.py: error: {exc}", file=sys.stderr)
        return 2
    command = " ".join(["python bench/mujoco_vs_sb3.py"] + (argv if argv is not None else sys.argv[1:]))
    text = (f"# MuJoCo: ours beside Stable-Baselines3's A2C\n\n`{command}`. SB3's runs: "
            f"[sb3_a2c_mujoco.md](sb3_a2c_mujoco.md) (rl-zoo's settings: one env, VecNormalize, "
            f"SB3's defaults otherwise). SB3's eval is rl-zoo's protocol (the final model, "
            f"deterministic, {EVAL_EPISODES} episodes); ours is given for the best checkpoint (the "
            f"protocol of [mujoco.md](mujoco.md)) and for the final one, both deterministic over "
            f"{EVAL_EPISODES} episodes. Wall times are each run's own on this 2-core machine: "
            f"SB3's A2C steps its one env on one core (two of its runs went at once, each "
            f"pinned to a core of its own), ours ran alone on both.\n\n{table}\n")
    print(text)
    if not args.no_save:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
