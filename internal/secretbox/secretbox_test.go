package secretbox

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
)

func randomKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpenAndRotation(t *testing.T) {
	oldKey, newKey := randomKey(t), randomKey(t)
	old, err := New(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	secret := "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMw=="
	sealed, err := old.Seal(secret)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, secret) || strings.Contains(sealed, "c2VjcmV0") {
		t.Fatalf("sealed value shows the secret: %s", sealed)
	}
	again, _ := old.Seal(secret)
	if again == sealed {
		t.Fatal("two seals of one secret are identical (nonce reused)")
	}

	ring, err := New(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ring.Open(sealed); err != nil || got != secret {
		t.Fatalf("ring opens old value: %q %v", got, err)
	}
	resealed, _ := ring.Seal(secret)
	if _, err := old.Open(resealed); err != ErrOpen {
		t.Fatalf("old box opened a value sealed with the new key: %v", err)
	}

	// Tampering with any byte of the ciphertext is detected.
	parts := strings.Split(sealed, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(parts[2])
	raw[len(raw)-1] ^= 1
	tampered := parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(raw)
	if _, err := old.Open(tampered); err != ErrOpen {
		t.Fatalf("tampered value opened: %v", err)
	}
	for _, bad := range []string{"", "v1", "v2." + parts[1] + "." + parts[2], "v1.zz." + parts[2], "v1." + parts[1] + ".!!"} {
		if _, err := old.Open(bad); err != ErrOpen {
			t.Errorf("Open(%q) = %v, want ErrOpen", bad, err)
		}
	}
}

func TestParseKeys(t *testing.T) {
	k1, k2 := randomKey(t), randomKey(t)
	keys, err := ParseKeys(base64.StdEncoding.EncodeToString(k1) + " , " + base64.RawURLEncoding.EncodeToString(k2))
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], k1) || !bytes.Equal(keys[1], k2) {
		t.Fatalf("ParseKeys = %d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", " , ", "not base64 !", base64.StdEncoding.EncodeToString(k1[:16])} {
		if _, err := ParseKeys(bad); err == nil {
			t.Errorf("ParseKeys(%q) accepted", bad)
		}
	}
	if _, err := New(k1[:31]); err == nil {
		t.Error("New accepted a 31-byte key")
	}
}

func TestSealedWithFirst(t *testing.T) {
	oldKey, newKey := randomKey(t), randomKey(t)
	old, _ := New(oldKey)
	ring, _ := New(newKey, oldKey)
	byOld, _ := old.Seal("whsec_a")
	byNew, _ := ring.Seal("whsec_a")
	oldID := strings.Split(byOld, ".")[1]
	for _, tc := range []struct {
		name   string
		sealed string
		id     string
		first  bool
	}{
		{"a value sealed with the first key", byNew, strings.Split(byNew, ".")[1], true},
		{"a value sealed with an older key of the ring", byOld, oldID, false},
		{"a value naming the first key that does not open", "v1." + strings.Split(byNew, ".")[1] + ".AAAA", strings.Split(byNew, ".")[1], true},
		{"an empty value", "", "", false},
		{"another version", "v2." + oldID + ".AAAA", "", false},
		{"too few parts", "v1." + oldID, "", false},
		{"plain text", "whsec_a", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := KeyID(tc.sealed); got != tc.id {
				t.Errorf("KeyID = %q, want %q", got, tc.id)
			}
			if got := ring.SealedWithFirst(tc.sealed); got != tc.first {
				t.Errorf("SealedWithFirst = %v, want %v", got, tc.first)
			}
		})
	}
	if !old.SealedWithFirst(byOld) || old.SealedWithFirst(byNew) {
		t.Error("a box of the old key alone does not take its own values as sealed with its first key")
	}
}
