// Package scaletest proves with real processes that placement spreads
// orders over many workflow members: a local cluster of six order-workflow
// and three commerce-api processes takes 1,000 orders through the public
// API, and the Location Store's records show every workflow member owning
// some and none more than twice its fair share. It prints the orders per
// member as FIGURE lines. It holds only tests.
//
// It owns the cluster it starts (runner/localcluster, in a test's
// temporary directory, every process stopped by PID) and nothing else. It
// drives the cluster through the public HTTP API and reads the Location
// Store directly only to find each order's owner.
//
// It must not import edge, actors/node or the actor runtime: nothing of
// the system runs inside the test binary.
package scaletest
