package gateway

import (
	"bufio"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
)

// The connection-tracking sync protocol, over TCP from the passive gateway
// (the client) to the active one (the server).
//
// Each end sends a hello first: "SNKS", version 1, a random 32-byte nonce.
// Each direction then has its own key, HKDF-SHA256 (RFC 5869) of the shared
// secret, salted with the client's nonce then the server's, so that a frame
// of one connection or one direction is worth nothing in another. Every
// frame is
//
//	type (1) | payload length (4) | sequence number (8) | payload | HMAC-SHA256 (32)
//
// the MAC over everything before it; sequence numbers count from 0 in each
// direction, and a frame out of sequence ends the connection, so that
// frames can be neither replayed nor dropped nor injected. The client's first
// frame is frameAuth: the server sends nothing before it has proved the
// client holds the key.
const (
	syncMagic      = "SNKS"
	syncVersion    = 1
	syncNonceLen   = 32
	syncHelloLen   = len(syncMagic) + 1 + syncNonceLen
	syncHeaderLen  = 1 + 4 + 8
	syncMACLen     = sha256.Size
	syncMaxPayload = 1 << 20
)

// Frame types.
const (
	frameAuth    = 1 // client → server: proves the key; no payload
	frameBegin   = 2 // a full resync (a dump of the table) begins
	frameRecords = 3 // stamp (8, ns; 0 in a dump) | records
	frameEnd     = 4 // the resync is complete
	frameBeat    = 5 // the server is alive; no payload
)

var errSyncAuth = errors.New("sync: frame authentication failed (wrong key, or a replayed or altered frame)")

// syncHello writes this end's hello and reads the peer's, returning both
// nonces (ours, theirs).
func syncHello(rw io.ReadWriter) (ours, theirs [syncNonceLen]byte, err error) {
	rand.Read(ours[:])
	hello := append([]byte(syncMagic), syncVersion)
	if _, err = rw.Write(append(hello, ours[:]...)); err != nil {
		return ours, theirs, err
	}
	var in [syncHelloLen]byte
	if _, err = io.ReadFull(rw, in[:]); err != nil {
		return ours, theirs, err
	}
	if string(in[:4]) != syncMagic || in[4] != syncVersion {
		return ours, theirs, fmt.Errorf("sync: the peer is not a snorkel sync version %d endpoint", syncVersion)
	}
	copy(theirs[:], in[5:])
	return ours, theirs, nil
}

// syncKeys derives the two directions' MAC keys from secret and the
// client's and server's nonces.
func syncKeys(secret []byte, client, server [syncNonceLen]byte) (toServer, toClient []byte) {
	salt := append(client[:], server[:]...)
	toServer, _ = hkdf.Key(sha256.New, secret, salt, "snorkel conntrack sync v1 client to server", sha256.Size)
	toClient, _ = hkdf.Key(sha256.New, secret, salt, "snorkel conntrack sync v1 server to client", sha256.Size)
	return toServer, toClient
}

// frameWriter writes authenticated frames in sequence.
type frameWriter struct {
	w   *bufio.Writer
	mac hash.Hash
	seq uint64
	hdr [syncHeaderLen]byte
}

func newFrameWriter(w io.Writer, key []byte) *frameWriter {
	return &frameWriter{w: bufio.NewWriterSize(w, 64<<10), mac: hmac.New(sha256.New, key)}
}

// write buffers one frame; Flush sends what is buffered.
func (f *frameWriter) write(typ byte, payload []byte) error {
	f.hdr[0] = typ
	binary.BigEndian.PutUint32(f.hdr[1:], uint32(len(payload)))
	binary.BigEndian.PutUint64(f.hdr[5:], f.seq)
	f.seq++
	f.mac.Reset()
	f.mac.Write(f.hdr[:])
	f.mac.Write(payload)
	var sum [syncMACLen]byte
	f.w.Write(f.hdr[:])
	f.w.Write(payload)
	_, err := f.w.Write(f.mac.Sum(sum[:0]))
	return err
}

func (f *frameWriter) Flush() error { return f.w.Flush() }

// frameReader reads and checks authenticated frames in sequence.
type frameReader struct {
	r   *bufio.Reader
	mac hash.Hash
	seq uint64
	buf []byte
}

func newFrameReader(r io.Reader, key []byte) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10), mac: hmac.New(sha256.New, key)}
}

// read returns the next frame's type and payload, valid until the next
// read. A frame whose MAC or sequence number is wrong is errSyncAuth.
func (f *frameReader) read() (byte, []byte, error) {
	var hdr [syncHeaderLen]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > syncMaxPayload {
		return 0, nil, fmt.Errorf("sync: frame of %d bytes, more than %d", n, syncMaxPayload)
	}
	if cap(f.buf) < int(n)+syncMACLen {
		f.buf = make([]byte, int(n)+syncMACLen)
	}
	b := f.buf[:int(n)+syncMACLen]
	if _, err := io.ReadFull(f.r, b); err != nil {
		return 0, nil, err
	}
	f.mac.Reset()
	f.mac.Write(hdr[:])
	f.mac.Write(b[:n])
	var sum [syncMACLen]byte
	if !hmac.Equal(f.mac.Sum(sum[:0]), b[n:]) || binary.BigEndian.Uint64(hdr[5:]) != f.seq {
		return 0, nil, errSyncAuth
	}
	f.seq++
	return hdr[0], b[:n], nil
}
