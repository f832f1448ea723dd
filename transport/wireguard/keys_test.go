package wireguard

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustHexKey(t *testing.T, s string) Key {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		t.Fatalf("bad test vector %q", s)
	}
	return Key(b)
}

// RFC 7748 section 6.1: Alice's and Bob's key pairs.
func TestPublicMatchesRFC7748(t *testing.T) {
	tests := []struct {
		name, priv, pub string
	}{
		{"alice", "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a", "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"},
		{"bob", "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb", "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := mustHexKey(t, tt.priv).Public(), mustHexKey(t, tt.pub); got != want {
				t.Errorf("Public() = %x, want %x", got, want)
			}
		})
	}
}

func TestKeyStringParsesBack(t *testing.T) {
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s := k.String()
	if len(s) != 44 || !strings.HasSuffix(s, "=") {
		t.Errorf("String() = %q, want 44 characters of padded base64 as wg prints", s)
	}
	got, err := ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	if got != k {
		t.Errorf("ParseKey(String()) = %v, want %v", got, k)
	}
}

func TestParseKeyRefusesMalformed(t *testing.T) {
	for _, s := range []string{
		"",
		"not base64!",
		"AAAA", // 3 bytes
		"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", // 36 bytes
		"-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-=",     // URL alphabet
	} {
		if _, err := ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q) succeeded, want an error", s)
		}
	}
}

func TestGenerateKeyIsClampedAndRandom(t *testing.T) {
	a, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("two generated keys are equal")
	}
	for _, k := range []Key{a, b} {
		if k[0]&7 != 0 || k[31]&128 != 0 || k[31]&64 == 0 {
			t.Errorf("key %x is not clamped (RFC 7748 section 5)", k)
		}
	}
}

func TestLoadOrCreateKeyCreatesOnceThenReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", "dir", "private.key")
	priv, pub, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if priv.IsZero() || pub != priv.Public() {
		t.Fatalf("LoadOrCreateKey returned priv %v pub %v; want a key and its public key", priv, pub)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != 0o600 {
		t.Errorf("key file mode = %o, want 600", mode)
	}
	pubText, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(pubText)); got != pub.String() {
		t.Errorf("%s.pub holds %q, want %q", path, got, pub.String())
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("key dir holds %d files, want the key and .pub only", len(entries))
	}

	priv2, pub2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if priv2 != priv || pub2 != pub {
		t.Errorf("second LoadOrCreateKey returned a different key")
	}
}

func TestLoadOrCreateKeyReadsWgGenkeyOutput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wg.key")
	// RFC 7748 Alice, written as `wg genkey > file` would (with a newline).
	alice := mustHexKey(t, "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
	if err := os.WriteFile(path, []byte(alice.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	priv, pub, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if priv != alice || pub != alice.Public() {
		t.Errorf("LoadOrCreateKey = %v, %v; want the key in the file", priv, pub)
	}
	if _, err := os.Stat(path + ".pub"); err == nil {
		t.Errorf("loading an existing key wrote a .pub file")
	}
}

func TestLoadOrCreateKeyRefusesGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(path, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKey(path); err == nil {
		t.Fatal("LoadOrCreateKey accepted a file that holds no key")
	}
	b, _ := os.ReadFile(path)
	if string(b) != "garbage\n" {
		t.Errorf("LoadOrCreateKey changed a file it could not parse")
	}
}
