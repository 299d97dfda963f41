package archiver_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/archiver"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
)

// countingArchive counts the writes per order that reach the archive.
type countingArchive struct {
	archive.Store
	mu   sync.Mutex
	puts map[string]int
}

func (c *countingArchive) Put(ctx context.Context, r archive.Record) error {
	c.mu.Lock()
	c.puts[r.OrderID]++
	c.mu.Unlock()
	return c.Store.Put(ctx, r)
}

func (c *countingArchive) max() (worst int, order string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for o, n := range c.puts {
		if n > worst {
			worst, order = n, o
		}
	}
	return worst, order
}

// finishMany finishes n orders of the bench's mix and returns them with
// their kinds' indexes.
func (e *env) finishMany(t *testing.T, prefix string, n int) (ids []string, kindOf map[string]int) {
	t.Helper()
	kindOf = map[string]int{}
	for i := range n {
		k := 0
		switch i % 20 {
		case 7:
			k = 1
		case 13:
			k = 2
		}
		id := e.finish(t, fmt.Sprintf("%s-%d", prefix, i), kinds[k].lines, kinds[k].method, kinds[k].want)
		ids = append(ids, id)
		kindOf[id] = k
	}
	return ids, kindOf
}

// Three archivers at once over the same orders take each shard under a
// lease, so no order is written to the archive twice; one that stalls
// mid-batch (a member SIGSTOPped or dead, as far as the others can tell)
// holds its shard until the lease ends, then the others finish it; the
// stalled one, resumed, writes nothing new.
func TestArchiversShareTheShardsAndAStalledOneLeavesItsWork(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	ids, kindOf := e.finishMany(t, "share", 60)
	counted := &countingArchive{Store: e.archive, puts: map[string]int{}}
	const ttl = 5 * time.Second

	stalled, resume := make(chan string, 1), make(chan struct{})
	var once sync.Once
	staller := e.archiverWith(t, func(c *archiver.Config) { c.Archive, c.LeaseTTL = counted, ttl })
	archiver.SetStepHook(staller, func(step string) error {
		if step == "write" {
			once.Do(func() {
				stalled <- "stalled"
				<-resume
			})
		}
		return nil
	})
	stallerDone := make(chan archiver.Pass, 1)
	go func() {
		p, _ := staller.RunOnce(context.WithoutCancel(ctx))
		stallerDone <- p
	}()
	<-stalled

	var wg sync.WaitGroup
	passes := make([]archiver.Pass, 2)
	for i := range passes {
		a := e.archiverWith(t, func(c *archiver.Config) { c.Archive, c.LeaseTTL = counted, ttl })
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := a.RunOnce(ctx)
			require.NoError(t, err)
			passes[i] = p
		}()
	}
	wg.Wait()
	busy := passes[0].Busy + passes[1].Busy
	require.GreaterOrEqual(t, busy, 1, "the stalled archiver's shard is busy for the others: %+v", passes)
	worst, order := counted.max()
	require.Equal(t, 1, worst, "no order written twice while the leases hold (%s)", order)

	// The lease ends: another archiver takes the stalled one's shard.
	late := e.archiverWith(t, func(c *archiver.Config) { c.Archive, c.LeaseTTL = counted, ttl })
	require.Eventually(t, func() bool {
		p, err := late.RunOnce(ctx)
		require.NoError(t, err)
		return p.Candidates == 0 && p.Busy == 0
	}, 4*ttl, 100*time.Millisecond, "the others finish the stalled archiver's work")
	for _, id := range ids {
		e.requireArchived(t, id, kinds[kindOf[id]].want, kinds[kindOf[id]].reserved)
	}

	// Resumed, the stalled archiver finishes the order it held, which
	// the others archived meanwhile: the same row again, nothing else.
	close(resume)
	<-stallerDone
	worst, _ = counted.max()
	require.LessOrEqual(t, worst, 2, "only the order in the stalled archiver's hands may be written twice, to the same row")
	n, err := e.archive.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(ids), n, "one row per order")
}

// PostgreSQL SIGKILLed in the middle of a pass: the pass ends with the
// archive unavailable, the orders it had not finished stay hot (sealed,
// answerable); once PostgreSQL runs again the next passes archive every
// candidate, each exactly once.
func TestAnArchiveOutageDelaysArchivalAndLosesNothing(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	ids, kindOf := e.finishMany(t, "outage", 40)
	var written atomic.Int64
	a := e.archiverWith(t, func(c *archiver.Config) {})
	archiver.SetStepHook(a, func(step string) error {
		if step == "verify" && written.Add(1) == 10 {
			require.NoError(t, e.pg.Kill())
		}
		return nil
	})
	p, err := a.RunOnce(ctx)
	require.ErrorIs(t, err, archive.ErrUnavailable, "the pass ends at the outage: %+v", p)
	require.Less(t, p.Archived, len(ids))
	hot := 0
	for _, id := range ids {
		if e.hot(t, id) {
			hot++
			st, _, err := e.stores.ReadModel.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, kinds[kindOf[id]].want, st.GetStatus(), "a hot order answers as before")
		}
	}
	require.Equal(t, len(ids)-p.Archived, hot, "every order not archived is still hot")
	t.Logf("outage: %d archived before it, %d hot", p.Archived, hot)

	require.NoError(t, e.pg.Restart(ctx))
	require.Eventually(t, func() bool {
		p, err := a.RunOnce(ctx)
		return err == nil && p.Candidates == 0
	}, 60*time.Second, 200*time.Millisecond, "archival resumes once the archive is back")
	for _, id := range ids {
		e.requireArchived(t, id, kinds[kindOf[id]].want, kinds[kindOf[id]].reserved)
	}
	n, err := e.archive.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(ids), n, "every candidate archived exactly once")
}

// A backlog drains at the archiver's own pace: Run takes the next batch
// at once while a pass found a full one, not an interval later.
func TestRunDrainsABacklogWithoutWaitingForItsInterval(t *testing.T) {
	e := setup(t)
	ids, _ := e.finishMany(t, "backlog", 100)
	a := e.archiverWith(t, func(c *archiver.Config) { c.Batch = 20 })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool {
		n, err := e.archive.Count(t.Context())
		require.NoError(t, err)
		return n == int64(len(ids))
	}, 60*time.Second, 50*time.Millisecond, "five full batches, one after another, within the hour's interval")
}
