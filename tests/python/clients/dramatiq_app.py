"""The dramatiq app the dramatiq test runs: WeTask as broker and Results backend. The port
comes from WETASK_PORT."""

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend

port = int(os.environ["WETASK_PORT"])
broker = RedisBroker(host="127.0.0.1", port=port, db=0)
broker.add_middleware(Results(backend=RedisBackend(host="127.0.0.1", port=port, db=1)))
dramatiq.set_broker(broker)


@dramatiq.actor(store_results=True, max_retries=0)
def add(a, b):
    return a + b
