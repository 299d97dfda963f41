package edge

import (
	_ "embed"
	"slices"
)

//go:embed openapi.yaml
var openAPIDoc []byte

// OpenAPI returns the OpenAPI 3.0.3 document of both listeners' routes
// (openapi.yaml): the public order API and the admin surface, told apart
// by each path item's x-listener. openapi_test.go holds it to the gin
// route tables and to real replies, so it cannot drift from the code
// unnoticed. Each call returns a fresh copy.
func OpenAPI() []byte { return slices.Clone(openAPIDoc) }
