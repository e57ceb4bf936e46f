"""Build the trainer's graph for a test and start a session on it."""
import tensorflow as tf

import a3c
import best_agent
import checkpoints


def build_session(spec, cfg, cluster=False):
    """(session, global net, worker nets), variables initialised; cluster: a cluster process's."""
    graph = tf.Graph()
    with graph.as_default():
        global_net, worker_nets = a3c.build_graph(spec, cfg, cluster)
        init = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session(graph=graph)
    sess.run(init)
    return sess, global_net, worker_nets


def checkpoints_and_best(run_dir, cfg, env_id, global_net, spec, copy_lock=None):
    """A run's Checkpoints and BestCheckpoint, built into the default graph as train builds them."""
    saved = checkpoints.Checkpoints(run_dir, cfg, env_id)
    best = best_agent.BestCheckpoint(saved.folder, global_net, a3c.ACNet("best_candidate", spec, cfg),
                                     spec, cfg, env_id, saved.env_id_variable, copy_lock)
    return saved, best
