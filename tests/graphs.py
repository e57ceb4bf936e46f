"""Build the trainer's graph for a test and start a session on it."""
import tensorflow as tf

import a3c


def build_session(spec, cfg):
    """(session, global net, worker nets), variables initialised."""
    graph = tf.Graph()
    with graph.as_default():
        global_net, worker_nets = a3c.build_graph(spec, cfg)
        init = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session(graph=graph)
    sess.run(init)
    return sess, global_net, worker_nets
