// Package uuidtext reads a UUID from request text (a path, a query value, a
// body field) in its one canonical form.
package uuidtext

import (
	"errors"

	"github.com/google/uuid"
)

// ErrNotCanonical is the error of Parse for text that is not 36 characters
// long.
var ErrNotCanonical = errors.New("a UUID is 36 characters: xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")

// Parse reads s as a UUID in the canonical form only: 32 hex digits in
// groups of 8-4-4-4-12 joined by hyphens, in either case. uuid.Parse also
// takes "urn:uuid:…", "{…}" and 32 bare hex digits; a request that names an
// id in one of those forms is malformed, as any other spelling is.
func Parse(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.Nil, ErrNotCanonical
	}
	return uuid.Parse(s)
}
