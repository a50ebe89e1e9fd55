"""Sends 100 messages to the dramatiq actor and prints their results as JSON."""

import json

import dramatiq_app

messages = [dramatiq_app.add.send(i, 1000) for i in range(100)]
print(json.dumps([m.get_result(block=True, timeout=60_000) for m in messages]))
