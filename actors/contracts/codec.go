package contracts

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ErrInvalidJSON is wrapped by every UnmarshalJSON error: the bytes are not
// one spec-conformant JSON object of the requested message.
var ErrInvalidJSON = errors.New("contracts: invalid JSON")

// ErrUnencodable is wrapped by every MarshalJSON error: the message holds a
// value the spec's JSON cannot express (an unset or unknown enum, invalid
// UTF-8, a non-finite float, or a field shape the contract does not use).
var ErrUnencodable = errors.New("contracts: message cannot be written as spec JSON")

// MarshalJSON writes m as the JSON object of docs/contract.md, "Wire form",
// compact, with fields in declaration order.
//
// protojson is not used for writing because its canonical mapping differs
// from the spec where it matters: it writes int64 as strings, omits
// zero-valued scalars (accepted:false would vanish) and deliberately varies
// its whitespace between builds. The rules here are the spec's:
//   - names exactly as declared in the .proto (which are the spec's names);
//   - every non-optional scalar, bool and enum is present, even at zero;
//   - an `optional` field or a nested message is present only when set;
//   - repeated fields are always arrays, [] when empty;
//   - integers of every width are JSON numbers; enums are their value names.
//
// Enum value 0 is the contract's "never set" placeholder (the spec lists
// only the named statuses), so writing it is an error rather than a silent
// "ORDER_STATUS_UNSPECIFIED" on the wire.
func MarshalJSON(m proto.Message) ([]byte, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil message", ErrUnencodable)
	}
	r := m.ProtoReflect()
	if !r.IsValid() {
		return nil, fmt.Errorf("%w: nil %s", ErrUnencodable, r.Descriptor().FullName())
	}
	// Events and states are a few hundred bytes: one allocation covers
	// nearly all of them.
	e := encoder{buf: make([]byte, 0, 512)}
	if err := e.message(r); err != nil {
		return nil, located(err, r)
	}
	return e.buf, nil
}

// UnmarshalJSON decodes b into m strictly: unknown fields, duplicate fields,
// malformed values and anything after the object are errors, and so is an
// enum that is missing, holds the unset placeholder or an undeclared number
// (a status the spec does not name). JSON null for an optional field means
// "absent", as the spec's `?: T | null` allows. Integers may be numbers (the
// spec form) or decimal strings, as in protobuf's canonical JSON.
//
// On error m is reset, so a caller never acts on a half-decoded message.
func UnmarshalJSON(b []byte, m proto.Message) error {
	return unmarshal(protojson.UnmarshalOptions{}, b, m)
}

// UnmarshalStoredJSON decodes b into m as UnmarshalJSON does, except that
// a field m does not declare is ignored, not an error, and so is an enum
// name it does not know (the field is then unset, which the enum check
// still refuses where a value is required). It is for what this project
// stored itself and a newer build may have written (events, the read
// model): a reader of the same schema version must not fail on an
// optional field another build added. What clients send is decoded
// strictly (UnmarshalJSON).
//
// tolerantReader is true in every build but the test build tagged
// strictreader, which the upgrade proof runs to show that its mixed-version
// cluster fails without this tolerance (runner/localcluster/upgradetest).
func UnmarshalStoredJSON(b []byte, m proto.Message) error {
	return unmarshal(protojson.UnmarshalOptions{DiscardUnknown: tolerantReader}, b, m)
}

// unmarshal is both decoders: opts decides only what an unknown field or
// enum name costs; the enum check and the reset on error are the same.
func unmarshal(opts protojson.UnmarshalOptions, b []byte, m proto.Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil target message", ErrInvalidJSON)
	}
	if err := opts.Unmarshal(b, m); err != nil {
		proto.Reset(m)
		return fmt.Errorf("%w: %w", ErrInvalidJSON, err)
	}
	r := m.ProtoReflect()
	if err := checkEnums(r); err != nil {
		err = located(err, r)
		proto.Reset(m)
		return err
	}
	return nil
}

// ValidStatus reports whether s is one of the five statuses
// (docs/contract.md, "Statuses").
func ValidStatus(s OrderStatus) bool {
	switch s {
	case OrderStatus_Created, OrderStatus_InventoryReserved, OrderStatus_PaymentAuthorized,
		OrderStatus_Confirmed, OrderStatus_Failed:
		return true
	}
	return false
}

type encoder struct {
	buf []byte
}

// pathError is a value the spec cannot express, or a missing enum, deep in
// a message. Its location ("OrderState.lines[0].sku") is put together only
// as the error travels up, one segment per level: on the hot path no value
// is wrong, and a path string built per field was a large part of a
// workflow step's encoding.
type pathError struct {
	sentinel error
	// rev holds the segments innermost first: ".sku", "[0]", ".lines".
	rev []string
	why string
}

func (e *pathError) Error() string { return e.why }

// under records that err happened inside seg, if it is a pathError.
func under(err error, seg string) error {
	if pe, ok := err.(*pathError); ok {
		pe.rev = append(pe.rev, seg)
	}
	return err
}

func index(i int) string { return "[" + strconv.Itoa(i) + "]" }

// located turns err into its public form, with its full location under
// the root message's name.
func located(err error, root protoreflect.Message) error {
	pe, ok := err.(*pathError)
	if !ok {
		return err
	}
	var b strings.Builder
	b.WriteString(string(root.Descriptor().Name()))
	for i := len(pe.rev) - 1; i >= 0; i-- {
		b.WriteString(pe.rev[i])
	}
	return fmt.Errorf("%w: %s: %s", pe.sentinel, b.String(), pe.why)
}

func (e *encoder) message(m protoreflect.Message) error {
	e.buf = append(e.buf, '{')
	fields := m.Descriptor().Fields()
	first := true
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.HasPresence() && !m.Has(fd) {
			continue
		}
		if !first {
			e.buf = append(e.buf, ',')
		}
		first = false
		e.buf = appendString(e.buf, string(fd.Name()))
		e.buf = append(e.buf, ':')
		if err := e.field(fd, m.Get(fd)); err != nil {
			return under(err, "."+string(fd.Name()))
		}
	}
	e.buf = append(e.buf, '}')
	return nil
}

func (e *encoder) field(fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch {
	case fd.IsMap():
		return unencodable("map fields are not part of the contract")
	case fd.IsList():
		list := v.List()
		e.buf = append(e.buf, '[')
		for i := range list.Len() {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if err := e.singular(fd, list.Get(i)); err != nil {
				return under(err, index(i))
			}
		}
		e.buf = append(e.buf, ']')
		return nil
	default:
		return e.singular(fd, v)
	}
}

func (e *encoder) singular(fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		e.buf = strconv.AppendBool(e.buf, v.Bool())
	case protoreflect.EnumKind:
		name, err := enumName(fd, v.Enum())
		if err != nil {
			return err
		}
		e.buf = appendString(e.buf, name)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		e.buf = strconv.AppendInt(e.buf, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		e.buf = strconv.AppendUint(e.buf, v.Uint(), 10)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return unencodable("non-finite number")
		}
		bits := 64
		if fd.Kind() == protoreflect.FloatKind {
			bits = 32
		}
		e.buf = strconv.AppendFloat(e.buf, f, 'g', -1, bits)
	case protoreflect.StringKind:
		s := v.String()
		if !utf8.ValidString(s) {
			return unencodable("invalid UTF-8")
		}
		e.buf = appendString(e.buf, s)
	case protoreflect.BytesKind:
		e.buf = appendString(e.buf, base64.StdEncoding.EncodeToString(v.Bytes()))
	case protoreflect.MessageKind:
		return e.message(v.Message())
	default:
		return unencodable("unsupported field kind " + fd.Kind().String())
	}
	return nil
}

func enumName(fd protoreflect.FieldDescriptor, n protoreflect.EnumNumber) (string, error) {
	if n == 0 {
		return "", unencodable("enum " + string(fd.Enum().Name()) + " is unset")
	}
	ev := fd.Enum().Values().ByNumber(n)
	if ev == nil {
		return "", unencodable(fmt.Sprintf("enum %s has no value %d", fd.Enum().Name(), n))
	}
	return string(ev.Name()), nil
}

func unencodable(why string) error {
	return &pathError{sentinel: ErrUnencodable, why: why}
}

// appendString writes s as a JSON string. Only what JSON requires is
// escaped, so names and ids appear on the wire exactly as the spec shows
// them.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	// Ids and names need no escaping: copy runs of plain bytes at once.
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		start = i + 1
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// checkEnums enforces after decoding what MarshalJSON enforces before
// writing: protojson turns a missing enum into the unset placeholder
// silently, which would let a body without "status" pass as valid.
func checkEnums(m protoreflect.Message) error {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() || (fd.HasPresence() && !m.Has(fd)) {
			continue
		}
		seg := "." + string(fd.Name())
		switch fd.Kind() {
		case protoreflect.EnumKind:
			if fd.IsList() {
				list := m.Get(fd).List()
				for j := range list.Len() {
					if !namedEnum(fd, list.Get(j).Enum()) {
						return under(under(invalidEnum(fd), index(j)), seg)
					}
				}
			} else if !namedEnum(fd, m.Get(fd).Enum()) {
				return under(invalidEnum(fd), seg)
			}
		case protoreflect.MessageKind:
			if fd.IsList() {
				list := m.Get(fd).List()
				for j := range list.Len() {
					if err := checkEnums(list.Get(j).Message()); err != nil {
						return under(under(err, index(j)), seg)
					}
				}
			} else if err := checkEnums(m.Get(fd).Message()); err != nil {
				return under(err, seg)
			}
		}
	}
	return nil
}

// namedEnum reports whether n is a declared value other than the unset
// placeholder; protojson keeps undeclared numbers, which the spec's closed
// set of names does not allow.
func namedEnum(fd protoreflect.FieldDescriptor, n protoreflect.EnumNumber) bool {
	return n != 0 && fd.Enum().Values().ByNumber(n) != nil
}

func invalidEnum(fd protoreflect.FieldDescriptor) error {
	return &pathError{sentinel: ErrInvalidJSON, why: string(fd.Enum().Name()) + " missing, unset or undeclared"}
}
