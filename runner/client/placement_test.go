package client_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

// docs/contract.md, "Nobody chooses the owner": the caller configuration,
// the message fields and the idempotency reservation carry no owner node,
// physical endpoint or fixed-node choice. A name holding any of these words
// is one.
var placementWords = []string{"node", "owner", "endpoint", "address", "host", "member", "pid"}

// notPlacement are names that contain a word above without meaning
// placement.
var notPlacement = map[string]bool{
	"shippingaddressid": true, // where the parcel goes, not where the order runs
}

// operatorRelocation lists the only node names the contracts may carry:
// the planned relocation operation (docs/contract.md,
// "Planned relocation resumes at payment"), an admin command whose reply
// reports where the order moved and which may name a target. It is not part
// of the order API (docs/contract.md, "Operator messages") and no client or
// order message uses it.
var operatorRelocation = map[string]bool{
	"shoppingmall.contracts.v1.RelocateOrderReq.targetNode": true,
	"shoppingmall.contracts.v1.RelocateOrderRes.sourceNode": true,
	"shoppingmall.contracts.v1.RelocateOrderRes.targetNode": true,
}

func placementWord(name string) string {
	n := strings.ToLower(name)
	if notPlacement[n] {
		return ""
	}
	for _, w := range placementWords {
		if strings.Contains(n, w) {
			return w
		}
	}
	return ""
}

func TestPlacementWordDetector(t *testing.T) {
	for _, n := range []string{"ownerNode", "targetNode", "EndpointURL", "remoteAddress", "Host", "memberId", "ownerPid", "workflowPID"} {
		assert.NotEmpty(t, placementWord(n), n)
	}
	for _, n := range []string{"shippingAddressId", "ShippingAddressID", "paymentId", "orderId", "reservationId", "APIs"} {
		assert.Empty(t, placementWord(n), n)
	}
}

func TestContractMessagesCarryNoPlacement(t *testing.T) {
	files := []protoreflect.FileDescriptor{
		contracts.File_actors_contracts_shoppingmall_proto,
		contracts.File_actors_contracts_operations_proto,
	}
	var walk func(protoreflect.MessageDescriptors)
	seen := 0
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			m := ms.Get(i)
			fields := m.Fields()
			for j := range fields.Len() {
				f := fields.Get(j)
				seen++
				full := string(f.FullName())
				if !operatorRelocation[full] {
					assert.Empty(t, placementWord(string(f.Name())), "%s: a message must not name an owner node or endpoint", full)
				}
			}
			walk(m.Messages())
		}
	}
	for _, fd := range files {
		walk(fd.Messages())
	}
	assert.Greater(t, seen, 80, "the walk must see the contract's fields")
	// The exception list names real fields, so it cannot silently widen.
	for full := range operatorRelocation {
		d, err := findField(files, full)
		assert.NoError(t, err, full)
		assert.NotNil(t, d, full)
	}
}

func findField(files []protoreflect.FileDescriptor, full string) (protoreflect.FieldDescriptor, error) {
	i := strings.LastIndexByte(full, '.')
	msg, field := protoreflect.FullName(full[:i]), protoreflect.Name(full[i+1:])
	for _, fd := range files {
		if m := fd.Messages().ByName(msg.Name()); m != nil && m.FullName() == msg {
			return m.Fields().ByName(field), nil
		}
	}
	return nil, nil
}

// goFields checks every field name and JSON name of t and of the structs
// it holds, recursively.
func goFields(t *testing.T, typ reflect.Type, path string, visited map[reflect.Type]bool) int {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map || typ.Kind() == reflect.Array {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || visited[typ] || typ.PkgPath() == "encoding/json" {
		return 0
	}
	visited[typ] = true
	n := 0
	for i := range typ.NumField() {
		f := typ.Field(i)
		n++
		jsonName, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		for _, name := range []string{f.Name, jsonName} {
			assert.Empty(t, placementWord(name), "%s.%s (%q): the caller must not know or choose where an order lives", path, f.Name, name)
		}
		n += goFields(t, f.Type, path+"."+f.Name, visited)
	}
	return n
}

func TestClientConfigurationCarriesNoPlacement(t *testing.T) {
	n := goFields(t, reflect.TypeFor[client.Fixtures](), "Fixtures", map[reflect.Type]bool{})
	n += goFields(t, reflect.TypeFor[client.Results](), "Results", map[reflect.Type]bool{})
	assert.Greater(t, n, 20, "the walk must reach the nested fixture structs")
}

func TestIdempotencyReservationCarriesNoPlacement(t *testing.T) {
	n := goFields(t, reflect.TypeFor[commerce.Mapping](), "commerce.Mapping", map[reflect.Type]bool{})
	assert.Equal(t, reflect.TypeFor[commerce.Mapping]().NumField(), n)
}

func TestFixturesFileNamesNoWorkflowNode(t *testing.T) {
	// The file the runner writes holds public API URLs and order ids only.
	b := strings.ToLower(string(example(t)))
	for _, w := range []string{"workflow-a", "workflow-b", "node", "member", "owner"} {
		assert.NotContains(t, b, w)
	}
}
