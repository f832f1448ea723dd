package udp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/snorkel-net/snorkel/transport"
)

// message is one prepared message as a test reads it back: its bytes and
// its UDP_SEGMENT size, 0 without one.
type message struct {
	data []byte
	seg  int
}

func readMessages(sc *sendScratch, n int) []message {
	var out []message
	for i := range n {
		var data []byte
		for _, iov := range unsafe.Slice(sc.msgs[i].Hdr.Iov, sc.msgs[i].Hdr.Iovlen) {
			if iov.Base != nil {
				data = append(data, unsafe.Slice(iov.Base, iov.Len)...)
			}
		}
		seg := 0
		if h := sc.msgs[i].Hdr; h.Control != nil {
			c := unsafe.Slice(h.Control, h.Controllen)
			ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			if ch.Level == unix.SOL_UDP && ch.Type == unix.UDP_SEGMENT {
				seg = int(*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])))
			}
		}
		out = append(out, message{data, seg})
	}
	return out
}

// referencePlan is the slow statement of prepare's grouping: the lengths of
// the datagrams each message carries.
func referencePlan(lens []int, gso bool, max int) [][]int {
	var plan [][]int
	i := 0
	for i < len(lens) {
		group := []int{lens[i]}
		total, size := lens[i], lens[i]
		i++
		for gso && size > 0 && i < len(lens) && len(group) < maxSegments {
			l := lens[i]
			if l == 0 || l > size || total+l > max {
				break
			}
			group = append(group, l)
			total += l
			i++
			if l < size {
				break
			}
		}
		plan = append(plan, group)
	}
	return plan
}

// checkPrepare prepares bufs (lengths lens, capacities caps, which must not
// matter) and checks the messages against referencePlan and against the
// datagrams' bytes.
func checkPrepare(t *testing.T, lens, caps []int, gso bool, max int) {
	t.Helper()
	bufs := make([][]byte, len(lens))
	var want [][]byte
	for i, l := range lens {
		bufs[i] = make([]byte, l, caps[i])
		for j := range bufs[i] {
			bufs[i][j] = byte(i*7 + j)
		}
		want = append(want, bytes.Clone(bufs[i]))
	}
	sc := sendPool.Get().(*sendScratch)
	defer sendPool.Put(sc)
	sc.setDest(netip.MustParseAddr("192.0.2.1"), 4500)
	n := sc.prepare(bufs, gso, max)
	got := readMessages(sc, n)
	sc.clear(n)
	plan := referencePlan(lens, gso, max)
	if len(got) != len(plan) {
		t.Fatalf("lens %v caps %v gso %v max %d: %d messages, want %d (%v)", lens, caps, gso, max, len(got), len(plan), plan)
	}
	k := 0
	for i, m := range got {
		group := plan[i]
		wantSeg := 0
		if len(group) > 1 {
			wantSeg = group[0]
		}
		if m.seg != wantSeg {
			t.Fatalf("message %d: segment size %d, want %d (group %v)", i, m.seg, wantSeg, group)
		}
		var joined []byte
		for range group {
			joined = append(joined, want[k]...)
			k++
		}
		if !bytes.Equal(m.data, joined) {
			t.Fatalf("message %d: %d bytes differ from its datagrams' %d", i, len(m.data), len(joined))
		}
	}
	for i := range bufs {
		if !bytes.Equal(bufs[i], want[i]) {
			t.Fatalf("datagram %d was changed by prepare", i)
		}
	}
}

func TestPrepareCoalescesRunsOfEqualSize(t *testing.T) {
	big := transport.BufSize
	for _, tc := range []struct {
		name string
		lens []int
		caps []int
		gso  bool
		max  int
	}{
		{"a run with a short last", []int{1400, 1400, 1400, 700}, []int{big, big, big, big}, true, 65507},
		{"a short datagram ends the run", []int{1400, 700, 1400, 1400}, []int{big, big, big, big}, true, 65507},
		{"a longer one starts a new run", []int{700, 1400, 1400}, []int{big, big, big}, true, 65507},
		{"no tailroom is needed", []int{1400, 1400}, []int{1400, 1400}, true, 65507},
		{"the payload limit", []int{30000, 30000, 30000}, []int{big, big, big}, true, 65507},
		{"without GSO", []int{1400, 1400, 1400}, []int{big, big, big}, false, 65507},
		{"empty datagrams", []int{0, 0, 100, 0}, []int{big, big, big, big}, true, 65507},
		{"more than the kernel's segments", repeat(100, 64*2+3)[:BatchSize], repeat(big, BatchSize), true, 65507},
	} {
		t.Run(tc.name, func(t *testing.T) { checkPrepare(t, tc.lens, tc.caps, tc.gso, tc.max) })
	}
}

func repeat(v, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// FuzzPrepare checks prepare's messages against referencePlan and the
// datagrams' bytes for batches of any lengths and capacities.
func FuzzPrepare(f *testing.F) {
	f.Add([]byte{10, 10, 10, 5}, true, uint16(65507))
	f.Add([]byte{10, 20, 10, 10, 0, 3}, true, uint16(40))
	f.Add([]byte{1, 1, 1}, false, uint16(100))
	f.Fuzz(func(t *testing.T, spec []byte, gso bool, max uint16) {
		if len(spec) > BatchSize {
			spec = spec[:BatchSize]
		}
		lens := make([]int, len(spec))
		caps := make([]int, len(spec))
		for i, s := range spec {
			lens[i] = int(s&0x3f) * 3
			caps[i] = lens[i] + int(s>>6)*int(s&0x3f)*40
		}
		checkPrepare(t, lens, caps, gso, int(max))
	})
}

// fakeRead fills b as a recvmmsg call would: one message per entry of dgrams,
// from src, each with a UDP_GRO control message when its segment size is
// not 0.
func fakeRead(b *batch, src netip.AddrPort, dgrams [][]byte, segs []int) {
	b.reset()
	for i, d := range dgrams {
		copy(b.bufs[i][b.offset:], d)
		m := &b.msgs[i]
		m.Len = uint32(len(d))
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&b.names[i]))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: src.Addr().As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], src.Port())
		m.Hdr.Namelen = unix.SizeofSockaddrInet4
		m.Hdr.Controllen = 0
		if segs[i] > 0 {
			c := unsafe.Slice((*byte)(unsafe.Pointer(&b.ctrl[i])), ctrlWords*8)
			h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			h.Level, h.Type = unix.SOL_UDP, unix.UDP_GRO
			h.SetLen(unix.CmsgLen(4))
			*(*int32)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = int32(segs[i])
			m.Hdr.SetControllen(unix.CmsgSpace(4))
		}
	}
	b.n = len(dgrams)
}

// referenceSplit is the slow statement of dispatch's splitting: every
// datagram cut into pieces of its segment size.
func referenceSplit(dgrams [][]byte, segs []int) [][]byte {
	var out [][]byte
	for i, d := range dgrams {
		s := segs[i]
		if s <= 0 || len(d) <= s {
			out = append(out, d)
			continue
		}
		for len(d) > 0 {
			n := min(s, len(d))
			out = append(out, d[:n])
			d = d[n:]
		}
	}
	return out
}

// checkDispatch feeds dgrams through dispatch and compares what the handler
// was given with referenceSplit.
func checkDispatch(t *testing.T, dgrams [][]byte, segs []int) {
	t.Helper()
	const offset = 30
	b := batchPool.Get().(*batch)
	defer batchPool.Put(b)
	b.setOffset(offset)
	src := netip.MustParseAddrPort("198.18.0.2:4500")
	fakeRead(b, src, dgrams, segs)
	var got [][]byte
	calls := 0
	b.dispatch(func(bufs [][]byte, sizes []int, srcs []netip.AddrPort) {
		calls++
		if len(bufs) > BatchSize {
			t.Fatalf("handler given %d datagrams, more than BatchSize", len(bufs))
		}
		seen := map[*byte]bool{}
		for i := range bufs {
			if seen[&bufs[i][0]] {
				t.Fatalf("buffer %d is given twice in one call", i)
			}
			seen[&bufs[i][0]] = true
			if srcs[i] != src {
				t.Fatalf("datagram from %v, want %v", srcs[i], src)
			}
			if !inside(bufs[i], b.bufs[:len(dgrams)]) {
				t.Fatalf("datagram %d was moved, want it where the kernel wrote it", i)
			}
			got = append(got, bytes.Clone(bufs[i][offset:offset+sizes[i]]))
		}
		// The handler owns its datagrams until it returns: scribble
		// over them.
		for i := range bufs {
			clear(bufs[i][offset : offset+sizes[i]])
		}
	})
	want := referenceSplit(dgrams, segs)
	if len(got) != len(want) {
		t.Fatalf("handler given %d datagrams in %d calls, want %d", len(got), calls, len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("datagram %d: %d bytes % x…, want %d bytes % x…", i, len(got[i]), head(got[i]), len(want[i]), head(want[i]))
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 8)] }

// inside reports whether b starts within one of bufs.
func inside(b []byte, bufs [][]byte) bool {
	p := uintptr(unsafe.Pointer(&b[0]))
	for _, c := range bufs {
		if start := uintptr(unsafe.Pointer(&c[0])); p >= start && p < start+uintptr(len(c)) {
			return true
		}
	}
	return false
}

func pattern(n, seed int) []byte {
	d := make([]byte, n)
	for i := range d {
		d[i] = byte(seed*31 + i*7)
	}
	return d
}

func TestDispatchSplitsCoalescedDatagrams(t *testing.T) {
	for _, tc := range []struct {
		name string
		lens []int
		segs []int
	}{
		{"one datagram each", []int{100, 1400, 64}, []int{0, 0, 0}},
		{"a coalesced run with a short last segment", []int{1400*10 + 300}, []int{1400}},
		{"mixed", []int{64, 1400 * 3, 64, 700*5 + 1}, []int{0, 1400, 0, 700}},
		{"a segment size above the length", []int{500}, []int{1400}},
		{"more segments than one call takes", repeat(64*64, 5), repeat(64, 5)},
		{"a full batch of single datagrams", repeat(64, BatchSize), repeat(0, BatchSize)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dgrams [][]byte
			for i, l := range tc.lens {
				dgrams = append(dgrams, pattern(l, i))
			}
			checkDispatch(t, dgrams, tc.segs)
		})
	}
}

// FuzzDispatch checks dispatch's splitting against referenceSplit for
// batches of any datagram and segment sizes.
func FuzzDispatch(f *testing.F) {
	f.Add([]byte{10, 3, 200, 0, 255, 7})
	f.Add([]byte{255, 1, 255, 1, 255, 1})
	f.Fuzz(func(t *testing.T, spec []byte) {
		var dgrams [][]byte
		var segs []int
		for i := 0; i+1 < len(spec) && len(dgrams) < BatchSize; i += 2 {
			l := int(spec[i]) * 13
			dgrams = append(dgrams, pattern(l, i))
			segs = append(segs, int(spec[i+1]))
		}
		checkDispatch(t, dgrams, segs)
	})
}

func TestGROSizeIgnoresOtherAndMalformedControlMessages(t *testing.T) {
	var words [ctrlWords]uint64
	c := unsafe.Slice((*byte)(unsafe.Pointer(&words)), ctrlWords*8)
	if got := groSize(c[:0]); got != 0 {
		t.Fatalf("no control data: %d, want 0", got)
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	h.Level, h.Type = unix.SOL_IP, unix.IP_TOS
	h.SetLen(unix.CmsgLen(1))
	if got := groSize(c); got != 0 {
		t.Fatalf("an IP_TOS message: %d, want 0", got)
	}
	h.SetLen(len(c) + 8)
	if got := groSize(c); got != 0 {
		t.Fatalf("a length past the buffer: %d, want 0", got)
	}
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_GRO
	h.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = 1448
	if got := groSize(c); got != 1448 {
		t.Fatalf("UDP_GRO 1448: %d", got)
	}
}
