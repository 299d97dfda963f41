// Package upgradetest proves with real processes that a rolling upgrade of
// the event schema, and a rollback before or after the compatibility
// level is raised, wedges no order and repeats no external effect: one
// local cluster (runner/localcluster) runs two builds of this tree side
// by side, the release build and the one tagged upgradetest (schema 2,
// one more optional event field, its upcaster and downcaster:
// actors/workflow/schema_upgradetest.go), each member from a binary of
// its own. A third schedule runs the same steps on the builds tagged
// strictreader, whose stored-body reader refuses a field it does not
// know, and must fail: the proof can fail.
//
// Its tests carry the upgradetest tag themselves, so that the test reads
// and folds the streams of both schemas (make upgrade-test). It holds
// only tests and must not be imported.
package upgradetest
