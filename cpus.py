"""Where the trainer's threads run: which CPUs this process may use, and how the worker threads
and TensorFlow's op pool are laid out on them (a3c.py pins them; config.py's pin_threads).

Not A3C itself, so it lives beside a3c.py; no TensorFlow here.
"""
from __future__ import annotations

import os
import typing

from config import Config


class CpuLayout(typing.NamedTuple):
    """Where the threads run when they are pinned."""
    workers: set  # the CPUs the worker threads share
    ops: set      # the CPUs of the session's op pool

    def describe(self) -> str:
        ops = f"CPU {min(self.ops)}" if len(self.ops) == 1 else f"{len(self.ops)} other CPUs"
        return f"worker threads share CPU {min(self.workers)}, TensorFlow's ops run on {ops}"


def cpu_quota(cgroup_root: str = "/sys/fs/cgroup") -> typing.Optional[float]:
    """How many CPUs' worth of time a cgroup CPU quota grants (cgroup v2's cpu.max, or v1's
    cfs_quota_us / cfs_period_us), or None: no quota, or none readable. Containers and batch
    systems set one while the affinity mask still lists every CPU of the host."""
    own = ""  # this process's cgroup-v2 path, where the host's tree is visible (no namespace)
    try:
        with open("/proc/self/cgroup") as f:
            own = next((line.split("::", 1)[1].strip().lstrip("/") for line in f
                        if line.startswith("0::")), "")
    except OSError:
        pass
    for quota_file, period_file in ((os.path.join(own, "cpu.max"), None), ("cpu.max", None),
                                    ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):
        try:
            with open(os.path.join(cgroup_root, quota_file)) as f:
                fields = f.read().split()
            if period_file is not None:
                with open(os.path.join(cgroup_root, period_file)) as f:
                    fields.append(f.read().strip())
            quota, period = fields[0], fields[1]
            if quota in ("max", "-1"):
                return None
            return int(quota) / int(period)
        except (OSError, IndexError, ValueError):
            continue
    return None


def usable_cpus() -> tuple[list, float]:
    """(the CPUs this process may run on, how many CPUs' worth of time it may use)."""
    if hasattr(os, "sched_getaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
    else:
        cpus = list(range(os.cpu_count() or 1))
    quota = cpu_quota()
    return cpus, min(len(cpus), quota) if quota else float(len(cpus))


def cpu_layout(cfg: Config, cpus: list = None, capacity: float = None) -> typing.Optional[CpuLayout]:
    """Where the worker threads and TensorFlow's op pool run, or None: no pinning. cpus and
    capacity are usable_cpus() unless given.

    Only one thread at a time runs Python (the GIL), and every session call hands it on. Left to
    the OS, the next worker often sleeps on another CPU, and waking it there costs more than the
    call. With the workers taking turns on one CPU and their ops queued to a pool on the others,
    both CPUs stay busy (results/throughput.md, docs/implementation.md). It takes 3 or more
    workers: with fewer, there is seldom another worker ready to run while one waits for its ops.

    Past 2 CPUs (reasoned, not measured): the workers still
    share one CPU, which costs nothing while Python runs one thread at a time, but does cost an
    env whose step releases the GIL (run those with pin_threads=false). The pool gets at most one
    CPU per worker, since each worker has at most one call in flight. Under a cgroup quota of Q
    CPUs the layout uses floor(Q) of the allowed CPUs, so the pinned threads can never ask for
    more time than the quota grants; below 2, nothing is pinned. Environments are made in the
    main thread, which is never pinned, so threads they start when made run anywhere; threads an
    env starts later, from inside a step, share the workers' CPU (pin_threads=false avoids it)."""
    if not cfg.pin_threads or cfg.workers < 3 or not hasattr(os, "sched_setaffinity"):
        return None
    if cpus is None:
        cpus, capacity = usable_cpus()
    usable = min(len(cpus), int(capacity))
    if usable < 2:
        return None
    return CpuLayout(workers={cpus[0]}, ops=set(cpus[1:min(usable, 1 + cfg.workers)]))
