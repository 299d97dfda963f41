package workflowtest_test

import (
	"testing"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/commerce/commercetest"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/eventstoretest"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
)

// Every fake passes the contract suite its Redis store passes, so tests
// above the stores learn nothing from a fake that Redis would not do.

func TestEventsContract(t *testing.T) {
	eventstoretest.RunContract(t, func(*testing.T) eventstore.Store { return workflowtest.NewEvents() })
}

func TestReadModelContract(t *testing.T) {
	readmodeltest.RunContract(t, func(*testing.T) readmodel.Store { return workflowtest.NewReadModel() })
}

func TestCommitterContract(t *testing.T) {
	readmodeltest.RunProjectedAppendContract(t, func(*testing.T) readmodeltest.Projected {
		p := workflowtest.NewDeps().Commits
		return readmodeltest.Projected{Append: p, Events: p.Events, ReadModel: p.ReadModel}
	})
}

func TestIdempotencyContract(t *testing.T) {
	commercetest.RunIdempotencyContract(t, func(*testing.T) commerce.Idempotency { return workflowtest.NewIdempotency() })
}

func TestInventoryContract(t *testing.T) {
	commercetest.RunInventoryContract(t, func(*testing.T) commerce.Inventory { return workflowtest.NewInventory() })
}

func TestPaymentContract(t *testing.T) {
	commercetest.RunPaymentContract(t, func(*testing.T) commerce.Payment { return workflowtest.NewPayment() })
}

func TestTerminalWatcherContract(t *testing.T) {
	readmodeltest.RunTerminalContract(t, func(*testing.T) readmodeltest.Watched {
		p := workflowtest.NewDeps().Commits
		return readmodeltest.Watched{ReadModel: p.ReadModel, Watcher: p.ReadModel, Append: p, Events: p.Events}
	})
}
