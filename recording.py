"""Watching an agent: --record's GIF, an Atari game's window, and MuJoCo's frames drawn in a
process of their own.

MuJoCo draws through OpenGL, and in a process that has imported TensorFlow its EGL and Mesa
drawing crash (a segmentation fault when the first frame is drawn; docs/usage.md). So --eval
plays a MuJoCo agent without drawing, keeping its actions, and this module's child process,
which imports no TensorFlow, replays them from the same seeds in an env that draws: the physics
is deterministic, so the frames are those of the games played. Without a display it draws with
EGL (MUJOCO_GL=egl). This module imports no TensorFlow.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

from console import UsageError, first_line, tell, warn

RECORD_FRAME_LIMIT = 5_000  # --record keeps an episode's first frames only (an Atari game can
                           # last 27,000 steps)


def save_animation(frames: list, path: str, frames_per_s: float = 30) -> str:
    """frames as a looping GIF at path, played at frames_per_s. A GIF times its frames in whole
    hundredths of a second: they alternate (15 a second: 70, 60, 70 ms...) to keep the pace."""
    from PIL import Image  # installed with matplotlib

    def image(frame):
        frame = np.asarray(frame)
        if frame.ndim == 2:  # an Atari agent's grayscale view (84 or 42 square), enlarged
            return Image.fromarray(frame).resize((frame.shape[1] * 3, frame.shape[0] * 3),
                                                 Image.NEAREST)
        # a GIF frame holds 256 colours: fast octree reduces a frame to them about four times
        # as fast as PIL's default median cut (results/overheads.md)
        return Image.fromarray(frame).quantize(method=Image.Quantize.FASTOCTREE)

    # browsers show a frame of under 20 ms for 100 ms: a faster env (Hopper's 125 a second)
    # keeps every k-th frame, at 50 a second or fewer
    keep = max(1, math.ceil(frames_per_s / 50))
    images = [image(frame) for frame in frames[::keep]]
    frames_per_s /= keep
    ends = np.round(np.arange(len(images) + 1) * 100 / frames_per_s)  # in hundredths of a second
    durations = [int(10 * duration) for duration in np.diff(ends)]
    partial = path + ".partial"  # an interrupted save never leaves half a GIF under the name
    images[0].save(partial, format="GIF", save_all=True, append_images=images[1:], duration=durations,
                   loop=0)
    os.replace(partial, path)
    return path


class ScreenWindow:
    """--eval --render of an Atari game: each frame AtariEnvs(screen="human") shows, enlarged in a
    pygame window, at the game's own pace (steps_per_s). UsageError where no window opens."""

    def __init__(self, title: str, steps_per_s: float, scale: int = 3):
        import pygame  # installed with gymnasium[classic-control]
        self.pygame, self.title, self.scale, self.steps_per_s = pygame, title, scale, steps_per_s
        self.surface = None
        try:
            pygame.display.init()
        except pygame.error as exc:
            raise UsageError(f"{title} cannot open a window here: {exc}; use --record to write "
                             f"episode.gif instead") from None
        self.clock = pygame.time.Clock()

    def show(self, frame: np.ndarray) -> None:
        pygame = self.pygame
        if self.surface is None:
            self.surface = pygame.display.set_mode((frame.shape[1] * self.scale,
                                                    frame.shape[0] * self.scale))
            pygame.display.set_caption(self.title)
        image = pygame.surfarray.make_surface(np.ascontiguousarray(frame.swapaxes(0, 1)))
        pygame.transform.scale(image, self.surface.get_size(), self.surface)
        pygame.event.pump()  # a window whose events go unread is "not responding"
        pygame.display.flip()
        self.clock.tick(self.steps_per_s)

    def close(self) -> None:
        self.pygame.display.quit()


class Drawing:
    """The env --eval --render / --record plays a gymnasium env in (not Atari: AtariEnvs' screen
    twin and ScreenWindow), and how its frames are drawn: in this process (pygame's classic control), or, for
    MuJoCo, replayed in a child process after the play (replays; see the module's note).
    UsageError, before anything is played, where the env or the machine cannot draw."""

    def __init__(self, env_id: str, cfg, render_mode: str, display: bool, played):
        """played: the env --eval made to play in (GymEnvs, drawing nothing): a replay plays in
        it; otherwise it is closed for one that draws."""
        from environments import GymEnvs, is_mujoco

        self.env_id, self.cfg, self.render_mode, self.display = env_id, cfg, render_mode, display
        self.replays = is_mujoco(env_id)
        self.env = played if self.replays else None
        modes = played.envs[0].metadata.get("render_modes", [])
        if not self.replays or render_mode not in modes:
            played.close()
        if render_mode not in modes:  # an env made with a mode it lacks only warns, then draws nothing
            raise UsageError(f"{env_id} cannot {'record' if render_mode == 'rgb_array' else 'render'}: "
                             f"it offers render modes {modes}, not {render_mode}")
        try:  # one frame first
            if self.replays:
                try:
                    draw_in_child(env_id, cfg.max_episode_steps, render_mode, display)
                except RuntimeError:
                    # a DISPLAY that names no X server that opens (a dropped ssh -X, a stale
                    # tmux): a recording draws offscreen with EGL just as well (MuJoCo's reason
                    # is about OpenGL contexts, not displays, so it is not repeated)
                    if not (display and render_mode == "rgb_array" and not chosen_mujoco_gl()):
                        raise
                    warn(f"drawing on the display {named_display()!r} failed: recording offscreen "
                         f"with EGL")
                    self.display = False
                    draw_in_child(env_id, cfg.max_episode_steps, render_mode, self.display)
            else:
                self.env = GymEnvs(env_id, cfg, 1, render_mode=render_mode)
                self.env.reset([0])
                self.env.render()
        except Exception as exc:  # pygame's, MuJoCo's missing OpenGL (several types), the child's
            if self.env is not None:
                self.env.close()
            if not self.replays:
                hint = ""
            elif render_mode == "human":
                hint = (f" (a window needs a display that opens: is the one named, "
                        f"{named_display()!r}, there? --record draws without one)")
            elif chosen_mujoco_gl():
                hint = (f" (MuJoCo draws through the OpenGL that MUJOCO_GL names, here "
                        f"{chosen_mujoco_gl()!r}: unset it, and --record draws with EGL "
                        f"where no display opens)")
            else:
                hint = (" (MuJoCo draws through OpenGL, which needs a display or EGL: apt install "
                        "libegl1)")
            raise UsageError(f"{env_id} cannot draw its frames here: {first_line(exc)}{hint}") from None

    def replay(self, first_seed: int, actions: list, gif_path: str = None) -> list:
        """MuJoCo: draw the episodes played (actions: play_episodes') in the child: the
        first one into gif_path when recording, every one in a window when rendering. Returns
        the replayed episodes' returns (RuntimeError if the child failed)."""
        if self.render_mode == "rgb_array":
            actions = actions[:1]
        return draw_in_child(self.env_id, self.cfg.max_episode_steps, self.render_mode,
                             self.display, [first_seed + k for k in range(len(actions))], actions,
                             gif_path)


    def draw_played(self, first_seed: int, returns: list, actions: list, gif_path, out) -> dict:
        """replay, for --eval once its episodes are played: says so first (it takes a while),
        and warns (a failure costs the picture only, not the results) where the child failed or
        its returns are not the ones played. The result's animation and replayed_returns."""
        what = "the first episode" if gif_path else "the episodes"
        tell(out, f"{self.env_id}: drawing {what} again in a process of its own "
                  f"({len(actions[0]):,} steps{'' if gif_path else ' and more'}), as MuJoCo "
                  f"cannot draw beside TensorFlow")
        try:
            replayed = self.replay(first_seed, actions, gif_path)
        except RuntimeError as exc:
            warn(f"{self.env_id} could not draw the episodes again: {exc}")
            return {}
        if replayed != returns[:len(replayed)]:
            warn(f"the episodes drawn again scored {replayed}, not {returns[:len(replayed)]}: "
                 f"the pictures may not be the games played")
        return dict(replayed_returns=replayed, **({"animation": gif_path} if gif_path else {}))


def named_display() -> str:
    """The display the environment names (X's, else Wayland's; "" for none)."""
    return os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or ""


def chosen_mujoco_gl() -> str:
    """The OpenGL backend the user's MUJOCO_GL names, in lower case ("": none; an empty one is as
    if unset). MuJoCo reads it in any case, gymnasium's viewer only in lower case ("EGL" fails)."""
    return os.environ.get("MUJOCO_GL", "").strip().lower()


def child_environment(display: bool) -> dict:
    """The drawing process's environment: EGL where there is no display."""
    environment = dict(os.environ)
    chosen = chosen_mujoco_gl()
    if chosen:
        environment["MUJOCO_GL"] = chosen
    elif not display:  # (an empty MUJOCO_GL: as if unset)
        environment["MUJOCO_GL"] = "egl"
    return environment


def draw_in_child(env_id: str, max_episode_steps, render_mode: str, display: bool,
                  seeds: list = (), actions: list = (), gif_path: str = None) -> list:
    """Replay each episode's actions from its seed in an env of render_mode, in a child
    process; with gif_path, the first episode's frames go there. With no episodes: draw one
    frame, to learn whether this machine can. Returns the replayed episodes' returns (the
    played ones again, if the replay is true); RuntimeError (its last line) if the child fails."""
    with tempfile.TemporaryDirectory() as folder:
        actions_path = os.path.join(folder, "actions.npz")
        np.savez(actions_path, *[np.asarray(a, np.float32) for a in actions])
        request = dict(env_id=env_id, max_episode_steps=max_episode_steps,
                       render_mode=render_mode, seeds=[int(s) for s in seeds],
                       actions=actions_path, gif=gif_path)
        done = subprocess.run([sys.executable, os.path.abspath(__file__), json.dumps(request)],
                              env=child_environment(display), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"its process ended with status {done.returncode}"
        raise RuntimeError(reason)
    return json.loads(done.stdout.strip().splitlines()[-1])["returns"]


def replay(request: dict) -> None:
    """The child's work (see draw_in_child)."""
    from config import Config
    from environments import make_env

    cfg = Config(max_episode_steps=request["max_episode_steps"])
    env = make_env(request["env_id"], cfg, request["render_mode"])
    try:
        returns = []
        if not request["seeds"]:
            env.reset(seed=0)
            env.render()
        with np.load(request["actions"]) as stored:
            episodes = [stored[f"arr_{k}"] for k in range(len(request["seeds"]))]
        frames = []
        for episode, (seed, actions) in enumerate(zip(request["seeds"], episodes)):
            env.reset(seed=seed)
            returns.append(0.0)
            for action in actions:
                frame = env.render()
                if episode == 0 and request["gif"] and len(frames) < RECORD_FRAME_LIMIT:
                    frames.append(frame)
                returns[-1] += float(env.step(action)[1])
        if request["gif"]:
            save_animation(frames, request["gif"], env.metadata.get("render_fps", 30))
    finally:
        env.close()
    print(json.dumps({"returns": returns}), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    replay(json.loads(sys.argv[1]))
