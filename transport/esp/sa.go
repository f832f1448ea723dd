package esp

import (
	"encoding/binary"
	"math"
	"sync/atomic"
)

// params is the part of an SA the packet framing needs, copied out of its
// suite so that the hot path makes no interface call for it.
type params struct {
	suite suite
	ivLen int
	block int // the cipher's block: the ciphertext is whole blocks
	// align is what the ciphertext is padded to: the block, and at least
	// 4 bytes (RFC 4303 §2.4).
	align int
	esn   bool
}

func newParams(s suite, esn bool) params {
	block := s.blockLen()
	return params{suite: s, ivLen: s.ivLen(), block: block, align: max(block, 4), esn: esn}
}

// headerLen is the ESP header and IV before the ciphertext.
func (p *params) headerLen() int { return espHeaderLen + p.ivLen }

// overhead is the most ESP adds to a packet: header, IV, the longest
// padding, trailer and ICV.
func (p *params) overhead() int { return p.headerLen() + p.align - 1 + trailerLen + icvLen }

// outbound is the sending half of a CHILD_SA.
type outbound struct {
	params
	spi uint32
	// limit is the last sequence number that may be sent (RFC 4303
	// §3.3.3): the counter never cycles.
	limit uint64
	seq   atomic.Uint64 // the last sequence number reserved
	bytes atomic.Uint64 // inner bytes sealed
}

func newOutbound(spi uint32, s suite, esn bool) *outbound {
	o := &outbound{params: newParams(s, esn), spi: spi, limit: math.MaxUint32}
	if esn {
		o.limit = math.MaxUint64
	}
	return o
}

// reserve takes up to n consecutive sequence numbers and returns the first
// and how many it got: fewer than n, down to none, at the end of the
// sequence number space.
func (o *outbound) reserve(n int) (uint64, int) {
	for {
		cur := o.seq.Load()
		k := min(uint64(n), o.limit-cur)
		if k == 0 {
			return 0, 0
		}
		if o.seq.CompareAndSwap(cur, cur+k) {
			return cur + 1, int(k)
		}
	}
}

// seal turns the inner packet b[off:] into an ESP packet with sequence
// number seq, in place, and returns it: header and IV go into the
// headroom, which must be at least headerLen()+scratchLen, padding,
// trailer and ICV into the capacity after the packet.
func (o *outbound) seal(b []byte, off int, next byte, seq uint64) ([]byte, reason) {
	n := len(b) - off
	ct := paddedLen(n, o.align)
	end := off + ct + icvLen
	if end > cap(b) {
		return nil, dropNoTailroom
	}
	b = b[:end]
	start := o.frame(b, off, n, next, seq)
	o.suite.putIV(b[start+espHeaderLen:off], seq)
	o.suite.encrypt(b, start, uint32(seq>>32), o.esn, (*scratch)(b[start-scratchLen:start]))
	return b[start:], accepted
}

// frame writes the SPI, the low half of seq and the trailer around the
// payload b[off:off+n] of the packet b, which ends with room for the ICV,
// and returns where the packet starts.
func (o *outbound) frame(b []byte, off, n int, next byte, seq uint64) int {
	start := off - o.headerLen()
	binary.BigEndian.PutUint32(b[start:], o.spi)
	binary.BigEndian.PutUint32(b[start+4:], uint32(seq))
	putTrailer(b[off:len(b)-icvLen], n, next)
	return start
}

// inbound is the receiving half of a CHILD_SA.
type inbound struct {
	params
	spi   uint32
	peer  int
	owner *peer // the state of peer, set by InstallChild
	win   window
	bytes atomic.Uint64 // inner bytes opened
	last  atomic.Int64  // coarse Unix nanoseconds of the last packet opened
	// pending is the outbound SA of a CHILD_SA installed Deferred, until a
	// packet opens here or the peer's current outbound SA is deleted.
	pending atomic.Pointer[outbound]
}

func newInbound(spi uint32, peer int, s suite, esn bool) *inbound {
	return &inbound{params: newParams(s, esn), spi: spi, peer: peer}
}

// open authenticates and decrypts the ESP packet b[start:] in place, its
// SPI already matched, working in s. It returns the length of the inner
// packet, which begins at start+headerLen(), and the next header. It
// writes nothing outside b[start:] and s.
func (in *inbound) open(b []byte, start int, s *scratch) (int, byte, reason) {
	ct := len(b) - start - in.headerLen() - icvLen
	if ct < max(trailerLen, in.block) {
		return 0, 0, dropTruncated
	}
	// Only the cipher's own block is required: a sender that misses the
	// 4-byte alignment of a stream mode is not refused for it.
	if ct%in.block != 0 {
		return 0, 0, dropMalformed
	}
	seq, ok := in.win.check(binary.BigEndian.Uint32(b[start+4:]), in.esn)
	if !ok {
		return 0, 0, dropReplay
	}
	if !in.suite.decrypt(b, start, uint32(seq>>32), in.esn, s) {
		return 0, 0, dropAuthFailed
	}
	if !in.win.commit(seq) {
		return 0, 0, dropReplay
	}
	at := start + in.headerLen()
	return trailer(b[at : at+ct])
}

// received records n inner bytes opened at the coarse time now; the load
// first keeps the cache line shared while the time does not change.
func (in *inbound) received(n int, now int64) {
	in.bytes.Add(uint64(n))
	if in.last.Load() != now {
		in.last.Store(now)
	}
}
