"""The worker pool the conformance kit and the fuzz campaign share (axle.testing.workers):
what a task said before it crashed comes back, captured output comes back with a failed
task, tasks sharing a key go to one worker, and terminate() stops a pool stuck in a hang.
Tasks are builtins (exec, eval) over source strings, so the workers need no test module."""
from __future__ import annotations

import threading
import time

from axle.testing.workers import CRASH, HANG, Lost, Pool, Raised

CRASHING = ("from axle.testing.workers import note; note(('k0', {'k0': 'kernel source'})); "
            "print('the toolchain said this', flush=True); import ctypes; ctypes.string_at(0)")
RAISING = "from axle.testing.workers import note; note('compiled'); print('before', flush=True); 1 / 0"


def test_notes_and_output_survive_a_crash_and_a_raise():
    with Pool(1, timeout=60, capture=True) as pool:
        crashed = pool.run(exec, CRASHING)
        raised = pool.run(exec, RAISING)
        assert pool.run(eval, "6 * 7") == 42  # the replaced worker takes the next task
    assert isinstance(crashed, Lost) and crashed.kind == CRASH and "SIGSEGV" in crashed.detail
    assert crashed.notes == (("k0", {"k0": "kernel source"}),)
    assert "the toolchain said this" in crashed.output
    assert "Fatal Python error: Segmentation fault" in crashed.stacks
    assert isinstance(raised, Raised) and raised.error.startswith("ZeroDivisionError")
    assert raised.notes == ("compiled",) and raised.output == "before" and "1 / 0" not in raised.error
    assert "ZeroDivisionError" in raised.traceback


def test_tasks_sharing_a_key_go_to_one_worker_until_it_runs_out():
    tasks = [(eval, (f"'{k}{i}'",)) for k in "abc" for i in range(3)]
    with Pool(2, timeout=60) as pool:
        take = pool._affine(tasks, lambda t: t[1][0][1])
        first, second = pool.slots
        order = [take(s)[1][0] for s in (first, second) * 3]
        # a and c to the first worker, b to the second; the second, out of work, takes
        # from the end of the first's queue
        assert order == ["'a0'", "'b0'", "'a1'", "'b1'", "'a2'", "'b2'"]
        assert [take(second)[1][0] for _ in range(3)] == ["'c2'", "'c1'", "'c0'"]
        assert take(first) is None
        answers = sorted(a for _, a in pool.imap(tasks, affinity=lambda t: t[1][0][1]))
    assert answers == sorted(f"{k}{i}" for k in "abc" for i in range(3))


def test_terminate_stops_a_pool_waiting_on_a_hang():
    pool = Pool(1, timeout=600)
    answers: list = []
    t = threading.Thread(target=lambda: answers.extend(pool.imap([(exec, ("import time; time.sleep(600)",))])))
    t.start()
    while pool.slots[0].task is None:  # dispatched
        t.join(0.05)
    pool.terminate()
    t.join(120)
    assert not t.is_alive()
    assert [a.kind for _, a in answers] in ([], [CRASH]) and HANG not in str(answers)
    pool.close()


def test_a_worker_is_replaced_after_max_tasks():
    """A long campaign's workers start afresh every max_tasks tasks, so what a driver
    never gives back (PoCL's mappings of released programs) cannot accumulate."""
    pid = "__import__('os').getpid()"
    with Pool(1, timeout=60, max_tasks=3) as pool:
        pids = [pool.run(eval, pid) for _ in range(7)]
    assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4] == pids[5] != pids[6]
    with Pool(1, timeout=60) as pool:  # no limit: one worker throughout
        assert len({pool.run(eval, pid) for _ in range(5)}) == 1


def test_a_hang_reports_the_notes_sent_since_the_last_wait():
    """A slot past its time is judged after reading its inbox, not from the ready set of
    the last wait: another slot's collection (a crashed worker replaced: seconds under load)
    can come between, and a check's kernel sources sent meanwhile were left out of its hang
    report ("no executable was compiled before the failure")."""
    with Pool(1, timeout=0.5) as pool:
        slot = pool.slots[0]
        pool._dispatch(slot, (exec, ("from axle.testing.workers import note; note('compiled'); "
                                     "import time; time.sleep(600)",)))
        while not slot.inbox.poll():  # the note is sent
            time.sleep(0.01)
        time.sleep(0.6)  # past the timeout, as if the pool had been busy with another slot
        done, lost = pool._collect(slot, set())
    assert done and isinstance(lost, Lost) and lost.kind == HANG
    assert lost.notes == ("compiled",)
