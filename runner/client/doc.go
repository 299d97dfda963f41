// Package client is the ShoppingMall client (docs/contract.md, "Components"
// and "Scenarios"): Client/Scenario (Scenario: start, polling, duplicate,
// failure, rebuild and resume assertions, in that order) over the public
// order API of CommerceApi (API), configured by the Fixtures file the smoke
// runner writes. Client/Program is cmd/shoppingmall-client.
//
// It speaks only the public HTTP order API: POST /orders, GET
// /orders/{id} (and its bounded wait, API.WaitTerminal), continue and
// rebuild-projection. It never calls
// /self-check/* or /admin/*, never reads a store, and never learns where an
// order lives. It must not import edge, cluster, eventstore, readmodel,
// actors/commerce, actors/workflow, actors/grain or runner/... but the
// leaf runner/jsonfile (its results file): its one other project import
// is actors/contracts, whose typed codec it uses for every body.
package client
