// Package edge owns CommerceApi, the stateless HTTP edge of the sample
// (docs/contract.md, "Roles", "Directions and completion",
// "Start and success", "Duplicate start and resume" and
// "Lookup and projection rebuild"): input validation, the idempotency
// mapping of StartOrderReq, order commands sent to the order's grain by its
// OrderId, read-model lookups (and the bounded wait for an order's outcome,
// wait.go), the readiness evidence (docs/contract.md, "Readiness lines"),
// and — only when enabled — the operator's /admin/ endpoints. The runner's
// /self-check/ hooks are not here: they live in edge/selfcheck, which the
// API's wiring mounts (Mount) on the admin listener only when enabled.
//
// It never changes an order's event stream or projection itself; the
// grain does. Every store and the grain client are reached through the
// consumer-side interfaces declared in this package (Idempotency, Carts,
// ReadModel, TerminalWatcher, Orders, Streams, Operator, Topology,
// MemberNames, and the Stuck and Timeline dependencies). It imports the store packages only for their
// value types: it must not construct a store, open a Redis client or
// import another store implementation; edge/edgenode does the wiring. It classifies other
// packages' errors by their kind (errkind) in httpError, never by their
// sentinels.
//
// It serves two handlers on two listeners: the public order API, and the
// admin surface (/admin/, mounts, /debug/pprof/), which exists only
// on its own listener and only behind the admin bearer token. On both, a
// known path asked with another method is 405 METHOD_NOT_ALLOWED with an
// Allow header and an unknown path 404 NOT_FOUND; the admin listener
// answers either only past the token, and 401 before it whatever the
// path or method, so that its routes are not revealed.
//
// Bodies are the contract messages' JSON written and read by
// actors/contracts (never encoding/json on generated types). Routing is
// gin in release mode; handlers are plain http.HandlerFuncs reading the
// path value, so the framework stays at the edge of the edge.
//
// Every request of the public listener is first admitted by the in-flight
// budget of its route kind or shed at once as 503 OVERLOADED
// (admission.go); /healthz, /readyz and the admin listener are never
// shed. Then every request of both listeners runs one middleware chain
// (Server's middleware): its X-Request-Id (the client's when sane, else a fresh
// one) is echoed and carried in its context (RequestID; LogHandler adds
// it to every line logged with that context), it is counted in the HTTP
// metrics of the process's telemetry.Registry under its route template,
// and it gets one access log line. 503 and 504 answers are counted by
// reason where every error reply is written (writeError).
package edge
