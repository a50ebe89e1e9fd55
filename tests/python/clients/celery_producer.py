"""Submits 100 `add` tasks and one `flaky` task to the Celery app and prints their results
as JSON (run as a process of its own, so each server gets a fresh app)."""

import json
import time

import celery_app

results = [celery_app.add.delay(i, 1000) for i in range(100)]
flaky = celery_app.flaky.delay(7)
deadline = time.time() + 60
values = [r.get(timeout=max(1, deadline - time.time())) for r in results]
print(json.dumps({
    "values": values,
    "flaky": flaky.get(timeout=30),
    "successful": all(r.successful() for r in results),
}))
