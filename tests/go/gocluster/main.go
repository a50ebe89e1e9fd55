// go-redis's ClusterClient (gopkg.in/redis.v5, Debian's) against a WeTask cluster of several
// processes, seeded with WETASK_CLUSTER_ADDRS (comma-separated shard ports): WETASK_NAMES
// random keys written, read back and counted, and as many tasks submitted, leased and acked
// by their queue's slot. v5 cannot read Redis 7's CLUSTER SLOTS (a fourth element per node,
// which Redis 7 sends too), so it learns nothing from it and reaches each key by following
// MOVED from its seed: what this checks is that every redirect it is given is right.
// Prints one JSON line; exits non-zero on the first wrong answer.
package main

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"

	redis "gopkg.in/redis.v5"
)

func check(ok bool, format string, args ...interface{}) {
	if !ok {
		fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
		os.Exit(1)
	}
}

func main() {
	addrs := strings.Split(os.Getenv("WETASK_CLUSTER_ADDRS"), ",")
	count, _ := strconv.Atoi(os.Getenv("WETASK_NAMES"))
	if count == 0 {
		count = 20
	}
	r := rand.New(rand.NewSource(time.Now().UnixNano()))
	// One connection per node: a lease belongs to the connection that fetched it, and the ACK
	// must come on the same one.
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: 8, PoolSize: 1})
	defer client.Close()
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	names := make([]string, count)
	for i := range names {
		b := make([]byte, 10)
		for j := range b {
			b[j] = letters[r.Intn(len(letters))]
		}
		names[i] = "gc:" + string(b)
	}
	for _, name := range names {
		check(client.Set(name, "v"+name, 0).Err() == nil, "SET %s", name)
		got, err := client.Get(name).Result()
		check(err == nil && got == "v"+name, "GET %s = %q %v", name, got, err)
		n, err := client.Incr("n:{" + name + "}").Result()
		check(err == nil && n == 1, "INCR %s = %d %v", name, n, err)
	}
	tasks := 0
	for _, name := range names {
		queue := "q:" + name
		submit := redis.NewStringCmd("TASK.SUBMIT", queue, "job")
		check(client.Process(submit) == nil, "TASK.SUBMIT %s: %v", queue, submit.Err())
		id := submit.Val()
		check(strings.HasPrefix(id, "{"), "task id %q", id)
		// A lease is the fetching connection's. v5 drops a connection whose CLUSTER SLOTS
		// reply it could not parse (its background slot reload), and the lease goes back to
		// the queue with it: then the ACK is refused and the task is leased again, as any
		// worker would see it. Bounded: 50 tries.
		acked := false
		for try := 0; try < 50 && !acked; try++ {
			fetch := redis.NewSliceCmd("TASK.FETCH", queue)
			check(client.Process(fetch) == nil, "TASK.FETCH %s: %v", queue, fetch.Err())
			leased := fetch.Val()
			if len(leased) == 0 {
				time.Sleep(20 * time.Millisecond) // the closed connection's lease is on its way back
				continue
			}
			check(len(leased) == 1, "TASK.FETCH %s leased %d", queue, len(leased))
			task, ok := leased[0].([]interface{})
			check(ok && len(task) >= 2 && task[0] == id, "TASK.FETCH %s: %v", queue, leased)
			ack := redis.NewStatusCmd("TASK.ACK", id)
			err := client.Process(ack)
			if err != nil && strings.Contains(err.Error(), "not leased to this client") {
				continue
			}
			if err != nil && strings.Contains(err.Error(), "task already finished") {
				// v5 sends a command again on a new connection when the first one dropped
				// before its reply came: the first ACK landed. The task must say so.
				get := redis.NewSliceCmd("TASK.GET", id)
				check(client.Process(get) == nil, "TASK.GET %s: %v", id, get.Err())
				fields := get.Val()
				state := ""
				for i := 0; i+1 < len(fields); i += 2 {
					if fields[i] == "state" {
						state, _ = fields[i+1].(string)
					}
				}
				check(state == "done", "TASK.ACK %s said finished, TASK.GET says %v", id, fields)
				acked = true
				continue
			}
			check(err == nil && ack.Val() == "OK", "TASK.ACK %s: %v", id, err)
			acked = true
		}
		check(acked, "task %s was never acked", id)
		tasks++
	}
	out, _ := json.Marshal(map[string]int{"names": count, "tasks": tasks})
	fmt.Println(string(out))
}
