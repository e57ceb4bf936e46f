"""--eval: play a trained run's checkpoint, its deterministic policy or (--stochastic) its sampled
one, for some episodes from fixed seeds; print the mean return, and with --record write the
first episode as episode.gif into the run folder. The network comes in as build_net (a3c.py
passes its ACNet): no module beside a3c.py imports it."""
from __future__ import annotations

import dataclasses
import os
import sys

import gymnasium as gym
import numpy as np

from best_agent import (EVAL_SEED, GreedyPlayer, SampledPlayer, episode_step_limit,
                        lr_fraction_of, pick_checkpoint, play_episodes)
from checkpoints import read_run, restore_checkpoint
from console import UsageError, counted, tenths, warn
from environments import ATARI_STEPS_PER_S, env_spec, is_atari, make_envs
from recording import Drawing, named_display, save_animation
from runlog import display_answers, display_available
from sessions import open_session, tf, v1


def evaluate(run_dir: str, build_net, episodes: int = 10, render: bool = False,
             record: bool = False, out=None, checkpoint: str = "best",
             stochastic: bool = False) -> dict:
    """Run the deterministic policy (mean action / argmax) of a run's best checkpoint, or of
    the one that `checkpoint` names (latest, or a path); stochastic: its sampled actions.
    build_net(scope, spec, cfg): the network a3c.py trains (its class), built for playing."""
    out = out or sys.stdout
    if render and record:  # a window's render mode gives no frames, a recording's no window
        raise UsageError("--render and --record do not go together: --render shows the "
                         "episodes in a window, --record writes episode.gif; choose one")
    env_id, cfg = read_run(run_dir)
    if render and not display_answers():  # pygame would crash the process, not raise
        raise UsageError("--render needs a display and " + (
            f"the one named ({named_display()}) does not answer" if display_available() else
            "none is set (DISPLAY or WAYLAND_DISPLAY)") + "; use --record to write episode.gif "
                         "instead")
    checkpoint, played = pick_checkpoint(run_dir, checkpoint)
    render_mode = "human" if render else ("rgb_array" if record else None)
    if render_mode == "rgb_array":
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # frames only: no window, no display
    # Atari: the agent plays training's own envs, and a twin of them keeps the colour screen
    env = make_envs(env_id, cfg, 1, greedy=True, screen=render_mode)
    spec = env_spec(env, env_id)
    drawing = None
    if render_mode is not None and not is_atari(env_id):
        drawing = Drawing(env_id, cfg, render_mode, display_available(), env)
        env = drawing.env
    replays = drawing is not None and drawing.replays
    graph = tf.Graph()
    graph.seed = EVAL_SEED  # the sampled actions' draws: the same episodes on every --eval
    with graph.as_default():
        # --stochastic: a net whose sigma takes the checkpoint's fraction (final_sigma_scale),
        # whether or not the run anneals now: a run resumed with anneal_lr off keeps checkpoints
        # trained at a fraction below 1, and its own hold 1
        net = build_net("global", spec, dataclasses.replace(cfg, anneal_lr=True) if stochastic
                        else cfg)
        saver = v1.train.Saver(var_list=net.net_variables)
    sess = open_session(graph, None)  # one thread plays the episodes: no pool to feed
    try:
        restore_checkpoint(sess, saver, checkpoint, net.net_variables, env_id)
    except BaseException:  # a bad checkpoint, or Ctrl-C
        sess.close()
        env.close()
        raise

    if stochastic:  # sigma as narrow as a worker's at the checkpoint's moment (final_sigma_scale)
        fraction = lr_fraction_of(checkpoint) if net.policy.uses_schedule else 1.0
        if fraction is None:
            warn(f"{checkpoint} does not say the learning rates' fraction at its save (written "
                 f"before checkpoints kept it, or a best agent's without its best.json): its "
                 f"actions are sampled with sigma as the net holds it, possibly wider than "
                 f"training's, which final_sigma_scale narrowed")
        player = SampledPlayer(sess, net, 1, spec.obs_dtype, cfg.n_steps, EVAL_SEED,
                               1.0 if fraction is None else fraction)
    else:
        player = GreedyPlayer(sess, net, 1, spec.obs_dtype)
    actions = [] if replays else None
    try:
        returns, frames = play_episodes(env, player, episodes, record and not replays,
                                        actions=actions,
                                        step_limit=episode_step_limit(env_id, cfg))
    except gym.error.DependencyNotInstalled as exc:
        raise UsageError(f"{env_id} cannot render: {exc}") from None
    finally:
        env.close()
        sess.close()
    policy = "stochastic" if stochastic else "deterministic"
    result = dict(env=env_id, checkpoint=checkpoint, policy=policy, returns=returns,
                  mean=float(np.mean(returns)), std=float(np.std(returns)))
    gif = os.path.join(run_dir, "episode.gif")
    score = (f"{env_id}: {policy} policy of {played}, {checkpoint}: return "
             f"{tenths(result['mean'])} ± {result['std']:.1f} over {counted(episodes, 'episode')}")
    if replays:  # MuJoCo: drawn in a process without TensorFlow (recording.py), which takes a
        print(score, file=out, flush=True)  # while: the score first
        result.update(drawing.draw_played(EVAL_SEED, returns, actions, gif if record else None,
                                          out))
        if "animation" in result:
            print(f"{env_id}: animation in {result['animation']}", file=out, flush=True)
        return result
    if record and frames:
        result["animation"] = save_animation(
            frames, gif, ATARI_STEPS_PER_S if is_atari(env_id) else 30)
    print(score + (f"; animation in {result['animation']}" if "animation" in result else ""),
          file=out, flush=True)
    return result
