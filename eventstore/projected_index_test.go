package eventstore_test

import (
	"context"
	"testing"

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
	_, err = s.AppendProjected(context.Background(), "o1", 0, eventstore.Fence{Generation: 1, Epoch: 1},
		[]eventstore.Envelope{{EventID: "e1", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}},
		eventstore.Projection{Key: "rm:{o1}", VersionField: "version", StateField: "state", Version: 1, State: []byte("s"),
			Index: eventstore.IndexEntry{Op: eventstore.IndexAdd, Key: "rm:active:{3}", Member: "o1", Score: 1}})
	require.ErrorIs(t, err, eventstore.ErrConfig)
}

// Companions need one server for the same reason.
func TestCompanionsNeedASingleServerClient(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { c.Close() })
	s, err := eventstore.NewRedis(eventstore.Config{Client: c})
	require.NoError(t, err)
	_, _, err = s.AppendProjectedWith(context.Background(), "o1", 0, eventstore.Fence{Generation: 1, Epoch: 1},
		[]eventstore.Envelope{{EventID: "e1", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}},
		eventstore.Projection{Key: "rm:{o1}", VersionField: "version", StateField: "state", Version: 1, State: []byte("s")},
		[]eventstore.Companion{{Op: eventstore.SetIfAbsent, Key: "env:{o1}", Value: []byte("x")}})
	require.ErrorIs(t, err, eventstore.ErrConfig)
}
