"""Environments: a worker's gymnasium envs (GymEnvs) or ale-py Atari games (AtariEnvs) as one
batch, and the space checks that say what networks an env needs (EnvSpec)."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import os
import re
import warnings

import gymnasium as gym
from gymnasium.envs.registration import find_highest_version, get_env_id, parse_env_id
import numpy as np

import config as config_module
from config import Config
from console import UsageError, first_line


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What the networks need to know about an environment."""
    env_id: str
    obs_dim: int            # flat observations: their size
    discrete: bool
    n_actions: int          # discrete: number of actions; continuous: action dimensions
    action_low: np.ndarray  # continuous only
    action_high: np.ndarray
    action_start: int = 0   # discrete: the env's first action (Discrete(n, start=s) takes s..s+n-1)
    obs_low: np.ndarray = None   # the observation space's bounds (may be infinite)
    obs_high: np.ndarray = None
    image_shape: tuple = None    # Atari: (frames stacked, height, width) of uint8 pixels

    @property
    def image(self) -> bool:
        return self.image_shape is not None

    @property
    def obs_shape(self) -> tuple:
        return self.image_shape if self.image else (self.obs_dim,)

    @property
    def obs_dtype(self):
        return np.uint8 if self.image else np.float32

    @property
    def scalable_obs(self) -> np.ndarray:
        """The flat observation dimensions scale_obs maps to [-1, 1]: those with finite bounds
        (bounds past 1e6 stand for "unbounded": some envs write float32's largest number)."""
        if self.obs_low is None:
            return np.zeros(self.obs_dim, bool)
        low, high = self.obs_low, self.obs_high
        return (np.abs(low) < 1e6) & (np.abs(high) < 1e6) & (high > low)


ATARI_PREFIX = "ALE/"  # gymnasium's ids of ale-py's Atari games: ALE/Pong-v5, ALE/Breakout-v5, ...


# gymnasium's own envs (classic control, MuJoCo, ...) as gymnasium registers them on import, before
# any --env module:Name's module can register one of its own (a3c.py imports this module first):
# an env a plugin registers anew, under its own name or one of these, is another spec object
GYMNASIUM_SPECS = {env_id: registered for env_id, registered in gym.registry.items()
                   if str(registered.entry_point).startswith("gymnasium.envs")}


def is_atari(env_id: str) -> bool:
    return env_id.startswith(ATARI_PREFIX)


def is_mujoco(env_id: str) -> bool:
    """Whether gymnasium registers env_id as one of its MuJoCo envs (HalfCheetah-v5, ...; a
    run's saved "Hopper", from before ids were completed, as the Hopper-v5 it made)."""
    registered = gym.envs.registry.get(latest_version(env_id))
    return registered is not None and "mujoco" in str(registered.entry_point)


def canonical_env_id(env_id: str) -> str:
    """An id without its version (Hopper, ALE/Pong) is the highest version gymnasium registers
    (Hopper-v5), the env gym.make would make of it, so that it gets that id's preset and its run
    folder says which env ran. "module:Name" where Name is one of gymnasium's own envs or ale-py's
    games (gymnasium:Pendulum-v1, ale_py:ALE/Pong-v5) is Name, which gymnasium registers without
    the import: their presets, frames and drawing go by that name. Any other id keeps its module
    (which --eval and --resume must import again), with its name's version completed as above."""
    if env_id != env_id.strip():  # (a pasted "ALE/Pong-v5 " was refused as not a -v5 id)
        raise UsageError(f"env id {env_id!r} has spaces around it: give {env_id.strip()!r}")
    if ":" not in env_id:
        return latest_version(env_id)
    module, name = env_id.split(":", 1)
    if not name.strip():  # ("ale_py:" would become "", taken for the default env)
        return env_id
    try:
        importlib.import_module(module)
    except Exception:  # make_env refuses the id in one line
        return env_id
    name = latest_version(name)
    # ale-py's ids outside ALE/ (ale_py:Pong-v4, ale_py:Pong) are refused as without their module
    if module.split(".")[0] == "ale_py" and not is_atari(name):
        return name
    # gymnasium's own envs by their names, and ale-py's games: a plugin's env (its own
    # Hopper-v5, its MyAnt-v0 in a module named mujoco) keeps its module
    registered = gym.registry.get(name)
    own = registered is not None and (
        str(registered.entry_point).startswith("ale_py") if is_atari(name) else
        GYMNASIUM_SPECS.get(name) is registered)
    return name if own else f"{module}:{name}"


def latest_version(env_id: str) -> str:
    """env_id with gymnasium's highest registered version where it names none and an id without
    one is not registered itself; else env_id (make_env refuses an unknown one in one line, and
    ale-py's ids outside ALE/, such as Pong, as typed, with the ALE/ id to use instead)."""
    if is_atari(env_id):  # ale-py registers its games when imported
        register_ale_games()
    latest = highest_registered(env_id)
    return env_id if outside_ale(latest) else latest


def highest_registered(env_id: str) -> str:
    """env_id, or the id of its highest registered version where it names none."""
    try:
        namespace, name, version = parse_env_id(env_id)
    except gym.error.Error:
        return env_id
    if version is not None or env_id in gym.registry:
        return env_id
    highest = find_highest_version(namespace, name)
    return env_id if highest is None else get_env_id(namespace, name, highest)


def outside_ale(env_id: str) -> bool:
    """Whether env_id is one of ale-py's ids without the ALE/ prefix (Pong-v4, PongNoFrameskip-v4,
    Pong), once ale-py has registered them in this process."""
    registered = gym.registry.get(highest_registered(env_id))
    return registered is not None and "ale_py" in str(registered.entry_point) \
        and not is_atari(env_id)


def register_ale_games() -> None:
    """ale-py's ids in gymnasium's registry, where ale-py is installed (atari_game says when not)."""
    try:
        import ale_py
        gym.register_envs(ale_py)
    except Exception:  # (not installed, or broken: atari_game refuses the id in one line)
        return


def registered_time_limit(env_id: str):
    """The time limit gymnasium registers env_id with (module:Name: Name's, once imported), or
    None."""
    registered = gym.registry.get(env_id.split(":", 1)[-1])
    return None if registered is None else registered.max_episode_steps


def make_envs(env_id: str, cfg: Config, count: int, greedy: bool = False, screen: str = None):
    """count environments of env_id as one batch (AtariEnvs for ALE ids, else GymEnvs);
    greedy and screen: for a deterministic policy's play, Atari only (see AtariEnvs)."""
    if is_atari(env_id):
        return AtariEnvs(env_id, cfg, count, greedy, screen)
    return GymEnvs(env_id, cfg, count)


def probe_spec(env_id: str, cfg: Config) -> "EnvSpec":
    """The EnvSpec of env_id, from one env made and closed (UsageError if it cannot be used)."""
    probe = make_envs(env_id, cfg, 1)
    try:
        return env_spec(probe, env_id)
    finally:
        probe.close()


def unused_setting_warnings(env_id: str, cfg: Config, set_by_hand: dict) -> list[str]:
    """Warning lines for each field set by hand that changes nothing in this run (cnn on
    CartPole, actor_lr under use_lstm): it is kept, and said so, as a user tuning it would
    otherwise wait a whole run to find out. The env is made only where one might be."""
    maybe = set(set_by_hand) & (set(config_module.unused_fields(cfg, True, True))
                                | set(config_module.unused_fields(cfg, False, False, False)))
    if not maybe:
        return []
    spec = probe_spec(env_id, cfg)
    unused = config_module.unused_fields(cfg, spec.image, spec.discrete, spec.scalable_obs.any())
    return [f"a3c.py: warning: --set {field} changes nothing in this run: {unused[field]}"
            for field in sorted(maybe & set(unused))]


def env_spec(env, env_id: str) -> EnvSpec:
    """Read the spaces of an env (or a batch of them), or refuse the ones this trainer has no
    network for."""
    obs_space, act_space = env.observation_space, env.action_space
    if isinstance(env, AtariEnvs):
        return EnvSpec(env_id, 0, True, int(act_space.n), None, None, image_shape=obs_space.shape)
    if not isinstance(obs_space, gym.spaces.Box):
        raise UsageError(f"{env_id}: observation space {obs_space} is not supported "
                         f"(only flat Box observations)")
    if len(obs_space.shape) != 1:
        raise UsageError(f"{env_id}: image observations {obs_space} are supported for Atari "
                         f"games only (ALE/<Game>-v5 ids, preprocessed by ale-py); other envs "
                         f"need flat Box observations")
    bounds = dict(obs_low=obs_space.low.astype(np.float64), obs_high=obs_space.high.astype(np.float64))
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpec(env_id, obs_space.shape[0], True, int(act_space.n), None, None,
                       int(act_space.start), **bounds)
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        low, high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise UsageError(f"{env_id}: action space {act_space} has infinite bounds; "
                             f"the Gaussian policy maps its mean into finite bounds")
        return EnvSpec(env_id, obs_space.shape[0], False, act_space.shape[0], low, high, **bounds)
    raise UsageError(f"{env_id}: action space {act_space} is not supported "
                     f"(only Discrete or a flat Box)")


class GymEnvs:
    """A worker's environments as a batch: gymnasium envs stepped one after the other in this
    thread. step() gives each env's next observation (the final one where an episode ended);
    restart(k) starts env k's next episode and gives its first observation."""

    def __init__(self, env_id: str, cfg: Config, count: int, render_mode: str = None):
        self.envs = []
        try:
            for _ in range(count):
                self.envs.append(make_env(env_id, cfg, render_mode))
        except BaseException:  # a failure (or Ctrl-C) part-way leaves none of them open
            self.close()
            raise
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, seeds) -> np.ndarray:
        first = [env.reset(seed=int(seed))[0] for env, seed in zip(self.envs, seeds)]
        for env, seed in zip(self.envs, seeds):
            env.action_space.seed(int(seed))
        return np.stack(first)

    def step(self, actions):
        next_obs, rewards, terminated, truncated, _ = zip(
            *[env.step(action) for env, action in zip(self.envs, actions)])
        return next_obs, np.array(rewards), terminated, truncated

    def restart(self, k: int):
        return self.envs[k].reset()[0]

    def render(self):
        return self.envs[0].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()


def old_atari_id(env_id: str):
    """The ALE/<Game>-v5 id to use instead of an Atari id without the prefix (Pong-v4,
    PongNoFrameskip-v4, Breakout-v5, ...), or None. Registers ale-py's ids only for an id that
    is not registered yet: the refusal path, or an id already known to be ale-py's."""
    registered = gym.registry.get(env_id)
    if registered is not None and "ale_py" not in str(registered.entry_point):
        return None
    name = re.sub(r"(NoFrameskip|Deterministic)?(-v\d+)?$", "", env_id)
    register_ale_games()  # (without ale-py no ALE/ id is registered: None)
    wanted = f"{ATARI_PREFIX}{name}-v5".lower()  # (pong: ALE/Pong-v5)
    return next((known for known in gym.registry if known.lower() == wanted), None)


def make_env(env_id: str, cfg: Config, render_mode: str = None) -> gym.Env:
    if outside_ale(env_id):  # (registered by an earlier ALE/ id in this process)
        instead = old_atari_id(env_id)
        raise UsageError(f"{env_id}: only the {ATARI_PREFIX}<Game>-v5 ids of Atari games are "
                         f"supported" + (f"; use {instead}" if instead else ""))
    kwargs = {"disable_env_checker": True}
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    if is_mujoco(env_id):
        quiet_mujoco_warnings()
    # An id not in the registry (unknown, retired like Taxi-v3, unversioned like "CartPole", or
    # "module:Name-v0"): gymnasium may warn (a retired version is "out of date") and then refuse,
    # and our one-line refusal says it all; the warnings of an env it does make are passed on,
    # each once. (catch_warnings resets every warning's "once": registered ids go without it.)
    unregistered = env_id not in gym.registry
    with warnings.catch_warnings(record=True) if unregistered else contextlib.nullcontext([]) \
            as said:
        try:
            env = gym.make(env_id, **kwargs)
        except Exception as exc:  # gymnasium raises several types for unknown or broken ids
            instead = old_atari_id(env_id) if unregistered else None
            if instead is not None:
                raise UsageError(f"{env_id}: only the {ATARI_PREFIX}<Game>-v5 ids of Atari "
                                 f"games are supported; use {instead}") from None
            raise UsageError(f"cannot make environment '{env_id}': {first_line(exc)} "
                             f"(gymnasium.pprint_registry() lists the known ids)") from exc
    for warning in said:
        if (str(warning.message), warning.category) not in WARNINGS_PASSED_ON:
            WARNINGS_PASSED_ON.add((str(warning.message), warning.category))
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno)
    return env


WARNINGS_PASSED_ON = set()


# MuJoCo 3.3+ warns that gymnasium's own model files use a deprecated attribute, once for every
# env made (32 times for 8 workers x 4 envs), on stderr and into MUJOCO_LOG.TXT in the current
# folder; harmless, so dropped. Its other warnings go through Python's warnings, each once.
MUJOCO_NOISE = ("compiler attribute 'settotalmass' is deprecated",)


@functools.lru_cache(maxsize=None)
def quiet_mujoco_warnings() -> None:
    try:
        import mujoco
    except ImportError:  # gym.make says what to install
        return
    except Exception as exc:  # mujoco loads the OpenGL backend MUJOCO_GL names as it is imported
        chosen = os.environ.get("MUJOCO_GL")
        fix = (f"MUJOCO_GL={chosen} names an OpenGL backend this machine cannot load: unset it "
               f"(training draws nothing; --record picks EGL itself)"
               f"{' or set it to egl' if chosen != 'egl' else ''}"
               if chosen else "reinstall it with pip install -r requirements.txt")
        raise UsageError(f"cannot load MuJoCo ({first_line(exc)}); {fix}") from None

    def warn(message: str) -> None:
        if not message.startswith(MUJOCO_NOISE):
            warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)
    mujoco.set_mju_user_warning(warn)


FRAME_SKIP = 4  # emulator frames per Atari agent step (the standard preprocessing's skip)
ATARI_STEPS_PER_S = 60 / FRAME_SKIP  # a game's pace as a person sees it: the console's 60 frames/s
SCREEN_HEIGHT, SCREEN_WIDTH = 210, 160  # the console's screen, as ALE gives it


def frame_size(cfg: Config) -> int:
    """The side of the square grayscale frames an Atari env gives: 42 for the small CNN (as
    universe-starter-agent and pytorch-a3c), else the standard 84."""
    return 42 if cfg.cnn == "small" else 84


class AtariEnvs:
    """A worker's Atari games as one ale-py AtariVectorEnv: its C++ threads (atari_threads of
    them) step the games and do the standard preprocessing there: 4 frames skipped per
    action with the last two max-pooled, 84x84 grayscale (42x42 for the small CNN), the last 4
    stacked (zeros before a game's first frame), 0-29 random no-ops at reset (0-28 and a FIRE
    press where the game needs FIRE), the minimal action set. An episode is a whole game (all
    lives); rewards are the raw score (clipping is for learning, in the worker).

    greedy: the envs of a deterministic policy (the best agent's trials, --eval), which press
    FIRE for it after a life is lost in a game that needs FIRE to go on (Breakout), and again
    once nothing on the screen has moved for STILL_STEPS steps: an argmax that never picks
    FIRE would otherwise stand still until the game's 108,000-frame limit, and a trial would
    cost minutes for a score the agent never earned. (Sticky actions swallow a press when the emulator repeats the previous
    action on all 4 frames of the step, 0.4% of them at 0.25.) Training's sampled actions
    press FIRE by themselves; --eval --stochastic plays in these envs all the same (FIRE
    after a lost life, as rl-baselines3-zoo's evaluation presses it, and on a still screen).

    screen "rgb_array" (--eval --record): the same games are also played, in lockstep, by a twin
    vector env that keeps each step's last frame in colour at the console's own size, which
    render() gives. ALE's games follow from the seed and the actions alone (sticky actions and
    no-ops included; tests/test_atari.py), so the twin's are the agent's games, and the agent's
    input is training's own. screen "human" (--eval --render): the twin's frames are also drawn
    in a window (recording.ScreenWindow)."""

    def __init__(self, env_id: str, cfg: Config, count: int, greedy: bool = False,
                 screen: str = None):
        game, _ = atari_game(env_id)
        self.game = game
        from ale_py.vector_env import AtariVectorEnv
        frames = 108_000 if cfg.max_episode_steps is None else cfg.max_episode_steps * FRAME_SKIP
        side = frame_size(cfg)
        rules = dict(num_threads=cfg.atari_threads, frameskip=FRAME_SKIP, noop_max=30,
                     episodic_life=False, reward_clipping=False,
                     repeat_action_probability=cfg.repeat_action_probability,
                     full_action_space=False, max_num_frames_per_episode=frames,
                     autoreset_mode="SameStep")
        self.vector = AtariVectorEnv(game, count, maxpool=True, stack_num=4, img_height=side,
                                     img_width=side, grayscale=True, **rules)
        self.screen = self.screen_frames = self.window = None
        if screen is not None:
            self.screen = AtariVectorEnv(game, count, maxpool=False, stack_num=1,
                                         img_height=SCREEN_HEIGHT, img_width=SCREEN_WIDTH,
                                         grayscale=False, **rules)
        if screen == "human":
            from recording import ScreenWindow
            try:
                self.window = ScreenWindow(env_id, ATARI_STEPS_PER_S)
            except BaseException:
                self.close()
                raise
        self.observation_space = self.vector.single_observation_space
        self.action_space = self.vector.single_action_space
        self.count = count
        self.restarted = None
        self.fire_after_life_loss = greedy and atari_needs_fire(env_id)
        # life_lost: each step, the games that lost a life and go on (for FIRE, and for training's
        # terminal_on_life_loss)
        self.tracks_lives = self.fire_after_life_loss or (cfg.terminal_on_life_loss and not greedy)
        self.lives = self.life_lost = self.still_steps = None

    def __len__(self) -> int:
        return self.count

    def reset(self, seeds) -> np.ndarray:
        # ALE takes C++ ints: seeds past 2**31 - 1 (a resumed part's, a large --seed) wrap round
        seeds = np.asarray(seeds, np.int64) % 2 ** 31
        obs, info = self.vector.reset(seed=seeds)
        if self.screen is not None:
            self.take_screen(self.screen.reset(seed=seeds)[0])
        self.restarted = obs
        self.lives, self.life_lost = info["lives"], np.zeros(self.count, bool)
        self.still_steps = np.zeros(self.count, np.int64)
        return obs

    def step(self, actions):
        actions = np.asarray(actions, np.int32)
        if self.fire_after_life_loss:
            actions = np.where(self.life_lost | self.standing_still, ATARI_FIRE,
                               actions).astype(np.int32)
        obs, rewards, terminated, truncated, info = self.vector.step(actions)
        if self.screen is not None:
            self.take_screen(self.screen.step(actions)[0])
        self.restarted = obs  # where an episode ended, the next one has already begun
        ended = terminated | truncated
        if self.tracks_lives:  # a new game's lives are no loss
            self.life_lost = (info["lives"] < self.lives) & ~ended
            self.lives = info["lives"]
        if self.fire_after_life_loss:
            # a game with lives to lose whose screen has not changed for STILL_STEPS steps:
            # waiting for FIRE (Pong has no lives; SpaceInvaders' invaders rest every other step)
            still = (self.lives > 0) & ~ended & np.all(obs[:, -1] == obs[:, -2], axis=(1, 2))
            self.still_steps = np.where(still, self.still_steps + 1, 0)
        if ended.any():  # the step's own observation is the final one of the ended game
            obs = np.where(ended[:, None, None, None], info["final_obs"], obs)
        return obs, rewards.astype(np.float64), terminated, truncated

    @property
    def standing_still(self) -> np.ndarray:
        return self.still_steps >= STILL_STEPS

    def restart(self, k: int):
        return self.restarted[k]

    def take_screen(self, screen_frames: np.ndarray) -> None:
        self.screen_frames = screen_frames[:, -1]  # (count, height, width, 3): each game's newest
        if self.window is not None:
            self.window.show(self.screen_frames[0])

    def render(self):
        """Env 0's newest frame: in colour at the console's size with screen, else the agent's
        own preprocessed one (ALE's vector env keeps no screen)."""
        if self.screen is not None:
            return self.screen_frames[0].copy()
        return self.restarted[0, -1].copy()

    def close(self) -> None:
        self.vector.close()
        if self.screen is not None:
            self.screen.close()
        if self.window is not None:
            self.window.close()


def atari_game(env_id: str) -> tuple[str, dict]:
    """ale-py's game name for an ALE/...-v5 id, and the id's registered settings."""
    if not env_id.endswith("-v5"):
        instead = old_atari_id(env_id[len(ATARI_PREFIX):])
        raise UsageError(f"{env_id}: only the ALE/<Game>-v5 ids are supported (their rules: "
                         f"frame skip 4, minimal action set); " + (
                             f"use {instead}" if instead else
                             "gymnasium.pprint_registry() lists them once ale-py is imported"))
    try:
        import ale_py
        gym.register_envs(ale_py)
        registered = gym.spec(env_id)
    except ImportError:
        raise UsageError(f"{env_id} needs ale-py: pip install -r requirements.txt") from None
    except Exception as exc:
        raise UsageError(f"cannot make environment '{env_id}': {first_line(exc)} "
                         f"(gymnasium.pprint_registry() lists the known ids)") from None
    return registered.kwargs["game"], registered.kwargs


STILL_STEPS = 8  # greedy play presses FIRE once a game's screen has stood still this long
ATARI_FIRE = 1  # FIRE's index in the minimal action set of every game that has it


def atari_needs_fire(env_id: str) -> bool:
    """Whether the game has FIRE as the second action of its minimal set (where ALE puts it).
    That is all it checks: in Breakout the ball is served only on FIRE; in a game where FIRE
    shoots (SpaceInvaders) greedy play fires one extra shot after each lost life."""
    env = gym.make(env_id)
    try:
        meanings = env.unwrapped.get_action_meanings()
    finally:
        env.close()
    return len(meanings) > ATARI_FIRE and meanings[ATARI_FIRE] == "FIRE"
