package wireguard

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Key is a Curve25519 key as WireGuard uses it: a private key, a public key or
// a preshared key.
type Key [32]byte

// String returns the key in standard base64, as wg(8) prints and reads it.
func (k Key) String() string {
	return base64.StdEncoding.EncodeToString(k[:])
}

// hex is the form wireguard-go's UAPI protocol takes.
func (k Key) hex() string {
	return hex.EncodeToString(k[:])
}

// IsZero reports whether k is all zeroes, the value of a key never set.
func (k Key) IsZero() bool {
	return k == Key{}
}

// ParseKey decodes a base64 key as wg(8) prints it.
func ParseKey(s string) (Key, error) {
	var k Key
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return k, fmt.Errorf("wireguard: parse key: %w", err)
	}
	if len(b) != len(k) {
		return k, fmt.Errorf("wireguard: parse key: %d bytes, want %d", len(b), len(k))
	}
	copy(k[:], b)
	return k, nil
}

// GenerateKey returns a new random private key, clamped as RFC 7748 section 5
// describes so that it prints the same as `wg genkey` output would.
func GenerateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return k, fmt.Errorf("wireguard: generate key: %w", err)
	}
	k[0] &= 248
	k[31] = (k[31] & 127) | 64
	return k, nil
}

// Public returns the public key of private key k. The scalar is clamped
// inside X25519, so an unclamped k gives the same result as its clamped form.
func (k Key) Public() Key {
	priv, err := ecdh.X25519().NewPrivateKey(k[:])
	if err != nil {
		// NewPrivateKey fails only on a wrong length, which Key rules out.
		panic("wireguard: " + err.Error())
	}
	var pub Key
	copy(pub[:], priv.PublicKey().Bytes())
	return pub
}

// ReadKeyFile reads a base64 key from path as wg(8) writes one, a private
// or a preshared key, ignoring the whitespace around it. The error of a
// missing file wraps fs.ErrNotExist.
func ReadKeyFile(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("wireguard: read key: %w", err)
	}
	k, err := ParseKey(string(bytes.TrimSpace(b)))
	if err != nil {
		return Key{}, fmt.Errorf("wireguard: key file %s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreateKey reads a base64 private key from path; if the file does not
// exist it generates one, writes it (mode 0600, parent dirs created) and
// writes the public key to path+".pub".
func LoadOrCreateKey(path string) (priv, pub Key, err error) {
	priv, err = ReadKeyFile(path)
	if err == nil {
		return priv, priv.Public(), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return Key{}, Key{}, err
	}
	if priv, err = GenerateKey(); err != nil {
		return Key{}, Key{}, err
	}
	pub = priv.Public()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return Key{}, Key{}, fmt.Errorf("wireguard: create key dir: %w", err)
	}
	if err := createFile(path, []byte(priv.String()+"\n")); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another process created the key meanwhile: use its key rather
			// than replace one that may already be published.
			return LoadOrCreateKey(path)
		}
		return Key{}, Key{}, fmt.Errorf("wireguard: write key file: %w", err)
	}
	if err := os.WriteFile(path+".pub", []byte(pub.String()+"\n"), 0o644); err != nil {
		return Key{}, Key{}, fmt.Errorf("wireguard: write public key file: %w", err)
	}
	return priv, pub, nil
}

// createFile writes data to a new file at path with mode 0600. The file
// appears complete or not at all, and never replaces an existing one: it is
// written under a temporary name and hard-linked into place.
func createFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Link(tmp, path)
}
