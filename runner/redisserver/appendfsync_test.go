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

// A persistent server keeps its data in the AOF alone: no RDB save
// points, whose once-a-minute fork under load the AOF makes redundant.
func TestAPersistentServerTakesNoSnapshots(t *testing.T) {
	s := startT(t, redisserver.Config{Dir: shortDir(t), Persist: true})
	c := s.Client()
	defer c.Close()
	got, err := c.ConfigGet(ctxT(t), "save").Result()
	must(t, err, "CONFIG GET save")
	if got["save"] != "" {
		t.Fatalf("a persistent server runs with save points %q, want none", got["save"])
	}
	aof, err := c.ConfigGet(ctxT(t), "appendonly").Result()
	must(t, err, "CONFIG GET appendonly")
	if aof["appendonly"] != "yes" {
		t.Fatalf("appendonly %q, want yes", aof["appendonly"])
	}
}
