// BullMQ's queue lifecycle on many random queue names (issue 15): for each name, jobs are
// added, the queue is obliterated (a script that builds key names at run time: on several
// shards its first run reaches keys it did not declare, is undone and runs again holding
// every shard), then new jobs are added and a Worker must complete every one of them, and
// getJobCounts must say so. A script that half-applied would leave the queue paused and the
// jobs waiting for ever. WETASK_PORT names the port, WETASK_QUEUES how many names (50).
// Prints a JSON report; exits non-zero on any failure.
// BULLMQ_HOME names the install to test (tests/node: the pinned release; tests/node-current:
// the newest), so one script drives both.
const { Queue, Worker } = require(require.resolve("bullmq", { paths: [process.env.BULLMQ_HOME || __dirname] }));

const connection = { host: "127.0.0.1", port: Number(process.env.WETASK_PORT), maxRetriesPerRequest: null };
const QUEUES = Number(process.env.WETASK_QUEUES || 50);
const AT_ONCE = 5;

function randomName() {
  return `q${Math.floor(Math.random() * 1e12).toString(36)}`;
}

async function lifecycle(name) {
  const queue = new Queue(name, { connection });
  await queue.add("before", { n: -1 });
  await queue.add("before", { n: -2 });
  await queue.obliterate({ force: true });
  const jobs = [];
  for (let n = 0; n < 3; n++) {
    jobs.push(await queue.add("after", { n }));
  }
  const done = new Set();
  let finish;
  const all = new Promise((resolve) => (finish = resolve));
  const worker = new Worker(
    name,
    async (job) => {
      done.add(job.id);
      if (done.size === jobs.length) setImmediate(finish);
      return job.data.n * 2;
    },
    { connection, concurrency: 2 },
  );
  const timeout = new Promise((_, reject) =>
    setTimeout(() => reject(new Error(`queue ${name}: only ${done.size} of ${jobs.length} jobs ran`)), 30000),
  );
  await Promise.race([all, timeout]);
  await worker.close();
  const counts = await queue.getJobCounts("completed", "failed", "waiting", "active", "paused", "delayed");
  await queue.close();
  if (counts.completed !== jobs.length || counts.failed || counts.waiting || counts.active || counts.paused) {
    throw new Error(`queue ${name}: counts ${JSON.stringify(counts)}`);
  }
  return counts.completed;
}

async function main() {
  const names = Array.from({ length: QUEUES }, randomName);
  let completed = 0;
  for (let i = 0; i < names.length; i += AT_ONCE) {
    const results = await Promise.all(names.slice(i, i + AT_ONCE).map(lifecycle));
    completed += results.reduce((a, b) => a + b, 0);
  }
  console.log(JSON.stringify({ queues: names.length, completed }));
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
