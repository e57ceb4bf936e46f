"""Every hyperparameter of the A3C trainer, in one dataclass, plus per-environment presets.

A run's config, lowest precedence first: Config's defaults < the env's preset (PRESETS; any other
ALE/ id gets ATARI, gymnasium's MuJoCo envs MUJOCO) < the --sync preset (SYNC_PRESETS) < --set and the flags (--workers,
--max-episodes, --max-steps, --seed and --sync are shortcuts for --set of their field). So a
default that a preset sets is not the one a run uses: describe_preset() names what the preset
sets. `--resume` continues with the run's saved config.json instead (the command line may change
only a few fields, such as the budget).

A field's docstring says what it does and where its default comes from; docs/config.md keeps the
measurements and tuning histories behind the defaults and presets. Each run writes the effective
values to config.json. Edit a default or a preset below, or override one field for one run:
    python a3c.py --env Pendulum-v1 --set actor_lr=3e-4 --set n_steps=10
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional


# float32's smallest normal number and its largest (np.finfo(np.float32)), without numpy
FLOAT32_TINY, FLOAT32_MAX = 1.1754943508222875e-38, 3.4028234663852886e38


@dataclass
class Config:
    # --- the run ---------------------------------------------------------------------------
    workers: int = 8
    """Worker threads, each with its own local ACNet and its own environments (A3C paper: 16)."""
    envs_per_worker: int = 4
    """Environments each worker steps together: one session call acts for all, one push carries
    all their rollouts (1: the classic A3C worker; 4: tuned here, docs/config.md)."""
    max_episodes: Optional[int] = 1000
    """Stop after this many finished episodes in all (None, or 0 on the command line: no limit)."""
    max_steps: Optional[int] = None
    """Stop after this many env steps in all (None, or 0 on the command line: no limit)."""
    seed: int = 1
    """Seeds TensorFlow, NumPy and every environment, 0 to 2**32 - 1; threads still interleave
    nondeterministically. Each --resume seeds anew (docs/config.md)."""
    max_episode_steps: Optional[int] = None
    """An episode's time limit (None: the env's own, Pendulum-v1's 200); reaching it truncates the
    episode, and the n-step return bootstraps from V(s) there."""
    pin_threads: bool = True
    """Linux, 2+ CPUs, 3+ workers: worker threads share one CPU and TensorFlow's ops run on the
    others (cpus.py's cpu_layout); measured faster on 2 cores (docs/config.md). An env whose step
    releases the GIL may run faster unpinned: bench/throughput.py --also-unpinned tells."""

    # --- the A3C update --------------------------------------------------------------------
    gamma: float = 0.99
    """Discount factor (A3C paper: 0.99)."""
    n_steps: int = 5
    """Rollout length: each push carries n steps per environment, every step's return
    bootstrapped at most n steps ahead (A3C paper: t_max = 5)."""
    entropy_beta: float = 0.01
    """Weight of the entropy bonus in the actor loss (A3C paper: 0.01)."""
    clip_norm: float = 40.0
    """Actor and critic gradients are each clipped to this global norm before a push (a shared
    trunk's one loss: one norm); universe-starter-agent and the A3C tutorials: 40."""

    # --- optimisers: two RMSProps on the global net, one for the actor, one for the critic --
    actor_lr: float = 1e-3
    """Actor learning rate (tuned here on CartPole, Acrobot and Pendulum; the classic tutorial's
    1e-4 learns several times slower)."""
    critic_lr: float = 3e-3
    """Critic learning rate (tuned here; the classic tutorial: 1e-3)."""
    scale_lr_with_workers: bool = False
    """Divide both learning rates by sqrt(workers), the chief's on a cluster (a practitioners'
    rule of thumb; the study found it worse: docs/config.md). Refused with sync_updates, where a
    round makes one update however many workers push."""
    sync_updates: bool = False
    """A2C instead of A3C (--sync, which also applies SYNC_PRESETS): each round applies one clipped
    step of all workers' mean gradient, and every worker pulls the result (docs/config.md)."""
    anneal_lr: bool = False
    """Decrease both learning rates linearly to 0 with every env step, over the run's budget or
    anneal_steps (A3C paper). How --resume goes on, and when it refuses: docs/config.md."""
    anneal_steps: Optional[int] = None
    """With anneal_lr: the env steps over which both rates fall to 0 (and stay there), instead of
    the budget, as episodes that lengthen make a poor clock. Without anneal_lr: nothing."""
    rmsprop_decay: float = 0.99
    """RMSProp's moving-average decay (A3C paper: 0.99; TF's default 0.9)."""
    rmsprop_epsilon: float = 1e-5
    """RMSProp's epsilon under the square root (OpenAI baselines' A2C: 1e-5; TF's default 1e-10
    lets weights with tiny gradients step nearly lr each time: docs/config.md)."""

    # --- Atari (ALE/<Game>-v5 ids): image observations, one network with a shared trunk ----
    shared_lr: float = 7e-4
    """Learning rate of the one RMSProp of a net with a shared trunk (the Atari CNN, or use_lstm;
    OpenAI baselines' A2C on Atari: 7e-4). Separate MLPs use actor_lr and critic_lr."""
    value_loss_coef: float = 0.5
    """A shared trunk trains on one loss, policy loss + value_loss_coef x value loss - entropy
    (baselines' A2C: 0.5; the A3C paper halved the value gradient the same way)."""
    cnn: str = "a3c"
    """The trunk of image observations: "a3c" (the A3C paper's), "nature" (DQN's) or "small"
    (universe-starter-agent's, on 42x42 frames); layers and measurements: docs/config.md."""
    trunk_activation: str = "elu"
    """The CNN trunk's nonlinearity: "elu" (universe-starter-agent's and pytorch-a3c's) or "relu"
    (both papers'), with which our Pong run never learned (docs/config.md)."""
    reward_clip: Optional[float] = None
    """Clip learning rewards to [-reward_clip, reward_clip] before reward_shift and reward_scale
    (Atari: 1, as DQN and A3C did, so one rate fits every game's scores); logs show raw scores."""
    repeat_action_probability: float = 0.25
    """Atari "sticky actions": the chance the emulator repeats the previous action instead (0.25:
    what ALE/...-v5 ids mean, Machado et al. 2018; the old ids of the A3C figures: 0.0)."""
    terminal_on_life_loss: bool = False
    """Atari, training only: a lost life ends the n-step return there (bootstrap 0), as DQN
    trained, while the game, its score and its record go on to its last life. Games without
    lives (Pong) are unchanged."""
    use_lstm: bool = False
    """An LSTM of lstm_units cells after the trunk (the A3C paper's "A3C LSTM"), for tasks whose
    observations leave out what must be remembered: both heads then train on one loss with
    shared_lr (on flat observations actor_/critic_hidden and _lr go unused). On in Breakout's
    and SpaceInvaders' presets only: it costs time per step, and on flat observations samples
    too (CartPole needs ~300k env steps with it, more than its preset's 1,500 episodes hold;
    docs/config.md)."""
    lstm_units: int = 256
    """Cells of the LSTM (A3C paper: 256)."""
    lstm_input_hidden: tuple = (64,)
    """Flat observations with use_lstm: hidden layers (hidden_activation) between them and the
    LSTM, part of the shared trunk. Raw observations beside 256 recurrent inputs barely move the
    gates at the start: one layer of 64 took CartPole's mean-100 at 150k steps from 62 to 189
    (docs/config.md). The A3C paper put 200 ReLUs before its MuJoCo LSTM."""
    atari_threads: int = 1
    """Atari: C++ threads of each worker's ale-py vector env, which step its games (1: with 8
    workers there are already more such threads than cores; not tuned further)."""

    # --- networks (separate actor and critic MLPs, as in the classic tutorial) --------------
    actor_hidden: tuple = (200,)
    """Hidden layer sizes of the actor."""
    critic_hidden: tuple = (100,)
    """Hidden layer sizes of the critic."""
    hidden_activation: str = "relu"
    """Both MLPs' hidden nonlinearity: "relu" (the classic tutorial's) or "tanh" (SB3's and
    OpenAI baselines' MLP policies); a shared trunk's heads have no hidden layers to change."""
    sigma_from_state: bool = False
    """Continuous actions: sigma is an output of the actor (True, A3C paper) or one learned
    parameter per action dimension (False, PPO and SB3's A2C; tuned here on Pendulum)."""
    use_sde: bool = False
    """Continuous actions: generalized state-dependent exploration (gSDE, Raffin et al. 2021;
    rl-zoo's A2C on Pendulum uses it): the noise is a linear map of the actor's features, its
    matrix drawn anew for each rollout, so that it changes smoothly with the state and sigma
    depends on it (the formula: networks.py's GaussianPolicy). Pendulum's preset uses it; it
    did not help HalfCheetah (docs/config.md)."""
    initial_sigma: float = 0.7
    """Continuous actions: the standard deviation at the start, as a fraction of half the action
    range (0.7 is softplus(0) + floor, what a zero-initialised layer gives)."""
    final_sigma_scale: float = 1.0
    """Continuous actions, with anneal_lr: sigma narrows with the rate, to this factor where the
    rate reaches 0 (1.0: no narrowing, as in the A3C paper). The formula: docs/config.md."""
    sigma_floor: float = 0.01
    """Continuous actions: the smallest standard deviation, as a fraction of half the action
    range, so that the policy never collapses to a point and log-probs stay finite."""
    scale_obs: bool = False
    """Map observation dimensions with finite bounds (up to 1e6) from [low, high] to [-1, 1]: helps
    where the bounds are the values' real range (Pendulum), hurts where far wider (Acrobot)."""

    normalize_obs: bool = False
    """Flat observations: each dimension less its running mean, over its running standard
    deviation, clipped to +-obs_clip. The statistics count every observation the workers have
    trained on, all workers together; they are saved in the checkpoints and frozen in --eval.
    For unbounded observations (MuJoCo), which scale_obs leaves alone (SB3's VecNormalize)."""
    obs_clip: float = 10.0
    """With normalize_obs: the bound of the normalised values (VecNormalize's clip_obs: 10)."""

    # --- rewards (applied to learning only; logs always show the environment's raw returns) -
    reward_shift: float = 0.0
    """Learning reward is (r + reward_shift) * reward_scale."""
    reward_scale: float = 1.0
    """See reward_shift."""

    # --- output ----------------------------------------------------------------------------
    log_every_s: float = 5.0
    """Seconds between progress lines on the console."""
    checkpoint_every_s: float = 300.0
    """Seconds between checkpoints of the global net and its optimiser slots (+ one at the end)."""
    keep_checkpoints: int = 3
    """How many of the newest checkpoints to keep in the run folder's checkpoints/."""
    best_trial_episodes: int = 50
    """checkpoints/best/ keeps the net whose deterministic policy did best over this many trial
    episodes, tried at each new best mean-100 and at the end (0: no trials, the net at the best
    mean-100). 50 tuned here, as fewer kept lucky nets (docs/config.md)."""
    best_checkpoint_every_s: float = 1.0
    """At most one trial (without trials: one promotion) for checkpoints/best/ per this many
    seconds; the trials also keep within best_trial_cpu_share (why: docs/config.md)."""
    best_trial_cpu_share: float = 0.1
    """The share of the run's CPU time the best agent's trials may cost, as TrialSchedule in
    best_agent.py estimates it (what 0.1 costs: docs/config.md)."""

    def validate(self) -> None:
        """Raise ValueError naming the first field whose value cannot work."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not of_its_type(value, field.type):  # (config.json may be edited by hand)
                raise ValueError(f"{field.name} must be of type {field.type}, got {value!r}")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{field.name} must be a finite number, got {value}")
            # the graphs compute in float32: 1e-50 would be 0 there (a floor of 0, a clip to 0)
            if isinstance(value, float) and value != 0 and not (
                    FLOAT32_TINY <= abs(value) <= FLOAT32_MAX):
                raise ValueError(f"{field.name} must be of a size float32 holds "
                                 f"({FLOAT32_TINY:.2g} to {FLOAT32_MAX:.2g}), got {value}")
        if not 0 <= self.seed < 2 ** 32:
            raise ValueError(f"seed must be in [0, 2**32 - 1], got {self.seed}")
        positive_ints = ("workers", "envs_per_worker", "n_steps", "keep_checkpoints", "atari_threads",
                         "lstm_units")
        for name in positive_ints:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_episodes", "max_steps", "max_episode_steps", "anneal_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None (no limit), got {value}")
        if self.workers > MAX_WORKERS:
            raise ValueError(f"workers must be <= {MAX_WORKERS} (threads of one process; more "
                             f"machines: --cluster), got {self.workers}")
        if self.max_episodes is None and self.max_steps is None:
            raise ValueError("set max_episodes or max_steps, or the run never ends")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        if not 0.0 < self.final_sigma_scale <= 1.0:
            raise ValueError(f"final_sigma_scale must be in (0, 1], got {self.final_sigma_scale}")
        if not self.sigma_floor < self.initial_sigma <= 100:  # softplus^-1 overflows past ~700
            raise ValueError(f"initial_sigma must be > sigma_floor ({self.sigma_floor}) and "
                             f"<= 100, got {self.initial_sigma}")
        for name in ("actor_lr", "critic_lr", "shared_lr", "clip_norm", "rmsprop_epsilon", "sigma_floor",
                     "reward_scale", "log_every_s", "checkpoint_every_s", "obs_clip"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.cnn not in CNNS:
            raise ValueError(f"cnn must be {', '.join(CNNS[:-1])} or {CNNS[-1]}, got {self.cnn}")
        if self.hidden_activation not in HIDDEN_ACTIVATIONS:
            raise ValueError(f"hidden_activation must be {' or '.join(HIDDEN_ACTIVATIONS)}, "
                             f"got {self.hidden_activation}")
        if self.trunk_activation not in TRUNK_ACTIVATIONS:
            raise ValueError(f"trunk_activation must be {' or '.join(TRUNK_ACTIVATIONS)}, "
                             f"got {self.trunk_activation}")
        if not 0.0 <= self.repeat_action_probability < 1.0:
            raise ValueError(f"repeat_action_probability must be in [0, 1), got "
                             f"{self.repeat_action_probability}")
        if self.reward_clip is not None and not self.reward_clip > 0:
            raise ValueError(f"reward_clip must be > 0 or None, got {self.reward_clip}")
        if self.value_loss_coef < 0:
            raise ValueError(f"value_loss_coef must be >= 0, got {self.value_loss_coef}")
        if self.best_trial_episodes < 0:
            raise ValueError(f"best_trial_episodes must be >= 0, got {self.best_trial_episodes}")
        if not 0.0 < self.best_trial_cpu_share <= 1.0:
            raise ValueError(f"best_trial_cpu_share must be in (0, 1], got {self.best_trial_cpu_share}")
        if self.best_checkpoint_every_s < 0:
            raise ValueError(f"best_checkpoint_every_s must be >= 0, got {self.best_checkpoint_every_s}")
        if self.entropy_beta < 0:
            raise ValueError(f"entropy_beta must be >= 0, got {self.entropy_beta}")
        if not 0.0 <= self.rmsprop_decay < 1.0:
            raise ValueError(f"rmsprop_decay must be in [0, 1), got {self.rmsprop_decay}")
        for name in ("actor_hidden", "critic_hidden"):
            sizes = getattr(self, name)
            if not sizes or any(int(s) < 1 for s in sizes):
                raise ValueError(f"{name} needs one or more layer sizes >= 1, got {sizes}")
        if any(int(s) < 1 for s in self.lstm_input_hidden):
            raise ValueError(f"lstm_input_hidden needs layer sizes >= 1 (or none), got "
                             f"{self.lstm_input_hidden}")
        for field in dataclasses.fields(self):  # what the graphs hold: int32 sizes and lengths,
            value = getattr(self, field.name)   # an int64 env step count
            largest = 2 ** 63 - 1 if field.name in BUDGET_FIELDS else 2 ** 31 - 1
            if field.name != "seed" and any(isinstance(number, int) and number > largest for number
                                            in (value if isinstance(value, tuple) else (value,))):
                raise ValueError(f"{field.name} must be at most {largest:,}, got {value}")


# What every Atari game shares: the A3C paper's setup, except the trunk, rollout length, rate and
# clip. The runs behind each value: docs/config.md, ATARI.
ATARI = dict(
    cnn="small", n_steps=20,  # universe-starter-agent's and pytorch-a3c's trunk and rollout length
    envs_per_worker=8,      # one C++ vector env of 8 games per worker: pushes of 160 samples
    gamma=0.99, entropy_beta=0.01, reward_clip=1.0, anneal_lr=True,  # A3C paper
    shared_lr=2e-3,         # tuned on seed 61
    clip_norm=0.5, rmsprop_epsilon=1e-5,  # baselines' A2C (the paper's clip 40 seldom binds)
    max_episodes=None, max_steps=10_000_000,  # 40M frames (4 per step), the A3C figures' scale
    best_trial_episodes=4,  # a game lasts thousands of steps
    pin_threads=False,      # the CNN's ops, not Python, fill the CPUs: measured faster unpinned
    repeat_action_probability=0.0,  # no sticky actions, like the ids the A3C figures come from
    terminal_on_life_loss=True,  # DQN's training and rl-zoo's: Breakout's mean-100 at 12M frames 3.4 -> 5.6
)

# --- MuJoCo locomotion (gymnasium's MuJoCo envs, any version): tuned on seed 11 (HalfCheetah 11-17)
MUJOCO = dict(
    normalize_obs=True,     # unbounded observations: HalfCheetah's eval 2,481 -> (with the anneal) 4,002
    anneal_lr=True,         # tuned with it: HalfCheetah's final mean-100 1,677 -> 3,242 (docs/config.md)
    n_steps=20,             # Walker2d's eval (with reward_scale) 272 -> 2,555; HalfCheetah's preset: 5
    max_episodes=None, max_steps=1_000_000,  # the published tables' budget
    best_trial_episodes=5,  # an episode lasts up to 1,000 steps
)
# gymnasium's MuJoCo env names (the part before "-v"): each gets MUJOCO under any version
MUJOCO_ENVS = ("Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup",
               "InvertedDoublePendulum", "InvertedPendulum", "Pusher", "Reacher", "Swimmer",
               "Walker2d")


def is_mujoco_id(env_id: str) -> bool:
    return env_id.rsplit("-v", 1)[0] in MUJOCO_ENVS


# What cnn, trunk_activation and hidden_activation may name: the keys of networks.CNN_LAYERS,
# networks.TRUNK_ACTIVATION_OPS and networks.HIDDEN_ACTIVATION_OPS.
CNNS = ("a3c", "nature", "small")
TRUNK_ACTIVATIONS = ("relu", "elu")
HIDDEN_ACTIVATIONS = ("relu", "tanh")

# Per-environment presets: the fields an env sets over Config's defaults, tuned on seeds 11-28
# and 41-59 (the learning benchmark, bench/learning.py, reports seeds 1-9, on which nothing is
# tuned). The tuning runs behind each value: docs/config.md, by env.
PRESETS: dict[str, dict] = {
    "Pendulum-v1": dict(
        scale_obs=True, critic_lr=5e-3, clip_norm=5.0,  # tuned on seeds 11-19, then 11-28
        gamma=0.93, final_sigma_scale=0.3,  # tuned together on seeds 41-59 (the scale on 11-28)
        reward_shift=8.0, reward_scale=1 / 8,  # r in [-16.3, 0] -> about [-1, 1]
        actor_lr=2e-3, anneal_lr=True,  # tuned: with annealing, a high start pays
        entropy_beta=0.001,     # tuned: 0.01 kept sigma wide and the returns noisy
        use_sde=True,           # tuned on seeds 41-59: finals at/above -200 on 19 of 19 (without: 17)
        envs_per_worker=8, n_steps=3,  # tuned together
        max_episodes=1000,
        shared_lr=2e-3,         # use_lstm only: tuned on seed 11 (docs/config.md, use_lstm)
    ),
    "CartPole-v1": dict(
        hidden_activation="tanh", envs_per_worker=2,  # tuned on seeds 41-59
        n_steps=10,             # tuned (with ReLUs, as are the rest): fewer, larger pushes
        actor_lr=1.5e-3, anneal_lr=True, anneal_steps=300_000,  # tuned on seeds 11-19 and 11-28
        max_episodes=1500,
        shared_lr=3e-3,         # use_lstm only: tuned on seed 11 (docs/config.md, use_lstm)
    ),
    "Acrobot-v1": dict(max_episodes=1500),
    # 50M frames: the scoreboard gives Pong until +18 or 2 h, and seed 2 ended its 40M frames
    # (1.56 h) at 15.0, still rising; tuned on seed 62 (docs/atari.md)
    "ALE/Pong-v5": dict(ATARI, max_steps=12_500_000),
    # the LSTM after the small CNN (the A3C paper's "A3C LSTM"): mean-100 at 40M frames 19.6 on
    # tuning seed 11 and 20.1 on seed 1, where the feed-forward net had 14.0 (its best setting
    # there) and 13.0 (docs/atari.md)
    "ALE/Breakout-v5": dict(ATARI, use_lstm=True),
    # the same: mean-100 at 40M frames 507.4 on tuning seed 11 and 504.6 on seed 1, where the
    # feed-forward net had 436.0 and 431.9 (docs/atari.md)
    "ALE/SpaceInvaders-v5": dict(ATARI, use_lstm=True),
    # tuned on seed 11: the critic's returns a tenth as large; Hopper's eval 176 -> 2,466 (at
    # n_steps 5), Walker2d's 287 -> 2,555 with n_steps 20; it hurt HalfCheetah (docs/config.md)
    **{f"{name}-v{version}": dict(MUJOCO, reward_scale=0.1)
       for name in ("Hopper", "Walker2d") for version in (4, 5)},
    # tuned on seeds 12-17: n_steps 5 took the median eval of the best from 2,659 to 3,942, and
    # the seeds at or above 3,041 (rl-zoo's A2C) from 2 of 6 to 4 (one run each; run again,
    # 12-17 gave 3 of 6: runs of one seed differ). 4 workers (pushes half as stale; on 2 cores
    # as many env steps/s, on more cores fewer than 8 would give): 26 of 36 runs on seeds 12-47
    # reached 3,041 (31 of 48 with a later sitting's), the 8 workers' 52 of 86, a gap inside the
    # draw (docs/config.md)
    **{f"HalfCheetah-v{version}": dict(MUJOCO, n_steps=5, workers=4) for version in (4, 5)},
}

# --sync (A2C) on top of an env's preset, tuned on seeds 11-17 (results/study.md reports seeds
# 1-5). A round makes one update for all workers' rollouts, 8x fewer per env step than the
# asynchronous workers at the presets' batching: these make rounds smaller (docs/config.md).
SYNC_PRESETS: dict[str, dict] = {
    # (tuned before Pendulum's preset took use_sde, which --sync inherits: not measured with it)
    "Pendulum-v1": dict(envs_per_worker=1),  # rounds of 8 x 3 = 24 samples, one async push's worth
    "CartPole-v1": dict(envs_per_worker=1,   # rounds of 8 x 10 = 80 samples
                        actor_lr=4.5e-3, critic_lr=9e-3),  # 3x the preset's, about sqrt(8)
}


def _preset_layers(env_id: str, sync: bool) -> list[tuple[str, dict]]:
    """(its name in describe_preset's line, the fields it sets) of each preset config_for applies
    to env_id, in order: the one lookup behind preset_for and describe_preset."""
    if env_id in PRESETS:
        layers = [(f"the {env_id} preset (config.py PRESETS)", PRESETS[env_id])]
    elif env_id.startswith("ALE/"):
        layers = [("the Atari preset (config.py ATARI)", ATARI)]
    elif is_mujoco_id(env_id):
        layers = [("the MuJoCo preset (config.py MUJOCO)", MUJOCO)]
    else:
        layers = [(f"no preset for {env_id}: Config's defaults", {})]
    if sync:
        name = ("--sync's preset (config.py SYNC_PRESETS)" if env_id in SYNC_PRESETS
                else f"--sync (no SYNC_PRESETS entry for {env_id})")
        layers.append((name, {**SYNC_PRESETS.get(env_id, {}), "sync_updates": True}))
    return layers


def preset_for(env_id: str, sync: bool = False) -> dict:
    """The fields config_for sets over Config's defaults for env_id (with sync: --sync's too)."""
    return {name: value for _, fields in _preset_layers(env_id, sync)
            for name, value in fields.items()}


def config_for(env_id: str, sync: bool = False) -> Config:
    """The defaults with the env's preset applied (any other Atari game gets the Atari preset,
    gymnasium's MuJoCo envs the MuJoCo preset, any other env id the plain defaults); sync: with --sync's own values on top (SYNC_PRESETS)."""
    return dataclasses.replace(Config(), **preset_for(env_id, sync))


def describe_preset(env_id: str, sync: bool = False, given: dict = None) -> str:
    """The one line for a run to print first: the presets config_for applies to env_id and the
    fields each sets, so that an edited Config default that a preset overrides shows at once;
    given: {field: value} the command line sets, named at the end where a preset set another."""
    layers, preset = _preset_layers(env_id, sync), preset_for(env_id, sync)
    line = "config: " + "; ".join(name + (f" sets {', '.join(fields)}" if fields else "")
                                  for name, fields in layers)
    overridden = [name for name in field_names()
                  if name in (given or {}) and name in preset and given[name] != preset[name]]
    return line + (f" (the command line sets {', '.join(overridden)} instead)"
                   if overridden else "")


# What a run's config.json written before a field existed meant by its absence, where that
# may differ from today's default: those runs' CNN trunks and MLPs were ReLU nets, and their
# LSTMs read flat observations directly; resuming or evaluating one with ELUs, tanh or an input
# layer would load its weights into the wrong network.
BEFORE_THE_FIELD = {"trunk_activation": "relu", "hidden_activation": "relu", "lstm_input_hidden": ()}


BUDGET_FIELDS = ("max_episodes", "max_steps", "anneal_steps")  # counted in Python and int64


def of_its_type(value, kind: str) -> bool:
    """Whether value fits a Config field's annotation: int, float (an int too), bool, str, a tuple
    of ints, or Optional of one (None)."""
    if kind.startswith("Optional["):
        return value is None or of_its_type(value, kind[len("Optional["):-1])
    if kind == "bool" or isinstance(value, bool):
        return kind == "bool" and isinstance(value, bool)
    if kind == "tuple":
        return isinstance(value, tuple) and all(of_its_type(size, "int") for size in value)
    return isinstance(value, {"int": int, "float": (int, float), "str": str}[kind])


def from_dict(values: dict) -> Config:
    """A Config from the "config" object of a run's config.json (ValueError if it doesn't fit)."""
    known = set(field_names())
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown config keys {unknown}")
    values = {**BEFORE_THE_FIELD, **values}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    return dataclasses.replace(Config(), **values)


MAX_WORKERS = 1024  # worker threads in one process: each builds a net and opens its envs


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Config)]


def unused_fields(cfg: Config, image: bool, discrete: bool,
                  obs_bounded: bool = True) -> dict[str, str]:
    """The fields that change nothing in a run of cfg on an env with image (Atari) or flat
    observations, discrete or continuous actions, and (obs_bounded) flat observations of which
    some have finite bounds, each with why: a run says so of those set by hand (they are kept
    in config.json all the same)."""
    shared = image or cfg.use_lstm
    why = {}
    if not image:
        why.update(dict.fromkeys(("cnn", "trunk_activation", "repeat_action_probability",
                                  "atari_threads", "terminal_on_life_loss"),
                                 "it is for Atari's image observations"))
        if not obs_bounded:
            why["scale_obs"] = ("it maps finite observation bounds, and this env's observations "
                                "have none (normalize_obs is for unbounded ones)")
    else:
        why["scale_obs"] = "Atari's frames are scaled to [0, 1] in the graph"
    if discrete:
        why.update(dict.fromkeys(("sigma_from_state", "initial_sigma", "final_sigma_scale",
                                  "sigma_floor", "use_sde"), "it is for continuous actions"))
    else:
        if not cfg.anneal_lr:
            why["final_sigma_scale"] = "sigma narrows with the annealed rate: it needs anneal_lr"
        if cfg.use_sde:
            why["sigma_from_state"] = "use_sde's sigma depends on the state its own way"
    if shared:
        why.update(dict.fromkeys(("actor_lr", "critic_lr", "actor_hidden", "critic_hidden"),
                                 "one trunk feeds both heads here (Atari, use_lstm): shared_lr "
                                 "trains it"))
    else:
        why.update(dict.fromkeys(("shared_lr", "value_loss_coef"), "it is for one trunk under "
                                 "both heads (Atari, use_lstm); actor_lr and critic_lr train here"))
    hidden = cfg.lstm_input_hidden if cfg.use_lstm else cfg.actor_hidden + cfg.critic_hidden
    if image or not hidden:
        why["hidden_activation"] = "no hidden layer here uses it (it is for flat observations' MLPs)"
    if not cfg.use_lstm:
        why.update(dict.fromkeys(("lstm_units", "lstm_input_hidden"), "it needs use_lstm"))
    elif image:
        why["lstm_input_hidden"] = "it is for flat observations"
    if not cfg.anneal_lr:
        why["anneal_steps"] = "it needs anneal_lr"
    if not cfg.normalize_obs:
        why["obs_clip"] = "it needs normalize_obs"
    if not cfg.best_trial_episodes:
        why["best_trial_cpu_share"] = "it paces the best agent's trials: best_trial_episodes is 0"
    return why


# Budgets where None means "no limit": on the command line 0 says the same.
NO_LIMIT_FIELDS = ("max_episodes", "max_steps")


def parse_overrides(items: list[str]) -> dict:
    """{"key": value} from ["key=text", ...] as given to --set (ValueError on a bad item, and on a
    key given twice: which one was meant is not ours to guess)."""
    overrides, given = {}, {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set needs KEY=VALUE, got '{item}'")
        key, text = (part.strip() for part in item.split("=", 1))
        if key in given:
            raise ValueError(f"{key} is set twice ({given[key]} and {item}); set it once")
        given[key] = item
        overrides[key] = parse_value(key, text)
    return overrides


def parse_value(name: str, text: str):
    """Turn the text of `--set name=text` into a value of the field's type (ValueError if not)."""
    fields = {f.name: f for f in dataclasses.fields(Config)}
    if name not in fields:
        raise ValueError(f"unknown config key '{name}'; known keys: {', '.join(fields)}")
    kind = fields[name].type
    text = text.strip()
    if kind.startswith("Optional") and text.lower() in ("none", ""):
        return None
    try:
        if "bool" in kind:
            lowered = text.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if "int" in kind:  # "1e6" too; digits exactly, past float's 2**53
            number = int(text) if text.lstrip("+-").isdigit() else float(text)
            if isinstance(number, float) and not number.is_integer():
                raise ValueError
            return None if number == 0 and name in NO_LIMIT_FIELDS else int(number)
        if "float" in kind:
            return float(text)
        if "tuple" in kind:
            if text.lower() in ("none", ""):  # no layers
                return ()
            parts = text.replace("x", ",").split(",")
            if not all(part.strip() for part in parts):  # "64,,64", "64,": a size left out
                raise ValueError
            return tuple(int(part) for part in parts)
    except ValueError:
        pass
    else:
        return text
    raise ValueError(f"bad value for {name}: '{text}' is not a valid {kind}")
