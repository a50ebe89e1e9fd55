// Cluster clients in Node against one WeTask node in cluster mode (docs/CLUSTER.md), seeded
// with its shared port WETASK_PORT: ioredis's `Redis.Cluster` (the release BullMQ pins:
// tests/node) and node-redis's `createCluster` (newest: NODE_REDIS_HOME). Each discovers
// the shards from CLUSTER SLOTS, writes WETASK_NAMES random keys through the shards' own
// ports, reads them back, runs a pipeline, and checks that every shard holds only keys of
// its own slots. Prints one JSON line; exits non-zero on a mismatch.
const path = require("path");
const assert = require("assert");
const IORedis = require("ioredis");

const port = Number(process.env.WETASK_PORT);
// WETASK_SEED_HOST and WETASK_PROCESSES=1: seeded with a shard's own port of a cluster of
// several processes that hold other tests' keys too (tests/python/test_cluster_nodes.py).
const host = process.env.WETASK_SEED_HOST || "127.0.0.1";
const processes = process.env.WETASK_PROCESSES === "1";
const count = Number(process.env.WETASK_NAMES || "20");
const { createCluster } = require(path.join(process.env.NODE_REDIS_HOME, "node_modules", "redis"));

function randomNames(prefix) {
  const names = new Set();
  while (names.size < count) names.add(prefix + Math.random().toString(36).slice(2, 12));
  return [...names];
}

async function withIoredis() {
  const cluster = new IORedis.Cluster([{ host, port }], {
    redisOptions: { maxRetriesPerRequest: 2 },
  });
  try {
    const keys = randomNames("io:");
    for (const key of keys) assert.strictEqual(await cluster.set(key, `v${key}`), "OK");
    for (const key of keys) assert.strictEqual(await cluster.get(key), `v${key}`);
    const pipeline = cluster.pipeline();
    // (An ioredis cluster pipeline holds keys of one node: one hash tag.)
    for (const key of keys) pipeline.incr(`{pipe}:${key}`);
    const replies = await pipeline.exec();
    assert.deepStrictEqual(replies.map(([err, n]) => [err, n]), keys.map(() => [null, 1]));
    const masters = cluster.nodes("master");
    assert.ok(masters.length >= 2, `${masters.length} masters`);
    if (!processes) {
      assert.ok(masters.every((m) => m.options.port !== port), "shard ports, not the shared one");
      let total = 0;
      for (const master of masters) total += await master.dbsize();
      assert.strictEqual(total, 2 * keys.length);
    } else {
      // Each key is on the master its slot names, and nowhere else.
      for (const key of keys) {
        const holders = [];
        for (const master of masters) {
          // A master that does not own the key's slot answers MOVED.
          const held = await master.exists(key).catch((err) => {
            assert.ok(String(err.message).startsWith("MOVED"), err.message);
            return 0;
          });
          if (held === 1) holders.push(master);
        }
        assert.strictEqual(holders.length, 1, `${key} on ${holders.length} masters`);
      }
    }
    return masters.length;
  } finally {
    cluster.disconnect();
  }
}

async function withNodeRedis() {
  const cluster = createCluster({ rootNodes: [{ url: `redis://${host}:${port}` }] });
  cluster.on("error", (err) => console.error("node-redis cluster:", err));
  await cluster.connect();
  try {
    const keys = randomNames("nr:");
    for (const key of keys) assert.strictEqual(await cluster.set(key, `v${key}`), "OK");
    for (const key of keys) assert.strictEqual(await cluster.get(key), `v${key}`);
    const slots = await cluster.sendCommand(undefined, true, ["CLUSTER", "SLOTS"]);
    assert.ok(slots.length >= 2, `${slots.length} ranges`);
    return cluster.masters.length;
  } finally {
    await cluster.quit();
  }
}

async function main() {
  const io = await withIoredis();
  const nr = await withNodeRedis();
  console.log(JSON.stringify({ names: count, ioredisMasters: io, nodeRedisMasters: nr }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
