package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ceilingMix is one order's Redis work as the ceiling replays it.
type ceilingMix struct {
	Source string `json:"source"`
	// TopLevel: commands per order that clients send themselves (one
	// round trip each in the ceiling), by name, scripts excluded.
	TopLevel map[string]float64 `json:"topLevelPerOrder"`
	// ScriptCalls: EVALSHA/EVAL per order.
	ScriptCalls float64 `json:"scriptCallsPerOrder"`
	// Inner: commands per order run inside those scripts, by name.
	Inner map[string]float64 `json:"innerPerOrder"`
}

// deriveMix splits the commandstats delta (which counts commands run inside
// scripts too) into what clients sent and what scripts ran: for each name,
// the clients' own count (from their hooks) is top level and the rest ran
// inside a script. A nil client map means no process reported counts.
func deriveMix(server, client map[string]int64, orders float64) ceilingMix {
	haveClient := client != nil
	m := ceilingMix{TopLevel: map[string]float64{}, Inner: map[string]float64{}}
	if haveClient {
		m.Source = "INFO commandstats delta per order; top level vs inside scripts told apart by the processes' client-side counts"
	} else {
		m.Source = "INFO commandstats delta per order; no client-side counts, so every non-script command is taken as top level"
	}
	for name, n := range server {
		if scriptCommands[name] {
			m.ScriptCalls += float64(n) / orders
			continue
		}
		top := n
		if haveClient {
			top = min(client[name], n)
		}
		if top > 0 {
			m.TopLevel[name] = float64(top) / orders
		}
		if n-top > 0 {
			m.Inner[name] = float64(n-top) / orders
		}
	}
	return m
}

type ceilingStats struct {
	OrdersPerSec        float64  `json:"ordersPerSec"`
	Orders              int64    `json:"orders"`
	ElapsedSec          float64  `json:"elapsedSec"`
	Concurrency         int      `json:"concurrency"`
	RoundTripsPerOrder  float64  `json:"roundTripsPerOrder"`
	CommandsPerOrder    float64  `json:"commandsPerOrder"`
	MeasuredOverCeiling float64  `json:"measuredOverCeiling"`
	Substituted         []string `json:"substituted,omitempty"`
	Approximation       string   `json:"approximation"`
}

// ceilingScript runs a list of (command, count) pairs against one virtual
// order's keys, so one EVALSHA carries the inner commands of the real
// scripts. KEYS: string, hash, stream, set, counter; ARGV[1] a value.
var ceilingScript = redis.NewScript(`#!lua
local v = ARGV[1]
local s, h, x, z, n = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
for i = 2, #ARGV, 2 do
  local op = ARGV[i]
  for _ = 1, tonumber(ARGV[i+1]) do
    if op == 'set' then redis.call('SET', s, v)
    elseif op == 'setnx' then redis.call('SETNX', s, v)
    elseif op == 'mget' then redis.call('MGET', s, n)
    elseif op == 'incr' then redis.call('INCR', n)
    elseif op == 'incrby' then redis.call('INCRBY', n, 1)
    elseif op == 'decr' then redis.call('DECR', n)
    elseif op == 'decrby' then redis.call('DECRBY', n, 1)
    elseif op == 'exists' then redis.call('EXISTS', s)
    elseif op == 'del' then redis.call('DEL', n)
    elseif op == 'expire' then redis.call('EXPIRE', s, 600)
    elseif op == 'pexpire' then redis.call('PEXPIRE', s, 600000)
    elseif op == 'pttl' then redis.call('PTTL', s)
    elseif op == 'ttl' then redis.call('TTL', s)
    elseif op == 'hget' then redis.call('HGET', h, 'f1')
    elseif op == 'hset' then redis.call('HSET', h, 'f1', v, 'f2', '1')
    elseif op == 'hsetnx' then redis.call('HSETNX', h, 'f3', v)
    elseif op == 'hmget' then redis.call('HMGET', h, 'f1', 'f2')
    elseif op == 'hgetall' then redis.call('HGETALL', h)
    elseif op == 'hincrby' then redis.call('HINCRBY', h, 'c', 1)
    elseif op == 'hexists' then redis.call('HEXISTS', h, 'f1')
    elseif op == 'hdel' then redis.call('HDEL', h, 'zz')
    elseif op == 'hlen' then redis.call('HLEN', h)
    elseif op == 'xadd' then redis.call('XADD', x, '*', 'f', v)
    elseif op == 'xrange' then redis.call('XRANGE', x, '-', '+')
    elseif op == 'xrevrange' then redis.call('XREVRANGE', x, '+', '-', 'COUNT', 1)
    elseif op == 'xlen' then redis.call('XLEN', x)
    elseif op == 'sadd' then redis.call('SADD', z, 'm')
    elseif op == 'sismember' then redis.call('SISMEMBER', z, 'm')
    elseif op == 'smembers' then redis.call('SMEMBERS', z)
    elseif op == 'srem' then redis.call('SREM', z, 'zz')
    else redis.call('GET', s)
    end
  end
end
return 1
`)

// supported lists the names both the script and topArgs reproduce; any
// other name is replaced by a GET and reported.
var supported = map[string]bool{}

func init() {
	for _, n := range strings.Fields(`get set setnx mget incr incrby decr decrby exists del expire pexpire pttl ttl
		hget hset hsetnx hmget hgetall hincrby hexists hdel hlen xadd xrange xrevrange xlen sadd sismember smembers srem
		publish`) {
		supported[n] = true
	}
}

type ceilKeys struct{ s, h, x, z, n string }

func keysFor(k int64) ceilKeys {
	tag := "{ceil-" + strconv.FormatInt(k, 10) + "}"
	return ceilKeys{s: "bench:ceil:" + tag + ":s", h: "bench:ceil:" + tag + ":h", x: "bench:ceil:" + tag + ":x",
		z: "bench:ceil:" + tag + ":z", n: "bench:ceil:" + tag + ":n"}
}

func topArgs(name string, k ceilKeys, v string) []any {
	switch name {
	case "set":
		return []any{"SET", k.s, v}
	case "setnx":
		return []any{"SETNX", k.s, v}
	case "mget":
		return []any{"MGET", k.s, k.n}
	case "incr":
		return []any{"INCR", k.n}
	case "incrby":
		return []any{"INCRBY", k.n, 1}
	case "decr":
		return []any{"DECR", k.n}
	case "decrby":
		return []any{"DECRBY", k.n, 1}
	case "exists":
		return []any{"EXISTS", k.s}
	case "del":
		return []any{"DEL", k.n}
	case "expire":
		return []any{"EXPIRE", k.s, 600}
	case "pexpire":
		return []any{"PEXPIRE", k.s, 600000}
	case "pttl":
		return []any{"PTTL", k.s}
	case "ttl":
		return []any{"TTL", k.s}
	case "hget":
		return []any{"HGET", k.h, "f1"}
	case "hset":
		return []any{"HSET", k.h, "f1", v, "f2", "1"}
	case "hsetnx":
		return []any{"HSETNX", k.h, "f3", v}
	case "hmget":
		return []any{"HMGET", k.h, "f1", "f2"}
	case "hgetall":
		return []any{"HGETALL", k.h}
	case "hincrby":
		return []any{"HINCRBY", k.h, "c", 1}
	case "hexists":
		return []any{"HEXISTS", k.h, "f1"}
	case "hdel":
		return []any{"HDEL", k.h, "zz"}
	case "hlen":
		return []any{"HLEN", k.h}
	case "xadd":
		return []any{"XADD", k.x, "*", "f", v}
	case "xrange":
		return []any{"XRANGE", k.x, "-", "+"}
	case "xrevrange":
		return []any{"XREVRANGE", k.x, "+", "-", "COUNT", 1}
	case "xlen":
		return []any{"XLEN", k.x}
	case "sadd":
		return []any{"SADD", k.z, "m"}
	case "sismember":
		return []any{"SISMEMBER", k.z, "m"}
	case "smembers":
		return []any{"SMEMBERS", k.z}
	case "srem":
		return []any{"SREM", k.z, "zz"}
	case "publish":
		// The terminal notice: a channel, not a key, with no subscriber.
		return []any{"PUBLISH", k.s, v}
	default:
		return []any{"GET", k.s}
	}
}

// share is how many of a per-order rate r fall on order k, so that the
// first K orders carry round(K*r) in total.
func share(r float64, k int64) int {
	return int(math.Floor(float64(k+1)*r+1e-9) - math.Floor(float64(k)*r+1e-9))
}

// writesFirst orders names so a virtual order writes its keys before it
// reads them, as a real order does.
func writesFirst(names []string) []string {
	isWrite := func(n string) bool {
		switch n {
		case "set", "setnx", "incr", "incrby", "decr", "decrby", "hset", "hsetnx", "hincrby", "xadd", "sadd", "expire", "pexpire":
			return true
		}
		return false
	}
	out := append([]string(nil), names...)
	sort.SliceStable(out, func(i, j int) bool { return isWrite(out[i]) && !isWrite(out[j]) })
	return out
}

// runCeiling replays the per-order command mix against the same Redis with
// the same concurrency, each worker one virtual order at a time, and
// reports how many orders per second Redis alone allows.
func runCeiling(ctx context.Context, rdb redis.UniversalClient, m ceilingMix, concurrency int, d time.Duration) (ceilingStats, error) {
	st := ceilingStats{Concurrency: concurrency}
	var subst []string
	for _, names := range []map[string]float64{m.TopLevel, m.Inner} {
		for n := range names {
			if !supported[n] {
				subst = append(subst, n)
			}
		}
	}
	sort.Strings(subst)
	st.Substituted = subst
	st.Approximation = "each top-level command is replayed by name, one round trip each, on keys of one virtual order (one hash tag); " +
		"every EVALSHA runs one generic Lua script that executes the order's inner script commands by name, split evenly over the " +
		"order's script calls; values are 160 bytes; pipelines are not reproduced (each command is its own round trip); " +
		"names not reproduced are sent as GET (see substituted); keys are left behind, as real orders leave theirs"
	if err := ceilingScript.Load(ctx, rdb).Err(); err != nil {
		return st, err
	}
	top := writesFirst(sortedKeys(m.TopLevel))
	inner := writesFirst(sortedKeys(m.Inner))
	v := strings.Repeat("x", 160)
	var seq, orders, rts, cmds atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				k := seq.Add(1) - 1
				keys := keysFor(k)
				var nrt, ncmd int64
				fail := func(err error) bool {
					if err != nil && err != redis.Nil {
						firstErr.CompareAndSwap(nil, err)
						return true
					}
					return false
				}
				ok := true
				for _, name := range top {
					for range share(m.TopLevel[name], k) {
						nrt++
						ncmd++
						if fail(rdb.Do(ctx, topArgs(name, keys, v)...).Err()) {
							ok = false
						}
					}
				}
				calls := share(m.ScriptCalls, k)
				counts := make([]int, len(inner))
				for i, name := range inner {
					counts[i] = share(m.Inner[name], k)
				}
				for c := 0; c < calls; c++ {
					argv := []any{v}
					for i, name := range inner {
						n := counts[i] / calls
						if c < counts[i]%calls {
							n++
						}
						if n > 0 {
							argv = append(argv, name, n)
							ncmd += int64(n)
						}
					}
					nrt++
					ncmd++
					if fail(ceilingScript.EvalSha(ctx, rdb, []string{keys.s, keys.h, keys.x, keys.z, keys.n}, argv...).Err()) {
						ok = false
					}
				}
				if ok {
					orders.Add(1)
				}
				rts.Add(nrt)
				cmds.Add(ncmd)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	st.Orders = orders.Load()
	st.ElapsedSec = el.Seconds()
	st.OrdersPerSec = float64(st.Orders) / el.Seconds()
	if n := seq.Load(); n > 0 {
		st.RoundTripsPerOrder = float64(rts.Load()) / float64(n)
		st.CommandsPerOrder = float64(cmds.Load()) / float64(n)
	}
	if e, ok := firstErr.Load().(error); ok {
		return st, fmt.Errorf("ceiling command failed: %w", e)
	}
	return st, nil
}
