// node-redis (the `redis` package, newest release: tests/node-current) against WeTask, on
// WETASK_PORT, with WETASK_NAMES random key names: typed commands, a MULTI across shards, a
// pipeline, EVAL, pub/sub, and its client-side cache (RESP3, CLIENT TRACKING) seeing another
// client's write. Prints one JSON line with what it counted; exits non-zero on a mismatch.
const path = require("path");
const assert = require("assert");

const home = process.env.NODE_REDIS_HOME;
const { createClient } = require(path.join(home, "node_modules", "redis"));
const port = Number(process.env.WETASK_PORT);
const count = Number(process.env.WETASK_NAMES || "20");

function randomName(prefix) {
  return prefix + Math.random().toString(36).slice(2, 12);
}

async function typed(client, key) {
  assert.strictEqual(await client.set(`${key}:s`, "v1"), "OK");
  assert.strictEqual(await client.get(`${key}:s`), "v1");
  assert.strictEqual(await client.incrBy(`${key}:n`, 5), 5);
  assert.strictEqual(await client.hSet(`${key}:h`, { a: "1", b: "2" }), 2);
  assert.deepStrictEqual({ ...(await client.hGetAll(`${key}:h`)) }, { a: "1", b: "2" });
  assert.strictEqual(await client.rPush(`${key}:l`, ["x", "y", "z"]), 3);
  assert.deepStrictEqual(await client.lRange(`${key}:l`, 0, -1), ["x", "y", "z"]);
  assert.strictEqual(await client.sAdd(`${key}:set`, ["m1", "m2"]), 2);
  assert.strictEqual(await client.zAdd(`${key}:z`, [{ score: 1.5, value: "a" }]), 1);
  assert.strictEqual(await client.zScore(`${key}:z`, "a"), 1.5);
}

async function main() {
  const client = createClient({ socket: { port, host: "127.0.0.1" } });
  client.on("error", (e) => { throw e; });
  await client.connect();
  const keys = Array.from({ length: count }, () => randomName("nr:"));
  for (const key of keys) {
    await typed(client, key);
  }
  // One transaction over every name (keys on every shard).
  const multi = client.multi();
  for (const key of keys) multi.incr(`${key}:n`);
  const results = await multi.exec();
  assert.deepStrictEqual(results, keys.map(() => 6));
  // node-redis pipelines commands sent in the same tick.
  const gets = await Promise.all(keys.map((k) => client.get(`${k}:s`)));
  assert.deepStrictEqual(gets, keys.map(() => "v1"));
  const mget = await client.mGet(keys.map((k) => `${k}:s`));
  assert.deepStrictEqual(mget, keys.map(() => "v1"));
  for (const key of keys) {
    const sum = await client.eval(
      "return redis.call('INCRBY', KEYS[1], ARGV[1])",
      { keys: [`${key}:n`], arguments: ["10"] },
    );
    assert.strictEqual(sum, 16);
  }
  // Pub/sub on a second connection.
  const sub = client.duplicate();
  await sub.connect();
  const received = [];
  const channel = randomName("nr-ch:");
  await sub.subscribe(channel, (message) => received.push(message));
  assert.strictEqual(await client.publish(channel, "hello"), 1);
  for (let i = 0; i < 500 && received.length === 0; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.deepStrictEqual(received, ["hello"]);
  await sub.quit();
  // The client-side cache: a read cached, another client's write invalidates it.
  const cached = createClient({
    socket: { port, host: "127.0.0.1" },
    RESP: 3,
    clientSideCache: { ttl: 0, maxEntries: 0 },
  });
  await cached.connect();
  let invalidated = 0;
  for (const key of keys) {
    assert.strictEqual(await cached.get(`${key}:s`), "v1");
    assert.strictEqual(await cached.get(`${key}:s`), "v1");
    await client.set(`${key}:s`, "v2");
    let seen;
    for (let i = 0; i < 500; i++) {
      seen = await cached.get(`${key}:s`);
      if (seen === "v2") break;
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.strictEqual(seen, "v2", `${key}: the cache kept a stale value`);
    invalidated += 1;
  }
  const stats = cached.clientSideCache.stats();
  assert.ok(stats.hitCount >= keys.length, `cache hits: ${stats.hitCount}`);
  await cached.quit();
  await client.quit();
  console.log(JSON.stringify({ names: keys.length, invalidated, cacheHits: stats.hitCount > 0 }));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
