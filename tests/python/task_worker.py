"""A TASK.* worker process for the crash tests: one blocking FETCH per task, then a
separate ACK so that it knows, and logs, which acknowledgements the server accepted.

Usage: task_worker.py PORT QUEUE LOGFILE WORK_MS
Log lines: "start <id>" before working on a task, "acked <id>" after the server took the ACK.
"""

import sys
import time

import redis

port, queue, log_path, work_ms = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
r = redis.Redis(port=port)
with open(log_path, "a", buffering=1) as log:
    while True:
        tasks = r.execute_command("TASK.FETCH", queue, "BLOCK", 1000, "LEASE", 30000)
        for task in tasks:
            task_id = task[0].decode()
            log.write(f"start {task_id}\n")
            time.sleep(work_ms / 1000)
            if r.execute_command("TASK.ACK", task_id, "RESULT", str(len(task[2]))) == b"OK":
                log.write(f"acked {task_id}\n")
