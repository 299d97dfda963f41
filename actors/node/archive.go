package node

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/archiver"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// ArchiverConfig is a workflow member's archiver: how long a finished
// order stays hot.
type ArchiverConfig struct {
	// Retention is the grace after an order's terminal event; above 0.
	Retention time.Duration
	// Owner names the archiver in the finished list's shard leases: the
	// member's id.
	Owner  string
	Logger *slog.Logger
}

// NewArchiver returns the archiver over st's Redis stores and the
// archive. The stores must be NewStores' own, built with
// StoreOptions.IndexFinished, so that terminal orders are listed.
func NewArchiver(st *Stores, arch archive.Store, cfg ArchiverConfig) (*archiver.Archiver, error) {
	events, ok1 := st.Events.(*eventstore.Redis)
	records, ok2 := st.ReadModel.(*readmodel.Redis)
	relocations, ok3 := st.Relocation.(*relocation.Redis)
	if !ok1 || !ok2 || !ok3 || st.Locations == nil || st.Commerce == nil {
		return nil, fmt.Errorf("%w: the archiver needs the Redis stores", archiver.ErrConfig)
	}
	return archiver.New(archiver.Config{
		Events: events, Records: records, Modules: st.Commerce, Locations: st.Locations, Relocations: relocations,
		Archive: arch, Kind: grain.KindName, Retention: cfg.Retention, Owner: cfg.Owner, Logger: cfg.Logger,
	})
}

// NewCold returns the cold tier's answers for archived orders
// (archiver.Cold) over st's event store and the archive: what an API
// answers rebuild-projection and the timeline of an archived order with.
func NewCold(st *Stores, arch archive.Store) (*archiver.Cold, error) {
	events, ok := st.Events.(*eventstore.Redis)
	if !ok {
		return nil, fmt.Errorf("%w: archived orders are answered from the Redis event store's sealed records", archiver.ErrConfig)
	}
	return archiver.NewCold(events, arch)
}
