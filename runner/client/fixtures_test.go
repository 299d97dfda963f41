package client_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
)

func example(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "fixtures.json"))
	require.NoError(t, err)
	return b
}

func TestDecodeFixturesExample(t *testing.T) {
	fx, err := client.DecodeFixtures(example(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"http://127.0.0.1:8081", "http://127.0.0.1:8082"}, fx.APIs)
	assert.Equal(t, int64(4870), fx.Catalog.SuccessAmount)
	assert.Equal(t, "ord-p", fx.Prepared.PendingMapping.OrderID)
	st, err := fx.Prepared.Interrupted.ExpectedState()
	require.NoError(t, err)
	assert.Equal(t, contracts.OrderStatus_InventoryReserved, st.GetStatus())
	assert.Equal(t, "rsv-ord-i", st.GetReservationId())
	assert.Nil(t, st.PaymentId, "an absent optional field stays absent")
	none, err := fx.Prepared.Relocated.ExpectedState()
	require.NoError(t, err)
	assert.Nil(t, none)
	assert.Equal(t, client.Poll{IntervalMs: 100, Attempts: 300}, fx.Poll)
}

func TestDecodeFixturesIsStrict(t *testing.T) {
	good := string(example(t))
	for name, b := range map[string]string{
		"unknown field":  strings.Replace(good, `"runId"`, `"ownerNode": "workflow-a", "runId"`, 1),
		"trailing data":  good + "{}",
		"not an object":  `[]`,
		"bad state enum": strings.Replace(good, `"status":"InventoryReserved"`, `"status":"Parked"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := client.DecodeFixtures([]byte(b))
			require.ErrorIs(t, err, client.ErrInvalidFixtures)
		})
	}
}

func TestDecodeFixturesReportsEveryProblem(t *testing.T) {
	_, err := client.DecodeFixtures([]byte(`{"apis":["ftp://x"],"prepared":{"closed":{"orderId":"a","state":{"orderId":"b","status":"Confirmed","updatedAtUnixMs":1}}}}`))
	require.ErrorIs(t, err, client.ErrInvalidFixtures)
	for _, want := range []string{
		"want at least 2", `apis[0]: "ftp://x"`, "runId is empty", "catalog.successCartId is empty",
		"catalog.successAmount 0", "prepared.pendingMapping.orderId is empty", "prepared.interrupted.state is missing",
		`prepared.closed.state is of order "b", not "a"`, "prepared.neverCreated.orderId is empty",
	} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestDecodeFixturesDefaultsPoll(t *testing.T) {
	b := strings.Replace(string(example(t)), `"poll": {"intervalMs": 100, "attempts": 300},`, "", 1)
	fx, err := client.DecodeFixtures([]byte(b))
	require.NoError(t, err)
	assert.Equal(t, client.DefaultPoll, fx.Poll)
}

func TestFixturesRoundTrip(t *testing.T) {
	fx, err := client.DecodeFixtures(example(t))
	require.NoError(t, err)
	st := &contracts.OrderState{OrderId: "ord-x", Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: 7}
	fx.Prepared.Closed, err = client.Expected{OrderID: "ord-x"}.WithState(st)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "fixtures.json")
	require.NoError(t, jsonfile.Write(path, fx))
	back, err := client.LoadFixtures(path)
	require.NoError(t, err)
	assert.Equal(t, fx.APIs, back.APIs)
	assert.Equal(t, fx.Prepared.PendingMapping, back.Prepared.PendingMapping)
	got, err := back.Prepared.Closed.ExpectedState()
	require.NoError(t, err)
	assert.Equal(t, "ord-x", got.GetOrderId())
	assert.Equal(t, contracts.OrderStatus_Confirmed, got.GetStatus())
	assert.Equal(t, int64(7), got.GetUpdatedAtUnixMs())

	res := client.Results{Orders: map[string]string{client.CaseSuccess: "ord-s"}, Concurrent: []string{"a", "b"}}
	rpath := filepath.Join(t.TempDir(), "results.json")
	require.NoError(t, jsonfile.Write(rpath, res))
	rback, err := client.LoadResults(rpath)
	require.NoError(t, err)
	assert.Equal(t, res, rback)
}
