"""What the user reads: the errors a run reports in one line, warnings, progress lines, and the
console that must never be what stops a run."""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time


def quiet_ctrl_c_while_starting(program: str, also: tuple = ()) -> bool:
    """A script's imports take seconds (TensorFlow's): a Ctrl-C then ends it with one line and
    status 130, not a traceback, written to a copy of stderr, which sessions.py silences during
    TensorFlow's import. Only where Ctrl-C is Python's own: a start that ignores SIGINT keeps
    ignoring it. also: the names of other signals to take so while they have their default
    action (SIGTERM ended a3c.py silently with 143), for a script that puts in handlers of its
    own for them too. True if it took SIGINT; the script puts its own handler in once it has
    imported."""
    takes_sigint = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    taken = ([signal.SIGINT] if takes_sigint else []) + [  # (a background job ignores SIGINT)
        number for number in (getattr(signal, name, None) for name in also)
        if number is not None and signal.getsignal(number) is signal.SIG_DFL]
    if not taken:
        return False
    try:
        stderr_at_start = os.dup(2)
    except OSError:  # started with stderr closed: Python's own Ctrl-C then
        return False
    line = f"{program}: interrupted while starting: nothing was written\n".encode()

    def stopped_while_starting(signum, frame):
        try:
            os.write(stderr_at_start, line)
        except OSError:  # (no console left to tell)
            pass
        # at once: nothing is written yet, and a SystemExit raised inside a C extension's import
        # (numpy's) comes out as an ImportError's traceback
        os._exit(130)
    for number in taken:
        signal.signal(number, stopped_while_starting)
    return takes_sigint


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit status 2, nothing written."""


class WorkerError(Exception):
    """Training stopped because a worker thread (or the driver) raised: carries its name."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) that ended the program before a clean stop; the message says
    what is true of the run at that point."""


class StoreOnce(argparse._StoreAction):
    """A flag that takes a value, refused the second time: `--max-steps 1e4 ... --max-steps 500`
    means one of them by mistake, and which is not ours to guess (argparse keeps the last)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_flags_given", set())
        if self.dest in given:
            parser.error(f"{'/'.join(self.option_strings)} is given twice; give it once")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class OneLineParser(argparse.ArgumentParser):
    """A bad flag gets one line, like every other bad input, not argparse's usage block; a flag
    that takes a value takes it once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, StoreOnce)
        self.register("action", "store", StoreOnce)

    def error(self, message):
        tell(sys.stderr, f"{self.prog}: error: {message} (python {self.prog} --help lists the flags)")
        raise SystemExit(2)


def first_line(exc: Exception) -> str:
    """The first line of an exception's message (or its type's name): fit for a one-line error."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    while len(lines) > 1 and (lines[0].startswith("Graph execution error")  # TensorFlow's headers
                              or lines[0].startswith("From /job:") and lines[0].endswith(":")):
        lines = lines[1:]
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= 300 else line[:300] + " ..."  # (a request's dump of tensors)


def tenths(value: float) -> str:
    """One decimal, and "0.0" where a small negative would print "-0.0" (MountainCar's returns)."""
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def counted(number: int, noun: str) -> str:
    """"1 env", "8 envs", "1,000 episodes"."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def tell(stream, text: str) -> bool:
    """Print text to stream; False, and the stream silenced for good, if it is gone (a broken
    pipe, a closed terminal): a message must never be what stops a run or its cleanup."""
    try:
        print(text, file=stream, flush=True)
        return True
    except (OSError, ValueError):
        if stream in (sys.stdout, sys.stderr):  # keep Python's exit-time flush from failing too
            try:
                with open(os.devnull, "w") as devnull:
                    os.dup2(devnull.fileno(), stream.fileno())
            except (OSError, ValueError):
                pass
        return False


def warn(text: str) -> None:
    tell(sys.stderr, f"a3c.py: warning: {text}")


def attempt(what: str, step, *args):
    """step(*args), or None after a warning if it raised: one failing step of a cleanup must not
    keep the others from running."""
    try:
        return step(*args)
    except Exception as exc:
        warn(f"could not {what}: {first_line(exc)}")
        return None


def is_ctrl_c(exc: BaseException) -> bool:
    """A KeyboardInterrupt, or what pybind11 makes of one that lands while TensorFlow's C++ is
    handling an error of its own (as it does while it builds the graph): a RuntimeError
    "... MISMATCH of original and normalized active exception types: ... REPLACED BY
    KeyboardInterrupt"."""
    return isinstance(exc, KeyboardInterrupt) or (
        isinstance(exc, RuntimeError) and "REPLACED BY KeyboardInterrupt" in str(exc))


class Console:
    """Progress lines for the user. A console that goes away (`a3c.py ... | head`, a closed
    terminal) stops the lines, not the training: the run goes on to write its files."""

    def __init__(self, out):
        self.out = out
        self.open = True

    def say(self, text: str) -> None:
        if self.open and not tell(self.out, text):
            self.open = False
            warn("the console went away; training goes on without progress lines")


def progress_line(p: dict) -> str:
    """Before the first 100 episodes the running mean is over fewer, and says over how many."""
    best = tenths(p["best_running"]) if math.isfinite(p["best_running"]) else "n/a"
    window = p["window"] or 100  # (no episode yet: n/a, under the usual label)
    running = tenths(p["running"]) if p["window"] else "n/a"
    return (f"episodes {p['episodes']:>6} | env steps {p['env_steps']:>10,} | "
            f"{p['steps_per_s']:>7,.0f} steps/s | {f'mean-{window} return':<15} {running:>8} | "
            f"best mean-100 {best} | {p['wall_s']:.0f} s")


SAME_STOP_S = 0.25
last_stop = [-SAME_STOP_S]  # when the latest stop signal came (time.monotonic())


def repeated_stop() -> bool:
    """Whether a stop signal is the one before it delivered again: within SAME_STOP_S (GNU
    timeout signals the process, then its group), not the second Ctrl-C that stops at once."""
    now = time.monotonic()
    if now - last_stop[0] < SAME_STOP_S:
        return True
    last_stop[0] = now
    return False


def stop_like_ctrl_c(signum, frame):
    """Ctrl-C, kill and a closed terminal stop a run as Ctrl-C does (once: repeated_stop)."""
    if not repeated_stop():
        raise KeyboardInterrupt
