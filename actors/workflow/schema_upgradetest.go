//go:build upgradetest

package workflow

import (
	"encoding/json"
	"errors"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
)

// SchemaVersion of the upgradetest build: schema 2, which adds the
// optional field salesChannel to OrderStartedEvent. It is the newer build
// of the upgrade proof (runner/localcluster/upgradetest), built from this
// tree with `-tags upgradetest`; no release carries it.
//
// The field lives outside the generated contract message, as a field
// another build added would: this build writes it into the body, its
// upcaster gives older bodies a value, and it reads it back through the
// tolerant reader (contracts.UnmarshalStoredJSON), which the strictreader
// build turns off.
const SchemaVersion = 2

// salesChannel is schema 2's field; web is what this build writes,
// unknown what the upcaster gives an order started under schema 1.
const (
	salesChannel        = "salesChannel"
	salesChannelWeb     = `"web"`
	salesChannelUnknown = `"unknown"`
)

var (
	buildUpcasters = []Upcaster{{From: 1, EventType: order.TypeOrderStarted, Up: func(body map[string]json.RawMessage) error {
		if _, ok := body[salesChannel]; !ok {
			body[salesChannel] = json.RawMessage(salesChannelUnknown)
		}
		return nil
	}}}
	// At a level below 2 the field is not written: a schema-1 reader
	// would drop it.
	buildDowncasters = []Downcaster{{From: 2, EventType: order.TypeOrderStarted, Down: func(body map[string]json.RawMessage) error {
		delete(body, salesChannel)
		return nil
	}}}
)

// addBuildFields writes salesChannel into every OrderStartedEvent body.
func addBuildFields(eventType string, data []byte) []byte {
	if eventType != order.TypeOrderStarted || len(data) < 2 || data[len(data)-1] != '}' {
		return data
	}
	out := append([]byte(nil), data[:len(data)-1]...)
	if len(data) > 2 {
		out = append(out, ',')
	}
	return append(append(out, `"`+salesChannel+`":`+salesChannelWeb...), '}')
}

// checkBuildFields requires, from a schema-2 codec, salesChannel on every
// OrderStartedEvent it decodes: a body written under schema 1 has it only
// through the upcaster, so an upcaster that did not run fails here.
func checkBuildFields(schema int, eventType string, data []byte) error {
	if schema < 2 || eventType != order.TypeOrderStarted {
		return nil
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(data, &body); err != nil {
		return err
	}
	if len(body[salesChannel]) == 0 {
		return errors.New("schema 2 requires " + salesChannel)
	}
	return nil
}
