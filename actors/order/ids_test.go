package order

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeterministicIDsAreStable(t *testing.T) {
	cases := []struct{ got, want string }{
		{ReservationID("ord-1"), "rsv-ord-1"},
		{PaymentID("ord-1"), "pay-ord-1"},
		{EventID("ord-1", 1), "evt-ord-1-1"},
		{EventID("ord-1", 12), "evt-ord-1-12"},
		// sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a3...
		{StartSourceCommandID("abc"), "start-ba7816bf8f01cfea414140de5dae2223"},
		{StepSourceCommandID("ord-1", StepReserveInventory), "ord-1:reserve-inventory"},
		{StepSourceCommandID("ord-1", StepAuthorizePayment), "ord-1:authorize-payment"},
		{StepSourceCommandID("ord-1", StepReleaseInventory), "ord-1:release-inventory"},
		{StepSourceCommandID("ord-1", StepConfirm), "ord-1:confirm"},
		{StepSourceCommandID("ord-1", StepFail), "ord-1:fail"},
		{StepSourceCommandID("ord-1", StepNone), ""},
		{StepSourceCommandID("ord-1", Step(99)), ""},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, c.got)
	}
}

func TestDeterministicIDsAreDistinct(t *testing.T) {
	seen := map[string]string{}
	add := func(id, what string) {
		t.Helper()
		require.NotEmpty(t, id, what)
		require.NotContains(t, seen, id, "%s and %s share id %q", seen[id], what, id)
		seen[id] = what
	}
	// Order ids chosen so that naive concatenation schemes would collide.
	for _, o := range []string{"ord-1", "ord-2", "ord-1-1", "ord", "1"} {
		add(ReservationID(o), "reservation "+o)
		add(PaymentID(o), "payment "+o)
		for v := int64(1); v <= 12; v++ {
			add(EventID(o, v), "event "+o+"@"+strconv.FormatInt(v, 10))
		}
		for _, s := range []Step{StepReserveInventory, StepAuthorizePayment, StepConfirm, StepReleaseInventory, StepFail} {
			add(StepSourceCommandID(o, s), "step "+o+" "+s.String())
		}
	}
	for _, k := range []string{"idem-1", "idem-2", "", "a very long idempotency key " + string(make([]byte, 4096))} {
		add(StartSourceCommandID(k), "start "+k)
	}
}

func TestStartSourceCommandIDShape(t *testing.T) {
	shape := regexp.MustCompile(`^start-[0-9a-f]{32}$`)
	for _, k := range []string{"", "k", "ключ/with spaces", string(make([]byte, 10000))} {
		id := StartSourceCommandID(k)
		assert.Regexp(t, shape, id, "StartSourceCommandID(%.20q)", k)
		assert.Equal(t, id, StartSourceCommandID(k), "StartSourceCommandID(%.20q) is stable", k)
	}
}

func TestCommandsUseTheDeterministicIDs(t *testing.T) {
	s := given(t, evStarted)
	ev, err := ReservationResult(s, true, "")
	require.NoError(t, err)
	r := ev.(InventoryReserved)
	require.Equal(t, ReservationID(oid), r.ReservationID)
	require.Equal(t, EventID(oid, 2), r.EventID)
	// The same state always yields the same event: a resumed workflow
	// sends the module the id the first attempt used.
	again, _ := ReservationResult(s, true, "")
	require.Equal(t, ev, again, "the second call gives the first call's event")
	s = given(t, evStarted, evReserved)
	ev, err = PaymentResult(s, true, "")
	require.NoError(t, err)
	p := ev.(PaymentAuthorized)
	require.Equal(t, PaymentID(oid), p.PaymentID)
	require.Equal(t, EventID(oid, 3), p.EventID)
}

func TestOrderIDForIsAKeyedFunctionOfTheKey(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	shape := regexp.MustCompile(`^ord-[0-9a-f]{32}$`)
	for _, k := range []string{"", "k", "idem-1", "ключ/with spaces", string(make([]byte, 10000))} {
		id := OrderIDFor(secret, k)
		assert.Regexp(t, shape, id, "OrderIDFor(%.20q)", k)
		assert.Len(t, id, OrderIDLen)
		assert.Equal(t, id, OrderIDFor(secret, k), "same key and secret, same OrderId")
		assert.Equal(t, id, OrderIDFor(append([]byte{}, secret...), k), "the secret's bytes decide, not its slice")
		assert.NotEqual(t, id, OrderIDFor([]byte("another cluster's secret"), k), "another secret, another OrderId")
	}
	// HMAC-SHA256 with key "key" over "The quick brown fox jumps over the
	// lazy dog" is f7bc83f430538424b13298e6aa6fb143ef4d59a1...
	assert.Equal(t, "ord-f7bc83f430538424b13298e6aa6fb143",
		OrderIDFor([]byte("key"), "The quick brown fox jumps over the lazy dog"))
	assert.NotEqual(t, OrderIDFor(secret, "idem-1"), OrderIDFor(secret, "idem-2"))
	// Not the bare hash of the key that StartSourceCommandID uses.
	assert.NotEqual(t, StartSourceCommandID("idem-1")[len("start-"):], OrderIDFor(secret, "idem-1")[len("ord-"):])
}
