"""Does an Atari run's CNN trunk see the game? For each checkpoint of a run: how many of the fc
layer's units stay at their floor on every one of a fixed set of real frames (ReLU: 0, ELU: -0.99
or below, where its gradient is under 1% of a live unit's), how many vary from frame to frame, and
how much the value and the policy's logits vary over those frames. A trunk that has died, or not
yet learned to see the ball, gives nearly the same value and logits for every frame.

    python bench/trunk_probe.py results/ALE_Pong-v5/<run> --name pong_trunk

The frames: 8 games (seeds 0-7) played with uniformly random actions, every 10th of 300 agent
steps. Writes results/<name>.md (--out to put it elsewhere); nothing is typed by hand.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import a3c  # noqa: E402
import checkpoints  # noqa: E402
import console  # noqa: E402
import environments  # noqa: E402
import sessions  # noqa: E402

FLOOR = {"relu": 0.0, "elu": -0.99}  # at or below it a unit passes (almost) no gradient
GAMES, STEPS, EVERY = 8, 300, 10


def probe_frames(env_id: str, cfg) -> tuple:
    """(frames [GAMES * STEPS / EVERY, ...], the env's EnvSpec)."""
    envs = environments.make_envs(env_id, cfg, GAMES)
    try:
        obs = envs.reset(np.arange(GAMES))
        rng = np.random.default_rng(0)
        frames = []
        for t in range(STEPS):
            obs = np.asarray(envs.step(rng.integers(0, envs.action_space.n, GAMES))[0])
            if t % EVERY == 0:
                frames.append(obs.copy())
        return np.concatenate(frames), environments.env_spec(envs, env_id)
    finally:
        envs.close()


def checkpoints_of(run_dir: str) -> list[str]:
    found = glob.glob(os.path.join(run_dir, checkpoints.CHECKPOINT_FOLDER, "model-*.index"))
    return sorted((path[:-len(".index")] for path in found), key=lambda p: int(p.rsplit("-", 1)[1]))


def main(argv=None) -> int:
    parser = console.OneLineParser(prog="bench/trunk_probe.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--name", required=True, help="results/<name>.md")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "results"))
    args = parser.parse_args(argv)
    try:
        return probe(args, argv)
    except console.UsageError as exc:  # before anything is written
        print(f"trunk_probe.py: error: {exc}", file=sys.stderr)
        return 2


def probe(args, argv) -> int:
    env_id, cfg = checkpoints.read_run(args.run_dir)
    if not environments.is_atari(env_id) or cfg.use_lstm:
        raise console.UsageError(f"{args.run_dir} is a {env_id} run{' with an LSTM' if cfg.use_lstm else ''}"
                                 f"; the probe needs a feed-forward Atari run (a trunk ending in fc)")
    paths = checkpoints_of(args.run_dir)
    if not paths:
        raise console.UsageError(f"{args.run_dir} has no checkpoints to probe")
    cfg = dataclasses.replace(cfg, workers=1)
    frames, spec = probe_frames(env_id, cfg)
    tf, v1 = sessions.tf, sessions.v1
    graph = tf.Graph()
    with graph.as_default():
        net = a3c.ACNet("global", spec, cfg)
        saver = v1.train.Saver(net.params)
    sess = v1.Session(graph=graph, config=sessions.session_config(-1))
    rows = []
    for checkpoint in paths:
        checkpoints.restore_checkpoint(sess, saver, checkpoint, net.params, env_id)
        fc, values, logits = sess.run([net.features, net.value, net.policy.logits], {net.obs: frames})
        at_floor = np.all(fc <= FLOOR[cfg.trunk_activation], axis=0)
        varying = fc.std(axis=0) > 1e-3
        rows.append(f"| {int(checkpoint.rsplit('-', 1)[1]):,} | {at_floor.mean():.0%} | "
                    f"{varying.mean():.0%} | {values.mean():.3f} | {values.std():.4f} | "
                    f"{logits.std(axis=0).mean():.4f} |")
    sess.close()
    info = checkpoints.read_run_info(args.run_dir)
    lines = [f"# Trunk probe: {env_id}", "",
             f"`python bench/trunk_probe.py {' '.join(argv if argv is not None else sys.argv[1:])}`,"
             f" run `{os.path.basename(os.path.normpath(args.run_dir))}` "
             f"(`{' '.join(info.get('argv', ['a3c.py']))}`): cnn {cfg.cnn}, trunk "
             f"{cfg.trunk_activation}, shared_lr {cfg.shared_lr:g}, rmsprop_epsilon "
             f"{cfg.rmsprop_epsilon:g}.", "",
             f"Over {len(frames)} real frames ({GAMES} games of random play, every {EVERY}th of "
             f"{STEPS} agent steps); a unit at its floor on every frame passes (almost) no "
             f"gradient.", "",
             "| checkpoint (agent steps) | fc units at their floor on every frame | fc units "
             "varying (std > 0.001) | V mean | V std over frames | logit std over frames |",
             "| --- | --- | --- | --- | --- | --- |", *rows, ""]
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{args.name}.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
