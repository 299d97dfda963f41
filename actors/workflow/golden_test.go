package workflow_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The golden corpus: the Redis keys of every order that the smoke run
// (runner/smoke, the spec's §9 self-check: success, insufficient stock,
// a declined payment with its release, a continue from InventoryReserved,
// a skipped terminal projection, a rebuilt projection, a relocation, a
// kill and a close with its new generation) left behind when it ran on
// goldenCommit, the last commit whose stored events carry no schema
// version. Each order's stream and read-model record are kept byte for
// byte as that build wrote them.
//
// How it was made, once, and how to make it again (it needs git, the
// commit in the history and redis-server):
//
//	go test ./actors/workflow -run TestGoldenCorpus -golden.capture
//
// checks goldenCommit out into a temporary worktree, turns on Redis
// persistence in that tree's smoke runner (the one line the capture
// changes there), runs the smoke run to shoppingmall=completed, starts
// redis-server on the data it left and writes every order's stream and
// record into goldenFile. The worktree and the run are removed after.
const (
	goldenCommit = "e0df99c279eddbecefb8f187c0440827098d2aaa"
	goldenFile   = "testdata/golden/e0df99c.json"
)

var goldenCapture = flag.Bool("golden.capture", false, "rebuild "+goldenFile+" from a smoke run of "+goldenCommit+" (slow; needs git and redis-server)")

// goldenCorpus is goldenFile's shape.
type goldenCorpus struct {
	Commit string        `json:"commit"`
	Made   string        `json:"made"`
	Orders []goldenOrder `json:"orders"`
}

// goldenOrder is one order's keys as the old build left them: StreamKey's
// entries in order, and RecordKey's hash (the read model: its version and
// the protobuf state, base64 in JSON).
type goldenOrder struct {
	OrderID   string            `json:"orderId"`
	StreamKey string            `json:"streamKey"`
	Entries   []goldenEntry     `json:"entries"`
	RecordKey string            `json:"recordKey"`
	Record    map[string][]byte `json:"record"`
}

// goldenEntry is one stream entry: its id and its fields in stored order.
type goldenEntry struct {
	ID     string      `json:"id"`
	Fields [][2]string `json:"fields"`
}

// Streams the build before event schema versions wrote replay, on this
// build, to the very states that build projected, and every prefix of
// them folds: a format change that loses an old order fails here. The
// upgrade proof runs this test on each build it starts (make
// upgrade-test), so "this build" is each of them.
func TestGoldenCorpusReplaysToTheStatesItsBuildProjected(t *testing.T) {
	if *goldenCapture {
		captureGolden(t)
	}
	raw, err := os.ReadFile(goldenFile)
	require.NoError(t, err)
	var corpus goldenCorpus
	require.NoError(t, json.Unmarshal(raw, &corpus))
	require.Equal(t, goldenCommit, corpus.Commit)

	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	// The old keys go back verbatim, at their old names: this build must
	// find them where that build put them.
	for _, o := range corpus.Orders {
		for _, e := range o.Entries {
			values := make([]any, 0, 2*len(e.Fields))
			for _, f := range e.Fields {
				values = append(values, f[0], f[1])
			}
			require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: o.StreamKey, ID: e.ID, Values: values}).Err())
		}
		for field, value := range o.Record {
			require.NoError(t, c.HSet(ctx, o.RecordKey, field, value).Err())
		}
	}
	events, err := eventstore.NewRedis(eventstore.Config{Client: c})
	require.NoError(t, err)
	records, err := readmodel.NewRedis(readmodel.Config{Client: c})
	require.NoError(t, err)

	types := map[string]bool{}
	statuses := map[contracts.OrderStatus]int{}
	for _, o := range corpus.Orders {
		envs, err := events.Load(ctx, o.OrderID)
		require.NoError(t, err, o.OrderID)
		require.Len(t, envs, len(o.Entries), "%s: every stored entry is read", o.OrderID)
		for i := range envs {
			types[envs[i].EventType] = true
			require.Equal(t, 1, envs[i].Schema, "%s: an entry without a schema is schema 1", o.OrderID)
			_, err := workflow.Replay(o.OrderID, envs[:i+1])
			require.NoError(t, err, "%s: the first %d events fold", o.OrderID, i+1)
		}
		got, err := workflow.Replay(o.OrderID, envs)
		require.NoError(t, err, o.OrderID)
		want, version, err := records.Get(ctx, o.OrderID)
		require.NoError(t, err, "%s: the old read model record is read", o.OrderID)
		require.Equal(t, int64(len(envs)), version, "%s: the record was projected from the whole stream", o.OrderID)
		require.True(t, proto.Equal(want, got), "%s: replayed %v, the old build projected %v", o.OrderID, got, want)
		statuses[got.GetStatus()]++
	}
	// The corpus holds every branch: each event type and both ends.
	for _, typ := range []string{order.TypeOrderStarted, order.TypeInventoryReserved, order.TypeInventoryReservationFailed,
		order.TypePaymentAuthorized, order.TypePaymentFailed, order.TypeInventoryReleased, order.TypeOrderConfirmed, order.TypeOrderFailed} {
		require.True(t, types[typ], "the corpus holds a %s", typ)
	}
	require.Positive(t, statuses[contracts.OrderStatus_Confirmed])
	require.Positive(t, statuses[contracts.OrderStatus_Failed])
	t.Logf("%d orders of %s replayed: %v", len(corpus.Orders), corpus.Commit[:7], statuses)
}

// captureGolden rebuilds goldenFile; see the comment on goldenCommit.
func captureGolden(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root := strings.TrimSpace(run(t, ctx, ".", "git", "rev-parse", "--show-toplevel"))
	// A short folder: the old run's Redis serves on a unix socket in it.
	work, err := os.MkdirTemp("", "golden")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })
	src := filepath.Join(work, "src")
	run(t, ctx, root, "git", "worktree", "add", "--detach", src, goldenCommit)
	t.Cleanup(func() { run(t, context.Background(), root, "git", "worktree", "remove", "--force", src) })

	smoke := filepath.Join(src, "runner", "smoke", "main.go")
	code, err := os.ReadFile(smoke)
	require.NoError(t, err)
	const at = "\t\tRedisCluster: r.redisCluster,\n"
	require.Equal(t, 1, strings.Count(string(code), at), "the smoke runner of %s starts its cluster once", goldenCommit)
	require.NoError(t, os.WriteFile(smoke, []byte(strings.Replace(string(code), at, at+"\t\tRedisPersist: true,\n", 1)), 0o644))
	out := run(t, ctx, src, "go", "run", "./runner/smoke", "-run-dir", filepath.Join(work, "smoke"))
	require.Contains(t, out, "shoppingmall=completed")

	dirs, err := filepath.Glob(filepath.Join(work, "smoke", "run-*", "redis"))
	require.NoError(t, err)
	require.Len(t, dirs, 1)
	srv, err := redisserver.Start(ctx, redisserver.Config{Dir: dirs[0], Persist: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Stop()) }()
	c := srv.Client()
	defer c.Close()

	corpus := goldenCorpus{Commit: goldenCommit, Made: "go test ./actors/workflow -run TestGoldenCorpus -golden.capture: a smoke run of the commit"}
	keys, err := c.Keys(ctx, eventstore.DefaultKeyPrefix+"{*}:stream").Result()
	require.NoError(t, err)
	slices.Sort(keys)
	for _, k := range keys {
		id := strings.TrimSuffix(strings.TrimPrefix(k, eventstore.DefaultKeyPrefix+"{"), "}:stream")
		o := goldenOrder{OrderID: id, StreamKey: k, RecordKey: readmodel.DefaultKeyPrefix + "{" + id + "}", Record: map[string][]byte{}}
		// go-redis' XRange hands the fields back as a map; the raw reply
		// keeps their stored order.
		raw, err := c.Do(ctx, "XRANGE", k, "-", "+").Slice()
		require.NoError(t, err)
		for _, item := range raw {
			pair := item.([]any)
			kv := pair[1].([]any)
			e := goldenEntry{ID: pair[0].(string)}
			for i := 0; i+1 < len(kv); i += 2 {
				e.Fields = append(e.Fields, [2]string{kv[i].(string), kv[i+1].(string)})
			}
			o.Entries = append(o.Entries, e)
		}
		rec, err := c.HGetAll(ctx, o.RecordKey).Result()
		require.NoError(t, err)
		for f, v := range rec {
			o.Record[f] = []byte(v)
		}
		corpus.Orders = append(corpus.Orders, o)
	}
	require.NotEmpty(t, corpus.Orders)
	b, err := json.MarshalIndent(corpus, "", " ")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(goldenFile), 0o755))
	require.NoError(t, os.WriteFile(goldenFile, append(b, '\n'), 0o644))
	t.Logf("captured %d orders of %s into %s", len(corpus.Orders), goldenCommit[:7], goldenFile)
}

// run runs name with args in dir and returns its combined output; a
// failure ends the test with that output.
func run(t *testing.T, ctx context.Context, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
	return string(out)
}
