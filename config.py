"""Every hyperparameter of the A3C trainer, in one documented dataclass, plus per-environment presets.

`a3c.py` reads nothing else: the command line only overrides fields of `Config`
(`--workers 8` is a shortcut for `--set workers=8`). A field's comment says what it does and
where its default comes from. Each run writes the effective values to `config.json`.

Edit a preset below, or override one field for one run:
    python a3c.py --env Pendulum-v1 --set actor_lr=3e-4 --set n_steps=10
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional


@dataclass
class Config:
    # --- the run ---------------------------------------------------------------------------
    workers: int = 8
    """Worker threads, each with its own local ACNet and its own environments (A3C paper: 16)."""
    envs_per_worker: int = 4
    """Environments each worker steps together; one session call chooses all their actions and
    one push carries all their n-step rollouts. 1 is the classic A3C worker; 4 (tuned here) runs
    about 3x faster on 2 cores and learns as well per episode; 8 learned CartPole worse within
    1,500 episodes (more of them are spent by the first, random policy)."""
    max_episodes: Optional[int] = 1000
    """Stop after this many finished episodes over all workers (None: no episode limit; on the
    command line 0 and none both mean None)."""
    max_steps: Optional[int] = None
    """Stop after this many environment steps over all workers (None: no step limit; on the
    command line 0 and none both mean None)."""
    seed: int = 1
    """Seeds TensorFlow's graph, NumPy and every environment (env k of worker w gets
    seed*1000 + w*envs_per_worker + k), 0 to 2**32 - 1. Threads still interleave
    nondeterministically. Each --resume of a run seeds everything anew from (seed, how many
    times the run was resumed), so a resumed part never replays the start states and noise of an
    earlier part; config.json's "resumed" entries record the seed each part used."""
    max_episode_steps: Optional[int] = None
    """Time limit of an episode; None keeps the environment's own (Pendulum-v1: 200 steps).
    Reaching it truncates the episode, and the n-step return bootstraps from V(s) there."""
    pin_threads: bool = True
    """Linux, 2+ CPUs, 3+ workers: the worker threads share the first CPU and TensorFlow runs
    their ops in a pool of threads on other CPUs (at most one per worker, and no more CPUs in all
    than a cgroup CPU quota grants; cpus.py's cpu_layout says why). Only one thread runs Python
    at a time (the GIL); handing it to a worker waiting on the same CPU is cheap, while waking one on another
    CPU costs more than a session call. 8 workers x 8 Pendulum envs on 2 cores: ~1.6x the env
    steps/s. False (and 1-2 workers, or no affinity API): threads run anywhere and each session
    call runs its ops in the calling thread. The algorithm is the same; pushes queue a little
    more (Pendulum took ~10% more episodes to -200 on the tuning seeds, in less time). An env whose
    step releases the GIL (a C++ simulator that does) may run faster unpinned: measure with
    bench/throughput.py --also-unpinned."""

    # --- the A3C update --------------------------------------------------------------------
    gamma: float = 0.99
    """Discount factor (A3C paper: 0.99)."""
    n_steps: int = 5
    """Rollout length: each push carries n steps per environment, every step's return
    bootstrapped at most n steps ahead (A3C paper: t_max = 5)."""
    entropy_beta: float = 0.01
    """Weight of the entropy bonus in the actor loss (A3C paper: 0.01)."""
    clip_norm: float = 40.0
    """Actor and critic gradients are each clipped to this global norm before a push (with a
    shared trunk: the one loss's gradients, as one global norm; universe-starter-agent and the
    A3C tutorials: 40; the Atari preset's is 0.5)."""

    # --- optimisers: two RMSProps on the global net, one for the actor, one for the critic --
    actor_lr: float = 1e-3
    """Actor learning rate (tuned here on CartPole, Acrobot and Pendulum; the classic tutorial's
    1e-4 learns several times slower)."""
    critic_lr: float = 3e-3
    """Critic learning rate (tuned here; the classic tutorial: 1e-3)."""
    scale_lr_with_workers: bool = False
    """Divide both learning rates by sqrt(workers): more workers push more often, so each push
    should move less (a practitioners' rule of thumb). On a cluster every process applies the
    chief's rates: divided by the square root of the chief's --workers, not the cluster's total
    (another process's --workers sets only its own threads)."""
    sync_updates: bool = False
    """A2C instead of A3C (--sync): each round, every worker plays its n-step rollout and stores
    its gradients; the mean of all of them (the gradient of the workers' concatenated batch, as
    every batch is as large) is clipped to clip_norm once and applied to the global net in one
    RMSProp step per optimiser, and every worker then pulls those same parameters. Same nets,
    losses, optimisers and logs as the asynchronous default (a row's grad_norm is its worker's
    own batch's, before the mean); a round waits for its slowest worker. --sync starts from the
    env's SYNC_PRESETS values below (CartPole's rates among them); results/study.md compares the
    two modes. On a cluster a round spans every worker process (README: Synchronous updates)."""
    anneal_lr: bool = False
    """Decrease both learning rates linearly to 0 over the run's budget, as the A3C paper did,
    moving with every env step: a max_steps budget counts env steps, a max_episodes budget is
    converted into env steps with the mean length of the episodes finished so far (whichever
    budget is nearer wins; the rate never goes back up, and reaches 0 a little before the last
    episodes end). With equally long episodes (Pendulum: 200 steps) that is a straight line in
    env steps, where counting finished episodes made a staircase. On --resume the rate goes on
    from where the run left it and falls to 0 at the end of the new budget, so raising the
    budget never makes it jump back up; a run whose rate had reached 0 (it used its budget, or
    went past anneal_steps) is refused, as it would learn nothing more: resume it with --set
    anneal_lr=false to train on at the base rates. That jump can undo what was learned: our Pong
    run (results/pong_curve.md), resumed so at 3e-4 from 3% of it, fell from a mean-100 of -3.4
    to -20 within 120k agent steps (its checkpoints from before were kept). With anneal_steps
    set, that horizon replaces the budget, and a larger budget changes nothing."""
    anneal_steps: Optional[int] = None
    """With anneal_lr: the env steps over which both rates fall to 0 (and stay there), instead
    of the run's budget (without anneal_lr it does nothing, so that a preset's horizon does not
    stand in the way of --set anneal_lr=false). An episode budget is a poor clock where episodes lengthen as the agent
    learns (CartPole: ~20 steps at first, 500 at the end): most of its episodes are spent early,
    so the rate would fall while the agent still has everything to learn."""
    rmsprop_decay: float = 0.99
    """RMSProp's moving-average decay (A3C paper: 0.99; TF's default 0.9)."""
    rmsprop_epsilon: float = 1e-5
    """RMSProp's epsilon, added to the mean square under the square root (OpenAI baselines' A2C:
    1e-5; TF's default 1e-10). TF1's RMSProp starts the mean square at 1, so early steps are
    damped, not huge; epsilon matters later, for weights whose gradients stay tiny (mean square
    below ~1e-5), where 1e-10 lets lr * g / sqrt(ms) grow to nearly lr per step."""

    # --- Atari (ALE/<Game>-v5 ids): image observations, one network with a shared trunk ----
    shared_lr: float = 7e-4
    """Learning rate of the one RMSProp of a network with a shared trunk (the Atari CNN, or any
    net with use_lstm; OpenAI baselines' A2C on Atari: 7e-4, in the A3C paper's range; the
    Atari preset's is 2e-3 over pushes of 160 samples, see ATARI). Separate MLPs use actor_lr
    and critic_lr instead."""
    value_loss_coef: float = 0.5
    """A shared trunk trains on one loss, policy loss + value_loss_coef x value loss - entropy
    (baselines' A2C: 0.5; the A3C paper halved the value gradient the same way)."""
    cnn: str = "a3c"
    """The trunk of image observations: "a3c" (the A3C paper's 16 8x8/4 -> 32 4x4/2 -> 256),
    "nature" (DQN's 32 8x8/4 -> 64 4x4/2 -> 64 3x3/1 -> 512), or "small" (42x42 frames, four
    32 3x3/2 convolutions -> 256: universe-starter-agent's and pytorch-a3c's trunk). The Atari
    preset uses "small": faster on 2 cores and, with its n_steps, shared_lr and clip_norm, the
    fastest Pong learner we ran (see ATARI; results/throughput_atari_cnn.md). At the paper's
    settings (n_steps 5, 3e-4) "a3c" learned more per frame: seed 5 had mean-100 -18 at 14.3M
    frames, "small" -19.4 at 21.1M (results/pong_curve.md, results/pong_curve_small.md).
    "nature" ran at 404 agent steps/s against "a3c"'s 646 in an older sitting
    (results/throughput_atari_nature.md)."""
    trunk_activation: str = "elu"
    """The CNN trunk's nonlinearity: "elu", or "relu", both papers' choice. With ReLUs our Pong run
    (results/pong_curve_relu.md) never started: after 12.5M frames 61% of the fc units were
    off on every frame and V and the logits barely moved between frames (std 0.01 over real
    frames). Pong's frames are a near-constant background, so each unit's input is too: an
    RMSProp step moves its whole pre-activation at once, and a unit pushed below 0 on every
    frame gets no gradient again (results/pong_trunk_relu.md). ELUs (as universe-starter-agent
    and pytorch-a3c use) keep a gradient there: at the same rate, 18-77% of the units sat at the
    floor at one checkpoint or another but came back (results/pong_trunk_elu_lr7e-4.md)."""
    reward_clip: Optional[float] = None
    """Rewards for learning are clipped to [-reward_clip, reward_clip] before reward_shift and
    reward_scale (Atari: 1, as DQN and A3C did, so one learning rate fits every game's score
    scale); logs always show the raw score."""
    repeat_action_probability: float = 0.25
    """Atari: the chance that the emulator repeats the previous action instead of the chosen
    one ("sticky actions"); 0.25 is what ALE/...-v5 ids mean (Machado et al. 2018). The figures
    usually quoted for A3C come from the old deterministic ids (0.0)."""
    use_lstm: bool = False
    """An LSTM of lstm_units cells after the trunk (the A3C paper's "A3C LSTM"; its mean
    human-normalised Atari score beat the feed-forward net's, its median did not): each env's
    state is carried from step to step and rollout to rollout, zeroed when its episode ends,
    and the update runs it over the rollout from the state the rollout started with. Both heads
    then share the trunk, so they train on one loss through one optimiser (shared_lr). On flat
    observations the LSTM is the trunk: it reads the observations (scaled, with scale_obs) and
    the heads sit on it with no hidden layers, so actor_hidden, critic_hidden, actor_lr and
    critic_lr go unused (and no preset's shared_lr is tuned for it). Off in the presets: which
    learns Pong faster per wall second is not measured. Its cost: Pong, 2 cores unpinned, 8 games
    per worker, the paper net at n_steps 5: 1,015 / 952 agent steps/s at 4 / 8 workers with it,
    1,265 / 1,210 without (results/throughput_atari.md); the preset at 8 workers: 1,352 with it,
    1,616 without (3 runs each, results/throughput_atari_cnn.md)."""
    lstm_units: int = 256
    """Cells of the LSTM (A3C paper: 256)."""
    atari_threads: int = 1
    """Atari: C++ threads of each worker's ale-py vector env, which step its games. 1: with 8
    workers there are already more such threads than cores (not tuned further)."""

    # --- networks (separate actor and critic MLPs, as in the classic tutorial) --------------
    actor_hidden: tuple = (200,)
    """Hidden layer sizes of the actor."""
    critic_hidden: tuple = (100,)
    """Hidden layer sizes of the critic."""
    hidden_activation: str = "relu"
    """The nonlinearity of both MLPs' hidden layers: "relu" (the classic tutorial's) or "tanh"
    (Stable-Baselines3's and OpenAI baselines' MLP policies). A net with a shared trunk (the
    Atari CNN, use_lstm) has heads without hidden layers, so there it changes nothing."""
    sigma_from_state: bool = False
    """Continuous actions: the standard deviation is an output of the actor (True, as in the A3C
    paper) or one learned parameter per action dimension (False, as in PPO and SB3's A2C; tuned
    here: a state-dependent sigma collapsed on Pendulum and the policy got stuck)."""
    initial_sigma: float = 0.7
    """Continuous actions: the standard deviation at the start, as a fraction of half the action
    range (0.7 is softplus(0) + floor, what a zero-initialised layer gives)."""
    final_sigma_scale: float = 1.0
    """Continuous actions, with anneal_lr (without it, this does nothing): sigma is multiplied by
    final_sigma_scale + (1 - final_sigma_scale) x the learning rate's fraction in force, so it
    narrows as the rate falls (to this factor where the rate reaches 0: the end of the budget,
    or anneal_steps) and the stochastic policy's returns approach the deterministic one's. A
    rollout acts, and is trained on, with the fraction of the push before it. The logged
    entropy is that of the narrowed policy. A run resumed with --set anneal_lr=false plays with
    the policy's own, wider sigma again. 1.0: sigma is the policy's alone, as in the A3C paper."""
    sigma_floor: float = 0.01
    """Continuous actions: the smallest standard deviation, as a fraction of half the action
    range, so that the policy never collapses to a point and log-probs stay finite."""

    scale_obs: bool = False
    """Map each observation dimension with finite bounds in the observation space from [low, high]
    to [-1, 1] inside the graph, before the networks (dimensions with infinite bounds, or bounds
    past 1e6, which some envs write for "unbounded", pass unchanged). It helps where the bounds are the range the values really take (Pendulum: its
    angular velocity spans [-8, 8] and swamped the two unit-range inputs), and hurts where they
    are far wider (Acrobot's velocity bounds, 4 pi and 9 pi, squeezed the values it sees towards
    0: tuning seeds 11-12 never reached -100 within 1,500 episodes)."""

    # --- rewards (applied to learning only; logs always show the environment's raw returns) -
    reward_shift: float = 0.0
    """Learning reward is (r + reward_shift) * reward_scale."""
    reward_scale: float = 1.0
    """See reward_shift."""

    # --- output ----------------------------------------------------------------------------
    log_every_s: float = 5.0
    """Seconds between progress lines on the console."""
    checkpoint_every_s: float = 300.0
    """Seconds between checkpoints of the global net and its optimiser slots (one more is
    written at the end of the run)."""
    keep_checkpoints: int = 3
    """How many of the newest checkpoints to keep in the run folder's checkpoints/."""
    best_trial_episodes: int = 50
    """checkpoints/best/ keeps the best agent of the run, as Stable-Baselines3's EvalCallback keeps
    best_model, and --eval plays it unless told otherwise (--resume continues from the latest).
    Each new best mean-100 makes the global net of that moment a candidate, and its deterministic
    policy plays this many trial episodes (on environments of its own, from the same start
    states every time, in a thread beside the workers); the best candidate is the one with the
    highest mean trial return, and the final net is tried too. The mean-100 alone is a poor
    judge: it lags (100 episodes of nets that kept changing, so the net taken at its peak has
    often begun to fall) and it scores the stochastic policy (tuning seed 11 of Pendulum: the
    net at a best mean-100 of -183 played -326). 50, not 10 or 20: the best of many candidates
    in a short trial is often a lucky one (one Pendulum variant with 10: 3 of 9 best agents
    played 20 other start states below -200; with 20, the Pendulum preset of gamma 0.97 had 1
    of 9 in each of three sittings). Since trials are paid for in CPU time (see
    best_checkpoint_every_s) a run tries more candidates, and the luckiest of more is luckier:
    with 20, one sitting of Acrobot seeds 1-9 kept a best agent that played -104.8; tuning
    seeds 41-58 side by side, 20 and 50 both 18 of 18 at or above -100, the worst -97.8 and
    -88.8. 0: no trials, the best is the net at the best mean-100."""
    best_checkpoint_every_s: float = 1.0
    """At most one trial (or, without trials, one promotion) for checkpoints/best/ per this many
    seconds, and the trials cost about a tenth of the CPU time the run has used (a trial's
    cost: its thread's CPU time, or its share of the machine while it played if that is more;
    TrialSchedule in a3c.py). A Pendulum trial of 50 episodes costs ~0.25 s, an Atari one far
    more. The rule before made a trial wait ten times the wall time of the one before, which
    mid-run is mostly a wait for the GIL: Pendulum runs of ~8 s tried 2-3 candidates, the first
    at a mean-100 of -1,200, and 2 of 9 tuning seeds (61-69) kept a best that had played
    below -200 in its own trials (-248 and -209; over --eval's start states -200.4 and -190.1);
    paid for in CPU time they try 5-7, and 18 of 18 (61-69, 71-79) kept one that played -126 to -143
    over --eval's (a version that charged wall time over the threads, not process CPU). The
    candidate is copied at each rise all the same; the newest copy is tried when its turn comes."""

    best_trial_cpu_share: float = 0.1
    """The share of the run's CPU time the best agent's trials may cost, as TrialSchedule in
    a3c.py estimates it (a trial's own CPU time, or its share of the machine while it played).
    On classic control, seeds 1-9 side by side with and without trials, 0.1 cost ~5% of the
    env steps/s (README, Results). On Atari a trial of 4 whole games lasts minutes, so at 0.1
    one is playing most of the time, charged about a ninth of the machine with 8 workers. The
    Pong run of results/pong_curve_small.md averaged 1,506 agent steps/s, trials included; the
    same run without trials is not measured."""

    def validate(self) -> None:
        """Raise ValueError naming the first field whose value cannot work."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{field.name} must be a finite number, got {value}")
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
                     "reward_scale", "log_every_s", "checkpoint_every_s"):
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


# What every Atari game shares: the A3C paper's Atari setup, except the trunk and rollout length
# (universe-starter-agent's and pytorch-a3c's) and the rate and clip (tuned here, on seed 61).
ATARI = dict(
    cnn="small",            # 42x42 frames, four 32 3x3/2 convolutions (universe-starter-agent's
                            # trunk): on tuning seed 61 with n_steps and clip_norm below and 1e-3,
                            # mean-100 -14.8 at 10.7M frames (0.51 h); the paper net at n_steps 5
                            # and 3e-4 had -18 at 14.3M (results/pong_curve.md). Speed:
                            # results/throughput_atari_cnn.md
    envs_per_worker=8,      # one C++ vector env of 8 games per worker: the act call, the env step and
    n_steps=20,             # the push all go 8-wide; 20 steps (universe-starter-agent, pytorch-a3c)
                            # make pushes of 160 samples, a quarter as many as t_max = 5
    gamma=0.99,             # A3C paper
    entropy_beta=0.01,      # A3C paper
    reward_clip=1.0,        # A3C paper (rewards clipped to [-1, 1] for learning)
    shared_lr=2e-3,         # with eps 1e-5 and small gradients RMSProp acts as SGD at lr / sqrt(eps):
                            # per sample 1.4x baselines' A2C (7e-4 over 80). Tuning seed 61 at
                            # n_steps 20: 2e-3 had mean-100 -15 at 8.2M frames, 1e-3 at 10.3M
                            # (results/pong_tune_s61_lr2e-3.md, pong_tune_s61_lr1e-3_clip0.5.md);
                            # 2 workers x 32 games at n_steps 5 and 1e-3 stayed uniform to 7.8M frames
                            # (pong_tune_s61_2x32_n5.md); 1e-4 with eps 1e-8 left the policy
                            # uniform through 7M frames; 1e-3 without clip_norm 0.5 had gradient
                            # norms jump above 10 and the entropy fall to 1.34 with the score at -20
    clip_norm=0.5,          # baselines' A2C; the A3C paper's 40 seldom binds: a Pong push's norm is
                            # ~0.3 after the first minute but jumps above 10 now and then, and at
                            # 1e-3 those pushes threw the policy about (above)
    rmsprop_epsilon=1e-5,   # baselines' A2C (the paper searched 0.1 with shared statistics)
    max_episodes=None,      # an Atari budget is counted in agent steps (each 4 frames):
    max_steps=10_000_000,   # 40M frames, the A3C paper's figures' scale (the preset's Pong run,
                            # seed 5, reached mean-100 0 at 9.9M frames and +18 at 19.4M, in 0.94 h,
                            # and was stopped at 1 h, 20.7M: results/pong_preset_lr2e-3.md; at 1e-3
                            # a run went to the full 40M: results/pong_preset.md)
    best_trial_episodes=4,  # a game lasts thousands of steps: 4 games per trial, 8 workers' time
    anneal_lr=True,         # A3C paper: the rate falls linearly to 0 over the run
    pin_threads=False,      # the CNN's ops, not Python, fill the CPUs: Pong on 2 cores, 8 workers
                            # 1,210 agent steps/s unpinned, 894 pinned; 4 workers 1,265 and 850
                            # (results/throughput_atari.md: the paper net, n_steps 5;
                            # not measured again with the small CNN)
    repeat_action_probability=0.0,  # no sticky actions, like the ids the A3C figures come from
)

CNNS = ("a3c", "nature", "small")  # what cnn may name (a3c.CNN_LAYERS)
TRUNK_ACTIVATIONS = ("relu", "elu")  # what trunk_activation may name (a3c.TRUNK_ACTIVATION_OPS)
HIDDEN_ACTIVATIONS = ("relu", "tanh")  # what hidden_activation may name (a3c.HIDDEN_ACTIVATION_OPS)

# Per-environment presets: only the fields that differ from the defaults above.
# Tuned on seeds 11-19, later 11-28 and 41-59 (each comment says which); the learning benchmark
# (bench/learning.py) reports seeds 1-9, on which nothing is tuned.
PRESETS: dict[str, dict] = {
    "Pendulum-v1": dict(
        scale_obs=True,       # the angular velocity's [-8, 8] to [-1, 1], like cos and sin: tuning
        critic_lr=5e-3,       # seeds 11-19 reached -200 at a median 140k env steps, not 190k; with
        clip_norm=5.0,        # these two, 18 of 18 tuning seeds (11-28) reached it, 10 of 18 ended
                              # at or above it in that sitting (critic_lr alone: 17 and 12;
                              # neither: 9 of 9 and 6 of 9 on 11-19; clip_norm=5 alone: 7 and 3 of 9)
        gamma=0.93,           # with final_sigma_scale=0.3: on tuning seeds 41-59 the final mean-100
                              # ended at/above -200 on 17 of 18 (15 of 18 in a second sitting) and every best agent played above it
                              # (on 41-49, the old gamma 0.97 with 0.1: finals 6 of 9, best agents
                              # 8 of 9; gamma 0.93 alone: 8 and 8; gamma 0.9 reached -200 later:
                              # results/tuning_41-59.md). A short horizon is enough to swing up;
                              # 0.99 learned far slower
        reward_shift=8.0,     # r in [-16.3, 0] -> about [-1, 1]
        reward_scale=1 / 8,
        actor_lr=2e-3,        # with annealing, a high start pays; without it 2e-3 oscillated
        anneal_lr=True,
        entropy_beta=0.001,   # 0.01 kept sigma near 0.8 (of 2) and returns noisy at about -270
        final_sigma_scale=0.3,  # the stochastic policy's noise cost its returns 50-100 at the end;
                              # tuning seeds 11-28 at gamma 0.97, each pair side by side in one
                              # sitting: finals at/above -200 on 8 of 18 without it, 13 with 0.3
                              # (median final -206 and -169); then 0.3 against 0.1: 11 and 13 of 18
                              # (-190 and -178). Narrowed further, more training episodes fall into
                              # the deterministic policy's limit cycles (see gamma)
        envs_per_worker=8,    # with n_steps=3: -200 on 11 of 12 tuning seeds (1 env per worker:
        n_steps=3,            # 5 of 9). 16 envs x 2 steps runs 1.4x faster but reached it on
                              # only 10 of 12 tuning seeds and 1 of the 3 reported ones
        max_episodes=1000,
    ),
    "CartPole-v1": dict(
        hidden_activation="tanh",  # tuning seeds 41-59 (results/tuning_41-59.md): with ReLUs 475
                              # was reached on 6 of 9 of seeds 41-49 (with entropy_beta=0.001: 9
                              # of 9 there, then 7 of 9 on 51-59), and the misses stalled at a
                              # mean-100 of 130-250 (the cart driving off the track) or
                              # collapsed after reaching it; with tanh (SB3's and baselines'
                              # MLPs) 18 of 18 reached it, ended at/above it, and kept a best
                              # agent at/above it, at a median 140k and 147k env steps and
                              # episodes 1,013-1,074
        envs_per_worker=2,    # with tanh, 4 per worker reached 475 on 8 of 9 reported seeds in two
                              # sittings of four, at episodes up to 1,455 of the 1,500: the first,
                              # random policy spends many short episodes at once. 2 per worker, on
                              # tuning seeds 41-59: 475 reached, ended at/above and kept by the
                              # best agent on 18 of 18, at median episodes 686 and 608 (105k and
                              # 109k env steps). Slower per second (16 envs), as fast to 475
        # (the values below were tuned with ReLUs, before tanh)
        n_steps=10,           # fewer, larger pushes: 0.6x the env steps to 475 of n_steps=5
        actor_lr=1.5e-3,      # annealed from 2e-3 over 300k env steps, tuning seeds 11-19 reached
        anneal_lr=True,       # 475 and ended at/above it on 9 and 9 of 9 (without annealing: 8
        anneal_steps=300_000, # and 5 of 9; policies collapsed after reaching it). Over the
        max_episodes=1500,    # episode budget instead, 0 of 9 reached it: most episodes are spent
                              # short and early, so the rate fell before CartPole learned. From
                              # 1.5e-3 against 2e-3, side by side on tuning seeds 11-28: both
                              # reached 475 on 15 of 18, finals at/above it 15 and 12 of 18
                              # (within noise; seeds 1-9 had ended below it on 3 of 9 from 2e-3)
    ),
    # (A CartPole run still going at 300k env steps plays on with the net frozen there, so its
    # final mean-100 is that net's.)
    "Acrobot-v1": dict(
        max_episodes=1500,
    ),
    "ALE/Pong-v5": dict(ATARI),
    "ALE/Breakout-v5": dict(ATARI),
}


# --sync (A2C) on top of an env's preset (tuned on seeds 11-17; results/study.md reports seeds
# 1-5). A round applies one update for all 8 workers' rollouts, so at the presets' batching it
# makes 8x fewer updates per env step than the asynchronous workers do, and TF1's RMSProp (its
# mean square starts at 1) damps the first ones for 8x as many env steps: Pendulum at 8 x 8 envs
# sat at a mean-100 of -1,200 after 1,000 episodes on tuning seeds 11-12 (-590 with both rates
# 8x). With one env per worker a round's batch is 8 rollouts of one env (Pendulum: 8 x 3 = 24
# samples, the size of one asynchronous push of the preset's 8 envs x 3 steps).
SYNC_PRESETS: dict[str, dict] = {
    "Pendulum-v1": dict(
        envs_per_worker=1,    # rounds of 8 x 3 = 24 samples: -200 on 7 of 7 tuning seeds
                              # (11-17) at episodes 411-551; on seeds 11-12, 2 per worker: 714 and
                              # 671; 4 per worker: never, and 900-937 with both rates doubled
    ),
    "CartPole-v1": dict(
        envs_per_worker=1,    # rounds of 8 x 10 = 80 samples, and both rates 3x the preset's
        actor_lr=4.5e-3,      # (about sqrt(8)): 475 on 7 of 7 tuning seeds (11-17) at episodes
        critic_lr=9e-3,       # 790-895; on seeds 11-12 at the preset's rates with n_steps 5
                              # instead of 10: never and 1,384; 2 envs per worker at 3x: never
                              # and 1,450
    ),
}


def config_for(env_id: str, sync: bool = False) -> Config:
    """The defaults with the env's preset applied (any other Atari game gets the Atari preset,
    any other env id the plain defaults); sync: with --sync's own values on top (SYNC_PRESETS)."""
    preset = PRESETS.get(env_id, ATARI if env_id.startswith("ALE/") else {})
    if sync:
        preset = {**preset, **SYNC_PRESETS.get(env_id, {}), "sync_updates": True}
    return dataclasses.replace(Config(), **preset)


# What a run's config.json written before a field existed meant by its absence, where that
# may differ from today's default: those runs' CNN trunks and MLPs were ReLU nets, and resuming
# or evaluating one with ELUs or tanh would load its weights into the wrong network.
BEFORE_THE_FIELD = {"trunk_activation": "relu", "hidden_activation": "relu"}


def from_dict(values: dict) -> Config:
    """A Config from the "config" object of a run's config.json (ValueError if it doesn't fit)."""
    known = set(field_names())
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown config keys {unknown}")
    values = {**BEFORE_THE_FIELD, **values}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    return dataclasses.replace(Config(), **values)


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Config)]


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
        if "int" in kind:
            number = float(text)
            if not number.is_integer():
                raise ValueError
            return None if number == 0 and name in NO_LIMIT_FIELDS else int(number)
        if "float" in kind:
            return float(text)
        if "tuple" in kind:
            return tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        pass
    else:
        return text
    raise ValueError(f"bad value for {name}: '{text}' is not a valid {kind}")
