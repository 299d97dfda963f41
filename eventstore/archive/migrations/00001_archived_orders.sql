-- One row per finished order: its whole history and its final state,
-- written once by the archiver and never changed.
--
-- events is a JSON array, one object per event in stream order: version,
-- eventId, eventType, sourceCommandId, createdAtUnixMs, schema, and data,
-- the event's body as the hot stream held it, as a string. digest is the
-- SHA-256 of the row's content (archive.Record.digest): a repeated write
-- compares it to tell the same history from another one.

-- +goose Up
CREATE TABLE archived_orders (
    order_id    text        PRIMARY KEY,
    status      text        NOT NULL,
    generation  bigint      NOT NULL CHECK (generation >= 0),
    version     bigint      NOT NULL CHECK (version >= 1),
    terminal_at timestamptz NOT NULL,
    final_state bytea       NOT NULL,
    events      jsonb       NOT NULL,
    digest      bytea       NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now()
);
-- By status and time (the orders that failed last week), and by time alone
-- (what the archive holds from a day): the read side's lookups besides the id.
CREATE INDEX archived_orders_status_terminal_at ON archived_orders (status, terminal_at);
CREATE INDEX archived_orders_terminal_at ON archived_orders (terminal_at);

-- +goose Down
DROP TABLE archived_orders;
