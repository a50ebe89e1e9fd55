"""The Celery app the Celery test runs: WeTask as broker and result backend. The port
comes from WETASK_PORT."""

import os

from celery import Celery

port = os.environ["WETASK_PORT"]
app = Celery(
    "wetask_celery",
    broker=f"redis://127.0.0.1:{port}/0",
    backend=f"redis://127.0.0.1:{port}/1",
)
app.conf.update(
    broker_connection_retry_on_startup=True,
    task_acks_late=True,
    worker_prefetch_multiplier=4,
    result_expires=600,
)


@app.task
def add(a, b):
    return a + b


@app.task(bind=True, max_retries=3, default_retry_delay=0)
def flaky(self, n):
    if self.request.retries == 0:
        raise self.retry(countdown=0)
    return n * 10
