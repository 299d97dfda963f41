package telemetry

import (
	"net/http"
	"net/http/pprof"
)

// PprofPrefix is the path Pprof's handler expects to be mounted at: its
// index links and profile names are relative to it.
const PprofPrefix = "/debug/pprof/"

// Pprof returns net/http/pprof's handlers (the index, every runtime
// profile by name, cmdline, profile, symbol, trace) for requests under
// PprofPrefix, whatever the method. Mount it on a process's private
// listener only, behind its token: a profile shows the process's code
// and memory, and a CPU profile or trace costs CPU while it runs.
// (Importing net/http/pprof also registers these on
// http.DefaultServeMux, which no listener of this module serves.)
func Pprof() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(PprofPrefix, pprof.Index)
	mux.HandleFunc(PprofPrefix+"cmdline", pprof.Cmdline)
	mux.HandleFunc(PprofPrefix+"profile", pprof.Profile)
	mux.HandleFunc(PprofPrefix+"symbol", pprof.Symbol)
	mux.HandleFunc(PprofPrefix+"trace", pprof.Trace)
	return mux
}
