package esp

import (
	"fmt"
	"testing"

	"github.com/snorkel-net/snorkel/transport"
)

// benchSuites are the suites the benchmarks compare.
var benchSuites = suiteCases[:3]

var benchSizes = []int{64, 1400}

// BenchmarkSeal is ns per packet to seal an inner packet of each size in
// place: framing, IV, encryption and ICV.
func BenchmarkSeal(b *testing.B) {
	for _, sc := range benchSuites {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", sc.name, size), func(b *testing.B) {
				o, _ := saPair(b, sc.tr, 0x1000)
				pkt := ipv4(ip4A, ip4B, pattern(size-20, 1))
				buf := withHeadroom(pkt)
				n := transport.Headroom + len(pkt)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					seq, _ := o.reserve(1)
					if _, r := o.seal(buf[:n], transport.Headroom, nextIPv4, seq); r != accepted {
						b.Fatal(r)
					}
				}
			})
		}
	}
}

// BenchmarkOpen is ns per packet to open a sealed packet of each size in
// place: replay check, ICV, decryption, padding check and commit. Packets
// are sealed ahead in rounds of openRound, out of the timer.
func BenchmarkOpen(b *testing.B) {
	const openRound = 1024
	for _, sc := range benchSuites {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", sc.name, size), func(b *testing.B) {
				o, in := saPair(b, sc.tr, 0x1000)
				pkt := ipv4(ip4A, ip4B, pattern(size-20, 1))
				n := transport.Headroom + len(pkt)
				start := transport.Headroom - o.headerLen()
				bufs := make([][]byte, openRound)
				ends := make([]int, openRound)
				for i := range bufs {
					bufs[i] = withHeadroom(pkt)
				}
				seal := func() {
					for i, buf := range bufs {
						seq, _ := o.reserve(1)
						esp, r := o.seal(buf[:n], transport.Headroom, nextIPv4, seq)
						if r != accepted {
							b.Fatal(r)
						}
						ends[i] = start + len(esp)
					}
				}
				seal()
				s := new(scratch)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if i == openRound {
						b.StopTimer()
						seal()
						i = 0
						b.StartTimer()
					}
					if _, _, r := in.open(bufs[i][:ends[i]], start, s); r != accepted {
						b.Fatal(r)
					}
					i++
				}
			})
		}
	}
}
