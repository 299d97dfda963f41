package readmodeltest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Watched are the stores the terminal-notice contract needs: the store
// whose writes announce terminal records, the watcher that hears them
// and, optionally, a projected append writing the same records.
type Watched struct {
	ReadModel readmodel.Store
	Watcher   readmodel.TerminalWatcher
	// Append and Events, optional (nil skips those cases): a projected
	// append over ReadModel's records and the event store it appends to.
	Append readmodel.Committer
	Events eventstore.Store
}

// RunTerminalContract runs the TerminalWatcher contract, with the writes
// of Store.Put and Committer.Commit that must announce
// terminal records, as subtests. newStores is called once per subtest and
// must return empty stores (or ones whose keys no other subtest sees) and
// a watcher of them alone.
func RunTerminalContract(t *testing.T, newStores func(t *testing.T) Watched) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, w Watched)
	}{
		{"TerminalPutWakesEveryWaiterOfTheOrder", testTerminalPutWakes},
		{"WriteBetweenWatchAndWaitIsNotMissed", testWatchThenWrite},
		{"StopUnregisters", testStopUnregisters},
		{"TerminalProjectedAppendWakes", testTerminalProjectedAppend},
		{"ManyWaitersOverManyOrders", testManyWaiters},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStores(t)) })
	}
}

// waitBudget bounds every wait of the suite: a wake takes milliseconds.
const waitBudget = 10 * time.Second

// Awaited is what AwaitTerminal saw: the terminal state it read and how
// many reads it took.
type Awaited struct {
	State *contracts.OrderState
	Reads int
}

// AwaitTerminal is the waiter of TerminalWatcher's contract: register,
// read, and only if the record is not terminal wait for a wake and read
// again, until the record is terminal or ctx ends. It reads once per
// wake, never on a timer, so its read count tells how often it was woken.
// A record that is not there counts as not terminal yet.
func AwaitTerminal(ctx context.Context, s readmodel.Store, w readmodel.TerminalWatcher, orderID string) (Awaited, error) {
	return awaitTerminal(ctx, s, w, orderID, func() {})
}

// awaitTerminal is AwaitTerminal calling read after its first read.
func awaitTerminal(ctx context.Context, s readmodel.Store, w readmodel.TerminalWatcher, orderID string, read func()) (Awaited, error) {
	wake, stop := w.Watch(orderID)
	defer stop()
	var a Awaited
	for {
		st, _, err := s.Get(ctx, orderID)
		a.Reads++
		if a.Reads == 1 {
			read()
		}
		if err == nil && readmodel.Terminal(st.GetStatus()) {
			a.State = st
			return a, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return a, fmt.Errorf("order %s not seen terminal after %d reads (last error %v): %w", orderID, a.Reads, err, ctx.Err())
		}
	}
}

func budget(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	t.Cleanup(cancel)
	return ctx
}

// awaitAsync runs AwaitTerminal in the background and returns once it
// has registered and read; the channel gets its outcome. Writes the test
// makes after it returns must wake the waiter to be seen.
func awaitAsync(ctx context.Context, w Watched, orderID string) <-chan awaitOutcome {
	out := make(chan awaitOutcome, 1)
	read := make(chan struct{})
	go func() {
		a, err := awaitTerminal(ctx, w.ReadModel, w.Watcher, orderID, func() { close(read) })
		out <- awaitOutcome{a, err}
	}()
	select {
	case <-read:
	case <-ctx.Done():
	}
	return out
}

type awaitOutcome struct {
	Awaited
	err error
}

// maxReads bounds a waiter's reads in these cases: its first read, the
// wake of the write it waits for, and the spurious wakes the contract
// allows (a subscription confirmed while it waited; a repeated write).
// A waiter woken on a timer would read far more.
const maxReads = 4

func requireOutcome(t *testing.T, out <-chan awaitOutcome, want contracts.OrderStatus, what string) {
	t.Helper()
	select {
	case o := <-out:
		require.NoError(t, o.err, what)
		require.Equal(t, want, o.State.GetStatus(), what)
		require.LessOrEqual(t, o.Reads, maxReads, "%s: a waiter reads once per wake", what)
	case <-time.After(waitBudget):
		require.FailNow(t, what+": the waiter never returned")
	}
}

func testTerminalPutWakes(t *testing.T, w Watched) {
	ctx := budget(t)
	mustApply(t, w.ReadModel, "o1", 1, state("o1", contracts.OrderStatus_Created, 1))
	mustApply(t, w.ReadModel, "o2", 1, state("o2", contracts.OrderStatus_Created, 1))
	var o1 []<-chan awaitOutcome
	for range 3 {
		o1 = append(o1, awaitAsync(ctx, w, "o1"))
	}
	o2 := awaitAsync(ctx, w, "o2")

	// A non-terminal write moves nobody on: the waiters read it (if at
	// all) and wait again.
	mustApply(t, w.ReadModel, "o1", 2, state("o1", contracts.OrderStatus_InventoryReserved, 2))
	mustApply(t, w.ReadModel, "o1", 3, state("o1", contracts.OrderStatus_Confirmed, 3))
	for i, out := range o1 {
		requireOutcome(t, out, contracts.OrderStatus_Confirmed, fmt.Sprintf("waiter %d of o1", i))
	}
	select {
	case o := <-o2:
		require.FailNow(t, "o2's waiter returned while o2 is not terminal", "%+v", o)
	default:
	}
	mustApply(t, w.ReadModel, "o2", 2, state("o2", contracts.OrderStatus_Failed, 2))
	requireOutcome(t, o2, contracts.OrderStatus_Failed, "o2's waiter")
}

// Register, then write, then wait: the wake is not lost between them (the
// subscribe/read race).
func testWatchThenWrite(t *testing.T, w Watched) {
	mustApply(t, w.ReadModel, "o1", 1, state("o1", contracts.OrderStatus_Created, 1))
	wake, stop := w.Watcher.Watch("o1")
	defer stop()
	st, _ := mustGet(t, w.ReadModel, "o1")
	require.Equal(t, contracts.OrderStatus_Created, st.GetStatus())
	mustApply(t, w.ReadModel, "o1", 2, state("o1", contracts.OrderStatus_Failed, 2))
	awaitWake(t, w, wake, "o1", "the watch")
}

func testStopUnregisters(t *testing.T, w Watched) {
	mustApply(t, w.ReadModel, "o1", 1, state("o1", contracts.OrderStatus_Created, 1))
	mustApply(t, w.ReadModel, "o9", 1, state("o9", contracts.OrderStatus_Created, 1))
	wakeA, stopA := w.Watcher.Watch("o1")
	stopA()
	stopA() // again: nothing
	// A wake that came before the stop (a subscription confirmed while A
	// was registered) may be pending; none may come after it.
	select {
	case <-wakeA:
		t.Log("the stopped watch had a wake from before its stop")
	default:
	}
	wakeB, stopB := w.Watcher.Watch("o1")
	defer stopB()
	mustApply(t, w.ReadModel, "o1", 2, state("o1", contracts.OrderStatus_Confirmed, 2))
	awaitWake(t, w, wakeB, "o1", "the registered watch")
	// The barrier: a watcher hears and delivers notices in order, so once
	// o9's later write has woken C, every wake of o1's write is delivered.
	wakeC, stopC := w.Watcher.Watch("o9")
	defer stopC()
	mustApply(t, w.ReadModel, "o9", 2, state("o9", contracts.OrderStatus_Confirmed, 2))
	awaitWake(t, w, wakeC, "o9", "the barrier")
	select {
	case <-wakeA:
		require.FailNow(t, "a stopped watch was woken by a later write")
	default:
	}
}

// awaitWake waits on wake and re-reads orderID after each wake until it
// is terminal.
func awaitWake(t *testing.T, w Watched, wake <-chan struct{}, orderID, what string) {
	t.Helper()
	for range maxReads {
		select {
		case <-wake:
		case <-time.After(waitBudget):
			require.FailNow(t, what+": no wake for a terminal write made after Watch")
		}
		if st, _ := mustGet(t, w.ReadModel, orderID); readmodel.Terminal(st.GetStatus()) {
			return
		}
	}
	require.FailNow(t, what+": woken but never saw the terminal record")
}

func testTerminalProjectedAppend(t *testing.T, w Watched) {
	if w.Append == nil {
		t.Skip("no projected append for this store")
	}
	ctx := budget(t)
	f, _, err := w.Events.Open(ctx, "o1", 1)
	require.NoError(t, err)
	_, err = Commit(ctx, w.Append, "o1", 0, f, envs("o1", "e1"), state("o1", contracts.OrderStatus_Created, 1))
	require.NoError(t, err)
	out := awaitAsync(ctx, w, "o1")
	_, err = Commit(ctx, w.Append, "o1", 1, f, envs("o1", "e2"), state("o1", contracts.OrderStatus_PaymentAuthorized, 2))
	require.NoError(t, err)
	_, err = Commit(ctx, w.Append, "o1", 2, f, envs("o1", "e3"), state("o1", contracts.OrderStatus_Confirmed, 3))
	require.NoError(t, err)
	requireOutcome(t, out, contracts.OrderStatus_Confirmed, "waiter of the projected append")
	got, v := mustGet(t, w.ReadModel, "o1")
	require.EqualValues(t, 3, v)
	require.Equal(t, contracts.OrderStatus_Confirmed, got.GetStatus())
}

// Many waiters on many orders, the orders turning terminal concurrently
// while the waiters register: every waiter returns, none by polling.
func testManyWaiters(t *testing.T, w Watched) {
	const (
		orders  = 20
		waiters = 100
	)
	ctx := budget(t)
	id := func(i int) string { return fmt.Sprintf("m%d", i%orders) }
	for i := range orders {
		mustApply(t, w.ReadModel, id(i), 1, state(id(i), contracts.OrderStatus_Created, 1))
	}
	outs := make([]<-chan awaitOutcome, 0, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		outs = append(outs, awaitAsync(ctx, w, id(i)))
		if i == waiters/2 {
			// Half the waiters registered: the writes race the rest.
			for o := range orders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st := contracts.OrderStatus_Confirmed
					if o%3 == 0 {
						st = contracts.OrderStatus_Failed
					}
					if _, err := w.ReadModel.Put(ctx, id(o), 2, state(id(o), st, 2)); err != nil {
						t.Errorf("Put(%s): %v", id(o), err)
					}
				}()
			}
		}
	}
	wg.Wait()
	reads := 0
	for i, out := range outs {
		want := contracts.OrderStatus_Confirmed
		if (i%orders)%3 == 0 {
			want = contracts.OrderStatus_Failed
		}
		o := <-out
		require.NoError(t, o.err, "waiter %d", i)
		require.Equal(t, want, o.State.GetStatus(), "waiter %d", i)
		reads += o.Reads
	}
	require.LessOrEqual(t, reads, waiters*maxReads, "a waiter reads once per wake")
	t.Logf("%d waiters over %d orders: %d reads", waiters, orders, reads)
}
