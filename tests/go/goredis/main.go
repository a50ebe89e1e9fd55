// go-redis (gopkg.in/redis.v5, the release Debian packages as golang-gopkg-redis.v5-dev;
// the module proxy that serves v9 is not reachable from the machines this runs on) against
// WeTask at WETASK_PORT, with WETASK_NAMES random key and queue names: typed commands,
// pipelines, MULTI across shards, WATCH, EVAL, pub/sub, a blocking pop, and the task engine
// through raw commands. Prints one JSON line; exits non-zero on the first wrong answer.
package main

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"time"

	redis "gopkg.in/redis.v5"
)

func check(ok bool, format string, args ...interface{}) {
	if !ok {
		fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
		os.Exit(1)
	}
}

func must(err error, what string) {
	check(err == nil, "%s: %v", what, err)
}

func randomName(r *rand.Rand) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 10)
	for i := range b {
		b[i] = letters[r.Intn(len(letters))]
	}
	return "go:" + string(b)
}

func main() {
	port := os.Getenv("WETASK_PORT")
	count, _ := strconv.Atoi(os.Getenv("WETASK_NAMES"))
	if count == 0 {
		count = 20
	}
	r := rand.New(rand.NewSource(time.Now().UnixNano()))
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, PoolSize: 8})
	defer client.Close()
	must(client.Ping().Err(), "PING")

	names := make([]string, count)
	for i := range names {
		names[i] = randomName(r)
	}
	tasks := 0
	for i, name := range names {
		other := names[(i+1)%len(names)]
		// Strings, counters, expiry.
		must(client.Set(name, "v"+name, 0).Err(), "SET")
		got, err := client.Get(name).Result()
		check(err == nil && got == "v"+name, "GET %s = %q %v", name, got, err)
		n, err := client.Incr(name + ":n").Result()
		check(err == nil && n == 1, "INCR = %d %v", n, err)
		must(client.Expire(name, time.Minute).Err(), "EXPIRE")
		ttl, err := client.TTL(name).Result()
		check(err == nil && ttl > 0, "TTL = %v %v", ttl, err)
		// Hashes, sets, sorted sets, lists.
		must(client.HMSet(name+":h", map[string]string{"a": "1", "b": "2"}).Err(), "HMSET")
		h, err := client.HGetAll(name + ":h").Result()
		check(err == nil && len(h) == 2 && h["b"] == "2", "HGETALL = %v %v", h, err)
		must(client.SAdd(name+":s1", "x", "y").Err(), "SADD")
		must(client.SAdd(other+":s2", "y", "z").Err(), "SADD")
		inter, err := client.SInter(name+":s1", other+":s2").Result()
		check(err == nil && len(inter) == 1 && inter[0] == "y", "SINTER = %v %v", inter, err)
		must(client.ZAdd(name+":z", redis.Z{Score: 2, Member: "b"}, redis.Z{Score: 1, Member: "a"}).Err(), "ZADD")
		zr, err := client.ZRange(name+":z", 0, -1).Result()
		check(err == nil && len(zr) == 2 && zr[0] == "a", "ZRANGE = %v %v", zr, err)
		must(client.RPush(name+":l", "1", "2", "3").Err(), "RPUSH")
		moved, err := client.RPopLPush(name+":l", other+":dst").Result()
		check(err == nil && moved == "3", "RPOPLPUSH = %q %v", moved, err)
		// MGET and MSET across shards.
		must(client.MSet(name+":m", "1", other+":m", "2").Err(), "MSET")
		mget, err := client.MGet(name+":m", other+":m", name+":missing").Result()
		check(err == nil && len(mget) == 3 && mget[0] == "1" && mget[1] == "2" && mget[2] == nil,
			"MGET = %v %v", mget, err)
		// A pipeline.
		cmds, err := client.Pipelined(func(p *redis.Pipeline) error {
			p.Incr(name + ":p")
			p.Incr(name + ":p")
			p.Get(name + ":p")
			return nil
		})
		check(err == nil && cmds[2].(*redis.StringCmd).Val() == "2", "pipeline: %v", err)
		// MULTI/EXEC over two keys that may live on different shards.
		cmds, err = client.TxPipelined(func(p *redis.Pipeline) error {
			p.Set(name+":tx", "a", 0)
			p.Set(other+":tx", "b", 0)
			p.MGet(name+":tx", other+":tx")
			return nil
		})
		check(err == nil, "MULTI/EXEC: %v", err)
		pair := cmds[2].(*redis.SliceCmd).Val()
		check(len(pair) == 2 && pair[0] == "a" && pair[1] == "b", "EXEC MGET = %v", pair)
		// WATCH: a transaction on an untouched key commits.
		err = client.Watch(func(tx *redis.Tx) error {
			v, err := tx.Get(name + ":n").Int64()
			if err != nil {
				return err
			}
			_, err = tx.Pipelined(func(p *redis.Pipeline) error {
				p.Set(name+":n", v+10, 0)
				return nil
			})
			return err
		}, name+":n")
		must(err, "WATCH transaction")
		check(client.Get(name+":n").Val() == "11", "after WATCH: %q", client.Get(name+":n").Val())
		// A script that touches a key it did not declare, on any shard.
		res, err := client.Eval("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', ARGV[2])",
			[]string{name + ":e"}, "x", other+":m").Result()
		check(err == nil && res == "2", "EVAL = %v %v", res, err)
		// A blocking pop served by a push from another connection.
		done := make(chan []string, 1)
		go func() {
			v, err := client.BRPop(5*time.Second, name+":q").Result()
			must(err, "BRPOP")
			done <- v
		}()
		time.Sleep(20 * time.Millisecond)
		must(client.LPush(name+":q", "job").Err(), "LPUSH")
		popped := <-done
		check(len(popped) == 2 && popped[1] == "job", "BRPOP = %v", popped)
		// The task engine through raw commands.
		queue := name + ":queue"
		submit := redis.NewStringCmd("TASK.SUBMIT", queue, "payload "+name)
		must(client.Process(submit), "TASK.SUBMIT")
		fetch := redis.NewSliceCmd("TASK.FETCH", queue, "BLOCK", "1000")
		must(client.Process(fetch), "TASK.FETCH")
		fetched := fetch.Val()
		check(len(fetched) == 1, "TASK.FETCH = %v", fetched)
		task, _ := fetched[0].([]interface{})
		check(len(task) == 4 && task[0] == submit.Val() && task[1] == queue &&
			task[2] == "payload "+name, "TASK.FETCH task = %v", task)
		ack := redis.NewCmd("TASK.ACK", submit.Val())
		must(client.Process(ack), "TASK.ACK")
		tasks++
	}
	// Pub/sub: a subscriber on its own connection gets a message per name.
	pubsub, err := client.Subscribe(names...)
	must(err, "SUBSCRIBE")
	// Publish only once every subscription is confirmed (a message sent before is lost).
	for confirmed := 0; confirmed < len(names); {
		reply, err := pubsub.ReceiveTimeout(10 * time.Second)
		must(err, "SUBSCRIBE confirmation")
		if _, ok := reply.(*redis.Subscription); ok {
			confirmed++
		}
	}
	for _, name := range names {
		must(client.Publish(name, "hello "+name).Err(), "PUBLISH")
	}
	for range names {
		msg, err := pubsub.ReceiveMessage()
		check(err == nil && msg.Payload == "hello "+msg.Channel, "message %v %v", msg, err)
	}
	pubsub.Close()
	out, _ := json.Marshal(map[string]int{"names": len(names), "tasks": tasks})
	fmt.Println(string(out))
}
