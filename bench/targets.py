"""The learning targets every benchmark measures against: the mean of the last 100 raw episode
returns to reach, and the episode budget it must be reached within (the trainer issue's table).
Plain data, no TensorFlow, so bench/sb3_a2c.py can read it from its own environment."""

TARGETS = {"Pendulum-v1": (-200.0, 1000), "CartPole-v1": (475.0, 1500), "Acrobot-v1": (-100.0, 1500)}

# Atari: the mean-100 game score to reach, within a budget of emulator frames (agent steps x 4)
# that bench/learning.py --frames sets; Pong's 18 is what "solved" usually means.
ATARI_TARGETS = {"ALE/Pong-v5": 18.0, "ALE/Breakout-v5": 60.0}
