package pgserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/pgserver/pgtest"
)

// A started server takes connections as the role of its URL; paused (the
// whole group SIGSTOPped) an open connection's query hangs until its
// deadline; resumed it answers; SIGKILLed and restarted on its folder it
// still holds what was committed before.
func TestAServerPausesKillsAndRestartsWithItsData(t *testing.T) {
	s := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	_, err = c.Exec(ctx, "CREATE TABLE kept (id int primary key)")
	require.NoError(t, err)
	_, err = c.Exec(ctx, "INSERT INTO kept VALUES (1)")
	require.NoError(t, err)
	var user string
	require.NoError(t, c.QueryRow(ctx, "SELECT current_user").Scan(&user))
	require.Equal(t, "shoppingmall", user)

	require.NoError(t, s.Pause())
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Exec(short, "INSERT INTO kept VALUES (2)")
	stop()
	require.Error(t, err, "a paused server's backend does not answer")
	require.NoError(t, s.Resume())
	_ = c.Close(ctx)

	pid := s.PID()
	require.NoError(t, s.Kill())
	require.Zero(t, s.PID())
	require.NoError(t, s.Restart(ctx))
	require.NotEqual(t, pid, s.PID())
	c, err = pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	defer c.Close(ctx)
	var n int
	require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM kept WHERE id = 1").Scan(&n))
	require.Equal(t, 1, n, "the committed row survived the kill")
}
