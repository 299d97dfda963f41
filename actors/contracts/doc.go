// Package contracts owns the wire contracts of the ShoppingMall sample
// (docs/contract.md, "Messages") and their JSON codec.
//
// The messages are generated from shoppingmall.proto; their field names are
// declared exactly as the spec spells them. MarshalJSON writes the spec's
// JSON literally (declared names, 64-bit integers as JSON numbers, the order
// status by its name, every non-optional scalar and bool present, unset
// optional fields absent, repeated fields as arrays), and UnmarshalJSON
// reads it strictly (unknown fields, trailing data and unset enums are
// errors), so every process, whatever its language, sees the same bytes.
//
// This package is the leaf every other package builds on: it must not
// import anything of the project, only the standard library and
// google.golang.org/protobuf.
package contracts
