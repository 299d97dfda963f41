package edge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// The compatibility level of the event schema (cluster/compat), for the
// operator of a rolling upgrade: GET /admin/schema shows the level, its
// history and what every member reads; POST /admin/schema/raise raises it
// once every live workflow member reads the new schema. The API's wiring
// mounts it on the admin listener with -admin.

// SchemaControl reads and raises the compatibility level against the
// live workflow members this API sees.
type SchemaControl interface {
	// SchemaStatus returns the level, its history and every published
	// member with the schema it reads.
	SchemaStatus(ctx context.Context) (compat.Report, error)
	// RaiseSchema raises the level to to, recorded as by at the caller's
	// clock (compat.Raise): raised false when it already was there. It
	// fails with a *compat.BehindError when a live workflow member does
	// not read to, compat.ErrNoWorkflowMembers with none live,
	// location.ErrSchemaLevelLower below the level and
	// location.ErrInvalidSchema below the base schema, writing nothing.
	RaiseSchema(ctx context.Context, to int, by string) (location.SchemaLevel, bool, error)
}

// SchemaAdmin is the compatibility level's Mount.
type SchemaAdmin struct {
	Control SchemaControl
}

// SchemaRaiseRequest is the body of POST /admin/schema/raise.
type SchemaRaiseRequest struct {
	// To is the level asked for.
	To int `json:"to"`
	// By names who raises it, recorded with the level; "operator" when
	// empty.
	By string `json:"by,omitempty"`
}

// SchemaRaiseReply is the reply of POST /admin/schema/raise: the level
// now, and whether this call raised it.
type SchemaRaiseReply struct {
	Level  location.SchemaLevel `json:"level"`
	Raised bool                 `json:"raised"`
}

// maxRaiser bounds the recorded raiser's name.
const maxRaiser = 128

// Mount implements Mount.
func (a SchemaAdmin) Mount(r AdminRouter) {
	r.Handle(http.MethodGet, "/admin/schema", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := r.Context(req)
		defer cancel()
		rep, err := a.Control.SchemaStatus(ctx)
		if err != nil {
			r.Fail(w, req, fmt.Errorf("schema status: %w", err))
			return
		}
		r.JSON(w, http.StatusOK, rep)
	})
	r.Handle(http.MethodPost, "/admin/schema/raise", func(w http.ResponseWriter, req *http.Request) {
		var body SchemaRaiseRequest
		if !r.DecodeJSON(w, req, &body) {
			return
		}
		body.By = strings.TrimSpace(body.By)
		var err error
		switch {
		case body.To < location.BaseSchema:
			err = invalidField("to", "must be a schema version, %d or above", location.BaseSchema)
		case len(body.By) > maxRaiser:
			err = invalidField("by", "must be at most %d bytes", maxRaiser)
		case body.By == "":
			body.By = "operator"
		}
		if err != nil {
			r.Fail(w, req, err)
			return
		}
		ctx, cancel := r.Context(req)
		defer cancel()
		lvl, raised, err := a.Control.RaiseSchema(ctx, body.To, body.By)
		if err != nil {
			r.Fail(w, req, schemaRefusal(body.To, lvl.Level, err))
			return
		}
		r.JSON(w, http.StatusOK, SchemaRaiseReply{Level: lvl, Raised: raised})
	})
}

// errSchemaRefused: a raise of the level that cannot be done as asked;
// *schemaRefused says why in the operator's words.
var errSchemaRefused = errkind.New(errkind.FailedPrecondition, "edge: schema raise refused")

// schemaRefused is a refused raise with the message the admin reply
// carries: node names and schema versions, which the admin listener may
// show, never addresses or store errors.
type schemaRefused struct {
	msg string
	err error
}

func (e *schemaRefused) Error() string { return e.msg + ": " + e.err.Error() }
func (e *schemaRefused) Unwrap() []error {
	return []error{errSchemaRefused, e.err}
}

// schemaRefusal turns a refused raise into its reply's words (level is
// the level the store answered with, 0 if none); any other error (a
// store that did not answer) passes as it is.
func schemaRefusal(to, level int, err error) error {
	var behind *compat.BehindError
	switch {
	case errors.As(err, &behind):
		names := make([]string, 0, len(behind.Behind))
		for _, m := range behind.Behind {
			name := m.Node
			if name == "" {
				name = "a member without a published name"
			}
			names = append(names, fmt.Sprintf("%s reads up to %d", name, m.Schema))
		}
		return &schemaRefused{err: err, msg: fmt.Sprintf("schema %d is not read by every live workflow member (%s): deploy a build that reads it to every workflow member first; nothing was changed",
			to, strings.Join(names, ", "))}
	case errors.Is(err, compat.ErrNoWorkflowMembers):
		return &schemaRefused{err: err, msg: "no live workflow member to check the schema against; nothing was changed"}
	case errors.Is(err, location.ErrSchemaLevelLower):
		now := "above " + strconv.Itoa(to)
		if level > to {
			now = strconv.Itoa(level)
		}
		return &schemaRefused{err: err, msg: fmt.Sprintf("the compatibility level is %s and never drops: orders may hold events of the higher schema, which members of an older build cannot read; nothing was changed", now)}
	}
	return err
}
