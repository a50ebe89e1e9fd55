"""A linearizability checker for a read/write register, after Wing and Gong's search with
Lowe's memoisation (the method of Knossos and Porcupine), small enough to read whole.

A history is operations with an invocation and a completion on one logical clock. An
operation whose outcome the client does not know (its connection died after sending)
may have taken effect at any point after its invocation, or never: it has no completion.
A read whose outcome is unknown tells nothing and is dropped.

The search linearizes one operation at a time: any operation invoked before the earliest
completion among those not yet linearized may go next, if the register allows it (a read
must return the current value). It succeeds once every answered operation is placed; a
(placed set, value) pair already explored is not explored again."""

import itertools
import sys
import threading
from dataclasses import dataclass
from typing import Optional


@dataclass
class Op:
    process: int
    kind: str  # "write" or "read"
    value: Optional[str]
    invoked: int
    completed: Optional[int] = None
    ok: bool = False


class History:
    def __init__(self):
        self._lock = threading.Lock()
        self._clock = itertools.count()
        self._ops = []

    def invoke(self, process, kind, value):
        with self._lock:
            op = Op(process, kind, value, next(self._clock))
            self._ops.append(op)
            return op

    def complete(self, op, value, ok):
        with self._lock:
            op.completed = next(self._clock) if ok else None
            op.ok = ok
            if op.kind == "read":
                op.value = value

    def ops(self):
        with self._lock:
            return list(self._ops)


INFINITY = float("inf")


def check_register(ops, initial=None):
    """(True, None) when the history is linearizable, else (False, a description)."""
    ops = [o for o in ops if o.ok or o.kind == "write"]
    ops.sort(key=lambda o: o.invoked)
    ends = [o.completed if o.ok else INFINITY for o in ops]
    must = sum(1 << i for i, o in enumerate(ops) if o.ok)
    seen = set()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * len(ops) + 1000))
    deepest = [0]

    def search(done, value, placed):
        if done & must == must:
            return True
        if (done, value) in seen:
            return False
        seen.add((done, value))
        deepest[0] = max(deepest[0], placed)
        horizon = min(ends[i] for i in range(len(ops)) if not done >> i & 1 and ops[i].ok)
        for i, op in enumerate(ops):
            if op.invoked > horizon:
                break
            if done >> i & 1:
                continue
            if op.kind == "write":
                if search(done | 1 << i, op.value, placed + 1):
                    return True
            elif op.value == value and search(done | 1 << i, value, placed + 1):
                return True
        return False

    if search(0, initial, 0):
        return True, None
    return False, f"no legal order: at most {deepest[0]} of {len(ops)} operations placed"


def _selftest():
    h = History()
    w = h.invoke(0, "write", "a")
    h.complete(w, None, True)
    r = h.invoke(1, "read", None)
    h.complete(r, "a", True)
    assert check_register(h.ops())[0]
    stale = h.invoke(1, "read", None)
    h.complete(stale, None, True)
    assert not check_register(h.ops())[0]


if __name__ == "__main__":
    _selftest()
    print("ok")
