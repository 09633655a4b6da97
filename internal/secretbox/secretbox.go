// Package secretbox seals small secrets (webhook signing secrets) for storage
// with AES-256-GCM. A Box holds a key ring: the first key seals, every key
// opens, so keys can be rotated by putting a new key first and keeping the
// old ones until every secret was sealed again (`podctl webhooks reseal`).
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Box seals and opens secrets.
type Box struct {
	keys []key
}

type key struct {
	id   string // first 8 hex digits of the key's SHA-256
	aead cipher.AEAD
}

// ErrOpen means a sealed value could not be opened: unknown key or tampered.
var ErrOpen = errors.New("secretbox: cannot open sealed value")

// New builds a Box from 32-byte keys; the first one seals.
func New(keys ...[]byte) (*Box, error) {
	if len(keys) == 0 {
		return nil, errors.New("secretbox: no key")
	}
	b := &Box{}
	for i, k := range keys {
		if len(k) != 32 {
			return nil, fmt.Errorf("secretbox: key %d has %d bytes, 32 needed", i+1, len(k))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(k)
		b.keys = append(b.keys, key{id: hex.EncodeToString(sum[:4]), aead: aead})
	}
	return b, nil
}

// ParseKeys reads a comma-separated list of base64 (standard or URL, padded
// or not) 32-byte keys, as POD_WEBHOOK_SECRET_KEY holds them.
func ParseKeys(s string) ([][]byte, error) {
	var out [][]byte
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		var k []byte
		var err error
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if k, err = enc.DecodeString(part); err == nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("key %d is not base64", i+1)
		}
		if len(k) != 32 {
			return nil, fmt.Errorf("key %d has %d bytes, 32 needed", i+1, len(k))
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, errors.New("no key given")
	}
	return out, nil
}

// Seal encrypts plain; the result names the key that sealed it:
// "v1.<key id>.<base64url(nonce || ciphertext)>".
func (b *Box) Seal(plain string) (string, error) {
	k := b.keys[0]
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := k.aead.Seal(nonce, nonce, []byte(plain), []byte(k.id))
	return "v1." + k.id + "." + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open decrypts a value Seal produced with any key of the ring.
func (b *Box) Open(sealed string) (string, error) {
	id, body, ok := parse(sealed)
	if !ok {
		return "", ErrOpen
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return "", ErrOpen
	}
	for _, k := range b.keys {
		if k.id != id {
			continue
		}
		n := k.aead.NonceSize()
		if len(raw) < n {
			return "", ErrOpen
		}
		plain, err := k.aead.Open(nil, raw[:n], raw[n:], []byte(k.id))
		if err != nil {
			return "", ErrOpen
		}
		return string(plain), nil
	}
	return "", ErrOpen
}

// KeyID is the id of the key a sealed value names ("" when it is not a
// sealed value). It says nothing of whether the value opens.
func KeyID(sealed string) string {
	id, _, _ := parse(sealed)
	return id
}

// parse splits a sealed value into the id of its key and its encoded
// nonce and ciphertext; ok is false for anything Seal did not produce.
func parse(sealed string) (id, body string, ok bool) {
	parts := strings.Split(sealed, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// SealedWithFirst tells whether sealed names the key that seals now, the
// first of the ring: a value that does not needs sealing again before an
// older key can leave the ring.
func (b *Box) SealedWithFirst(sealed string) bool {
	return KeyID(sealed) == b.keys[0].id
}

// DevelopmentKey is the fixed key used outside production when no key is
// configured. It protects nothing; it only keeps the code path the same.
func DevelopmentKey() []byte {
	sum := sha256.Sum256([]byte("podsvc development webhook secret key"))
	return sum[:]
}
