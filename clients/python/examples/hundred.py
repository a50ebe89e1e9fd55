"""The 100-task example: a producer submits 100 tasks, eight threads work them off, and each
result is kept on its task. Run a server (`wetask`), then: python examples/hundred.py [port]"""
import sys

from wetask import Worker

worker = Worker(["emails"], concurrency=8, port=int(sys.argv[1]) if len(sys.argv) > 1 else 6379)


@worker.task("emails", retries=3, backoff_ms=100)
def send_email(payload):
    # A real sender talks to SMTP here; raising makes the server retry after the backoff.
    return {"sent_to": payload["to"]}


if __name__ == "__main__":
    ids = [send_email.submit({"n": n, "to": f"user{n}@example.com"}) for n in range(100)]
    worker.run(until_idle=True)  # stops once nothing is left; without it, at SIGTERM
    print("done:", sum(worker.client.get(i)["state"] == "done" for i in ids), "of", len(ids))
