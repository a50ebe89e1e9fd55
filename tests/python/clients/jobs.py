"""Job functions the framework tests run; importable by worker processes."""

import os


def add(a, b):
    return a + b


def fail_once(marker_dir, n):
    """Fails the first time it runs for `n`, succeeds after (a retried job)."""
    marker = os.path.join(marker_dir, f"failed-{n}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError(f"first attempt of {n} fails")
    return n * 10
