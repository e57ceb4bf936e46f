"""Optional comparison: Stable-Baselines3's A2C with rl-zoo's Atari settings, one game and seed,
its learning curve printed as it trains (the mean of the last 100 whole games, raw scores).

Needs PyTorch, Stable-Baselines3, ale-py and OpenCV (the trainer needs only ale-py); install them
in a separate environment, e.g. `pip install torch stable-baselines3 ale-py opencv-python-headless`,
then

    python bench/sb3_atari.py --game Breakout --seed 11 --frames 6e6

rl-zoo's a2c.yml for Atari: `<Game>NoFrameskip-v4` through SB3's AtariWrapper (no-op starts,
4-frame skip with max-pooling, a lost life ends the learning episode and FIRE is pressed after
it, 84x84 grayscale, rewards clipped) and 4 stacked frames, 16 envs, the Nature CNN, ent_coef
0.01, vf_coef 0.25, RMSprop with TF's epsilon placement (1e-5), SB3's defaults otherwise
(n_steps 5, lr 7e-4 constant, gamma 0.99, gradients clipped to 0.5). SB3's Monitor sits inside
the wrappers, so its episodes are whole games with raw scores, as our mean-100 is. Prints only:
the numbers docs/atari.md quotes come from its output.
"""
from __future__ import annotations

import math
import os
import sys
import time
from collections import deque

# appended: the repo's config.py, networks.py, ... must not hide same-named modules torch imports
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from console import OneLineParser  # noqa: E402  (the standard library only)

PRINT_EVERY_STEPS = 50_000  # agent steps (4 frames each)
ENVS = 16  # rl-zoo's n_envs for A2C on Atari
UPDATE_FRAMES = ENVS * 5 * 4  # one A2C update: 5 steps of every env, 4 frames a step


def main(argv=None) -> int:
    parser = OneLineParser(prog="bench/sb3_atari.py", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--frames", type=float, default=6e6)
    parser.add_argument("--threads", type=int, default=2, help="torch's intra-op threads")
    args = parser.parse_args(argv)

    if not math.isfinite(args.frames) or args.frames < UPDATE_FRAMES:
        parser.error(f"--frames must be a number >= {UPDATE_FRAMES} (one update: 16 envs x 5 "
                     f"steps x 4 frames), got {args.frames:g}")
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if not 0 <= args.seed <= 2**32 - ENVS:  # env i seeds with seed + i, i < ENVS
        parser.error(f"--seed must be from 0 to {2**32 - ENVS:,}, got {args.seed}")
    try:
        import ale_py
        import cv2  # noqa: F401  (SB3's Atari wrappers resize with it)
        import stable_baselines3  # noqa: F401
        import torch
    except ImportError:
        print("bench/sb3_atari.py: error: needs torch, stable-baselines3, ale-py and "
              "opencv-python-headless (pip install torch stable-baselines3 ale-py "
              "opencv-python-headless), an optional comparison", file=sys.stderr)
        return 2
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    torch.set_num_threads(args.threads)
    try:
        env = make_atari_env(f"{args.game}NoFrameskip-v4", n_envs=ENVS, seed=args.seed)
    except gym.error.Error as exc:
        print(f"bench/sb3_atari.py: error: --game {args.game}: {exc} (a game's name as in "
              f"ALE/<Game>-v5, e.g. Breakout)", file=sys.stderr)
        return 2
    env = VecFrameStack(env, n_stack=4)

    class Curve(BaseCallback):
        def __init__(self):
            super().__init__()
            self.returns = deque(maxlen=100)
            self.games = 0
            self.start = time.time()
            self.next_print = 0

        def _on_step(self):
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.returns.append(info["episode"]["r"])
                    self.games += 1
            if self.num_timesteps >= self.next_print:
                self.next_print += PRINT_EVERY_STEPS
                wall = time.time() - self.start
                mean = np.mean(self.returns) if self.returns else float("nan")
                print(f"frames {4 * self.num_timesteps / 1e6:6.2f}M games {self.games:6d} "
                      f"mean-100 {mean:6.2f} wall {wall:6.0f} s "
                      f"{self.num_timesteps / max(wall, 1e-9):6.0f} steps/s", flush=True)
            return True

    model = A2C("CnnPolicy", env, ent_coef=0.01, vf_coef=0.25, seed=args.seed, verbose=0,
                policy_kwargs=dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5)))
    model.learn(int(args.frames / 4), callback=Curve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
