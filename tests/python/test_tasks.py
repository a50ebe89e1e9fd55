"""TASK.* from redis-py: the worked example of docs/TASKS.md, and workers killed with
SIGKILL in the middle of tasks."""

import os
import signal
import subprocess
import sys
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))


def test_worked_example(server):
    # --- the example from docs/TASKS.md ---
    r = redis.Redis(port=server.port)
    ids = [r.execute_command("TASK.SUBMIT", "emails", f"hello {n}", "RETRIES", 2) for n in range(3)]

    done = []
    previous = []
    while True:
        # One command per task: acknowledge the previous task and lease the next.
        args = ["TASK.FETCH", "emails", "BLOCK", 200]
        if previous:
            args += ["ACK", *previous]
        tasks = r.execute_command(*args)
        if not tasks:
            break
        task_id, queue, payload, attempt = tasks[0][:4]
        done.append(payload.decode())
        previous = [task_id]
    # --- end of the example ---
    assert done == ["hello 0", "hello 1", "hello 2"]
    for task_id in ids:
        info = r.execute_command("TASK.GET", task_id)
        fields = dict(zip(info[::2], info[1::2])) if isinstance(info, list) else info
        assert fields[b"state"] == b"done"


def test_killed_workers_lose_no_task(server, tmp_path):
    r = redis.Redis(port=server.port)
    queue = f"crash-{server.port}"
    total = 120
    ids = [r.execute_command("TASK.SUBMIT", queue, "x" * n, "RETRIES", 5) for n in range(total)]
    logs = []
    workers = []

    def spawn(n):
        log = tmp_path / f"worker-{n}.log"
        logs.append(log)
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "task_worker.py"),
                                 str(server.port), queue, str(log), "15"])
        workers.append(proc)
        return proc, log

    victims = [spawn(n) for n in range(2)]
    for n in range(2, 4):
        spawn(n)

    def mid_task(log):
        """True when the worker's last log line says it is working on a task."""
        try:
            lines = log.read_text().splitlines()
        except FileNotFoundError:  # the worker has not started yet (Python starts slowly)
            return False
        return bool(lines) and lines[-1].startswith("start")

    # Kill two workers with SIGKILL mid-task, and time how long their task takes to come back.
    # Each victim is killed once its log shows it holds a task: a readiness signal, not a
    # sleep (four Python processes importing redis-py took 1.8 s to start on a slow machine).
    redelivery_ms = []
    for proc, log in victims:
        deadline = time.monotonic() + 60
        while not mid_task(log):
            assert proc.poll() is None, "a worker exited"
            assert time.monotonic() < deadline, "a worker never started a task"
            time.sleep(0.001)
        started = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")]
        acked = {line.split()[1] for line in log.read_text().splitlines() if line.startswith("acked")}
        in_flight = [t for t in started if t not in acked]
        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait()
        if in_flight:
            task_id = in_flight[-1]
            while True:
                info = r.execute_command("TASK.GET", task_id)
                fields = dict(zip(info[::2], info[1::2])) if isinstance(info, list) else info
                if int(fields[b"attempts"]) >= 2 or fields[b"state"] == b"done":
                    redelivery_ms.append((time.monotonic() - killed_at) * 1000)
                    break
                assert time.monotonic() - killed_at < 5, "a killed worker's task never came back"
                time.sleep(0.001)
    for n in range(4, 6):
        spawn(n)

    deadline = time.monotonic() + 60
    while True:
        states = []
        for task_id in ids:
            info = r.execute_command("TASK.GET", task_id)
            fields = dict(zip(info[::2], info[1::2])) if isinstance(info, list) else info
            states.append(fields[b"state"])
        if all(s == b"done" for s in states):
            break
        assert time.monotonic() < deadline, f"unfinished: {sum(s != b'done' for s in states)}"
        time.sleep(0.05)
    for proc in workers:
        proc.kill()
        proc.wait()

    acked = []
    for log in logs:
        if log.exists():  # a worker started late may have found nothing left to do
            acked += [line.split()[1] for line in log.read_text().splitlines() if line.startswith("acked")]
    assert len(acked) == len(set(acked)), "a task was acknowledged twice"
    # A victim may be killed after the server took its ACK but before it logged it: such a
    # task is done (checked above) without an "acked" line, and must be a victim's last one.
    victims_last = set()
    for _, log in victims:
        lines = log.read_text().splitlines()
        started = [line.split()[1] for line in lines if line.startswith("start")]
        if started:
            victims_last.add(started[-1])
    missing = {i.decode() for i in ids} - set(acked)
    assert missing <= victims_last, f"tasks done by nobody: {missing - victims_last}"
    print(f"redelivery after SIGKILL: {[round(ms, 1) for ms in redelivery_ms]} ms")
    assert redelivery_ms, "no worker was killed mid-task"
    assert max(redelivery_ms) < 1000
