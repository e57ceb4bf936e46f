"""A3C: Asynchronous Advantage Actor-Critic, threaded, in TF1-style graph mode.

    python a3c.py --env Pendulum-v1 --workers 8

One graph, one Session. A global ACNet lives on the CPU; each worker thread owns a local ACNet
(its own variable scope) and its own environments. A worker repeatedly

  1. pulls the global parameters into its local net (fused into the previous push),
  2. acts for n steps in each of its environments,
  3. computes n-step returns R_t = r_t + g r_t+1 + ... + g^k V(s_t+k), bootstrapping from V at
     the rollout's end and at time-limit cuts, from 0 only where an episode really terminated,
  4. pushes the clipped gradients of its actor and critic losses to the global net through two
     RMSProp optimisers (one, on one combined loss, where both heads share a trunk: Atari's CNN,
     or the optional LSTM).

With --sync (A2C) step 4 waits: every worker stores its raw gradients, the last to arrive
applies their mean (clipped once) to the global net, and then all of them pull it (UpdateRound).

This file follows that order: the network and its update (ACNet, n_step_returns), the worker
loop with its push and pull (Worker, UpdateRound), the driver (train; a cluster's other worker
processes: train_as_worker) and the command line. What is not A3C itself lives beside it:
config.py (every hyperparameter), environments.py, networks.py (layers, policies, trunks,
optimisers), runlog.py (budget, anneal, episodes.csv), checkpoints.py, best_agent.py,
evaluation.py (--eval), recording.py (GIFs and windows), remote.py (push and pull through a
cluster's ps tasks), cluster.py (its processes), cpus.py, sessions.py and console.py.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
import typing

from console import quiet_ctrl_c_while_starting  # (the standard library only: imports at once)

if __name__ == "__main__":
    # main() puts the training handlers in
    quiet_ctrl_c_while_starting("a3c.py", also=("SIGTERM", "SIGHUP"))

import numpy as np

import cluster as cluster_module
import config as config_module
from config import Config
from cpus import cpu_layout
from sessions import close_remote_session, open_session, session_callable, tf, v1
from console import (Console, Interrupted, OneLineParser, UsageError, WorkerError, attempt,
                     counted, first_line, is_ctrl_c, progress_line, repeated_stop,
                     stop_like_ctrl_c, tell, warn)
from environments import (FRAME_SKIP, EnvSpec, canonical_env_id, is_atari, make_envs,
                          probe_spec, unused_setting_warnings)
from networks import (build_actor, build_critic, head_sizes, learning_rates, lstm_state_placeholders,
                      lstm_step, lstm_unroll, make_optimizers, mean_gradient_update, network_input,
                      observation_statistics_update, optimizer_groups, scaled_observations,
                      shared_trunk)
from runlog import AnnealStart, EpisodeLog, RunHistory, describe_budget, plot_rewards
from checkpoints import (CHECKPOINT_FOLDER, ENV_STEPS_VARIABLE, Checkpoints, check_results_dir,
                         checkpoint_note, latest_checkpoint, new_run_dir, part_seed, read_run,
                         read_run_info, resume_history, resume_point,
                         remove_unstarted_run, run_info, RunFolderLock, write_atomically)
from best_agent import BestCheckpoint, TrialSchedule, best_kept
import evaluation
from remote import (ChiefLink, ClusterLog, RemoteGlobal, RunOver, follow_the_chief, run_to_join,
                    start_cluster_task)


# ---------------------------------------------------------------------------------------------
# The network and its update
# ---------------------------------------------------------------------------------------------


UNROLLED_STEPS = 64


def n_step_returns(rewards, next_values, terminated, ended, gamma):
    """Bootstrapped n-step returns of a [T, E] time-major rollout.

    rewards[t]     reward of step t (already scaled for learning)
    next_values[t] V(s') of the observation step t led to (its final observation if it ended)
    terminated[t]  1 where the episode really ended at step t: nothing follows, V = 0
    ended[t]       1 where it ended for any reason (terminated or truncated by a time limit)

    R_t = r_t + gamma * (1 - terminated_t) * (V(s'_t) if step t ended or is the last, else R_t+1)
    so a time-limit cut bootstraps from V of the state it was cut in, exactly as the rollout's end.
    T is static, so the recursion unrolls into T small ops (no while loop in the hot path); past
    UNROLLED_STEPS a loop (tf.scan) keeps the graph small, which would otherwise take minutes to
    build (n_steps 512: ~90 s on 2 cores).
    """
    def step_back(following, step):  # R_t from R_t+1 (following) and step t's tensors
        reward, next_value, terminal, end = step
        bootstrap = end * next_value + (1.0 - end) * following
        return reward + gamma * (1.0 - terminal) * bootstrap

    steps = rewards.shape[0]
    if steps > UNROLLED_STEPS:
        return tf.scan(step_back, (rewards, next_values, terminated, ended),
                       initializer=next_values[steps - 1], reverse=True)
    per_step = list(zip(*(tf.unstack(x, num=steps) for x in (rewards, next_values, terminated, ended))))
    returns = [None] * steps
    following = per_step[-1][1]  # V(s') of the rollout's last step
    for t in reversed(range(steps)):
        returns[t] = following = step_back(following, per_step[t])
    return tf.stack(returns)


class ACNet:
    """Actor and critic in one variable scope ('global' or 'worker_<i>').

    Tensors (B = any batch; T = n_steps, E = envs_per_worker, N = T * E):
      obs [B, obs_dim]            -> policy.env_action [B, ...], value [B]
    Worker nets only, fed once per rollout:
      rollout_obs [N, obs_dim], rollout_actions [N, ...], next_obs [N, obs_dim]  (time-major)
      rewards, terminated, ended [T, E]
      -> returns [T, E]; push_and_pull: apply both clipped gradients to the global net, then
         copy the global parameters back into this net, in one session call.
      current_obs [E, obs_dim] -> policy_after_pull: the next step's actions, chosen in that same
         call with the parameters just pulled (one act call fewer per rollout).
    With use_lstm, each (c, h) pair [B or E, lstm_units] goes beside its observations: state_in ->
    state_out while acting, current_state -> state_after_pull, and rollout_state, the state at
    the rollout's first step, from which train_policy and train_value unroll the LSTM over the
    rollout (without an LSTM these tuples are empty and train_* are policy and value).
    A net built without a global_net (the global net, or a net that only plays) has its own
    lr_fraction: the fraction of the learning rates in force, which the workers of a global net
    feed (1 - the budget used, when annealing).
    feedable: a cluster process's net, whose parameters can be put in as arrays (fed).
    """

    def __init__(self, scope: str, spec: EnvSpec, cfg: Config, global_net: ACNet = None,
                 optimizers: list = None, feedable: bool = False):
        self.scope = scope
        actor_hidden, critic_hidden = head_sizes(spec, cfg)
        self.lr_fraction = (v1.placeholder_with_default(1.0, [], "lr_fraction")
                            if global_net is None else global_net.lr_fraction)
        with v1.variable_scope(scope):
            self.obs = v1.placeholder(spec.obs_dtype, [None, *spec.obs_shape], "obs")
            self.features = network_input(self.obs, spec, cfg)
            # with an LSTM, one step from the state fed beside obs; state_out is the next one
            self.state_in = lstm_state_placeholders(cfg, None, "state")
            heads_input, self.state_out = (lstm_step(self.features, self.state_in, cfg)
                                           if cfg.use_lstm else (self.features, ()))
            # a worker's policy narrows with the learning rate (final_sigma_scale): it acts, and
            # its rollout is trained on, with the fraction its previous push was fed (--eval
            # --stochastic feeds a global net the fraction of its checkpoint's moment)
            self.acting_fraction = v1.placeholder_with_default(1.0, [], "acting_fraction")
            self.policy = build_actor(heads_input, spec, cfg, actor_hidden, self.acting_fraction)
            self.value = build_critic(heads_input, cfg, critic_hidden)
            trainable = v1.GraphKeys.TRAINABLE_VARIABLES
            self.actor_params = v1.get_collection(trainable, f"{scope}/actor")
            self.critic_params = v1.get_collection(trainable, f"{scope}/critic")
            self.trunk_params = v1.get_collection(trainable, f"{scope}/trunk")
            self.params = self.trunk_params + self.actor_params + self.critic_params
            # normalize_obs's statistics: with the parameters, what the net plays with
            self.obs_statistics = v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, f"{scope}/obs_norm/")
            self.net_variables = self.params + self.obs_statistics
            if global_net is not None:
                self._build_update(spec, cfg, global_net, optimizers)
        if feedable:
            self.fed = self._feedable_params()

    def _build_update(self, spec, cfg, global_net, optimizers):
        """A worker net's training part, in the order of the A3C update: the rollout's feeds,
        the n-step returns, the losses, their clipped gradients, the push to the global net (or
        --sync's store) with the pull after it, and the next actions, chosen with what was pulled."""
        self._build_rollout_feeds(spec, cfg)
        self._build_returns(spec, cfg)
        losses = self._build_losses(spec, cfg, global_net)
        gradients, finite_check = self._build_gradients(spec, cfg, losses)

        def copy_global_params():
            return tf.group(*[local.assign(glob) for local, glob
                              in zip(self.net_variables, global_net.net_variables)])

        def update_statistics():
            """The rollout's observations join the global net's statistics as its gradients do
            (built under the finite check, so that a refused push adds nothing)."""
            return ([observation_statistics_update(
                global_net.obs_statistics, scaled_observations(self.obs, spec, cfg))]
                if global_net.obs_statistics else [])

        self.pull = copy_global_params()
        if cfg.sync_updates:
            # --sync: the raw gradients wait in this worker's own variables (not saved: the
            # Saver skips worker_*) until every worker's are in; mean_gradient_update applies
            # them all at once, and this worker's next call pulls the result
            # (None where a parameter gets no gradient: the optimiser skips it, as in A3C)
            self.gradient_store = [[None if grad is None else v1.get_variable(
                f"gradient_store/{p.op.name.split('/', 1)[1]}", p.shape, p.dtype.base_dtype,
                v1.zeros_initializer(), trainable=False) for p, grad in zip(local_params, grads)]
                for (_, local_params, _), grads in zip(losses, gradients)]
            with tf.control_dependencies([finite_check]):
                self.store_gradients = tf.group(*[
                    store.assign(grad) for stores, grads in zip(self.gradient_store, gradients)
                    for store, grad in zip(stores, grads) if grad is not None], *update_statistics())
            pulled = copy_global_params()
        else:
            # the optimisers' slots belong to the global net: made at the root variable scope
            # they are named global/.../RMSPropActor and saved with it (in this scope,
            # worker_0/global/...)
            at_root = v1.variable_scope(v1.VariableScope(reuse=None, name=""),
                                        auxiliary_name_scope=False)
            with at_root, tf.control_dependencies([finite_check]):
                self.push = tf.group(*[
                    optimizer.apply_gradients(zip(grads, global_params)) for optimizer, grads,
                    (_, _, global_params) in zip(optimizers, self.clipped_grads, losses)],
                    *update_statistics())
            with tf.control_dependencies([self.push]):  # pull only after this push has landed
                self.push_and_pull = pulled = copy_global_params()
        self._build_acting_after(pulled, spec, cfg)

    def _build_rollout_feeds(self, spec, cfg):
        """The placeholders a push feeds: the rollout's obs go to self.obs (time-major), and with
        an LSTM they go through it in time order from each env's state at the rollout's start."""
        T, E = cfg.n_steps, cfg.envs_per_worker
        self.actions = self.policy.action_placeholder(spec)
        self.next_obs = v1.placeholder(spec.obs_dtype, [T * E, *spec.obs_shape], "next_obs")
        self.rewards = v1.placeholder(tf.float32, [T, E], "rewards")
        self.terminated = v1.placeholder(tf.float32, [T, E], "terminated")
        self.ended = v1.placeholder(tf.float32, [T, E], "ended")
        self.rollout_state = lstm_state_placeholders(cfg, E, "rollout_state")
        # in the order Worker.push_and_pull gives them
        self.rollout_feeds = [self.obs, self.actions, self.next_obs, self.rewards, self.terminated,
                              self.ended, *self.rollout_state]

    def _build_returns(self, spec, cfg):
        """The heads the rollout trains (train_policy, train_value: with an LSTM, unrolled over
        the rollout) and its n-step returns, bootstrapped from V of each step's next obs."""
        T, E = cfg.n_steps, cfg.envs_per_worker
        actor_hidden, critic_hidden = head_sizes(spec, cfg)
        if cfg.use_lstm:
            outputs, states_after = lstm_unroll(self.features, self.rollout_state, self.ended, cfg)
            with v1.variable_scope(v1.get_variable_scope(), reuse=True):
                self.train_policy = build_actor(outputs, spec, cfg, actor_hidden, self.acting_fraction)
            self.train_value = build_critic(outputs, cfg, critic_hidden)
        else:
            self.train_policy, self.train_value = self.policy, self.value

        if shared_trunk(spec, cfg):
            # only V(s') where an episode ended or the rollout does is used (n_step_returns):
            # the trunk runs on those rows alone, E of T * E in most rollouts; with an LSTM,
            # from the state after that step (before an episode's end zeroed it)
            last_step = np.zeros((T, E), bool)
            last_step[-1] = True
            needed = tf.where(tf.reshape(tf.logical_or(self.ended > 0, last_step), [-1]))
            features = network_input(tf.gather_nd(self.next_obs, needed), spec, cfg)
            if cfg.use_lstm:
                features, _ = lstm_step(features, tuple(tf.gather_nd(part, needed)
                                                        for part in states_after), cfg)
            some_values = build_critic(features, cfg, critic_hidden)
            next_values = tf.scatter_nd(needed, some_values, [T * E])
        else:  # a tiny MLP runs on all T * E rows faster than a gather and a scatter
            next_values = build_critic(network_input(self.next_obs, spec, cfg), cfg, critic_hidden)
        next_values = tf.stop_gradient(tf.reshape(next_values, [T, E]))
        self.returns = n_step_returns(self.rewards, next_values, self.terminated, self.ended, cfg.gamma)

    def _build_losses(self, spec, cfg, global_net) -> list:
        """The actor's policy-gradient loss (with its entropy bonus) and the critic's squared
        error; (loss, local params, the global params it updates) for each optimiser."""
        flat_returns = tf.reshape(self.returns, [-1])
        advantages = tf.stop_gradient(flat_returns - self.train_value)
        self.entropy = tf.reduce_mean(self.train_policy.entropy)
        self.actor_loss = (-tf.reduce_mean(self.train_policy.log_prob(self.actions) * advantages)
                           - cfg.entropy_beta * self.entropy)
        self.critic_loss = tf.reduce_mean(tf.square(flat_returns - self.train_value))
        if shared_trunk(spec, cfg):  # one loss and one optimiser (as the A3C paper on Atari)
            return [(self.actor_loss + cfg.value_loss_coef * self.critic_loss,
                     self.params, global_net.params)]
        # separate MLPs: each its own loss and optimiser
        return [(self.actor_loss, self.actor_params, global_net.actor_params),
                (self.critic_loss, self.critic_params, global_net.critic_params)]

    def _build_gradients(self, spec, cfg, losses) -> tuple:
        """Each loss's gradients (returned, with the check below) and clipped_grads, each
        clipped to clip_norm; grad_norm, their norm before clipping."""
        gradients = [tf.gradients(loss, local_params) for loss, local_params, _ in losses]
        clipped, norms = [], []
        for grads in gradients:
            grads, norm = tf.clip_by_global_norm(grads, cfg.clip_norm)
            clipped.append(grads)
            norms.append(norm)
        self.gradients, self.clipped_grads = gradients, clipped  # one list per optimiser
        if not shared_trunk(spec, cfg):
            self.actor_grads, self.critic_grads = clipped
        self.grad_norm = tf.sqrt(tf.add_n([tf.square(n) for n in norms]))  # before clipping
        # a NaN or inf anywhere in the losses or gradients makes this norm non-finite: the check
        # fails the session call before anything is applied, so the global net stays finite
        finite_check = tf.debugging.check_numerics(self.grad_norm, "non-finite gradient norm")
        self.checked_grad_norm = finite_check  # the same check where gradients are fetched (a cluster)
        return gradients, finite_check

    def _build_acting_after(self, pulled, spec, cfg):
        """policy_after_pull: the next rollout's first actions for current_obs (and with an LSTM
        state_after_pull), read from the parameters `pulled` has just copied, in the same call."""
        E = cfg.envs_per_worker
        actor_hidden, _ = head_sizes(spec, cfg)
        self.current_obs = v1.placeholder(spec.obs_dtype, [E, *spec.obs_shape], "current_obs")
        self.current_state = lstm_state_placeholders(cfg, E, "current_state")
        with tf.control_dependencies([pulled]):  # read the parameters just pulled
            with v1.variable_scope(v1.get_variable_scope(), reuse=True):
                features = network_input(self.current_obs, spec, cfg)
                features, self.state_after_pull = (lstm_step(features, self.current_state, cfg)
                                                   if cfg.use_lstm else (features, ()))
                # drawn with this push's fraction, as the rest of the rollout
                self.policy_after_pull = build_actor(features, spec, cfg, actor_hidden, self.lr_fraction)

    def add_mean_update(self, worker_nets: list, optimizers: list, spec: EnvSpec, cfg: Config):
        """--sync, on the global net: gradient_sums, per optimiser group and parameter, the sum
        of the workers' stored gradients (None where a parameter gets none; on a cluster it goes
        to the ps tasks), and apply_mean_gradients, one process's round: their mean, applied."""
        self.gradient_sums = [[None if stored[0] is None else tf.add_n(list(stored))
                               for stored in zip(*(net.gradient_store[group] for net in worker_nets))]
                              for group in range(len(worker_nets[0].gradient_store))]
        self.apply_mean_gradients = mean_gradient_update(
            optimizers, optimizer_groups(self, spec, cfg), self.gradient_sums, len(worker_nets),
            cfg.clip_norm)

    def _feedable_params(self) -> tuple:
        """(placeholders like self.params, the op that assigns them): a cluster's worker pulls the
        global parameters over gRPC as arrays and puts them into its net with this."""
        with v1.name_scope(f"{self.scope}/fed"):
            fed = [v1.placeholder(p.dtype.base_dtype, p.shape) for p in self.params]
            return fed, tf.group(*[p.assign(f) for p, f in zip(self.params, fed)])


def build_graph(spec: EnvSpec, cfg: Config, cluster: bool = False):
    """The global net on the CPU, its optimisers (actor and critic, or one for a shared trunk),
    and one ACNet per worker. cluster: a cluster process's nets, which take parameters from the
    ps tasks as arrays: every worker net, and with --sync the global net, where a round's go."""
    with tf.device("/cpu:0"):
        global_net = ACNet("global", spec, cfg, feedable=cluster and cfg.sync_updates)
        optimizers = make_optimizers(spec, cfg, global_net.lr_fraction)
        worker_nets = [ACNet(f"worker_{i}", spec, cfg, global_net, optimizers, feedable=cluster)
                       for i in range(cfg.workers)]
        if cfg.sync_updates:
            global_net.add_mean_update(worker_nets, optimizers, spec, cfg)
    return global_net, worker_nets


# ---------------------------------------------------------------------------------------------
# The worker loop: act, push, pull
# ---------------------------------------------------------------------------------------------


class Worker:
    """One thread's environments and local net, running the n-step rollout loop.

    The rollout buffers are time-major [T, E] (T = n_steps, E = envs_per_worker); a step that
    ends an episode stores the episode's final observation in next_obs and the env restarts at
    once, so every rollout is exactly T steps and each push carries T * E samples.
    """

    def __init__(self, index: int, net: ACNet, env_id: str, spec: EnvSpec, cfg: Config):
        self.index = index
        self.name = f"worker_{index}"
        self.net = net
        self.spec = spec
        self.cfg = cfg
        self.envs = make_envs(env_id, cfg, cfg.envs_per_worker)
        T, E = cfg.n_steps, cfg.envs_per_worker
        self.rollout_obs = np.zeros((T, E, *spec.obs_shape), spec.obs_dtype)
        self.next_obs = np.zeros_like(self.rollout_obs)
        self.rewards = np.zeros((T, E), np.float32)
        self.terminated = np.zeros((T, E), np.float32)
        self.ended = np.zeros((T, E), np.float32)
        self.actions = (np.zeros((T, E), np.int32) if spec.discrete
                        else np.zeros((T, E, spec.n_actions), np.float32))
        self.episode_return = np.zeros(E)
        self.episode_length = np.zeros(E, np.int64)
        self.life_loss_ends_return = cfg.terminal_on_life_loss and is_atari(env_id)
        self.coord = v1.train.Coordinator()  # work() passes the team's; this one never stops

    def prepare(self, sess, seed: int, remote: "RemoteGlobal" = None,
                rounds: "UpdateRound" = None) -> None:
        """Build this worker's session calls, pull the global parameters and reset the envs
        with seeds drawn from `seed` (the run's, or a resumed part's). TensorFlow prepares a
        callable's executors when it is made, so this runs before the clock starts. remote: the
        global net is on a cluster's ps tasks, and the update pushes and pulls through it.
        rounds: --sync, where this worker's gradients wait for the others' (see UpdateRound)."""
        net = self.net
        # a policy that narrows with the learning rate acts, and its rollout is trained on, with
        # the fraction of the last push (act_schedule: () where sigma does not narrow)
        scheduled = [net.acting_fraction] if net.policy.uses_schedule else []
        # use_sde: each env's noise matrix, drawn anew for each rollout (() without use_sde)
        noise_feeds = [net.policy.noise_in] if net.policy.noise_in is not None else []
        # the call after a push draws the next rollout's first actions (an asynchronous
        # cluster's update does not: there the next act call draws them)
        after_pull_noise = ([net.policy_after_pull.noise_in]
                            if noise_feeds and (remote is None or rounds is not None) else [])
        self.noise_after_pull = bool(after_pull_noise)
        self.act = session_callable(sess, [net.policy.sample, net.policy.env_action, *net.state_out],
                                    [net.obs, *net.state_in, *scheduled, *noise_feeds])
        self.act_schedule = tuple(np.float32(1.0) for _ in scheduled)
        self.rounds = rounds
        if rounds is not None:
            self.store = session_callable(
                sess, [net.store_gradients, net.entropy, net.grad_norm],
                [*net.rollout_feeds, *scheduled])
            self.pull_and_act = session_callable(
                sess, [net.policy_after_pull.sample, net.policy_after_pull.env_action,
                       *net.state_after_pull],
                [net.current_obs, *net.current_state, net.lr_fraction, *after_pull_noise])
        elif remote is None:
            self.update = session_callable(
                sess, [net.push_and_pull, net.entropy, net.grad_norm, net.policy_after_pull.sample,
                       net.policy_after_pull.env_action, *net.state_after_pull],
                [*net.rollout_feeds, net.current_obs, *net.current_state, *scheduled, net.lr_fraction,
                 *after_pull_noise])
        else:
            self.update = remote.update_for(net, sess, scheduled)
        if remote is None:
            sess.run(net.pull)
        else:
            remote.pull_into(sess, net)
        # (sampled, for the envs, the LSTM state after this step) for self.obs, chosen by the last update
        self.chosen_actions = None
        first_seed = seed * 1000 + self.index * len(self.envs)
        self.noise_rng = np.random.default_rng(first_seed)
        self.noise_shape = ((len(self.envs), *net.policy.noise_in.shape[1:].as_list())
                            if noise_feeds else None)
        self.noise = self.draw_noise()
        self.obs = self.envs.reset(first_seed + np.arange(len(self.envs))).astype(self.spec.obs_dtype)
        # with an LSTM: each env's (c, h), carried from step to step and rollout to rollout,
        # zeroed when its episode ends; () without one
        self.state = tuple(np.zeros((len(self.envs), self.cfg.lstm_units), np.float32)
                           for _ in net.state_in)

    def draw_noise(self) -> tuple:
        return (() if self.noise_shape is None else
                (self.noise_rng.standard_normal(self.noise_shape, np.float32),))

    def rollout(self) -> typing.Optional[list]:
        """Act n_steps in every env; return (env index, raw return, length) of episodes that ended,
        or None if the run stopped meanwhile (a long rollout must not hold up a Ctrl-C).

        Per step: one session call for all E actions, E env steps, and whole-row NumPy writes
        (per-env scalar writes cost more than the step of a cheap env)."""
        shift, scale, clip = self.cfg.reward_shift, self.cfg.reward_scale, self.cfg.reward_clip
        finished = []
        self.rollout_state = self.state  # the training unroll starts from it
        stopped = self.coord.should_stop
        for t in range(self.cfg.n_steps):
            if stopped():
                return None
            self.rollout_obs[t] = self.obs
            if self.chosen_actions is None:
                self.chosen_actions = self.act(self.obs, *self.state, *self.act_schedule, *self.noise)
            self.actions[t], env_actions, *state = self.chosen_actions
            self.state = tuple(state)
            self.chosen_actions = None
            next_obs, raw_rewards, terminated, truncated = self.envs.step(env_actions)
            self.next_obs[t] = next_obs
            learning_rewards = raw_rewards if clip is None else np.clip(raw_rewards, -clip, clip)
            self.rewards[t] = (learning_rewards + shift) * scale
            # a lost life (terminal_on_life_loss) ends the return; the game, its record and LSTM state go on
            self.terminated[t] = (np.logical_or(terminated, self.envs.life_lost)
                                  if self.life_loss_ends_return else terminated)
            self.ended[t] = np.logical_or(terminated, truncated)
            self.episode_return += raw_rewards
            self.episode_length += 1
            self.obs[:] = self.next_obs[t]
            if self.state and self.ended[t].any():  # a new episode starts from a zero state
                going_on = (1.0 - self.ended[t])[:, None]
                self.state = tuple(part * going_on for part in self.state)
            for k in np.flatnonzero(self.ended[t]):
                # the final observation stays in next_obs for the bootstrap; the env starts anew
                finished.append((int(k), float(self.episode_return[k]), int(self.episode_length[k])))
                self.episode_return[k] = 0.0
                self.episode_length[k] = 0
                self.obs[k] = self.envs.restart(k)
        return finished

    def push_and_pull(self, lr_fraction: float) -> tuple[float, float]:
        """Push this rollout's clipped gradients to the global net and pull it back; the same call
        chooses the next step's actions with the pulled parameters. Returns the policy entropy
        and the gradient norm before clipping."""
        T, E = self.cfg.n_steps, len(self.envs)
        rollout = (self.rollout_obs.reshape(T * E, *self.spec.obs_shape),
                   self.actions.reshape(T * E, *self.actions.shape[2:]),
                   self.next_obs.reshape(T * E, *self.spec.obs_shape), self.rewards,
                   self.terminated, self.ended, *self.rollout_state)
        self.noise = self.draw_noise()  # the next rollout's, whose first actions this call draws
        noise = self.noise if self.noise_after_pull else ()
        if self.rounds is None:
            entropy, grad_norm, *chosen = self.update(*rollout, self.obs, *self.state,
                                                      *self.act_schedule, np.float32(lr_fraction),
                                                      *noise)
        else:  # --sync: wait for every worker's gradients to be applied, then pull
            entropy, grad_norm = self.store(*rollout, *self.act_schedule)
            chosen = (self.pull_and_act(self.obs, *self.state, np.float32(lr_fraction), *noise)
                      if self.rounds.join(self.coord, lr_fraction) else [])
        self.chosen_actions = chosen or None  # none from a cluster's update: the next step acts
        # the next actions were drawn with this push's fraction: so are the rest of the rollout's
        self.act_schedule = tuple(np.float32(lr_fraction) for _ in self.act_schedule)
        return float(entropy), float(grad_norm)

    def work(self, coord, log: EpisodeLog) -> None:
        self.coord = coord
        steps_per_rollout = self.cfg.n_steps * len(self.envs)
        update_stats = np.zeros((len(self.envs), 3))  # per env: entropy sum, grad norm sum, pushes
        self.act_schedule = tuple(np.float32(log.lr_fraction()) for _ in self.act_schedule)
        while not coord.should_stop():
            finished = self.rollout()
            if finished is None:
                break
            log.add_steps(steps_per_rollout)
            lr_fraction = log.lr_fraction()
            try:
                this_push = (*self.push_and_pull(lr_fraction), 1)
            except tf.errors.InvalidArgumentError as exc:
                if "non-finite" not in str(exc):
                    raise
                raise FloatingPointError(
                    f"non-finite loss or gradient at global env step {log.env_steps:,}; this push "
                    f"was not applied, so the global net and its checkpoints stay finite "
                    f"(try lower learning rates or reward_scale)") from None
            update_stats += this_push
            for k, episode_return, length in finished:
                entropy_sum, norm_sum, pushes = update_stats[k]
                log.record(self.index, episode_return, length, entropy_sum / pushes, norm_sum / pushes)
                update_stats[k] = this_push  # it also trained on env k's next episode's first steps
            if log.budget_used() >= 1.0:
                coord.request_stop()

    def close(self) -> None:
        self.envs.close()


class UpdateRound:
    """--sync (A2C): the barrier where every worker's gradients meet. Each worker stores its
    rollout's gradients in its own variables and joins; the last to arrive applies their mean to
    the global net in one session call (mean_gradient_update) and releases the others, and then
    every worker pulls the same parameters. A plain Python barrier: the session call releases the
    GIL, and the waiters sleep on a condition, so a round costs one wake-up per worker.

    No worker is ever left waiting: a waiter looks at the Coordinator every tenth of a second,
    and once a stop is requested (the budget, Ctrl-C, SIGTERM, a worker's exception, a NaN)
    join returns False and the worker leaves without pulling.

    On a cluster the same barrier gathers a process's workers, and the last one in takes their
    sum to the ps tasks, where the processes' rounds meet (RemoteGlobal.round_for). It holds the
    condition while it waits there, so the others wake with it: a stop reaches it through
    RemoteGlobal.release_rounds, not the Coordinator."""

    POLL_S = 0.1

    def __init__(self, parties: int, apply, condition: threading.Condition = None):
        """condition: the rounds' lock, held while a round's update is applied; the best-agent
        copy and (in one process) the checkpoints take it too, so they never see half a round."""
        self.parties = parties
        # apply(lr_fraction) -> bool: the one update of a round; False when the run stopped
        # before it was applied (a cluster's round, released by a stop)
        self.apply = apply
        self.arrived = 0
        self.completed = 0  # rounds ended so far
        self.failed = False  # a round was not applied: the run is stopping
        self.condition = threading.Condition() if condition is None else condition

    @classmethod
    def in_one_process(cls, sess, global_net: ACNet, parties: int,
                       condition: threading.Condition = None) -> UpdateRound:
        """The rounds of a run in one process: the mean of the workers' stores, applied here."""
        apply_mean = session_callable(sess, [global_net.apply_mean_gradients],
                                      [global_net.lr_fraction])

        def apply(lr_fraction) -> bool:
            apply_mean(lr_fraction)
            return True
        return cls(parties, apply, condition)

    def join(self, coord, lr_fraction: float) -> bool:
        """Wait until this round's update is applied (True), or until the run stops (False)."""
        with self.condition:
            round_number = self.completed
            self.arrived += 1
            if self.arrived == self.parties:  # the last one in applies the round (at its rate)
                self.arrived = 0
                applied = False
                try:
                    applied = self.apply(np.float32(lr_fraction))
                finally:  # an error or a stop: the run stops; nobody pulls this round
                    self.failed = self.failed or not applied
                    self.completed += 1
                    self.condition.notify_all()
                if not applied:
                    coord.request_stop()
                return applied
            while self.completed == round_number:
                if coord.should_stop():
                    return False
                self.condition.wait(self.POLL_S)
            return not self.failed


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------


class Team:
    """One process's workers, from their graph to their clean stop; train and a cluster's other
    worker processes (join_the_run) share it. The graph holds the global net and one ACNet per
    worker (add what else the process needs inside `with team.graph.as_default()` before open);
    open() starts the session, make_workers() the workers and their environments, prepare()
    their session calls and --sync's rounds, start() their threads, stop() and close() end them."""

    def __init__(self, spec: EnvSpec, cfg: Config, seed: int, cluster: bool = False):
        self.spec, self.cfg = spec, cfg
        self.graph = tf.Graph()
        with self.graph.as_default():
            v1.set_random_seed(seed)
            self.global_net, self.nets = build_graph(spec, cfg, cluster)
        self.layout = cpu_layout(cfg)
        self.coord = v1.train.Coordinator()
        self.sess, self.workers, self.threads, self.rounds = None, [], [], None

    def open(self) -> None:
        """The session, every variable of the graph initialised."""
        with self.graph.as_default():
            init = v1.global_variables_initializer()
        self.sess = open_session(self.graph, self.layout)
        self.sess.run(init)

    def make_workers(self, env_id: str) -> None:
        for i, net in enumerate(self.nets):
            self.workers.append(Worker(i, net, env_id, self.spec, self.cfg))

    def prepare(self, seed: int, remote: RemoteGlobal = None, chief: bool = True,
                round_lock: threading.Condition = None) -> None:
        """Each worker's session calls, its pull and its envs' first reset; with --sync, the
        rounds they meet in (on a cluster through remote; chief: this process applies them)."""
        if self.cfg.sync_updates and remote is not None:
            self.rounds = UpdateRound(len(self.workers), remote.round_for(
                self.sess, self.global_net, len(self.workers), chief), round_lock)
        elif self.cfg.sync_updates:
            self.rounds = UpdateRound.in_one_process(self.sess, self.global_net, len(self.workers),
                                                     round_lock)
        for worker in self.workers:
            worker.prepare(self.sess, seed, remote, self.rounds)

    def start(self, log) -> None:
        """A thread per worker, running its loop under the Coordinator."""
        for worker in self.workers:
            self.start_thread(worker.name, worker.name, lambda worker=worker: worker.work(self.coord, log))

    def start_thread(self, name: str, who: str, run) -> None:
        """run() in a thread pinned like the workers, under the Coordinator: what it raises stops
        the others, as a WorkerError that names who raised it."""
        def guarded():
            with self.coord.stop_on_exception():
                if self.layout is not None:
                    os.sched_setaffinity(0, self.layout.workers)  # this thread only
                try:
                    run()
                except Exception as exc:
                    raise WorkerError(f"{who} raised {type(exc).__name__}: {first_line(exc)}") from exc
        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def stop(self, release=None) -> tuple:
        """Stop the threads and join them (30 s of grace): (what a thread raised, for which the
        Coordinator stopped the others, or None; the names of threads still running). release():
        wakes a thread that waits where the Coordinator cannot reach it (a cluster's --sync round)."""
        self.coord.request_stop()
        if release is not None:
            release()
        try:
            self.coord.join(self.threads, stop_grace_period_secs=30, ignore_live_threads=True)
            raised = None
        except Exception as exc:
            raised = exc
        return raised, [thread.name for thread in self.threads if thread.is_alive()]

    def close(self) -> None:
        """The workers' environments and the session (never while a thread may still use them)."""
        for worker in self.workers:
            attempt(f"close {worker.name}'s environments", worker.close)
        if self.sess is not None:
            attempt("close the session", self.sess.close)


def train(env_id: str, cfg: Config, results_dir: str = "results", show_plot: bool = True,
          out=None, resume_dir: str = None, cluster=None, preamble: str = None) -> dict:
    """Train, writing everything into a new run folder (or continuing resume_dir's run from its
    latest checkpoint); returns a summary dict. cluster: this process is the chief (worker task
    0) of a cluster run, whose global net lives on the ps tasks (see ChiefLink). preamble: the
    first line to print, once the env and config are known to work.

    Raises UsageError before anything is written when the env or config cannot work (or another
    process trains in resume_dir), re-raises a worker's exception (after saving the checkpoint,
    the CSV and the plot) when a worker fails, and raises Interrupted on a Ctrl-C during set-up
    or a second one during the final saves.
    """
    folder_lock = RunFolderLock()  # held from when the run folder is known to train()'s end
    try:
        return train_holding(folder_lock, env_id, cfg, results_dir, show_plot, out, resume_dir,
                             cluster, preamble)
    finally:
        folder_lock.release()


def train_holding(folder_lock: RunFolderLock, env_id: str, cfg: Config, results_dir: str,
                  show_plot: bool, out, resume_dir, cluster, preamble) -> dict:
    """train(), taking folder_lock on its run folder as soon as it is known."""
    console = Console(out or sys.stdout)
    cfg.validate()
    spec = probe_spec(env_id, cfg)
    earlier = read_run_info(resume_dir) if resume_dir is not None else None
    if resume_dir is not None:
        folder_lock.take(resume_dir)
    part = len(earlier.get("resumed", [])) + 1 if earlier is not None else 0
    seed = part_seed(cfg.seed, part)
    if resume_dir is None:
        check_results_dir(results_dir)
    if cluster is not None:  # before anything is written: a port in use, no ps
        server = start_cluster_task(cluster)

    run_dir, team, best, remote, chief, summary_writer = resume_dir, None, None, None, None, None
    earlier_text = None  # a resumed run's config.json as it was, once set-up rewrites it
    # --sync: a round's update holds this lock; so do the best agent's copy and (in one process)
    # the saves. A cluster's saves wait on its local copy's lock instead (RemoteGlobal): the
    # chief's watch must never wait a round.
    round_lock = threading.Condition() if cfg.sync_updates else None
    try:
        np.random.seed(seed)
        team = Team(spec, cfg, seed, cluster=cluster is not None)
        with team.graph.as_default():
            if cluster is not None:
                remote = RemoteGlobal(ACNet, spec, cfg, cluster, server)
                chief = ChiefLink(remote, v1.global_variables())
            run_dir = resume_dir or new_run_dir(results_dir, env_id, cfg.seed)
            if resume_dir is None:
                folder_lock.take(run_dir)
            if preamble is not None:  # (once the run folder is made: a results dir that
                console.say(preamble)  # check_results_dir could not rule out is refused alone)
            checkpoints = Checkpoints(run_dir, cfg, env_id,
                                      save_lock=remote.local_params_lock if remote else round_lock,
                                      before_save=chief.download if chief else None)
            best = BestCheckpoint(checkpoints.folder, team.global_net,
                                  ACNet("best_candidate", spec, cfg), spec, cfg, env_id,
                                  checkpoints.env_id_variable, round_lock)
        team.open()
        sess = team.sess
        history = resume_history(sess, checkpoints, run_dir, cfg, earlier) if resume_dir else None
        team.make_workers(env_id)
        if resume_dir is not None:  # put back if set-up stops here: the resume never began
            with open(os.path.join(run_dir, "config.json")) as f:
                earlier_text = f.read()
        write_atomically(os.path.join(run_dir, "config.json"), json.dumps(
            run_info(env_id, cfg, learning_rates(cfg, spec), team.layout, seed, history, earlier,
                     None if cluster is None else cluster.shape), indent=2))
        summary_writer = v1.summary.FileWriter(run_dir, team.graph)
        worker_log = None
        if chief is not None:  # the ps tasks take this process's net, slots and counters
            start = history or RunHistory({}, 0, AnnealStart())
            totals = (start.env_steps, len(start.rows.get("episode", ())),
                      int(start.rows["length"].sum()) if start.rows else 0)
            chief.start(sess, json.dumps({"env": env_id, "config": dataclasses.asdict(cfg),
                                          "seed": seed, "cluster": cluster.spec}),
                        totals, start.anneal_start)
            worker_log = remote.log = ClusterLog(cfg, cluster.task, totals, start.anneal_start)
        team.prepare(seed, remote, chief=True, round_lock=round_lock)
        best.prepare(sess)
        # the clock starts with the workers
        log = EpisodeLog(run_dir, cfg, summary_writer, history, cluster=cluster is not None)
        worker_log = worker_log or log
        best.must_beat(log.best_running)
    except BaseException as exc:
        if earlier_text is not None:  # first: a second Ctrl-C in the closes below must not keep it
            attempt("put config.json back", write_atomically,
                    os.path.join(run_dir, "config.json"), earlier_text)
        if team is not None:
            team.close()
        if best is not None:
            best.close()
        if chief is not None and chief.heart is not None:  # the others must not wait for it
            attempt("tell the ps tasks to stop", chief.shutdown)
        if remote is not None:
            remote.close()
        if resume_dir is None and run_dir is not None:  # a new run that never trained: no folder
            if summary_writer is not None:
                attempt("close the event file", summary_writer.close)
            attempt("remove the new run folder", remove_unstarted_run, run_dir)
        if not is_ctrl_c(exc):
            raise
        if resume_dir is not None:
            raise Interrupted(f"interrupted during set-up, before training started; "
                              f"{checkpoint_note(run_dir)}") from None
        where = (f"; {run_dir} was not kept" if run_dir is not None and not os.path.exists(run_dir)
                 else f"; {run_dir} holds no checkpoint" if run_dir is not None else "")
        raise Interrupted(f"interrupted during set-up, before training started: nothing was "
                          f"trained{where}") from None

    where = "" if team.layout is None else f" ({team.layout.describe()})"
    if history is not None:
        where += f"; resumed at {history.env_steps:,} env steps with seed {seed}"
        if history.lost_steps:  # the run ended without its last save (kill -9, a crash)
            where += (f" (the net is its last checkpoint's, {history.lost_steps:,} env steps "
                      f"earlier: what it learned in those was lost, their episodes stay counted)")
        if cfg.anneal_lr:
            where += f", learning rates at {history.anneal_start.lr_fraction:.0%} of their base"
            if history.reached is not None:  # a jump up, which can undo what was learned
                where += (f" (a longer schedule's, up from the {history.reached:.0%} it had "
                          f"reached" + ("; its best agent stays in checkpoints/best/ unless "
                                        "beaten)" if best_kept(run_dir) else ")"))
        elif history.anneal_start.lr_fraction < 1.0 - 1e-9:  # --set anneal_lr=false: a jump up too
            where += (f", learning rates at their base (anneal_lr off; they had annealed to "
                      f"{history.anneal_start.lr_fraction:.0%})")
    if cluster is not None:
        where += (f"; the chief of a cluster of {len(cluster.spec['ps'])} ps and "
                  f"{len(cluster.spec['worker'])} worker processes")
    error = None
    interrupted = False
    try:
        mode = (f", an LSTM of {cfg.lstm_units} cells" if cfg.use_lstm else "") + (
            ", synchronous updates (A2C)" if cfg.sync_updates else "")
        console.say(f"training {env_id} with {counted(cfg.workers, 'worker')} x "
                    f"{counted(cfg.envs_per_worker, 'env')} for "
                    f"{describe_budget(cfg, FRAME_SKIP if is_atari(env_id) else 1)}"
                    f"{mode}{where}; results in {run_dir}")
        if chief is not None:
            chief.open()
        team.start(worker_log)
        schedule = TrialSchedule(cfg.best_checkpoint_every_s, len(team.workers),
                                 cfg.best_trial_cpu_share)
        team.start_thread("best_trials", "the best-agent trials",
                          lambda: best.run_trials(sess, team.coord, log, schedule))
        supervise(team.coord, log, checkpoints, sess, cfg, console, chief)
    except KeyboardInterrupt:
        interrupted = True
    except WorkerError as exc:  # the cluster's ps tasks went away
        error = exc
    except Exception as exc:  # the driver itself failed: the workers stop all the same
        error = WorkerError(f"the driver raised {type(exc).__name__}: {first_line(exc)}")

    def finishing(step):
        """step(); the first Ctrl-C (or SIGTERM) of a run that ended by itself, landing while it
        finishes, is taken as one in training: the step is done again, and the files written."""
        nonlocal interrupted
        try:
            return step()
        except KeyboardInterrupt:
            if interrupted or error is not None:
                raise
            interrupted = True
            return step()

    try:
        # every way out stops and joins the workers before anything they use is closed
        release = (None if remote is None or team.rounds is None
                   else lambda: remote.release_rounds(every_process=True))
        raised, stuck = finishing(lambda: team.stop(release))
        error = error or raised
        if chief is not None and not chief.ps_lost:
            if not stuck:  # its own threads' last episodes, like any worker process's
                attempt("send the last episodes", remote.flush)
            attempt("collect the cluster's last episodes and global net", chief.finish, sess, log)
        final = log.progress()  # the workers have stopped: the clock stops too
        finishing(lambda: attempt("write the final checkpoint", checkpoints.save, sess,
                                  log.env_steps, final["wall_s"], log.lr_fraction()))
        if "best_trials" not in stuck:  # else it may still be playing: best/ stays as it is
            finishing(lambda: attempt("try the last candidates for the best checkpoint",
                                      best.try_final, sess, log,
                                      10.0 if interrupted or error is not None else 60.0))
        if stuck:  # closing what a running thread uses could crash the process or lose its rows
            warn(f"{', '.join(stuck)} did not stop within 30 s; the CSV, the session and the "
                 f"environments are left open for them")
        else:
            attempt("close episodes.csv", log.close)
            attempt("close the TensorBoard events", summary_writer.close)
            team.close()
            attempt("close the trial environments", best.close)
        plot_path = attempt("draw rewards.png", plot_rewards, run_dir, env_id,
                            show_plot and error is None and not interrupted)
        if chief is not None and not chief.ps_lost:
            attempt("tell the ps tasks to stop", chief.shutdown)
        if chief is not None and not stuck:
            attempt("close the session with the ps tasks", remote.close)
    except KeyboardInterrupt:
        how = "interrupted twice" if interrupted else "interrupted while finishing the run"
        why = f" (training had stopped: {error})" if error is not None else ""
        raise Interrupted(f"{how}: stopped at once{why}; {checkpoint_note(run_dir)}") from None

    final.update(run_dir=run_dir, plot=plot_path, interrupted=interrupted)
    how = "interrupted" if interrupted else ("stopped by an error" if error else "done")
    if best.on_disk is not None:
        final.update(best_checkpoint=best.folder)
    console.say(f"{how}: {progress_line(final)}\n{best.describe(log)}\n"
                f"results in {run_dir}")
    if error is not None:
        raise error
    return final


def supervise(coord, log: EpisodeLog, checkpoints: "Checkpoints", sess, cfg: Config,
              console: Console, chief: ChiefLink = None) -> None:
    """Until the workers stop: a progress line every log_every_s seconds and a checkpoint every
    checkpoint_every_s (the best checkpoint has a thread of its own). A checkpoint that fails (disk full,
    folder moved) is reported and tried again at the next one; it does not end a long run.
    A cluster's chief also runs its ChiefLink's tick twice a second."""
    next_line = next_save = time.time()
    next_line += cfg.log_every_s
    next_save += cfg.checkpoint_every_s
    while not coord.wait_for_stop(min(max(min(next_line, next_save) - time.time(), 0.0), 0.5)):
        if chief is not None:
            chief.tick(sess, log, console.say)
        now = time.time()
        if now >= next_line:
            console.say(progress_line(log.progress()))
            next_line = now + cfg.log_every_s
        if now >= next_save:
            attempt(f"write a periodic checkpoint (next try in {cfg.checkpoint_every_s:g} s)",
                    checkpoints.save, sess, log.env_steps, log.wall(), log.lr_fraction())
            next_save = now + cfg.checkpoint_every_s


def train_as_worker(cluster, workers: typing.Optional[int], env_id: typing.Optional[str],
                    out=None) -> int:
    """A worker process other than the chief: it takes the run's env and config from the chief
    (through ps task 0), trains with its own threads and writes nothing; its episodes go to the
    chief. Returns 0 when the run is over, 1 if the chief or a ps task went away or a worker
    raised, 130 on Ctrl-C (or SIGTERM). A process started again with the same command rejoins."""
    console = Console(out or sys.stdout)
    server = start_cluster_task(cluster)
    graph = tf.Graph()
    with graph.as_default():
        control = cluster_module.control_variables(tf, len(cluster.spec["worker"]))
    control_sess = cluster_module.ps_session(tf, cluster, graph, one_task=True)
    try:
        return join_the_run(cluster, server, control, control_sess, workers, env_id, console)
    finally:
        close_remote_session(control_sess)


def join_the_run(cluster, server, control, control_sess, workers: typing.Optional[int],
                 env_id: typing.Optional[str], console: Console) -> int:
    """train_as_worker, once it can read the chief's flags: wait for the run, join it, train."""
    watch = cluster_module.ChiefWatch(tf, control_sess, control)
    try:
        run = run_to_join(cluster, control, control_sess, watch, env_id)
    except RunOver as over:
        console.say(f"worker process {cluster.task}: {over}")
        return 0
    if run is None:
        return 1
    cfg = run.cfg if workers is None else checked(dataclasses.replace(run.cfg, workers=workers))
    spec = probe_spec(run.env_id, cfg)
    team = Team(spec, cfg, run.seed, cluster=True)
    remote = RemoteGlobal(ACNet, spec, run.cfg, cluster, server)  # the chief's rates, whatever --workers
    try:
        remote.mark_finished(0)  # (a process that rejoins)
        team.open()
        team.make_workers(run.env_id)
        remote.log = ClusterLog(cfg, cluster.task, run.totals, run.anneal_start)
        team.prepare(run.seed, remote, chief=False)
    except BaseException:
        team.close()
        if cfg.sync_updates:  # the chief's rounds must not wait for this process
            attempt("tell the chief this process stopped", remote.mark_finished, 1)
        remote.close()
        raise
    team.start(remote.log)
    console.say(f"worker process {cluster.task} joined the run of {run.env_id} at "
                f"{int(run.totals[0]):,} env steps with {counted(cfg.workers, 'worker')} x "
                f"{counted(cfg.envs_per_worker, 'env')}"
                f"{', synchronous updates (A2C)' if cfg.sync_updates else ''}")
    return follow_the_chief(team, remote, watch, cluster.task, console)


# ---------------------------------------------------------------------------------------------
# Evaluation (evaluation.py plays a checkpoint of the network above)
# ---------------------------------------------------------------------------------------------


def evaluate(run_dir: str, episodes: int = 10, render: bool = False, record: bool = False,
             out=None, checkpoint: str = "best", stochastic: bool = False) -> dict:
    """--eval RUN_DIR: evaluation.evaluate with this file's ACNet."""
    return evaluation.evaluate(run_dir, ACNet, episodes, render, record, out, checkpoint,
                               stochastic)


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


DEFAULT_ENV = "Pendulum-v1"


def parse_args(argv):
    parser = OneLineParser(
        allow_abbrev=False,  # (--clus would stay in the argv local:N passes on, beside --cluster)
        description="Threaded A3C (TF1 graph mode) on a gymnasium environment. "
                    "Hyperparameters live in config.py; any field can be set with --set.")
    parser.add_argument("--env", help=f"gymnasium id (default {DEFAULT_ENV}); "
                        "'module:Env-v0' imports module first")
    parser.add_argument("--workers", type=int, help="worker threads (config: workers)")
    parser.add_argument("--max-episodes", help="stop after this many episodes "
                        "(config: max_episodes; 0 or none means no limit)")
    parser.add_argument("--max-steps", help="stop after this many global env steps "
                        "(config: max_steps; 0 or none means no limit)")
    parser.add_argument("--seed", type=int, help="random seed (config: seed)")
    parser.add_argument("--results-dir", help="where a new run's folder goes (default results/)")
    parser.add_argument("--no-plot", action="store_true", help="don't open the plot window "
                        "(rewards.png is saved anyway)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue RUN_DIR's run from its latest "
                        "checkpoint with its config; --max-episodes, --max-steps and --set of "
                        + ", ".join(RESUMABLE_FIELDS) + " may change")
    parser.add_argument("--eval", metavar="RUN_DIR", help="don't train: run the deterministic "
                        "policy of RUN_DIR's best checkpoint (see --checkpoint, --stochastic) and "
                        "print its mean return")
    parser.add_argument("--episodes", type=int, help="episodes for --eval (default 10)")
    parser.add_argument("--checkpoint", help="--eval: best (the default: the run's best agent), "
                        "latest, or a checkpoint's path")
    parser.add_argument("--render", action="store_true", help="--eval: show the environment's window")
    parser.add_argument("--record", action="store_true", help="--eval: write the first episode "
                        "as episode.gif into RUN_DIR")
    parser.add_argument("--stochastic", action="store_true", help="--eval: sample the policy's "
                        "actions, as training does (rl-zoo's Atari scores), not its "
                        "deterministic one")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of config.py, e.g. --set actor_lr=3e-4 (repeatable)")
    parser.add_argument("--sync", dest="sync_updates", action="store_const", const=True,
                        help="A2C: every worker's rollout goes into one update, then all pull "
                        "the same parameters (config: sync_updates, with config.py's SYNC_PRESETS)")
    parser.add_argument("--cluster", metavar="local:N|FILE", help="train on TensorFlow's distributed "
                        "runtime: local:N starts 1 ps and N worker processes (of --workers threads "
                        "each) on this machine's loopback; FILE is a cluster dict "
                        '{"ps": ["host:port"], "worker": ["host:port", ...]} used with --job and '
                        "--task, one command per process (worker task 0 is the chief: it writes the "
                        "run folder). No authentication, no encryption: a trusted network only")
    parser.add_argument("--job", choices=cluster_module.JOBS, help="with a cluster FILE: this "
                        "process's job")
    parser.add_argument("--task", type=int, help="with a cluster FILE: this process's index in "
                        "its job's list")
    return parser.parse_args(argv)


RESUMABLE_FIELDS = ("max_episodes", "max_steps", "log_every_s", "checkpoint_every_s",
                    "best_checkpoint_every_s", "best_trial_episodes", "best_trial_cpu_share",
                    "keep_checkpoints", "pin_threads", "anneal_lr", "anneal_steps", "atari_threads")

# the config field each shortcut flag sets: --max-steps N is --set max_steps=N
FLAG_FIELDS = {"workers": "--workers", "max_episodes": "--max-episodes",
               "max_steps": "--max-steps", "seed": "--seed", "sync_updates": "--sync"}


def overrides_from_args(args) -> dict:
    """The config fields the command line sets. A flag is a shortcut for --set of its field, with
    the same meaning (0 for a budget: no limit); a field set twice is refused."""
    flags = {field: flag if getattr(args, field) is True else f"{flag} {getattr(args, field)}"
             for field, flag in FLAG_FIELDS.items() if getattr(args, field) is not None}
    try:
        overrides = config_module.parse_overrides(args.set)
        twice = sorted(set(overrides) & set(flags))
        if twice:
            raise ValueError(f"{twice[0]} is set twice ({flags[twice[0]]} and --set "
                             f"{twice[0]}=...); set it once")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for field in flags:  # (the budgets' text as --set reads it: 1e6, 0 and none too)
        try:
            value = config_module.parse_value(field, str(getattr(args, field)))
        except ValueError as exc:
            raise UsageError(f"{flags[field]}: {exc}") from None
        if field in config_module.NO_LIMIT_FIELDS and value is not None and value < 0:
            raise UsageError(f"{flags[field]}: must be >= 0 (0 or none: no limit)")
        overrides[field] = value
    return overrides


def cluster_role(args):
    """None (one process), N of --cluster local:N, or this process's cluster.Cluster."""
    if args.cluster is None:
        if args.job is not None or args.task is not None:
            raise UsageError("--job and --task place this process in a cluster: they go with "
                             "--cluster FILE")
        return None
    count = cluster_module.parse_local(args.cluster)
    if count is not None:
        if args.job is not None or args.task is not None:
            raise UsageError("--cluster local:N starts every process itself; --job and "
                             "--task go with a cluster file")
        return count
    return cluster_module.cluster_for(args.cluster, args.job, args.task)


def describe_shape(shape: typing.Optional[dict]) -> str:
    if shape is None:
        return "in one process (no --cluster)"
    return f"on {shape['ps']} ps and {shape['worker']} worker processes"


def resume_config(args, cluster_shape: dict = None) -> tuple[str, Config]:
    """The (env id, config) to continue args.resume's run with: its own config, with only the
    fields that cannot change what was learned taken from the command line. A cluster run goes
    on with a cluster of the same shape, and a one-process run in one process."""
    env_id, saved = read_run(args.resume)
    trained_on = read_run_info(args.resume).get("cluster")
    if trained_on != cluster_shape:
        raise UsageError(f"{args.resume} was trained {describe_shape(trained_on)}; resume it "
                         f"the same way (it is being resumed {describe_shape(cluster_shape)})")
    # (a run saved before ids without a version were completed has "Hopper": --env Hopper-v5)
    same_env = args.env is None or args.env in (env_id, canonical_env_id(env_id))
    changed = ([] if same_env else [f"--env {env_id}, not {args.env}"]) + [
        f"{flag} {own}, not {given}" for flag, given, own in (
            ("--workers", args.workers, saved.workers), ("--seed", args.seed, saved.seed))
        if given is not None and given != own]
    if changed:  # (the run's own values: a preset's may not be what the user thinks it is)
        raise UsageError(f"--resume continues a run with its own --env, --workers and --seed "
                         f"(the run has {'; '.join(changed)}); leave them out, or start a new "
                         f"run to change them")
    # what the command line sets to the run's own value changes nothing (the original command)
    overrides = {field: value for field, value in overrides_from_args(args).items()
                 if value != getattr(saved, field)}
    fixed = sorted(set(overrides) - set(RESUMABLE_FIELDS))
    if fixed:
        raise UsageError(f"--resume cannot change {', '.join(fixed)}; only "
                         f"{', '.join(RESUMABLE_FIELDS)} (start a new run to change the others)")
    return env_id, checked(dataclasses.replace(saved, **overrides))


def config_from_args(args) -> Config:
    """The env's preset with the command line's fields on top."""
    overrides = overrides_from_args(args)
    preset = config_module.config_for(args.env or DEFAULT_ENV,
                                      sync=overrides.get("sync_updates", False))
    cfg = checked(dataclasses.replace(preset, **overrides))
    if cfg.sync_updates and cfg.scale_lr_with_workers:  # (a run saved so still reads back)
        raise UsageError("bad config: scale_lr_with_workers divides the rates by sqrt(workers) "
                         "because more workers push more often; with sync_updates (--sync) a "
                         "round makes one update whatever the workers: drop one of the two")
    return cfg


def checked(cfg: Config) -> Config:
    try:
        cfg.validate()
    except ValueError as exc:
        raise UsageError(f"bad config: {exc}") from None
    return cfg


def refuse_flags_of_the_other_mode(args) -> None:
    """--eval plays a run with its own config: a training flag with it (or an --eval flag
    without it) would be silently ignored, so it is refused."""
    if args.eval is not None:
        given = [flag for flag, value in (
            ("--env", args.env), ("--resume", args.resume), ("--workers", args.workers),
            ("--seed", args.seed), ("--max-episodes", args.max_episodes),
            ("--max-steps", args.max_steps), ("--sync", args.sync_updates),
            ("--set", args.set or None), ("--results-dir", args.results_dir)) if value is not None]
        if given:
            raise UsageError(f"--eval plays RUN_DIR's agent with the run's own config; "
                             f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for "
                             f"training: drop {'it' if len(given) == 1 else 'them'}")
        return
    given = [flag for flag, value in (
        ("--episodes", args.episodes), ("--render", args.render or None),
        ("--record", args.record or None), ("--stochastic", args.stochastic or None))
        if value is not None]
    if given:
        raise UsageError(f"{', '.join(given)} {'goes' if len(given) == 1 else 'go'} with --eval "
                         f"RUN_DIR, which plays a trained agent")
    if args.resume is not None and args.results_dir is not None:
        raise UsageError("--resume goes on writing into RUN_DIR itself; drop --results-dir (it "
                         "places new runs)")


def stop_like_ctrl_c_or_exit(signum, frame):
    """A cluster process: a stop as Ctrl-C, and an exit all the same if that stop has not
    ended the process within cluster.STOP_GRACE_S (a call to a vanished ps can wait forever)."""
    if repeated_stop():
        return
    timer = threading.Timer(cluster_module.STOP_GRACE_S, os._exit, (130,))
    timer.daemon = True
    timer.start()
    raise KeyboardInterrupt


def main(argv=None, command_line: bool = False) -> int:
    """command_line: the process is `python a3c.py ...` itself (local:N may then replace it by
    the launcher)."""
    args = parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C, `kill`, and a closed terminal or dropped ssh session stop the run cleanly; a
        # signal the caller ignores (`nohup` ignores SIGHUP) stays ignored
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            number = getattr(signal, name, None)
            if number is not None and signal.getsignal(number) is not signal.SIG_IGN:
                signal.signal(number, stop_like_ctrl_c if args.cluster is None or name == "SIGINT"
                              else stop_like_ctrl_c_or_exit)
    try:
        for flag, value, instead in (
                ("--results-dir", args.results_dir, "give it a folder, or leave it out for results/"),
                ("--env", args.env, f"give a gymnasium id, or leave it out for {DEFAULT_ENV}"),
                ("--resume", args.resume, "give the folder of the run to continue"),
                ("--eval", args.eval, "give the folder of the run to play")):
            if value is not None and not value.strip():
                raise UsageError(f"{flag} is empty: {instead}")
        if args.env is not None:
            args.env = canonical_env_id(args.env)
        refuse_flags_of_the_other_mode(args)
        if args.eval is not None:
            if args.cluster is not None or args.job is not None or args.task is not None:
                raise UsageError("--eval plays a run's checkpoint in this process, whatever "
                                 "trained it; drop --cluster, --job and --task")
            episodes = 10 if args.episodes is None else args.episodes
            if episodes < 1:
                raise UsageError(f"--episodes must be >= 1, got {episodes}")
            if args.checkpoint is not None and not args.checkpoint.strip():
                raise UsageError("--checkpoint is empty: give best, latest or a checkpoint's "
                                 "path, or leave it out for best")
            try:
                evaluate(args.eval, episodes, args.render, args.record,
                         checkpoint=args.checkpoint or "best", stochastic=args.stochastic)
            except KeyboardInterrupt:
                raise Interrupted("interrupted: evaluation stopped; nothing was written") from None
            return 0
        if args.checkpoint is not None:
            raise UsageError("--checkpoint picks what --eval plays; --resume always continues "
                             "from the latest checkpoint")
        cluster = cluster_role(args)
        if cluster is not None and not isinstance(cluster, int) and not cluster.is_chief:
            if cluster.job == "ps":
                return cluster_module.run_ps(tf, cluster, lambda text: tell(sys.stdout, text))
            return train_as_worker(cluster, args.workers, args.env)
        shape = None if cluster is None else (
            {"ps": 1, "worker": cluster} if isinstance(cluster, int) else cluster.shape)
        if args.resume is not None:
            env_id, cfg = resume_config(args, shape)
        else:
            env_id, cfg = args.env or DEFAULT_ENV, config_from_args(args)
            if isinstance(cluster, int):
                probe_spec(env_id, cfg)  # a bad env fails here, before any process starts
            unused_notes = [] if isinstance(cluster, int) else (  # (local:N: its chief says them)
                unused_setting_warnings(env_id, cfg, overrides_from_args(args)))
        if cfg.normalize_obs and is_atari(env_id):
            raise UsageError("normalize_obs is for flat observations: Atari frames are scaled to "
                             "[0, 1] in the graph; drop --set normalize_obs=true")
        if cfg.normalize_obs and cluster is not None:
            raise UsageError("normalize_obs does not work with --cluster yet: its statistics "
                             "are kept in one process's graph; train in one process, or without "
                             "it (the MuJoCo preset turns it on; --set normalize_obs=false turns "
                             "it off)")
        if isinstance(cluster, int):
            if args.resume is not None:  # a run that cannot go on: refused before any process starts
                RunFolderLock.refuse_if_held(args.resume)  # (the chief takes it for good)
                checkpoint = latest_checkpoint(os.path.join(args.resume, CHECKPOINT_FOLDER))
                try:
                    steps = int(v1.train.load_variable(checkpoint, ENV_STEPS_VARIABLE))
                except (tf.errors.OpError, ValueError) as exc:
                    raise UsageError(f"cannot read {checkpoint} ({first_line(exc)}); resume from "
                                     f"a run folder whose checkpoints are whole") from None
                resume_point(args.resume, cfg, read_run_info(args.resume), steps)
            if command_line:  # the launcher needs no TensorFlow, so drop it
                cluster_module.become_launcher(os.path.abspath(__file__), sys.argv[1:], cluster,
                                               cfg.sync_updates)
            return cluster_module.launch_local(os.path.abspath(__file__),
                                               list(sys.argv[1:] if argv is None else argv),
                                               cluster, lambda text: tell(sys.stderr, text),
                                               sync=cfg.sync_updates)
        if args.resume is not None:
            summary = train(env_id, cfg, show_plot=not args.no_plot, resume_dir=args.resume,
                            cluster=cluster)
        else:  # first, which preset set what (an edited Config default it overrides shows), and
            # what was set by hand to no effect: once the env and config are known to work
            preamble = [config_module.describe_preset(env_id, cfg.sync_updates,
                                                      overrides_from_args(args))] + unused_notes
            summary = train(env_id, cfg, args.results_dir or "results", show_plot=not args.no_plot,
                            cluster=cluster, preamble="\n".join(preamble))
    except (UsageError, cluster_module.ClusterError) as exc:  # the input, cluster files too
        tell(sys.stderr, f"a3c.py: error: {exc}")
        return 2
    except WorkerError as exc:
        tell(sys.stderr, f"a3c.py: error: training stopped: {exc}")
        return 1
    except OSError as exc:  # the disk, not the input: a full disk, a folder that went away
        tell(sys.stderr, f"a3c.py: error: {exc}")
        return 1
    except Interrupted as exc:  # a Ctrl-C that training could not turn into a clean stop
        tell(sys.stderr, f"a3c.py: {exc}")
        return 130
    except KeyboardInterrupt:
        tell(sys.stderr, "a3c.py: interrupted")
        return 130
    return 130 if summary["interrupted"] else 0


def leave(code: int) -> int:
    """Exit with code; straight away, skipping Python's shutdown, while a worker thread is still
    inside TensorFlow (a second Ctrl-C stopped at once): finalising the interpreter under a
    running session call aborts the process (SIGABRT) instead of exiting with the code."""
    if cluster_module.Resends.count:
        tell(sys.stderr, f"a3c.py: note: the ps refused this process's calls as repeats of earlier "
                         f"ones {cluster_module.Resends.count} times, a TensorFlow defect "
                         f"(REPEATED_REQUEST in cluster.py); each time the call was sent again")
    if any(thread.daemon and thread.is_alive() for thread in threading.enumerate()):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(leave(main(command_line=True)))
