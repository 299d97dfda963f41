package eventstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// An index entry rides in the append's script only on one server: the
// entry's key is outside the order's hash slot, which a Redis Cluster
// refuses in one script, so a cluster client is refused before anything
// is sent.
func TestIndexEntryNeedsASingleServerClient(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { c.Close() })
	s, err := eventstore.NewRedis(eventstore.Config{Client: c})
	require.NoError(t, err)
	require.False(t, s.SingleServer())
	_, err = commitProjected(context.Background(), s, "o1", 0, eventstore.Fence{Generation: 1, Epoch: 1},
		[]eventstore.Envelope{{EventID: "e1", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}},
		eventstore.Projection{Key: "rm:{o1}", VersionField: "version", StateField: "state", Version: 1, State: []byte("s"),
			Index: eventstore.IndexEntry{Op: eventstore.IndexAdd, Key: "rm:active:{3}", Member: "o1", Score: 1}})
	require.ErrorIs(t, err, eventstore.ErrConfig)
}

// A companion outside the order's hash slot needs one server for the
// same reason; one with the order's tag rides on a cluster client too
// (the unreachable address then answers, not the config check).
func TestCompanionsOutsideTheOrdersSlotNeedASingleServerClient(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRedirects: -1})
	t.Cleanup(func() { c.Close() })
	s, err := eventstore.NewRedis(eventstore.Config{Client: c})
	require.NoError(t, err)
	appendWith := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		u := eventstore.NewUnit("o1", 0, eventstore.Fence{Generation: 1, Epoch: 1},
			[]eventstore.Envelope{{EventID: "e1", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}})
		u.Project(eventstore.Projection{Key: "rm:{o1}", VersionField: "version", StateField: "state", State: []byte("s")})
		u.SetIfAbsent(key, []byte("x"))
		_, err := s.Commit(ctx, u)
		return err
	}
	for _, key := range []string{"env:o1", "env:{o2}", "owned:m-1", "env:{}{o1}"} {
		require.ErrorIs(t, appendWith(key), eventstore.ErrConfig, key)
	}
	err = appendWith("env:{o1}")
	require.Error(t, err)
	require.NotErrorIs(t, err, eventstore.ErrConfig)
}

func TestHashTagIsWhatRedisClusterHashes(t *testing.T) {
	for key, tag := range map[string]string{
		"sm:es:{o1}":                    "o1",
		"a{o1}b{o2}":                    "o1",
		"no-tag":                        "no-tag",
		"empty{}tag":                    "empty{}tag",
		"{}{o1}":                        "{}{o1}",
		"open{only":                     "open{only",
		"sm:loc:{sm:loc:gone}heartbeat": "sm:loc:gone",
	} {
		require.Equal(t, tag, eventstore.HashTag(key), key)
	}
}
