package esp

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
)

func TestSealOpenRoundTrip(t *testing.T) {
	for _, sc := range suiteCases {
		for _, esn := range []bool{false, true} {
			tr := withESN(sc.tr, esn)
			name := sc.name
			if esn {
				name += "/esn"
			}
			t.Run(name, func(t *testing.T) {
				o, in := saPair(t, tr, 0x1000)
				for _, size := range []int{0, 1, 2, 3, 13, 14, 15, 16, 17, 100, 1400} {
					for _, pkt := range [][]byte{
						ipv4(ip4A, ip4B, pattern(size, byte(size))),
						ipv6(ip6A, ip6B, pattern(size, byte(size)+1)),
					} {
						esp := sealed(t, o, pkt)
						wantLen := o.headerLen() + paddedLen(len(pkt), o.align) + icvLen
						if len(esp) != wantLen {
							t.Fatalf("%d-byte packet sealed into %d bytes, want %d", len(pkt), len(esp), wantLen)
						}
						if (len(esp)-o.headerLen()-icvLen)%o.align != 0 || o.align%4 != 0 {
							t.Fatalf("ciphertext of %d bytes is not aligned to %d", len(esp)-o.headerLen()-icvLen, o.align)
						}
						if got := binary.BigEndian.Uint32(esp); got != 0x1000 {
							t.Fatalf("SPI %#x, want 0x1000", got)
						}
						if bytes.Contains(esp, pkt[20:]) && size >= 16 {
							t.Fatal("the payload is in the clear")
						}
						got, next, r := opened(in, esp)
						if r != accepted {
							t.Fatalf("open: %v", r)
						}
						if !bytes.Equal(got, pkt) || next != nextHeaderOf(pkt, 0) {
							t.Fatalf("opened next header %d, %d bytes; want %d, %d bytes", next, len(got), nextHeaderOf(pkt, 0), len(pkt))
						}
					}
				}
			})
		}
	}
}

// TestSealIsInPlace checks that the ESP packet is written around the
// caller's packet, in the caller's buffer.
func TestSealIsInPlace(t *testing.T) {
	for _, sc := range suiteCases {
		o, _ := saPair(t, sc.tr, 0x1000)
		b := withHeadroom(ipv4(ip4A, ip4B, pattern(100, 1)))
		esp, r := o.seal(b, transport.Headroom, nextIPv4, 1)
		if r != accepted {
			t.Fatalf("%s: seal: %v", sc.name, r)
		}
		if &esp[o.headerLen()] != &b[transport.Headroom] {
			t.Fatalf("%s: ciphertext does not start where the packet did", sc.name)
		}
	}
}

func TestSealWithoutTailroomIsRefused(t *testing.T) {
	o, _ := saPair(t, gcm128, 0x1000)
	pkt := ipv4(ip4A, ip4B, pattern(30, 1))
	b := make([]byte, transport.Headroom+len(pkt), transport.Headroom+len(pkt)+icvLen)
	copy(b[transport.Headroom:], pkt)
	if _, r := o.seal(b, transport.Headroom, nextIPv4, 1); r != dropNoTailroom {
		t.Fatalf("seal with room for the ICV but not the trailer: %v, want %v", r, dropNoTailroom)
	}
}

// craft seals payload under o like seal, but lets mutate change the framed
// plaintext (trailer included) before it is encrypted: the way to make a
// packet that authenticates yet breaks a rule of the plaintext.
func craft(o *outbound, payload []byte, next byte, seq uint64, mutate func(pt []byte)) []byte {
	off := transport.Headroom
	b := make([]byte, off+paddedLen(len(payload), o.align)+icvLen, transport.BufSize)
	copy(b[off:], payload)
	start := o.frame(b, off, len(payload), next, seq)
	mutate(b[off : len(b)-icvLen])
	o.suite.putIV(b[start+espHeaderLen:off], seq)
	o.suite.encrypt(b, start, uint32(seq>>32), o.esn, new(scratch))
	return bytes.Clone(b[start:])
}

func TestOpenRefusesBrokenPackets(t *testing.T) {
	pkt := ipv4(ip4A, ip4B, pattern(61, 3)) // 81 bytes: GCM pads 1, CBC 13
	flip := func(at func(esp []byte) int) func([]byte) []byte {
		return func(esp []byte) []byte {
			esp = bytes.Clone(esp)
			esp[at(esp)] ^= 0x01
			return esp
		}
	}
	tests := []struct {
		name   string
		mutate func(esp []byte) []byte
		want   reason
	}{
		{"ICV bit flipped", flip(func(e []byte) int { return len(e) - 1 }), dropAuthFailed},
		{"ciphertext bit flipped", flip(func(e []byte) int { return len(e) - icvLen - 5 }), dropAuthFailed},
		{"IV bit flipped", flip(func(e []byte) int { return espHeaderLen }), dropAuthFailed},
		{"sequence number changed", flip(func(e []byte) int { return 6 }), dropAuthFailed},
		{"SPI changed", flip(func(e []byte) int { return 0 }), dropAuthFailed},
		{"cut to the header", func(e []byte) []byte { return e[:espHeaderLen+4] }, dropTruncated},
		{"ICV cut off", func(e []byte) []byte { return e[:len(e)-icvLen] }, dropAuthFailed},
		{"empty", func([]byte) []byte { return nil }, dropTruncated},
	}
	for _, sc := range suiteCases {
		for _, tt := range tests {
			t.Run(sc.name+"/"+tt.name, func(t *testing.T) {
				o, in := saPair(t, sc.tr, 0x1000)
				esp := sealed(t, o, pkt)
				bad := tt.mutate(esp)
				if len(bad) < espHeaderLen {
					// The receive path counts these before any SA.
					return
				}
				if _, _, r := opened(in, bad); r != tt.want {
					t.Fatalf("open: %v, want %v", r, tt.want)
				}
				// A refused packet leaves the window alone: the real one
				// still opens.
				if _, _, r := opened(in, esp); r != accepted {
					t.Fatalf("the intact packet after the broken one: %v", r)
				}
			})
		}
	}
}

func TestOpenRefusesCBCCiphertextOfPartialBlocks(t *testing.T) {
	o, in := saPair(t, cbc128, 0x1000)
	esp := sealed(t, o, ipv4(ip4A, ip4B, pattern(100, 1)))
	bad := append(bytes.Clone(esp[:len(esp)-icvLen-3]), esp[len(esp)-icvLen:]...)
	if _, _, r := opened(in, bad); r != dropMalformed {
		t.Fatalf("open: %v, want %v", r, dropMalformed)
	}
}

func TestOpenChecksPadding(t *testing.T) {
	payload := ipv4(ip4A, ip4B, pattern(61, 3)) // ends in 0xa7, not a padding byte
	tests := []struct {
		name   string
		mutate func(pt []byte)
		want   reason
	}{
		{"padding as sealed", func([]byte) {}, accepted},
		{"a padding byte not in sequence", func(pt []byte) { pt[len(payload)] = 7 }, dropBadPadding},
		{"pad length beyond the payload", func(pt []byte) { pt[len(pt)-2] = 255 }, dropBadPadding},
		{"pad length one too long", func(pt []byte) { pt[len(pt)-2]++ }, dropBadPadding},
	}
	for _, sc := range suiteCases {
		for _, tt := range tests {
			t.Run(sc.name+"/"+tt.name, func(t *testing.T) {
				o, in := saPair(t, sc.tr, 0x1000)
				esp := craft(o, payload, nextIPv4, 1, tt.mutate)
				got, _, r := opened(in, esp)
				if r != tt.want {
					t.Fatalf("open: %v, want %v", r, tt.want)
				}
				if r == accepted && !bytes.Equal(got, payload) {
					t.Fatal("payload differs")
				}
			})
		}
	}
}

func TestOpenRefusesReplays(t *testing.T) {
	for _, sc := range suiteCases {
		t.Run(sc.name, func(t *testing.T) {
			o, in := saPair(t, sc.tr, 0x1000)
			esp := sealed(t, o, ipv4(ip4A, ip4B, nil))
			if _, _, r := opened(in, esp); r != accepted {
				t.Fatalf("first: %v", r)
			}
			if _, _, r := opened(in, esp); r != dropReplay {
				t.Fatalf("replay: %v, want %v", r, dropReplay)
			}
		})
	}
}

// TestForgeryDoesNotMoveWindow sends a forged packet far ahead; had it been
// committed before its ICV was checked, the genuine packets behind it would
// now be too old.
func TestForgeryDoesNotMoveWindow(t *testing.T) {
	for _, sc := range suiteCases {
		t.Run(sc.name, func(t *testing.T) {
			o, in := saPair(t, sc.tr, 0x1000)
			esp := sealed(t, o, ipv4(ip4A, ip4B, nil))
			forged := bytes.Clone(esp)
			binary.BigEndian.PutUint32(forged[4:], 1_000_000)
			if _, _, r := opened(in, forged); r != dropAuthFailed {
				t.Fatalf("forgery: %v", r)
			}
			if _, _, r := opened(in, esp); r != accepted {
				t.Fatalf("genuine packet after the forgery: %v", r)
			}
		})
	}
}

// TestESNHighBitsWrap seals across the 2^32 boundary of the sequence number
// and opens the packets in an order that makes the receiver infer both
// high halves, including one from before the boundary after one beyond it.
func TestESNHighBitsWrap(t *testing.T) {
	for _, sc := range suiteCases {
		t.Run(sc.name, func(t *testing.T) {
			o, in := saPair(t, withESN(sc.tr, true), 0x1000)
			o.seq.Store(1<<32 - 4)
			in.win.top = 1<<32 - 5
			var esps [][]byte
			for i := range 8 {
				esps = append(esps, sealed(t, o, numbered(uint32(i), 60)))
			}
			if got := o.seq.Load(); got != 1<<32+4 {
				t.Fatalf("sender at %#x, want %#x", got, uint64(1<<32+4))
			}
			for _, i := range []int{0, 1, 5, 2, 3, 4, 7, 6} {
				got, _, r := opened(in, esps[i])
				if r != accepted {
					t.Fatalf("packet %d (sequence number %#x): %v", i, uint64(1<<32-3+i), r)
				}
				if binary.BigEndian.Uint32(got[20:]) != uint32(i) {
					t.Fatalf("packet %d opened as %d", i, binary.BigEndian.Uint32(got[20:]))
				}
			}
			if in.win.top != 1<<32+4 {
				t.Fatalf("window top %#x, want %#x", in.win.top, uint64(1<<32+4))
			}
			if _, _, r := opened(in, esps[2]); r != dropReplay {
				t.Fatalf("replay across the boundary: %v", r)
			}
		})
	}
}

// TestESNWithoutHighBitsFails checks that the high half really enters the
// ICV: a receiver that infers the wrong one refuses the packet.
func TestESNWithoutHighBitsFails(t *testing.T) {
	for _, sc := range suiteCases {
		t.Run(sc.name, func(t *testing.T) {
			o, in := saPair(t, withESN(sc.tr, true), 0x1000)
			o.seq.Store(1 << 32)
			esp := sealed(t, o, ipv4(ip4A, ip4B, nil))
			if _, _, r := opened(in, esp); r != dropAuthFailed {
				t.Fatalf("open with the high half taken as 0: %v, want %v", r, dropAuthFailed)
			}
		})
	}
}

func TestReserveStopsAtSequenceLimit(t *testing.T) {
	for _, esn := range []bool{false, true} {
		o, _ := saPair(t, withESN(gcm128, esn), 0x1000)
		o.seq.Store(o.limit - 2)
		first, n := o.reserve(5)
		if first != o.limit-1 || n != 2 {
			t.Fatalf("esn %v: reserve(5) near the limit = %#x, %d; want %#x, 2", esn, first, n, o.limit-1)
		}
		if _, n := o.reserve(1); n != 0 {
			t.Fatalf("esn %v: reserved past the limit", esn)
		}
		if o.seq.Load() != o.limit {
			t.Fatalf("esn %v: counter %#x, want it held at %#x", esn, o.seq.Load(), o.limit)
		}
	}
	o, _ := saPair(t, gcm128, 0x1000)
	if o.limit != math.MaxUint32 {
		t.Fatalf("limit without ESN %#x, want 2^32-1", o.limit)
	}
}

// TestConcurrentOpenOfOneSA opens every packet of an SA from several
// goroutines at once: each must be accepted exactly once.
func TestConcurrentOpenOfOneSA(t *testing.T) {
	for _, sc := range suiteCases {
		t.Run(sc.name, func(t *testing.T) {
			o, in := saPair(t, sc.tr, 0x1000)
			const n = 1000
			esps := make([][]byte, n)
			for i := range esps {
				esps[i] = sealed(t, o, numbered(uint32(i), 64))
			}
			var hits [n]atomic.Int32
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for _, esp := range esps {
						got, _, r := opened(in, esp)
						switch r {
						case accepted:
							hits[binary.BigEndian.Uint32(got[20:])].Add(1)
						case dropReplay:
						default:
							t.Errorf("open: %v", r)
						}
					}
				})
			}
			wg.Wait()
			for i := range hits {
				if h := hits[i].Load(); h != 1 {
					t.Fatalf("packet %d accepted %d times, want once", i, h)
				}
			}
		})
	}
}

func TestSealAndOpenAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping: the race detector makes sync.Pool drop items, so pooled paths allocate")
	}
	for _, sc := range suiteCases {
		for _, esn := range []bool{false, true} {
			o, in := saPair(t, withESN(sc.tr, esn), 0x1000)
			pkt := ipv4(ip4A, ip4B, pattern(1380, 1))
			b := withHeadroom(pkt)
			var esp []byte
			if n := testing.AllocsPerRun(100, func() {
				seq, _ := o.reserve(1)
				var r reason
				if esp, r = o.seal(b[:transport.Headroom+len(pkt)], transport.Headroom, nextIPv4, seq); r != accepted {
					t.Fatal(r)
				}
			}); n != 0 {
				t.Errorf("%s esn %v: seal allocates %v times", sc.name, esn, n)
			}
			rx := socketBuf(esp)
			orig := bytes.Clone(rx[:rxOffset+len(esp)])
			s := new(scratch)
			seq := o.seq.Load()
			if n := testing.AllocsPerRun(100, func() {
				copy(rx, orig)
				in.win.reset(seq - 1)
				if _, _, r := in.open(rx[:len(orig)], rxOffset, s); r != accepted {
					t.Fatal(r)
				}
			}); n != 0 {
				t.Errorf("%s esn %v: open allocates %v times", sc.name, esn, n)
			}
		}
	}
}

// TestCBCMatchesStandardLibrary compares the in-place CBC loops with
// crypto/cipher's CBC modes on random keys, IVs and lengths.
func TestCBCMatchesStandardLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	fill := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for range 200 {
		block, err := aes.NewCipher(fill(16 + 16*rng.IntN(2)))
		if err != nil {
			t.Fatal(err)
		}
		iv, pt := fill(aes.BlockSize), fill(aes.BlockSize*(1+rng.IntN(100)))
		want := make([]byte, len(pt))
		cipher.NewCBCEncrypter(block, iv).CryptBlocks(want, pt)
		got := bytes.Clone(pt)
		cbcEncrypt(block, iv, got)
		if !bytes.Equal(got, want) {
			t.Fatalf("cbcEncrypt of %d bytes differs from crypto/cipher", len(pt))
		}
		cbcDecrypt(block, iv, got)
		if !bytes.Equal(got, pt) {
			t.Fatalf("cbcDecrypt of %d bytes does not invert cbcEncrypt", len(pt))
		}
	}
}

// TestIVs checks what each suite puts in the IV field: GCM the sequence
// number (unique, RFC 4106 §3.1), CBC values that are distinct, hide the
// counter and differ between two SAs under the same keys (RFC 3602 §3).
func TestIVs(t *testing.T) {
	pkt := ipv4(ip4A, ip4B, nil)
	o, _ := saPair(t, gcm128, 0x1000)
	for range 10 {
		esp := sealed(t, o, pkt)
		if iv := binary.BigEndian.Uint64(esp[espHeaderLen:]); iv != o.seq.Load() {
			t.Fatalf("GCM IV %#x, want the sequence number %#x", iv, o.seq.Load())
		}
	}
	a, _ := saPair(t, cbc128, 0x1000)
	b, _ := saPair(t, cbc128, 0x1000)
	seen := map[[cbcIVLen]byte]bool{}
	for range 1000 {
		ea, eb := sealed(t, a, pkt), sealed(t, b, pkt)
		iv := [cbcIVLen]byte(ea[espHeaderLen:])
		if seen[iv] {
			t.Fatalf("CBC IV % x repeated", iv)
		}
		seen[iv] = true
		if bytes.Equal(iv[:8], make([]byte, 8)) {
			t.Fatalf("CBC IV % x shows the counter", iv)
		}
		if bytes.Equal(iv[:], eb[espHeaderLen:espHeaderLen+cbcIVLen]) {
			t.Fatal("two SAs made the same IV for the same sequence number")
		}
	}
}
