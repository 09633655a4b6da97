// Package codec encodes and decodes what the service hands itself: Kafka
// records (commands, events, delivery tasks and results), NOTIFY payloads,
// job payloads and the JSON it stores for its own reading.
//
// It is goccy/go-json, which keeps encoding/json's semantics (field names
// matched without regard to case, RawMessage written compacted, HTML
// characters escaped, map keys sorted) at about twice its speed on our
// records: every order is encoded and decoded some twenty times on its way
// through the stages, and that was a fifth of podsvc's CPU under load.
//
// What clients send and are answered over HTTP, and the calls to the store
// platform, stay with go-json-experiment's v1 package, whose errors and
// strict input rules the API is built on.
package codec

import gojson "github.com/goccy/go-json"

// Marshal encodes v.
func Marshal(v any) ([]byte, error) { return gojson.Marshal(v) }

// Unmarshal decodes data into v.
func Unmarshal(data []byte, v any) error { return gojson.Unmarshal(data, v) }
