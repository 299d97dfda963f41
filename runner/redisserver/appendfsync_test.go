package redisserver_test

import (
	"testing"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// The peer bench's like-with-like row runs Redis with appendfsync always:
// the server must really run with the policy asked for, and Redis' own
// default (everysec) when none is.
func TestAppendFsyncIsTheServersPolicy(t *testing.T) {
	for _, tc := range []struct{ given, want string }{{"always", "always"}, {"", "everysec"}} {
		s := startT(t, redisserver.Config{Dir: shortDir(t), Persist: true, AppendFsync: tc.given})
		c := s.Client()
		got, err := c.ConfigGet(ctxT(t), "appendfsync").Result()
		c.Close()
		must(t, err, "CONFIG GET appendfsync")
		if got["appendfsync"] != tc.want {
			t.Fatalf("AppendFsync %q: server runs with appendfsync %q, want %q", tc.given, got["appendfsync"], tc.want)
		}
	}
}

func TestAppendFsyncRejectsAnUnknownPolicy(t *testing.T) {
	s, err := redisserver.Start(ctxT(t), redisserver.Config{Dir: shortDir(t), Persist: true, AppendFsync: "sometimes"})
	if err == nil {
		_ = s.Stop()
		t.Fatal("Start accepted appendfsync \"sometimes\"")
	}
}
