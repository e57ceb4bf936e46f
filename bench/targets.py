"""The learning targets every benchmark measures against: the mean of the last 100 raw episode
returns to reach, and the episode budget it must be reached within (the trainer issue's table).
Plain data, no TensorFlow, so bench/sb3_a2c.py can read it from its own environment."""

TARGETS = {"Pendulum-v1": (-200.0, 1000), "CartPole-v1": (475.0, 1500), "Acrobot-v1": (-100.0, 1500)}
