//! `docs/COMPATIBILITY.md`, rendered from the command table so the two cannot drift. The
//! test below fails when the file is stale; `make compat` rewrites it.

use std::fmt::Write;

use crate::table::{flag, Merge, Route, COMMANDS};

/// Redis command groups WeTask does not serve yet, and the issue that brings them.
const MISSING: &[(&str, &str)] = &[
    (
        "operations across consensus mode's Raft groups (keys of several groups are `-CROSSSLOT`, as Redis Cluster answers keys of slots on different nodes; `RAFT MOVESLOTS` moves slots between groups to put keys together)",
        "issue 36",
    ),
    (
        "cluster mode's replicas and failover by hand (CLUSTER REPLICATE, FAILOVER; consensus mode elects and fails over by itself)",
        "issue 36",
    ),
];

/// Where cluster mode (`cluster-enabled yes`) differs from Redis Cluster, and why.
const CLUSTER: &str =
        "`--cluster-enabled yes` makes every shard of a WeTask process a Redis Cluster primary\n\
         (docs/CLUSTER.md): it has a node id, serves on a port of its own (`port` + 1 + i, or\n\
         `--cluster-shard-port-base` + i) and talks to the other nodes on a cluster bus port\n\
         (`--cluster-port` + i, by default its port + 10000). With `--cluster-self-assign yes`\n\
         (the default) a fresh process is a whole cluster: shard i owns the i-th of N contiguous\n\
         slot ranges. With `no`, each shard starts as a fresh Redis Cluster node, alone and owning\n\
         nothing, and several processes are joined with `CLUSTER MEET` and given slots with\n\
         `ADDSLOTS`, as `redis-cli --cluster create` does. `CLUSTER SLOTS`, `SHARDS`, `NODES`,\n\
         `MYID`, `MYSHARDID`, `INFO`, `KEYSLOT`, `COUNTKEYSINSLOT`, `GETKEYSINSLOT`, `LINKS`,\n\
         `MEET`, `ADDSLOTS[RANGE]`, `DELSLOTS[RANGE]`, `SETSLOT`, `SET-CONFIG-EPOCH`,\n\
         `BUMPEPOCH`, `FORGET`, `RESET`, `SAVECONFIG` and `COUNT-FAILURE-REPORTS` answer as\n\
         Redis's; `MIGRATE` and `RESTORE-ASKING` move keys; `-MOVED`, `-ASK`, `-CROSSSLOT`,\n\
         `-TRYAGAIN` and `-CLUSTERDOWN` redirect as Redis's do. `redis-cli --cluster create`,\n\
         `check`, `reshard` and `rebalance` work unchanged. Where it differs from Redis Cluster:\n\n\
         - A command whose keys are all served by one process's shards runs there, keys of\n  \
         several slots included (with hops), where Redis answers `-CROSSSLOT` for keys of\n  \
         different slots: one process serves them atomically. Keys of several slots that are not\n  \
         all here are `-CROSSSLOT`, as in Redis.\n\
         - On a shard port, a command whose keys all live on another shard of the process is\n  \
         answered `-MOVED` to that shard's port, so cluster clients pay no hop.\n\
         - The shared port serves every slot the process's shards own (with hops) and answers\n  \
         `-MOVED` for the others; `CLUSTER` there answers for the shard that serves the\n  \
         connection (`myself`). Send cluster administration to a shard's own port.\n\
         - On a shard port, `DBSIZE`, `KEYS`, `SCAN`, `RANDOMKEY`, `FLUSHDB` and `FLUSHALL` cover\n  \
         that shard's keys, as a Redis Cluster node's cover its slots; on the shared port, the\n  \
         whole process's.\n\
         - `SELECT` is allowed on every port (Redis Cluster allows database 0 only). `reshard`\n  \
         moves database 0, so `SETSLOT … NODE` refuses to give up a slot that holds keys in another\n  \
         database, rather than strand them.\n\
         - The bus carries each node's whole state every 100 ms (RESP arrays, not Redis's binary\n  \
         gossip), so a WeTask node cannot join a cluster of Redis servers. There is no failure\n  \
         detector: no `PFAIL`/`FAIL`, and `cluster_state` is `ok` whenever every slot has an\n  \
         owner; failover comes with replication. `LINKS` is empty.\n\
         - A node that stops claiming a slot loses it in every view at once (Redis keeps a stale\n  \
         owner until another claim replaces it). A node that loses a slot with keys in it to a\n  \
         higher epoch keeps the keys (unreachable until the slot comes back), where Redis deletes\n  \
         them.\n\
         - The configuration file (`cluster-config-file`, `nodes.conf` in `dir`) holds every\n  \
         shard's view in `CLUSTER NODES`' format, one section per shard; it is written (fsync,\n  \
         rename) before a reply that depends on it. A process of several nodes cannot restart\n  \
         with another shard count.\n\
         - A queue is a key of its slot: `GETKEYSINSLOT` and `COUNTKEYSINSLOT` list it, and\n  \
         `MIGRATE` moves it with all its tasks (queued, scheduled, leased, dead, done) through\n  \
         `TASK.EXPORT` and `TASK.IMPORT`. A lease held by a `TASK.WORKER` carries over; one held\n  \
         by a plain connection is handed back to the queue, as when the connection closes.\n  \
         `DUMP` and `RESTORE` of a queue's name are not supported.\n\
         - While `MIGRATE` sends a key or a queue, commands on it (and on the missing names of a\n  \
         slot whose queue is on its way) are answered `-TRYAGAIN` (Redis blocks the source\n  \
         instead); cluster clients retry it. A `MIGRATE` on the shared port of keys of another\n  \
         shard does not hold their writers off.\n\
         - `COUNTKEYSINSLOT` and `GETKEYSINSLOT` read a slot → keys index that each shard keeps in\n  \
         cluster mode, as Redis does: O(1) and O(count). It costs about 10 bytes a key (Redis 7:\n  \
         16). A queue counts as a key of its slot.\n\
         - `READONLY` and `READWRITE` answer OK (every node is a primary); `REPLICATE` and\n  \
         `FAILOVER` answer that replicas come with replication. With cluster mode off, `CLUSTER`,\n  \
         `ASKING`, `READONLY` and `READWRITE` answer that cluster support is disabled, as Redis\n  \
         does.\n\
         - Cluster mode needs the io_uring network path (`--io uring`, the default).\n\
         - Tested: `redis-cli --cluster create`, `check`, `reshard` (under writers, and under task\n  \
         producers and workers) and `rebalance` on three processes of two shards on 127.0.0.1-3;\n  \
         redis-py's `RedisCluster`, ioredis's `Cluster`, node-redis's `createCluster`, BullMQ\n  \
         with a `{prefix}` and go-redis's `ClusterClient` against them; redis-py's, ioredis's\n  \
         and node-redis's against one process of 2 and 4 shards; `redis-cli -c`;\n  \
         `redis-benchmark --cluster`. Debian's go-redis (v5) cannot read Redis 7's\n  \
         `CLUSTER SLOTS` (a fourth element per node, which Redis 7 sends too), so its\n  \
         `ClusterClient` learns no slot map and reaches each key by following `MOVED` from its\n  \
         seeds; go-redis v9 is out of the suite's reach (the module proxy).\n";

/// Every Redis 7.0 command of the families the real-clients issue covers, by family.
const FAMILIES: &[(&str, &[&str])] = &[
    (
        "keys and server introspection",
        &[
            "move", "swapdb", "object", "memory", "role", "wait", "slowlog", "latency", "monitor",
        ],
    ),
    ("hyperloglog", &["pfadd", "pfcount", "pfmerge"]),
    (
        "geo",
        &[
            "geoadd",
            "geodist",
            "geohash",
            "geopos",
            "georadius",
            "georadius_ro",
            "georadiusbymember",
            "georadiusbymember_ro",
            "geosearch",
            "geosearchstore",
        ],
    ),
    (
        "bitmaps",
        &[
            "setbit",
            "getbit",
            "bitcount",
            "bitpos",
            "bitop",
            "bitfield",
            "bitfield_ro",
        ],
    ),
    (
        "lists",
        &[
            "blmove",
            "blmpop",
            "blpop",
            "brpop",
            "brpoplpush",
            "lindex",
            "linsert",
            "llen",
            "lmove",
            "lmpop",
            "lpop",
            "lpos",
            "lpush",
            "lpushx",
            "lrange",
            "lrem",
            "lset",
            "ltrim",
            "rpop",
            "rpoplpush",
            "rpush",
            "rpushx",
        ],
    ),
    (
        "hashes",
        &[
            "hdel",
            "hexists",
            "hget",
            "hgetall",
            "hincrby",
            "hincrbyfloat",
            "hkeys",
            "hlen",
            "hmget",
            "hmset",
            "hrandfield",
            "hscan",
            "hset",
            "hsetnx",
            "hstrlen",
            "hvals",
        ],
    ),
    (
        "sets",
        &[
            "sadd",
            "scard",
            "sdiff",
            "sdiffstore",
            "sinter",
            "sintercard",
            "sinterstore",
            "sismember",
            "smembers",
            "smismember",
            "smove",
            "spop",
            "srandmember",
            "srem",
            "sscan",
            "sunion",
            "sunionstore",
        ],
    ),
    (
        "sorted sets",
        &[
            "bzmpop",
            "bzpopmax",
            "bzpopmin",
            "zadd",
            "zcard",
            "zcount",
            "zdiff",
            "zdiffstore",
            "zincrby",
            "zinter",
            "zintercard",
            "zinterstore",
            "zlexcount",
            "zmpop",
            "zmscore",
            "zpopmax",
            "zpopmin",
            "zrandmember",
            "zrange",
            "zrangebylex",
            "zrangebyscore",
            "zrangestore",
            "zrank",
            "zrem",
            "zremrangebylex",
            "zremrangebyrank",
            "zremrangebyscore",
            "zrevrange",
            "zrevrangebylex",
            "zrevrangebyscore",
            "zrevrank",
            "zscan",
            "zscore",
            "zunion",
            "zunionstore",
        ],
    ),
    (
        "streams",
        &[
            "xack",
            "xadd",
            "xautoclaim",
            "xclaim",
            "xdel",
            "xgroup",
            "xinfo",
            "xlen",
            "xpending",
            "xrange",
            "xread",
            "xreadgroup",
            "xrevrange",
            "xsetid",
            "xtrim",
        ],
    ),
    (
        "transactions",
        &["discard", "exec", "multi", "unwatch", "watch"],
    ),
    (
        "pub/sub",
        &[
            "psubscribe",
            "publish",
            "pubsub",
            "punsubscribe",
            "spublish",
            "ssubscribe",
            "subscribe",
            "sunsubscribe",
            "unsubscribe",
        ],
    ),
    (
        "scripting",
        &[
            "eval",
            "eval_ro",
            "evalsha",
            "evalsha_ro",
            "fcall",
            "fcall_ro",
            "function",
            "script",
        ],
    ),
];

/// What a served command of those families lacks, where it lacks something.
const PARTIAL: &[(&str, &str)] = &[
    (
        "acl",
        "Redis 7.2's users, selectors, key (`~`, `%R~`, `%W~`) and channel (`&`) patterns, categories, ACL LOG, the ACL file (`--aclfile`; SAVE writes it atomically) and DRYRUN, compared with a redis-server by tests/python/test_acl.py. WeTask adds the categories `@task` (TASK.* for workers and producers) and `@task-admin` (PURGE, DELETE, DELQUEUE, CRON, QUIET, EXPORT, IMPORT, which are in it and not in `@task`). A queue is a key for `~`; a task named by id (GET, WAIT, LOGS, RESULTS, CANCEL, RELEASE, REQUEUE, DELETE) is checked by its queue at the top level, and by the id itself inside MULTI and scripts; ACK, FAIL, EXTEND, PROGRESS and LOG are not checked against key patterns (the engine takes them only from the lease's holder, whose FETCH was checked); TASK.BATCHINFO's batch id is checked as a key. Users are not read from `user` lines of the config file (use `--aclfile`); ACL LOAD closes the connections of users it removed (Redis 7.2 closes those of every user but default)",
    ),
    (
        "object",
        "ENCODING reports what Redis 7.2 would pick for the value as it is now, at Redis's default thresholds (int/embstr/raw, listpack/quicklist, listpack/hashtable, intset/listpack/hashtable, listpack/skiplist, stream): Redis also keeps a converted encoding after a value shrinks, and makes an APPENDed string raw; IDLETIME is kept only under an LRU `maxmemory-policy` (0 otherwise: Redis tracks it always); FREQ and REFCOUNT as Redis",
    ),
    (
        "swapdb",
        "every shard swaps its halves in turn, as FLUSHALL runs: a client reading both databases during the swap may see one shard swapped and another not yet",
    ),
    (
        "latency",
        "LATEST, HISTORY, RESET, DOCTOR and HELP, with `latency-monitor-threshold` (off by default, as in Redis); the events are `command` and `fast-command` (no fork, AOF or expiry events here); DOCTOR's advice is shorter than Redis's; HISTOGRAM gives each command's calls and cumulative distribution in Redis's power-of-two microsecond buckets, from every shard (a command's time includes its mesh round trips, and a pipeline segment's commands share its time equally); GRAPH draws Redis's chart",
    ),
    (
        "slowlog",
        "as Redis, with `slowlog-log-slower-than` and `slowlog-max-len`; a command's time includes its mesh round trips when its keys live on other shards; commands inside MULTI are not logged one by one",
    ),
    (
        "memory",
        "USAGE [SAMPLES n] estimates this store's bytes for the key (node, key, value; collections sampled as Redis samples), so the numbers differ from Redis's; STATS has Redis 7.0's fields in its order, from INFO memory's numbers (a database's hash-table overheads are estimates, and what the store has no part for is 0); DOCTOR, MALLOC-STATS, PURGE and HELP answer",
    ),
    (
        "sort",
        "BY and GET patterns read keys on any shard: a SORT whose patterns may name another shard's keys holds every shard and borrows them (in MULTI and scripts too), so it costs more than one whose pattern's {hash tag} puts them on the sorted key's shard",
    ),
    (
        "pfadd",
        "counts as Redis counts; a sketch is written dense (12 KB) from its first element, where Redis starts sparse; Redis's sparse sketches are read",
    ),
    ("save", "with the journal on (the default: docs/DURABILITY.md) compacts every shard's journal into a snapshot and waits for it, the server serving meanwhile; with `appendonly no` writes a snapshot of every shard at one consistent cut (Redis's RDB), loaded at the next start, as do `save` points and SHUTDOWN [SAVE]"),
    ("bgsave", "as SAVE, without waiting; `SCHEDULE` is accepted"),
    ("bgrewriteaof", "as BGSAVE: a snapshot replaces the journal segments before it"),
    ("blmove", "a source and destination on different shards: the popped element is in neither list for one mesh round trip (Redis moves atomically), the source's other blocked clients waiting meanwhile; a destination of another type answers the blocked client WRONGTYPE and leaves the element for the next one, as Redis 7.2 does; a blocked client is answered at most one loop turn after its time-out"),
    ("brpoplpush", "as BLMOVE"),
    ("blpop", "blocked clients are served as Redis 7.2 serves them (a key that comes into being serves the waiters of its type, oldest first; an overwrite serves none): tests/python/test_blocked_differential.py; keys on several shards: if two shards serve the same blocked client at once (one MULTI or script fed keys of both), it gets the first answer where Redis gives it the key fed first, and the second element goes back to the end it came from"),
    ("brpop", "as BLPOP"),
    ("blmpop", "as BLPOP"),
    ("bzpopmin", "as BLPOP (a member handed back keeps its score)"),
    ("bzpopmax", "as BZPOPMIN"),
    ("bzmpop", "as BZPOPMIN"),
    ("eval", "Lua 5.1 with the base, table, string and math libraries and the cjson (lua-cjson 2.1.0), cmsgpack (lua-cmsgpack 0.4.0), struct and bit libraries Redis embeds, function by function with their error texts (tests/python/test_lua_libs.py compares each with a redis-server), and every `redis.*` helper, `redis.setresp(3)` included; `cjson.encode(-0.0)` gives `0` where Redis gives `-0` (mlua hands a Lua number that is a whole number over as an integer); the Lua debugger (SCRIPT DEBUG, `redis.breakpoint`, `redis.debug`) is not offered; a script runs in Redis 7's sandbox and past `busy-reply-threshold` the shards it holds answer BUSY until SCRIPT KILL or SHUTDOWN NOSAVE, as in Redis (docs/SECURITY.md); a script may touch any key: one that reaches a key neither declared nor on a declared key's shard has its writes so far undone and runs again holding every shard (and does so from the start on later runs), so the client sees one run; only a run that had already done a task command or PUBLISH (which cannot be undone) fails that once. A script that declares no key, or any script under `--lua-whole-server`, locks every shard"),
    ("evalsha", "as EVAL"),
    ("fcall", "as EVAL: atomic on any shard layout (a function that reaches an undeclared key on another shard is rerun holding every shard, its writes undone), with Redis's errors; each shard registers a changed library's functions the first time a call needs them"),
    ("fcall_ro", "as FCALL, refusing a function without the `no-writes` flag as Redis does"),
    ("function", "LOAD, DELETE, FLUSH, LIST, DUMP, RESTORE, STATS, KILL and HELP with Redis 7.2's replies and errors (a library's code sees only `redis.register_function`, `redis.log` and the version while it loads; function names are case-insensitive across libraries; compile errors named as Redis names them); the libraries are kept in `functions.rdb` in the data directory (FUNCTION DUMP's format, rewritten on every change), go to replicas, and in consensus mode go through the metadata group's Raft log (LOAD, DELETE, FLUSH and RESTORE run on its leader); LIST gives a library's functions in the order they were registered (Redis: its hash table's order); a library that loads runs with a 500 ms limit, as Redis's"),
    ("eval_ro", "as EVAL"),
    ("evalsha_ro", "as EVAL"),
    ("script", "LOAD, EXISTS, FLUSH, KILL and HELP; DEBUG (the Lua debugger) is missing"),
    ("xread", "a blocked `$` read takes the stream's newest id when it parks on the stream's shard, a moment after the command arrives"),
    ("xinfo", "STREAM [FULL [COUNT n]], GROUPS and CONSUMERS with Redis 7.2's fields (FULL's consumers carry `active-time`, CONSUMERS `inactive`), groups and consumers in name order as Redis lists them; `radix-tree-keys` counts the nodes Redis would pack the entries in, `radix-tree-nodes` is an estimate (one more)"),
    ("xadd", "`~` trimming removes whole nodes as Redis packs them (`stream-node-max-entries` 100 and `stream-node-max-bytes` 4096, counted in listpack bytes; a deleted entry keeps its node until the node is empty), so it removes what Redis removes; the two parameters keep their defaults (CONFIG SET of them has no effect), and a stream loaded from the journal or a snapshot is packed afresh"),
    ("xtrim", "as XADD"),
    ("client", "ID, GETNAME, SETNAME, SETINFO, INFO, LIST, KILL, NO-EVICT, NO-TOUCH, REPLY, PAUSE, UNPAUSE, UNBLOCK, TRACKING, CACHING, GETREDIR, TRACKINGINFO and HELP, each with Redis 7.2's arity error (`client|<sub>`). NO-TOUCH leaves keys' LRU/LFU stamps alone for the client's commands (TOUCH excepted) on every shard; NO-EVICT is shown (`e`) but changes nothing, as WeTask never evicts clients; RESET clears both and CLIENT REPLY. UNBLOCK ends a blocking pop or stream read on any shard (not a WAIT, nor a blocking TASK.FETCH, which end at their time-out or when the connection goes). PAUSE holds what Redis holds (ALL: every command, CLIENT UNPAUSE included, until the time-out; WRITE: writes, EVAL/EVALSHA/FCALL, PUBLISH, PFCOUNT, an EXEC with any of them) on every shard, and counts the held clients in `blocked_clients`; a pause's end is noticed within 100 ms (Redis: within one event-loop turn), and keys still expire during a pause (Redis keeps them until it ends). TRACKING has every Redis 7 option (REDIRECT, BCAST, PREFIX, OPTIN, OPTOUT, NOLOOP) with Redis's replies and errors; where it differs: one command's invalidations for a client come as one message (Redis sends one per key outside BCAST); a client's invalidation for its own write may arrive just before that write's reply instead of after it; SWAPDB invalidates every key (a null message), where Redis sends nothing; a CLIENT CACHING exception covers the next keyed command or EXEC, not a script's reads (a script's reads are tracked as plain reads); a connection bound with TASK.WORKER is not tracked; `tracking-table-max-keys` is 1,000,000 shared among the shards, and CONFIG SET of it has no effect; `broken_redirect` is noticed only when the redirect target lived on the tracking client's shard"),
    ("dump", "Redis's serialization (RDB version 10, CRC64), which Redis 7.0 RESTOREs; it writes the plain encodings (a list, set, hash or sorted set as a plain collection, strings uncompressed), so a payload of a small collection is larger than Redis's; a stream as Redis 7.0 writes it (listpack nodes of up to 100 entries, its groups, pending entries and consumers)"),
    ("restore", "reads every encoding Redis 2.6 to 7.2 writes (integer and LZF strings, ziplists, intsets, listpacks, quicklists, streams of RDB types 15, 19 and 21), RDB versions up to 11 (Redis 7.0 refuses 11); module values are refused with an error that says so; a consumer's active time (Redis 7.2) is read and not kept; an empty collection or a repeated member is `Bad data format`; IDLETIME and FREQ are checked as Redis checks them and set nothing"),
    ("monitor", "every client command on every shard, in Redis's line format, a transaction as MULTI, its commands, EXEC; administrative commands are not shown and AUTH's and HELLO's passwords are redacted, as in Redis; the commands a script runs are not shown (Redis shows them as `[db lua]`), and a line is written as its command starts rather than as it ends"),
    ("waitaof", "numlocal 1 waits for the journal's fsync of every shard: at once under `appendfsync always`, the everysec syncer's next round (up to a second), never under `no` (as Redis); a client's own writes are not tracked, so it waits for everyone's so far; numreplicas counts the replicas whose own journals fsynced every shard's records up to then, each under its own `appendfsync`; refused on a replica, as Redis does; in consensus mode, the leader's own Raft log synced and the other members whose logs hold every committed entry"),
    ("wait", "counts the replicas that have applied every write journaled on every shard before WAIT (everyone's writes, not only the client's: a superset of what Redis waits for); within 1 ms of the acknowledgement, and at the time-out (never, for 0) with the count so far; on a replica, Redis's error; in consensus mode, on a group's leader, the other members whose Raft logs hold every entry committed when it was called (a follower refuses it as a replica does)"),
    ("replicaof", "between WeTask nodes with the same shard count (docs/REPLICATION.md): a full sync from the primary's newest snapshot and journal, then its journal as it is written; a primary needs `appendonly yes` (its journal is the backlog, so a replica resumes from its position while the primary keeps that segment); refused in cluster mode, as Redis refuses it. Pointed at a redis-server (up to 7.2) it follows it with Redis's replica protocol (PSYNC, the RDB, the command stream, REPLCONF ACK), applying everything through its own port, on any shard count: the live migration from Redis"),
    ("slaveof", "as REPLICAOF"),
    ("replconf", "`REPLCONF WETASK` is a WeTask replica's handshake; Redis's options are accepted and change nothing (a WeTask primary streams on its `repl-port`; it does not serve PSYNC, so a Redis replica cannot follow WeTask)"),
    ("role", "a replica's state and offset, a primary's replicas; offsets are journal positions (segment << 40 | byte in it, summed over the shards): they grow with every write and compare between a primary and its replicas, but are not byte counts; a primary no replica has followed since it started shows 0, as Redis without a backlog"),
    ("incrbyfloat", "in Redis's `long double` (the x87 80-bit format, emulated exactly), printed with 17 decimals and the zeros cut, as Redis 7 on x86-64 answers: 0.1 three times is `0.3`"),
    ("hincrbyfloat", "as INCRBYFLOAT"),
    ("multi", "the server's own commands (COMMAND, FUNCTION, SCRIPT, SAVE, SLOWLOG, TASK.FETCH … all but PING, ECHO, SELECT, TIME, LOLWUT, WAIT, PUBLISH, SPUBLISH, PUBSUB, the scripts and the administration commands below) are refused inside MULTI (\"Command not allowed inside a transaction\", and EXEC aborts), where Redis queues them; every command on keys queues. REPLICAOF, CONFIG, INFO, ROLE and CLIENT KILL, SETNAME, GETNAME, ID, INFO and LIST queue in a transaction of their own (Redis Sentinel's failover sends one), run in order at EXEC without the shard locks; mixed with key commands or WATCH they are refused"),
    ("exec", "as MULTI"),
    ("watch", "a key counts as changed by any write command naming it, even one that changed nothing; a key that expires is not counted as changed"),
];

fn family_table(out: &mut String) {
    out.push_str(
        "\n## Redis 7.0 families\n\n\
         Every Redis 7.0 command of the families real clients need, and where WeTask stands.\n\n\
         | family | command | status |\n\
         |---|---|---|\n",
    );
    for (family, names) in FAMILIES {
        for name in *names {
            let served = COMMANDS.iter().any(|c| c.name == *name);
            let status = match PARTIAL.iter().find(|(n, _)| n == name) {
                Some((_, note)) if served => format!("partial: {note}"),
                _ if served => "done".to_string(),
                _ => "missing".to_string(),
            };
            let _ = writeln!(
                out,
                "| {family} | `{}` | {status} |",
                name.to_ascii_uppercase()
            );
        }
    }
}

fn route_text(route: Route) -> &'static str {
    match route {
        Route::Server => "server",
        Route::Keyed => "owning shard; cross-shard coordinator when keys span shards",
        Route::Split(Merge::PerKey) => "split per shard, replies in key order",
        Route::Split(Merge::Sum) => "split per shard, counts summed",
        Route::Split(Merge::Ok) => "split per shard",
        Route::Split(Merge::Concat) | Route::AllShards(Merge::Concat) => {
            "every shard, concatenated"
        }
        Route::AllShards(Merge::Sum) => "every shard, summed",
        Route::AllShards(_) => "every shard",
    }
}

/// The notes under the table: what holds across commands.
const NOTES: &str =
        "- `RENAME`, `RENAMENX`, `COPY` and `MSETNX` whose keys live on different shards never\n  \
         reply CROSSSLOT, and are atomic: the involved shards are locked in ascending order.\n\
         - Every other command whose keys live on different shards (LMOVE, SMOVE, SINTERSTORE,\n  \
         ZUNIONSTORE, LMPOP …) runs atomically on one shard that borrows the other keys'\n  \
         entries under the same locks, and puts them back afterwards.\n\
         - `MGET`, `MSET`, `DEL`, `EXISTS` and `TOUCH` over several shards run as one part per\n  \
         shard, all under the shards' locks (taken in ascending order, each travelling with its\n  \
         part): atomic as a whole, as in Redis.\n\
         - `INFO` carries every field of Redis 7.0's default sections (compared with a\n  \
         redis-server by `tests/python/test_info_compat.py`) and those 7.2 added (`listener0`,\n  \
         `total_blocking_keys[_on_nokey]`, `eventloop_*`, `acl_access_denied_*`). Fields for\n  \
         what WeTask does not do or measure (replicas, forks, defragmentation, threaded I/O,\n  \
         ACL rules, the event loop's durations) report what Redis reports without it. `used_memory` is the allocator's count; `keyspace_hits` and\n  \
         `keyspace_misses` count the key lookups of read commands; there is no `# Errorstats`\n  \
         section (`total_error_replies` is kept); `INFO commandstats` reports calls, rejected\n  \
         and failed calls, not time spent.\n\
         - `CONFIG GET` and `CONFIG SET` know every Redis 7.0 parameter and the four 7.2 added, aliases included\n  \
         (`scripts/redis-config-table.py` reads them from a redis-server;\n  \
         `tests/python/test_config_compat.py` compares). WeTask acts on `requirepass`,\n  \
         `maxclients`, `maxmemory`, `maxmemory-policy`, `maxmemory-samples`, `timeout`,\n  \
         `tcp-keepalive`, `client-output-buffer-limit`, `protected-mode`, `appendfsync`,\n  \
         `save`, `auto-aof-rewrite-percentage`, `auto-aof-rewrite-min-size` and\n  \
         `busy-reply-threshold` (`lua-time-limit`), `notify-keyspace-events`,\n  \
         `replica-read-only`, `replica-serve-stale-data`, `min-replicas-to-write`,\n  \
         `min-replicas-max-lag` (docs/REPLICATION.md, \"What a node refuses\"), `replica-priority`\n  \
         (Sentinel's choice), `masterauth` and\n  \
         `masteruser`. It sets at\n  \
         start only, where Redis also changes them at run time: `port`, `bind`, `appendonly`,\n  \
         `aof-load-truncated` and `proto-max-bulk-len`. Every other parameter (encoding thresholds such as\n  \
         `hash-max-listpack-entries`, replication, cluster, TLS, RDB, threads, logging) is\n  \
         stored and reported, checked as Redis checks it, and has no effect.\n\
         - `CLIENT KILL` supports `ID`, `ADDR`, `LADDR`, `SKIPME`, `USER default`, `TYPE normal`,\n  \
         `TYPE replica` (alone: it ends the replicas' streams) and the old `ip:port` form.\n\
         - Client-side caching (`CLIENT TRACKING`) works on any shard layout: the shard that owns\n  \
         a key remembers its readers and sends each invalidation to the reader's shard, which\n  \
         delivers it as a RESP3 push or, for a RESP2 `REDIRECT` target, as a\n  \
         `__redis__:invalidate` message. redis-py's cache (`cache_config`) refuses a server\n  \
         that announces a version under 7.4: start WeTask with `--announce-version 7.4.0` for\n  \
         it (WeTask serves Redis 7.2's commands, not 7.4's hash-field expiry).\n\
         - Keyspace notifications (`notify-keyspace-events`, every class letter of Redis 7.0,\n  \
         or `--notify-keyspace-events` at start) publish Redis 7.0's events, with its names and\n  \
         in its order for one command's keys on one shard\n  \
         (`tests/python/test_keyspace_notifications.py` compares them with a redis-server).\n  \
         Each shard publishes its own keys' events to subscribers on every shard, so the\n  \
         events of a multi-key command whose keys live on several shards (MSET, DEL, a\n  \
         blocked BLMOVE whose destination lives elsewhere) arrive in each shard's order, not\n  \
         interleaved as Redis's. Differences: SMOVE notifies `sadd` on the destination even\n  \
         when it held the member already; BITFIELD notifies `setbit` for any SET or INCRBY\n  \
         sub-command, even one that overflowed under `OVERFLOW FAIL`; `keymiss` counts each\n  \
         missing key a read command names, once; a script run that is undone and run again\n  \
         publishes only its final run's events; there are no module events (`d`).\n\
         - Clients tested against the real server, each with 20 random key or queue names on 2\n  \
         and 4 shards: redis-py, RQ, Celery, dramatiq, Sidekiq, BullMQ (pinned and newest),\n  \
         ioredis and node-redis (newest), and go-redis. The go-redis is Debian's (v5,\n  \
         `gopkg.in/redis.v5`): the Go module proxy that serves v9 cannot be reached from the\n  \
         machines the suite runs on, and Debian has no newer one.\n";

/// Redis 7.2's release notes (7.2-rc1 to 7.2.0), each item that a client or an operator
/// can see, and where WeTask stands: built, not applicable (no such part here), or missing
/// and why.
const RELEASE_72: &[(&str, &str)] = &[
    ("WAITAOF (#11713)", "built: `numlocal` 1 waits for every shard's journal fsync; `numreplicas` counts the replicas that report (an `F` ack on each shard's stream) having fsynced every shard's records up to then"),
    ("ZRANK/ZREVRANK … WITHSCORE (#11235)", "built"),
    ("CLIENT SETINFO lib-name/lib-ver (#11758)", "built; CLIENT LIST and CLIENT INFO show them"),
    ("CLIENT NO-TOUCH (#11483), CLIENT LIST flag `T`", "built"),
    ("CLUSTER MYSHARDID, shard ids (#10536)", "built in cluster mode: each shard is its own cluster shard, so its shard id is its node id"),
    ("ACL LOG entry-id and timestamps (#11477); unified ACL errors (#11160); ACL rule storage (#11224); sanitize-payload (#11279)", "built (tests/python/test_acl.py compares with a 7.0 redis-server, these texts mapped to 7.2's)"),
    ("COMMAND DOCS argument names as unique ids (#11051), and 7.2's summaries, history, deprecations", "built from Redis 7.2's own src/commands/*.json; COMMAND INFO carries tips and key specifications"),
    ("Client-side tracking follows the keys a script reads, not those declared (#11770)", "built, on any shard layout"),
    ("Time frozen during a command and a script (#10300)", "built: a script sees one time for expiry and TTLs (TIME still moves)"),
    ("A blocked command being served is checked again (ACL, OOM) (#11012)", "partial: served as Redis 7.2 serves it (its key's type, existence and the destination's type are checked again: tests/python/test_blocked_differential.py); `maxmemory` is not checked again for a served BLMOVE"),
    ("A blocked XREADGROUP whose stream is deleted gets NOGROUP (#11012)", "built: deleted, renamed, expired, or its group destroyed"),
    ("Command stats of a blocked command (#11012)", "partial: one call per command, counted when it is answered or times out, as 7.2 counts it; its `usec` includes the time it waited (Redis counts only the time it ran)"),
    ("Stream consumers' seen-time and active-time (#11099)", "built (XINFO CONSUMERS `inactive`, XINFO STREAM FULL `active-time`)"),
    ("XREADGROUP and X[AUTO]CLAIM create their consumer always (#11099)", "built"),
    ("HELLO changes nothing unless it succeeds (#11659)", "built"),
    ("NaN replies as one `nan` (#11597)", "built"),
    ("QUIT deprecated (#11439)", "built: COMMAND DOCS says so; QUIT still works"),
    ("WAIT counts from the client's last write (#11713)", "partial: WAIT waits for every write journaled before it, the client's and everyone else's"),
    ("Blocking commands in scripts behave as in MULTI (#11568)", "built (XREAD/XREADGROUP BLOCK still refused in scripts, as in Redis)"),
    ("Small lists and sets kept as listpacks (#11303, #11290)", "built for OBJECT ENCODING (the store's own layout is its own)"),
    ("New configuration: locale-collate, set-max-listpack-entries/-value, cluster-announce-human-nodename, loglevel `nothing`", "accepted, stored and reported; no effect (sorting and Lua compare bytes, as the C locale does)"),
    ("INFO: listener lines (#9320), event loop metrics (#11963), ACL denials (#11288), blocking keys", "built (event loop durations not measured: 0)"),
    ("PUBLISH from a RESP3 client subscribed to the channel: reply before the message; MULTI too (#12326)", "built"),
    ("LPOS … RANK LONG_MIN refused (#12167)", "built"),
    ("HINCRBYFLOAT creates no key for an invalid increment (#11149)", "built"),
    ("CLIENT RESET clears NO-EVICT (#11483)", "built (and NO-TOUCH)"),
    ("FUNCTION LOAD's timeout off when loading saved libraries (#12451); function-name error text (#10964)", "built"),
    ("Lua cjson/cmsgpack heap fixes (CVE-2022-24834); COMMAND GETKEYS bounds (CVE-2023-36824)", "not applicable: WeTask's libraries and GETKEYS are its own Rust, bounded"),
    ("RDB version 11", "built: RESTORE reads 7.2's RDB 11 payloads (DUMP writes version 10, which 7.0 and 7.2 both read)"),
    ("Module API changes; Sentinel; cluster bus; TLS SNI; redis-cli changes", "not applicable"),
];

fn release_72(out: &mut String) {
    out.push_str(
        "\n## Redis 7.2 release notes, item by item\n\n\
         WeTask announces Redis 7.2.0 (`--announce-version`). Each change of Redis 7.2's\n\
         release notes a client or an operator can see, and where WeTask stands.\n\n\
         | Redis 7.2 change | in WeTask |\n\
         |---|---|\n",
    );
    for (change, status) in RELEASE_72 {
        let _ = writeln!(out, "| {change} | {status} |");
    }
}

pub fn render() -> String {
    let mut out = String::from(
        "# Command compatibility\n\n\
         Generated from the command table (`shards/src/table/mod.rs`) by `make compat`; a test fails\n\
         when this file is stale. Arity follows Redis: `n` exactly, `-n` at least n arguments\n\
         (counting the command name). Every listed command is fully supported with Redis's\n\
         options and error texts unless a note says otherwise.\n\n\
         | command | group | arity | flags | keys (first, last, step) | runs on |\n\
         |---|---|---|---|---|---|\n",
    );
    let mut sorted: Vec<_> = COMMANDS.iter().collect();
    sorted.sort_by_key(|c| (c.group, c.name));
    for spec in sorted {
        let flags: Vec<&str> = flag::NAMES
            .iter()
            .filter(|(bit, _)| spec.has(*bit))
            .map(|(_, n)| *n)
            .collect();
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {}, {}, {} | {} |",
            spec.name.to_ascii_uppercase(),
            spec.group,
            spec.arity,
            flags.join(" "),
            spec.first_key,
            spec.last_key,
            spec.step,
            route_text(spec.route)
        );
    }
    out.push_str("\n## Notes\n\n");
    out.push_str(NOTES);
    out.push_str("\n## Cluster mode\n\n");
    out.push_str(CLUSTER);
    family_table(&mut out);
    release_72(&mut out);
    out.push_str("\n## Not yet supported\n\n");
    for (what, issue) in MISSING {
        let _ = writeln!(out, "- {what}: {issue}.");
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn partial_notes_name_served_commands() {
        for (name, _) in super::PARTIAL {
            assert!(crate::lookup(name.as_bytes()).is_some(), "{name}");
        }
    }

    #[test]
    fn compatibility_doc_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/COMPATIBILITY.md");
        let rendered = super::render();
        if std::env::var_os("UPDATE_COMPAT").is_some() {
            std::fs::write(path, &rendered).expect("write docs/COMPATIBILITY.md");
        }
        let current = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            current == rendered,
            "docs/COMPATIBILITY.md is stale: run `make compat`"
        );
    }
}
