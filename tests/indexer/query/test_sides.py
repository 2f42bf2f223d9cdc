"""A hybrid query's two sides at once (`indexer.query.sides`): both answers come back, an error
of either side is raised to the caller, and a process forked after using the pool still runs
its other side (a pool inherited through a fork would wait for threads the child lacks)."""

import os
import signal
import threading

import pytest

from indexer.query.sides import both


def test_both_sides_answer_and_the_other_runs_on_a_pool_thread():
    here = threading.current_thread().name
    first, second = both(
        lambda: threading.current_thread().name, lambda: threading.current_thread().name
    )
    assert first == here and second.startswith("bertindex-side")


def test_an_error_of_either_side_reaches_the_caller():
    def fail():
        raise ValueError("side failed")

    with pytest.raises(ValueError, match="side failed"):
        both(lambda: 1, fail)
    with pytest.raises(ValueError, match="side failed"):
        both(fail, lambda: 1)


def test_a_fork_of_a_process_that_used_the_pool_still_runs_both_sides():
    assert both(lambda: 1, lambda: 2) == (1, 2)  # the pool now has a thread here
    child = os.fork()
    if child == 0:  # the child: answer within 20 s or be stopped by the alarm
        signal.alarm(20)
        os._exit(0 if both(lambda: 3, lambda: 4) == (3, 4) else 1)
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
