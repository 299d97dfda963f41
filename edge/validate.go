package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// Input bounds. Ids travel into Redis keys, hash tags and evidence lines,
// so they are short, printable and free of the hash-tag braces.
const (
	// MaxBody is the largest request body accepted (64 KiB).
	MaxBody = 64 << 10
	// MaxIDLen bounds every id and key, in characters.
	MaxIDLen = 128
	// MaxLines bounds the lines of an orderable cart.
	MaxLines = 100
	// MaxQuantity bounds one line's quantity.
	MaxQuantity = 10_000
)

// readBody reads the whole body, refusing more than MaxBody bytes before
// reading when the length is declared and while reading when it is not.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxBody {
		return nil, ErrPayloadTooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, ErrPayloadTooLarge
	case err != nil:
		return nil, invalidField("body", "cannot be read")
	}
	return b, nil
}

var unknownField = regexp.MustCompile(`unknown field "([^"]*)"`)

// emptyBody says whether a route accepts an empty body.
type emptyBody bool

const (
	// bodyRequired: an empty body is not valid JSON, so it is refused.
	bodyRequired emptyBody = false
	// bodyOptional: an empty body means the empty message (no options).
	bodyOptional emptyBody = true
)

// decodeContract reads body strictly into m (unknown fields, duplicate
// fields, wrong types and trailing data are errors).
func decodeContract(body []byte, m proto.Message, empty emptyBody) error {
	if empty == bodyOptional && len(bytes.TrimSpace(body)) == 0 {
		proto.Reset(m)
		return nil
	}
	if err := contracts.UnmarshalJSON(body, m); err != nil {
		name := string(m.ProtoReflect().Descriptor().Name())
		if sub := unknownField.FindStringSubmatch(err.Error()); sub != nil && checkID("field", sub[1]) == nil {
			return invalidField(sub[1], "is not a field of %s", name)
		}
		return invalidField("body", "is not one valid %s JSON object: %s", name, detail(err))
	}
	return nil
}

// decodeJSON reads body strictly into v, for the hooks' own small bodies
// (not contract messages).
func decodeJSON(body []byte, v any, empty emptyBody) error {
	if empty == bodyOptional && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidField("body", "is not one valid JSON object: %s", detail(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalidField("body", "has data after the JSON object")
	}
	return nil
}

// detail shortens a decoder's message; it describes the client's own
// input, never server state.
func detail(err error) string {
	s := strings.TrimPrefix(err.Error(), contracts.ErrInvalidJSON.Error()+": ")
	if len(s) > 160 {
		s = s[:160]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

// checkID validates an id or key named field.
func checkID(field, v string) error {
	switch {
	case v == "":
		return invalidField(field, "is required")
	case !utf8.ValidString(v):
		return invalidField(field, "is not valid UTF-8")
	case utf8.RuneCountInString(v) > MaxIDLen:
		return invalidField(field, "is longer than %d characters", MaxIDLen)
	case strings.TrimSpace(v) == "":
		return invalidField(field, "is blank")
	case strings.ContainsAny(v, "{}"):
		return invalidField(field, "must not contain '{' or '}'")
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return invalidField(field, "must not contain control characters")
	}
	return nil
}

// checkOptionalID validates an id that may be empty.
func checkOptionalID(field, v string) error {
	if v == "" {
		return nil
	}
	return checkID(field, v)
}

// HeaderIdempotencyKey carries a start's idempotency key as an
// alternative to the body's idempotencyKey, which the spec's client keeps
// sending. Either may be given, or both when they are the same key.
const HeaderIdempotencyKey = "Idempotency-Key"

// decodeStartOrder is the whole input check of POST /orders: strict decode,
// the Idempotency-Key header of h folded into the body's key, then every
// field. The key is settled here, once, so that everything after it (the
// fingerprint, the OrderId, the mapping, the sourceCommandId) reads
// req.IdempotencyKey and cannot tell, nor diverge on, how the client sent
// it.
func decodeStartOrder(body []byte, h http.Header) (*contracts.StartOrderReq, error) {
	req := &contracts.StartOrderReq{}
	if err := decodeContract(body, req, bodyRequired); err != nil {
		return nil, err
	}
	if err := foldIdempotencyKey(req, h); err != nil {
		return nil, err
	}
	if err := validateStartOrder(req); err != nil {
		return nil, err
	}
	return req, nil
}

// foldIdempotencyKey gives req the key of the Idempotency-Key header when
// its body has none. The header's value is the key as sent, under the
// body field's rules: a key is one string whichever way it travels, so a
// retry that switches between the two reaches the same order. Two keys
// for one request, as two header values or as a header and a body that
// differ, are refused rather than one picked: the client would not know
// which order it got.
func foldIdempotencyKey(req *contracts.StartOrderReq, h http.Header) error {
	vs := h.Values(HeaderIdempotencyKey)
	switch {
	case len(vs) == 0:
		return nil
	case len(vs) > 1:
		return invalidField(HeaderIdempotencyKey, "is given %d times; send it once", len(vs))
	case vs[0] == "":
		return invalidField(HeaderIdempotencyKey, "is empty")
	}
	key := vs[0]
	if err := checkID(HeaderIdempotencyKey, key); err != nil {
		return err
	}
	switch req.IdempotencyKey {
	case "":
		req.IdempotencyKey = key
	case key:
	default:
		return invalidField(HeaderIdempotencyKey, "differs from the body's idempotencyKey; send one key, or the same key in both")
	}
	return nil
}

func validateStartOrder(req *contracts.StartOrderReq) error {
	for _, f := range []struct{ name, v string }{
		{"cartId", req.GetCartId()},
		{"shippingAddressId", req.GetShippingAddressId()},
		{"paymentMethodId", req.GetPaymentMethodId()},
		{"idempotencyKey", req.GetIdempotencyKey()},
	} {
		if err := checkID(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// checkCart refuses a cart snapshot that cannot become an order; the
// client chose the cart, so the error names cartId.
func checkCart(c commerce.Cart) error {
	switch {
	case len(c.Lines) == 0:
		return invalidField("cartId", "cart has no lines")
	case len(c.Lines) > MaxLines:
		return invalidField("cartId", "cart has more than %d lines", MaxLines)
	case c.Amount < 0:
		return invalidField("cartId", "cart amount is negative")
	case !currencyCode(c.Currency):
		return invalidField("cartId", "cart currency is not a three-letter code")
	}
	for i, l := range c.Lines {
		if err := checkID(fmt.Sprintf("cart line %d sku", i), l.GetSku()); err != nil {
			return invalidField("cartId", "cart line %d has an invalid sku", i)
		}
		if q := l.GetQuantity(); q < 1 || q > MaxQuantity {
			return invalidField("cartId", "cart line %d has quantity %d (allowed 1..%d)", i, q, MaxQuantity)
		}
	}
	return nil
}

func currencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}
