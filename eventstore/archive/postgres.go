package archive

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Defaults of Config.
const (
	DefaultMaxConns         = 8
	DefaultStatementTimeout = 5 * time.Second
	DefaultCallTimeout      = 10 * time.Second
)

// Config configures Open.
type Config struct {
	// URL is the archive's PostgreSQL URL (postgres://...). Required.
	URL string
	// MaxConns bounds the connection pool; 0 is DefaultMaxConns.
	MaxConns int32
	// StatementTimeout bounds each statement on the server
	// (statement_timeout); 0 is DefaultStatementTimeout.
	StatementTimeout time.Duration
	// CallTimeout bounds each call on this side, connecting included: a
	// stalled server, which no statement timeout reaches, answers
	// ErrUnavailable after it. 0 is DefaultCallTimeout.
	CallTimeout time.Duration
}

// Postgres is Store on PostgreSQL. It is safe for concurrent use.
type Postgres struct {
	pool    *pgxpool.Pool
	timeout time.Duration
}

var _ Store = (*Postgres)(nil)

// Open connects to cfg.URL and applies the archive's migrations that the
// database lacks (under PostgreSQL's advisory lock, so processes opening
// at once apply each once). It fails with ErrConfig for a bad Config or a
// database whose schema is newer than this build's, and with
// ErrUnavailable when the server cannot be reached: a process given an
// archive refuses to start without it.
func Open(ctx context.Context, cfg Config) (*Postgres, error) {
	if cfg.URL == "" {
		return nil, fmt.Errorf("%w: URL is required", ErrConfig)
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: URL: %w", ErrConfig, err)
	}
	pc.MaxConns = cfg.MaxConns
	if pc.MaxConns <= 0 {
		pc.MaxConns = DefaultMaxConns
	}
	st := cfg.StatementTimeout
	if st <= 0 {
		st = DefaultStatementTimeout
	}
	pc.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(st.Milliseconds(), 10)
	p := &Postgres{timeout: cfg.CallTimeout}
	if p.timeout <= 0 {
		p.timeout = DefaultCallTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if p.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, translate("open", err)
	}
	if err := p.migrate(ctx); err != nil {
		p.pool.Close()
		return nil, err
	}
	return p, nil
}

// migrate applies the embedded migrations the database lacks.
func (p *Postgres) migrate(ctx context.Context) error {
	src, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(p.pool)
	defer db.Close()
	// A process that finds the lock taken tries again every second, up
	// to its call's timeout: another is applying the same migrations.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, uint64(max(p.timeout/time.Second, 1))))
	if err != nil {
		return err
	}
	prov, err := goose.NewProvider(goose.DialectPostgres, db, src, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("%w: migrations: %w", ErrConfig, err)
	}
	if _, err := prov.Up(ctx); err != nil {
		return translate("migrate", err)
	}
	have, err := prov.GetDBVersion(ctx)
	if err != nil {
		return translate("schema version", err)
	}
	if want := SchemaVersion(); have != want {
		return fmt.Errorf("%w: the archive's schema is at version %d, this build's at %d", ErrConfig, have, want)
	}
	return nil
}

// SchemaVersion is the version of the newest migration this build holds.
func SchemaVersion() int64 {
	entries, _ := fs.ReadDir(migrations, "migrations")
	var v int64
	for _, e := range entries {
		var n int64
		if _, err := fmt.Sscanf(e.Name(), "%d_", &n); err == nil && n > v {
			v = n
		}
	}
	return v
}

// Close closes the pool.
func (p *Postgres) Close() { p.pool.Close() }

// storedEvent is an event as the events column spells it.
type storedEvent struct {
	Version         int64  `json:"version"`
	EventID         string `json:"eventId"`
	EventType       string `json:"eventType"`
	SourceCommandID string `json:"sourceCommandId,omitempty"`
	CreatedAtUnixMs int64  `json:"createdAtUnixMs"`
	Schema          int    `json:"schema"`
	FenceGeneration int64  `json:"fenceGeneration,omitempty"`
	FenceEpoch      int64  `json:"fenceEpoch,omitempty"`
	Data            string `json:"data"`
}

func encodeEvents(evs []eventstore.Envelope) ([]byte, error) {
	out := make([]storedEvent, len(evs))
	for i, e := range evs {
		out[i] = storedEvent{
			Version: e.Version, EventID: e.EventID, EventType: e.EventType, SourceCommandID: e.SourceCommandID,
			CreatedAtUnixMs: e.CreatedAtUnixMs, Schema: e.Schema, FenceGeneration: e.FenceGeneration,
			FenceEpoch: e.FenceEpoch, Data: string(e.Data),
		}
	}
	return json.Marshal(out)
}

func decodeEvents(orderID string, raw []byte) ([]eventstore.Envelope, error) {
	var in []storedEvent
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("archive: events of %s: %w", orderID, err)
	}
	out := make([]eventstore.Envelope, len(in))
	for i, e := range in {
		out[i] = eventstore.Envelope{
			EventID: e.EventID, OrderID: orderID, EventType: e.EventType, Version: e.Version,
			SourceCommandID: e.SourceCommandID, CreatedAtUnixMs: e.CreatedAtUnixMs, Data: []byte(e.Data),
			Schema: e.Schema, FenceGeneration: e.FenceGeneration, FenceEpoch: e.FenceEpoch,
		}
	}
	return out, nil
}

// digest is the SHA-256 of everything Put writes: two records with one
// digest are the same record.
func digest(r Record, events []byte) []byte {
	h := sha256.New()
	for _, part := range [][]byte{
		[]byte(r.OrderID), []byte(r.Status), []byte(strconv.FormatInt(r.Generation, 10)),
		[]byte(strconv.FormatInt(r.TerminalAtUnixMs, 10)), r.FinalState, events,
	} {
		// Each part with its length, so that no two splits of the same
		// bytes collide.
		h.Write([]byte(strconv.Itoa(len(part)) + ":"))
		h.Write(part)
	}
	return h.Sum(nil)
}

// Put implements Store: one INSERT that does nothing for an archived
// order, then, when it did nothing, a comparison with the stored digest.
func (p *Postgres) Put(ctx context.Context, r Record) error {
	if err := r.check(); err != nil {
		return err
	}
	// The events column leaves each event's order id out (it is the
	// row's), so the caller's events are encoded as they are.
	events, err := encodeEvents(r.Events)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	sum := digest(r, events)
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	tag, err := p.pool.Exec(ctx, `INSERT INTO archived_orders
		(order_id, status, generation, version, terminal_at, final_state, events, digest)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (order_id) DO NOTHING`,
		r.OrderID, r.Status, r.Generation, r.Version(), time.UnixMilli(r.TerminalAtUnixMs).UTC(), r.FinalState, string(events), sum)
	if err != nil {
		return translate("put "+r.OrderID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var stored []byte
	if err := p.pool.QueryRow(ctx, `SELECT digest FROM archived_orders WHERE order_id = $1`, r.OrderID).Scan(&stored); err != nil {
		return translate("put "+r.OrderID, err)
	}
	if string(stored) != string(sum) {
		return fmt.Errorf("%w: order %s", ErrConflict, r.OrderID)
	}
	return nil
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, orderID string) (Record, error) {
	if orderID == "" {
		return Record{}, fmt.Errorf("%w: orderId is empty", ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	r := Record{OrderID: orderID}
	var terminal time.Time
	var events []byte
	err := p.pool.QueryRow(ctx, `SELECT status, generation, terminal_at, final_state, events::text
		FROM archived_orders WHERE order_id = $1`, orderID).Scan(&r.Status, &r.Generation, &terminal, &r.FinalState, &events)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, orderID)
	}
	if err != nil {
		return Record{}, translate("get "+orderID, err)
	}
	r.TerminalAtUnixMs = terminal.UnixMilli()
	if r.Events, err = decodeEvents(orderID, events); err != nil {
		return Record{}, err
	}
	return r, nil
}

// Load implements Store.
func (p *Postgres) Load(ctx context.Context, orderID string) ([]eventstore.Envelope, error) {
	r, err := p.Get(ctx, orderID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r.Events, nil
}

// translate maps the driver's errors to the archive's, once, here. An
// answer of the server is an error of its own (a failed constraint, a
// bad statement), except those that say it cannot serve now (a statement
// cancelled by its timeout, a shutdown, too many connections); anything
// that is no answer (a refused or broken connection, this side's
// deadline) is ErrUnavailable.
func translate(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 57014 query_canceled (statement_timeout), 57P01-03 a shutdown
		// or a server not accepting connections yet, 53300
		// too_many_connections, class 08 a connection exception.
		switch c := pgErr.Code; {
		case c == "57014", c == "57P01", c == "57P02", c == "57P03", c == "53300", strings.HasPrefix(c, "08"):
			return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
		}
		return fmt.Errorf("archive: %s: %w", op, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}

// Count returns how many orders the archive holds.
func (p *Postgres) Count(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var n int64
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM archived_orders`).Scan(&n); err != nil {
		return 0, translate("count", err)
	}
	return n, nil
}
