package schemas

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the public HTTP API, served at
// /v1/openapi.json and rendered at /docs.
//
//go:embed openapi.json
var OpenAPI []byte
