// BullMQ on WeTask: a Worker runs 100 jobs added to a Queue; every job's return value is
// checked, plus one job that fails once and succeeds on its retry. The port comes from
// WETASK_PORT. Prints a JSON report; exits non-zero on any failure.
// BULLMQ_HOME names the install to test (tests/node: the pinned release; tests/node-current:
// the newest), so one script drives both.
const { Queue, Worker, QueueEvents } = require(require.resolve("bullmq", { paths: [process.env.BULLMQ_HOME || __dirname] }));

// WETASK_CLUSTER_NODES (a JSON list of {host, port}) runs it against a cluster instead, through
// ioredis's Cluster and a `{prefix}` that keeps every key of the queue in one slot, as BullMQ
// asks of Redis Cluster users.
const home = process.env.BULLMQ_HOME || __dirname;
const clusterNodes = process.env.WETASK_CLUSTER_NODES ? JSON.parse(process.env.WETASK_CLUSTER_NODES) : null;
const IORedis = require(require.resolve("ioredis", { paths: [home] }));
const connection = clusterNodes
  ? new IORedis.Cluster(clusterNodes, { redisOptions: { maxRetriesPerRequest: null } })
  : { host: "127.0.0.1", port: Number(process.env.WETASK_PORT), maxRetriesPerRequest: null };
const prefix = clusterNodes ? "{wetask-bull}" : undefined;

async function main() {
  const name = `wetask-${Date.now()}`;
  const queue = new Queue(name, { connection, prefix });
  const events = new QueueEvents(name, { connection, prefix });
  await events.waitUntilReady();
  const attempts = {};
  const worker = new Worker(
    name,
    async (job) => {
      attempts[job.id] = (attempts[job.id] || 0) + 1;
      if (job.name === "flaky" && attempts[job.id] === 1) {
        throw new Error("first attempt fails");
      }
      return job.data.a + job.data.b;
    },
    { connection, prefix, concurrency: 4 },
  );
  const jobs = [];
  for (let i = 0; i < 100; i++) {
    jobs.push(await queue.add("add", { a: i, b: 1000 }));
  }
  const flaky = await queue.add("flaky", { a: 7, b: 63 }, { attempts: 2, backoff: { type: "fixed", delay: 10 } });
  const results = [];
  for (const job of jobs) {
    results.push(await job.waitUntilFinished(events, 30000));
  }
  const flakyResult = await flaky.waitUntilFinished(events, 30000);
  const counts = await queue.getJobCounts("completed", "failed", "waiting", "active");
  await worker.close();
  await events.close();
  await queue.close();
  if (clusterNodes) await connection.quit();
  console.log(JSON.stringify({ results, flakyResult, flakyAttempts: attempts[flaky.id], counts }));
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
