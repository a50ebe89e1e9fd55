"""The register checker (`linearizability.py`) accepts legal histories and rejects illegal
ones, so that the consensus test's verdict can fail."""

from linearizability import Op, check_register


def op(kind, value, invoked, completed, ok=True):
    return Op(0, kind, value, invoked, completed if ok else None, ok)


def test_concurrent_operations_may_take_effect_in_either_order():
    # A read overlapping a write may see the old or the new value.
    assert check_register([op("write", "a", 0, 1), op("write", "b", 2, 5), op("read", "a", 3, 4)])[0]
    assert check_register([op("write", "a", 0, 1), op("write", "b", 2, 5), op("read", "b", 3, 4)])[0]


def test_a_stale_read_after_a_completed_write_is_refused():
    ok, detail = check_register([op("write", "a", 0, 1), op("write", "b", 2, 3), op("read", "a", 4, 5)])
    assert not ok and "no legal order" in detail


def test_a_value_never_written_is_refused():
    assert not check_register([op("write", "a", 0, 1), op("read", "z", 2, 3)])[0]


def test_reads_may_not_travel_back_in_time():
    # Two sequential reads see b then a, but a was overwritten by b: illegal.
    history = [op("write", "a", 0, 1), op("write", "b", 2, 9), op("read", "b", 3, 4), op("read", "a", 5, 6)]
    assert not check_register(history)[0]


def test_an_unknown_write_may_have_happened_or_not():
    unknown = op("write", "u", 2, None, ok=False)
    assert check_register([op("write", "a", 0, 1), unknown, op("read", "u", 10, 11)])[0]
    assert check_register([op("write", "a", 0, 1), unknown, op("read", "a", 10, 11)])[0]
    # ... but not before it was invoked.
    late = op("write", "u", 20, None, ok=False)
    assert not check_register([op("write", "a", 0, 1), late, op("read", "u", 10, 11)])[0]


def test_a_long_sequential_history_checks_quickly():
    history, t = [], 0
    for i in range(2000):
        history.append(op("write", str(i), t, t + 1))
        history.append(op("read", str(i), t + 2, t + 3))
        t += 4
    assert check_register(history)[0]
