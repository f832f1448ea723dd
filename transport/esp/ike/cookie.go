package ike

import (
	"crypto/hmac"
	"encoding/binary"
	"net/netip"
	"time"
)

// cookieLifetime is how long a cookie secret is used before a new one
// replaces it; a cookie made with the one before stays valid for one more
// lifetime, so that an initiator that got its cookie just before the change
// is not refused (RFC 7296 §2.6).
const cookieLifetime = 2 * time.Minute

// cookieJar makes and checks the cookies of IKE_SA_INIT (RFC 7296 §2.6):
// <VersionIDofSecret> | Hash(Ni | IPi | SPIi | <secret>), here with
// HMAC-SHA-256 keyed by the secret. It keeps no state per initiator.
type cookieJar struct {
	version byte
	secrets [2][]byte // current, previous; nil when none
	made    time.Time // when secrets[0] was made
}

// rotate replaces the current secret once it has served its lifetime, and
// forgets the previous one once that is over too.
func (j *cookieJar) rotate(now time.Time) {
	if j.secrets[0] != nil && now.Sub(j.made) < cookieLifetime {
		return
	}
	j.secrets[1] = j.secrets[0]
	if now.Sub(j.made) >= 2*cookieLifetime {
		j.secrets[1] = nil
	}
	j.secrets[0] = randomBytes(prfLen)
	j.version++
	j.made = now
}

// make returns the cookie for an initiator's nonce, address and SPI.
func (j *cookieJar) make(now time.Time, ni []byte, from netip.AddrPort, spiI uint64) []byte {
	j.rotate(now)
	return j.with(j.version, j.secrets[0], ni, from, spiI)
}

func (j *cookieJar) with(version byte, secret, ni []byte, from netip.AddrPort, spiI uint64) []byte {
	spi := binary.BigEndian.AppendUint64(nil, spiI)
	return append([]byte{version}, prf(secret, ni, from.Addr().AsSlice(), spi)...)
}

// valid reports whether c is a cookie this jar made for these values with
// its current or previous secret.
func (j *cookieJar) valid(now time.Time, c, ni []byte, from netip.AddrPort, spiI uint64) bool {
	j.rotate(now)
	if len(c) == 0 {
		return false
	}
	for i, s := range j.secrets {
		if s != nil && c[0] == j.version-byte(i) && hmac.Equal(c, j.with(c[0], s, ni, from, spiI)) {
			return true
		}
	}
	return false
}
