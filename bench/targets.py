"""The learning targets every benchmark measures against: the mean of the last 100 raw episode
returns to reach, and the episode budget it must be reached within (the trainer issue's table).
Plain data, no TensorFlow, so bench/sb3_a2c.py can read it from its own environment."""

TARGETS = {"Pendulum-v1": (-200.0, 1000), "CartPole-v1": (475.0, 1500), "Acrobot-v1": (-100.0, 1500)}

# Atari: the mean-100 game score to reach, within a budget of emulator frames (agent steps x 4)
# that bench/learning.py --frames sets; Pong's 18 is what "solved" usually means.
ATARI_TARGETS = {"ALE/Pong-v5": 18.0, "ALE/Breakout-v5": 60.0}

# MuJoCo: 1M env steps per run; the deterministic eval of the best checkpoint over 20 episodes
# must reach rl-baselines3-zoo's A2C at 1M steps, and the goal is its tuned PPO's (same protocol)
MUJOCO_STEPS = 1_000_000
MUJOCO_TARGETS = {"HalfCheetah-v5": (3041.0, 5819.0), "Hopper-v5": (733.0, 2410.0),
                  "Walker2d-v5": (582.0, 3479.0)}
# CleanRL's PPO at 1M steps, its own protocol: the mean return of the last 100 training episodes
CLEANRL_PPO_LAST_100 = {"HalfCheetah-v5": 1443.0, "Hopper-v5": 2383.0, "Walker2d-v5": 2288.0}
