"""What `topics cluster move|drain` prints as a move goes (cli/move_verbs.py), from the
topic's GET /v0/cluster entry: each phase in words, a new phase at once, new figures of
the same phase at most every REPEAT_S."""

from topics_actors.cli.move_verbs import REPEAT_S, finished, phase, worth_printing


def view(replicas, isr, leader, target=None):
    out = {"replicas": list(replicas), "isr": list(isr), "leader": leader}
    if target is not None:
        out["target"] = list(target)
    return out


def test_each_phase_of_a_move_in_words():
    wanted = ["b", "c"]
    assert phase(view("ab", "ab", "a"), wanted, {}, False) == "starting"   # view behind
    assert phase(view("ab", "ab", "a"), wanted, {}, True).startswith("replaced")
    assert phase(view("ab", "ab", "a", "bc"), wanted, {}, True) == "adding c"
    assert phase(view("abc", "ab", "a", "bc"), wanted, {"c": 120}, True) == (
        "catching up: c lag 120")
    assert phase(view("abc", "ab", "a", "bc"), wanted, {}, True) == "catching up: c lag ?"
    assert phase(view("abc", "abc", "a", "bc"), wanted, {}, True) == (
        "in sync; moving leadership off a")
    assert phase(view("abc", "abc", "b", "bc"), wanted, {}, True) == "in sync; removing a"
    done = phase(view("bc", "bc", "b"), wanted, {}, True)
    assert done == "done: replicas b,c, leader b" and finished(done)
    assert finished(phase(None, wanted, {}, True))                         # deleted
    assert not finished("catching up: c lag 1")


def test_a_lag_is_printed_again_only_every_few_seconds():
    assert worth_printing("adding c", "", 0.0, 0.1)
    assert not worth_printing("adding c", "adding c", 0.0, 100.0)
    assert not worth_printing("catching up: c lag 5", "catching up: c lag 9", 10.0, 11.0)
    assert worth_printing("catching up: c lag 5", "catching up: c lag 9", 10.0,
                          10.0 + REPEAT_S)
    assert worth_printing("in sync; removing a", "catching up: c lag 1", 10.0, 10.1)
