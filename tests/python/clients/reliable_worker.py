"""A worker of the reliable-fetch pattern Sidekiq-compatible engines use: one pipeline of
three commands per job retires the previous job (LREM from this worker's processing list,
DEL its data key) and claims the next (LMOVE from the queue to the processing list).

    python reliable_worker.py PORT NAME [hang]

With `hang` the worker stalls in its first job (for the test to kill it holding a job).
"""

import sys
import time

import redis

port, name = int(sys.argv[1]), sys.argv[2]
hang = len(sys.argv) > 3 and sys.argv[3] == "hang"
r = redis.Redis(port=port)
processing = f"processing:{name}"
previous = None
idle_since = None
while True:
    pipe = r.pipeline(transaction=False)
    if previous is not None:
        pipe.lrem(processing, 1, previous)
        pipe.delete(f"job:{previous.decode()}")
    pipe.lmove("queue", processing, "RIGHT", "LEFT")
    job = pipe.execute()[-1]
    previous = job
    if job is None:
        idle_since = idle_since or time.time()
        if time.time() - idle_since > 1.0:
            break
        time.sleep(0.02)
        continue
    idle_since = None
    payload = int(r.get(f"job:{job.decode()}"))
    time.sleep(60 if hang else 0.01)  # the work
    r.hset("results", job, payload * 2)
