// BullMQ across a migration: `add` puts 50 jobs (one delayed by 1 s) on a queue and exits;
// `work` runs a Worker until they have all completed, checks each return value, and prints a
// JSON report. The migration test adds on a redis-server, moves it to WeTask with REPLICAOF,
// and works on WeTask. WETASK_PORT names the server, BULLMQ_QUEUE the queue.
const { Queue, Worker } = require(require.resolve("bullmq", { paths: [process.env.BULLMQ_HOME || __dirname] }));

const connection = { host: "127.0.0.1", port: Number(process.env.WETASK_PORT), maxRetriesPerRequest: null };
const name = process.env.BULLMQ_QUEUE;
const JOBS = 50;

async function add() {
  const queue = new Queue(name, { connection });
  for (let i = 0; i < JOBS - 1; i++) {
    await queue.add("add", { a: i, b: 1000 });
  }
  await queue.add("add", { a: JOBS - 1, b: 1000 }, { delay: 1000 });
  await queue.close();
  console.log(JSON.stringify({ added: JOBS }));
}

async function work() {
  const queue = new Queue(name, { connection });
  const worker = new Worker(name, async (job) => job.data.a + job.data.b, { connection, concurrency: 4 });
  const deadline = Date.now() + 30000;
  let counts = {};
  while (Date.now() < deadline) {
    counts = await queue.getJobCounts("completed", "failed", "waiting", "delayed", "active");
    if (counts.completed >= JOBS) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const completed = await queue.getJobs(["completed"], 0, JOBS);
  const wrong = completed.filter((job) => job.returnvalue !== job.data.a + job.data.b).length;
  await worker.close();
  await queue.close();
  console.log(JSON.stringify({ counts, completed: completed.length, wrong }));
  if (counts.completed < JOBS || wrong > 0) process.exit(1);
}

(process.argv[2] === "add" ? add() : work()).catch((e) => {
  console.error(e);
  process.exit(1);
});
