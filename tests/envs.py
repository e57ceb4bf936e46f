"""Small real gymnasium environments that exercise corners of the trainer.

Registered on import (conftest.py imports this module) under the ids below.
"""
import threading

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class CountdownEnv(gym.Env):
    """Reward 1 per step; terminates after 10 steps. Its raw return is always exactly 10."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t / 10, 0.0], np.float32)
        return obs, 1.0, self.t >= 10, False, {}


class FailingEnv(CountdownEnv):
    """Raises on its 30th step when its first reset seed ends in 001: with one env per worker and
    seed 1, that is worker_1's env."""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.doomed = seed % 1000 == 1
            self.steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if self.doomed and self.steps >= 30:
            raise RuntimeError("the simulator crashed")
        return super().step(action)


class BoxActionEnv(gym.Env):
    """Asymmetric 3-d Box actions; records every action it receives so tests can check bounds."""

    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.Box(np.array([-1.0, 0.0, 5.0], np.float32),
                              np.array([2.0, 0.5, 10.0], np.float32))
    received = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        BoxActionEnv.received.append(np.array(action, dtype=np.float32))
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return obs, -float(np.sum(np.square(action))), False, self.t >= 20, {}


class StaggeredEnv(gym.Env):
    """Actions don't matter; the episode lasts 3 + (seed % 4) steps, set by the first seeded reset.

    obs = [seed % 4, t, episodes so far], reward = t at step t (1, 2, 3, ...), so a trajectory
    can be recomputed by hand. Register with max_episode_steps to cut the longer episodes.
    """

    observation_space = spaces.Box(-100.0, 100.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.kind, self.episodes = seed % 4, 0
        else:
            self.episodes += 1
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.array([self.kind, self.t, self.episodes], np.float32)

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t >= 3 + self.kind, False, {}


class NaNRewardEnv(CountdownEnv):
    """Countdown whose rewards turn NaN after 60 steps, as a diverging simulator's would."""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, float("nan") if self.steps > 60 else reward, terminated, truncated, info


class MultiDiscreteEnv(CountdownEnv):
    action_space = spaces.MultiDiscrete([3, 2])


class ImageEnv(CountdownEnv):
    observation_space = spaces.Box(0, 255, (84, 84, 3), np.uint8)


class ShiftedDiscreteEnv(CountdownEnv):
    """Discrete(3, start=-1): takes -1, 0 and 1, refuses anything else as a strict env would,
    and records every action it receives."""

    action_space = spaces.Discrete(3, start=-1)
    received = []

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        ShiftedDiscreteEnv.received.append(int(action))
        return super().step(action)


class RecordingEnv(CountdownEnv):
    """Countdown that records the seeds it is reset with, and which CPUs the thread stepping it
    may run on (by thread name)."""

    seeds = []
    affinity = {}

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            RecordingEnv.seeds.append(seed)
        return super().reset(seed=seed, options=options)

    def step(self, action):
        import os
        import threading
        RecordingEnv.affinity[threading.current_thread().name] = os.sched_getaffinity(0)
        return super().step(action)


class InterruptingEnv(CountdownEnv):
    """Countdown that raises KeyboardInterrupt, as Ctrl-C does in the main thread: when the
    make_count-th instance is made (make_count 0: never), or on a step once step_interrupts."""

    make_count = 0
    step_interrupts = False

    def __init__(self):
        InterruptingEnv.make_count -= 1
        if InterruptingEnv.make_count == 0:
            raise KeyboardInterrupt

    def step(self, action):
        if InterruptingEnv.step_interrupts:
            raise KeyboardInterrupt
        return super().step(action)


class InterruptsTheFinalTrialsEnv(CountdownEnv):
    """Countdown whose first step in the main thread after a worker's has stepped raises
    KeyboardInterrupt, as one Ctrl-C does there: in the best agent's trials at the end of a run
    (the workers and the trials during training step in threads of their own)."""

    armed = False
    interrupts_left = 1

    def step(self, action):
        cls = InterruptsTheFinalTrialsEnv
        if threading.current_thread() is not threading.main_thread():
            cls.armed = True
        elif cls.armed and cls.interrupts_left > 0:
            cls.interrupts_left -= 1
            raise KeyboardInterrupt
        return super().step(action)


class EndlessEnv(CountdownEnv):
    """Reward 1 per step and no end, nor any time limit where it is registered. Raises on its
    5,000th step after a reset: a player that never cuts an episode fails, rather than hangs."""

    def step(self, action):
        if self.t >= 4_999:
            raise RuntimeError("an episode of EndlessEnv was played for 5,000 steps")
        obs, reward, _, _, info = super().step(action)
        return obs, reward, False, False, info


class PickOneEnv(gym.Env):
    """One-step episodes: reward 1 for action 1, 0 for action 0. A deterministic policy's mean
    return is 1 or 0 by which of its two logits is larger."""

    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), float(action == 1), True, False, {}


class CueEnv(gym.Env):
    """Needs memory: the first observation shows a cue (-1 or 1), the next one nothing, and the
    third says "now" (obs[1] = 1): the action taken then must name the cue (0 for -1, 1 for 1),
    for a reward of 1, or -1 if it does not. A policy that sees only the present observation
    scores 0 on average; one that remembers the cue scores 1."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue, self.t = int(self.np_random.integers(2)), 0
        return np.array([2 * self.cue - 1, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t < 3:
            return np.array([0, float(self.t == 2)], np.float32), 0.0, False, False, {}
        return np.zeros(2, np.float32), 1.0 if int(action) == self.cue else -1.0, True, False, {}


for name, cls in (("Countdown", CountdownEnv), ("Cue", CueEnv), ("PickOne", PickOneEnv), ("Failing", FailingEnv), ("BoxAction", BoxActionEnv),
                  ("NaNReward", NaNRewardEnv), ("ShiftedDiscrete", ShiftedDiscreteEnv),
                  ("Recording", RecordingEnv), ("Interrupting", InterruptingEnv),
                  ("MultiDiscrete", MultiDiscreteEnv), ("Image", ImageEnv),
                  ("InterruptsTheFinalTrials", InterruptsTheFinalTrialsEnv), ("Endless", EndlessEnv)):
    gym.register(f"A3CTest/{name}-v0", entry_point=cls)
gym.register("A3CTest/Staggered-v0", entry_point=StaggeredEnv, max_episode_steps=5)
gym.register("A3CTest/EndlessTo400-v0", entry_point=EndlessEnv, max_episode_steps=400)
