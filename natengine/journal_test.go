package natengine

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/packet"
)

// conversation is one flow of the replication tests: first is its first
// packet, egress-started (from a local address) unless inbound.
type conversation struct {
	name    string
	first   pkt
	inbound bool
}

// open runs the handshake of c through e: the first packet, a reply and,
// for TCP, the originator's ACK. It returns the packets that continue the
// flow after it: one each way, as they reach the engine.
func (c conversation) open(t *testing.T, e *testEngine) (orig, reply pkt) {
	t.Helper()
	fwd, back := e.egress, e.ingress
	if c.inbound {
		fwd, back = e.ingress, e.egress
	}
	out, ok := fwd(t, c.first.build())
	if !ok {
		t.Fatalf("%s: first packet dropped: %+v", c.name, e.Stats().Drops)
	}
	src, dst := tuple(t, out)
	reply = c.first.reply(src, dst)
	if _, ok := back(t, reply.build()); !ok {
		t.Fatalf("%s: reply dropped: %+v", c.name, e.Stats().Drops)
	}
	orig = c.first
	if orig.proto == tcp {
		orig.flags = ack
		reply.flags = ack
	}
	if _, ok := fwd(t, orig.build()); !ok {
		t.Fatalf("%s: second packet dropped", c.name)
	}
	return orig, reply
}

// replicate carries the records of a dump of a, then of its journal,
// through the wire form into replica.
func replicate(t *testing.T, a *testEngine, j *Journal, replica *Replica, dump bool) {
	t.Helper()
	apply := func(recs []Record) bool {
		var wire []byte
		for i := range recs {
			wire = AppendRecord(wire, &recs[i])
		}
		for len(wire) > 0 {
			r, n, err := DecodeRecord(wire)
			if err != nil {
				t.Fatal(err)
			}
			replica.Apply(&r)
			wire = wire[n:]
		}
		return true
	}
	if dump {
		j.Reset()
		replica.BeginResync()
		a.Dump(make([]Record, 3), apply)
		replica.EndResync()
	}
	buf := make([]Record, 5)
	for {
		n, lost := j.Drain(buf, nil)
		if lost {
			t.Fatal("journal overflowed")
		}
		if n == 0 {
			return
		}
		apply(buf[:n])
	}
}

func TestReplicatedFlowsTranslateAsOnTheActive(t *testing.T) {
	v4 := []conversation{
		{"TCP from a pod", pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn}, false},
		{"TCP from a second pod of a one-IP pool, same port: a searched global port", pkt{src: "10.0.1.8", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn}, false},
		{"TCP from the first pod of that pool", pkt{src: "10.0.1.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn}, false},
		{"UDP from a pod", pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5353, dport: 53}, false},
		{"ICMP echo from a pod", pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: icmp, icmpType: packet.ICMPv4EchoRequest, sport: 77, dport: 77}, false},
		{"TCP to a service's global IP", pkt{src: "242.2.0.9", dst: "242.1.0.200", proto: tcp, sport: 50000, dport: 80, flags: syn}, true},
		{"UDP to a headless pod's global IP", pkt{src: "242.2.0.9", dst: "242.1.0.201", proto: udp, sport: 6000, dport: 53}, true},
		{"ICMP echo to a service's global IP", pkt{src: "242.2.0.9", dst: "242.1.0.200", proto: icmp, icmpType: packet.ICMPv4EchoRequest, sport: 5, dport: 5}, true},
	}
	v6 := []conversation{
		{"IPv6 TCP from a pod", pkt{src: "fd00::7", dst: "fd42:2::9", proto: tcp, sport: 40000, dport: 443, flags: syn}, false},
		{"IPv6 UDP from a pod", pkt{src: "fd00::7", dst: "fd42:2::9", proto: udp, sport: 5353, dport: 53}, false},
		{"ICMPv6 echo from a pod", pkt{src: "fd00::7", dst: "fd42:2::9", proto: icm6, icmpType: packet.ICMPv6EchoRequest, sport: 9, dport: 9}, false},
		{"IPv6 TCP to a service's global IP", pkt{src: "fd42:2::9", dst: "fd42:1::200", proto: tcp, sport: 50000, dport: 80, flags: syn}, true},
	}
	for _, set := range []struct {
		name  string
		rules Rules
		convs []conversation
	}{{"IPv4", testRules(), v4}, {"IPv6", testRules6(), v6}} {
		t.Run(set.name, func(t *testing.T) {
			a := newTestEngine(t, Config{}, set.rules)
			j, err := NewJournal(64, nil)
			if err != nil {
				t.Fatal(err)
			}
			a.SetJournal(j)
			replica := NewReplica(DefaultMaxFlows)
			type next struct{ orig, reply pkt }
			nexts := make([]next, len(set.convs))
			// Half the flows reach the replica through a dump, the rest
			// through the journal.
			half := len(set.convs) / 2
			for i, c := range set.convs[:half] {
				nexts[i].orig, nexts[i].reply = c.open(t, a)
			}
			replicate(t, a, j, replica, true)
			for i, c := range set.convs[half:] {
				nexts[half+i].orig, nexts[half+i].reply = c.open(t, a)
			}
			replicate(t, a, j, replica, false)

			b := newTestEngine(t, Config{}, set.rules)
			taken, skipped := b.Import(replica.Records())
			if taken != len(set.convs) || skipped != 0 {
				t.Fatalf("Import took %d and skipped %d, want %d and 0", taken, skipped, len(set.convs))
			}
			for i, c := range set.convs {
				fwdA, backA, fwdB, backB := a.egress, a.ingress, b.egress, b.ingress
				if c.inbound {
					fwdA, backA, fwdB, backB = a.ingress, a.egress, b.ingress, b.egress
				}
				for _, d := range []struct {
					dir    string
					p      pkt
					fa, fb func(testing.TB, []byte) ([]byte, bool)
				}{{"original", nexts[i].orig, fwdA, fwdB}, {"reply", nexts[i].reply, backA, backB}} {
					wantB, okA := d.fa(t, d.p.build())
					gotB, okB := d.fb(t, d.p.build())
					if !okA || !okB || !bytes.Equal(gotB, wantB) {
						t.Errorf("%s, %s direction: standby gives %x (%v), active %x (%v)", c.name, d.dir, gotB, okB, wantB, okA)
					}
				}
			}
			if got, want := flowSummary(b.Flows()), flowSummary(a.Flows()); got != want {
				t.Errorf("standby's flows:\n%s\nactive's:\n%s", got, want)
			}
		})
	}
}

// flowSummary lists flows by tuple and state, sorted, ages aside.
func flowSummary(fl []Flow) string {
	lines := make([]string, 0, len(fl))
	for _, f := range fl {
		lines = append(lines, f.Original.Src.String()+">"+f.Original.Dst.String()+" "+f.Reply.Src.String()+">"+f.Reply.Dst.String()+" "+f.State.String())
	}
	slices.Sort(lines)
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

func TestReplicaFollowsRemovalsAndStateChanges(t *testing.T) {
	a := newTestEngine(t, Config{}, testRules())
	j, _ := NewJournal(64, nil)
	a.SetJournal(j)
	replica := NewReplica(DefaultMaxFlows)
	tcpConv := conversation{"TCP", pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn}, false}
	echoConv := conversation{"echo", pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: icmp, icmpType: packet.ICMPv4EchoRequest, sport: 77, dport: 77}, false}
	orig, _ := tcpConv.open(t, a)
	echoConv.open(t, a)
	replicate(t, a, j, replica, true)
	if replica.Len() != 2 {
		t.Fatalf("replica holds %d flows, want 2", replica.Len())
	}

	// The originator closes its side; the echo flow expires on A.
	orig.flags = fin | ack
	if _, ok := a.egress(t, orig.build()); !ok {
		t.Fatal("FIN dropped")
	}
	a.clock.Advance(DefaultICMP + 2*time.Second)
	if n := a.Stats().Flows; n != 1 {
		t.Fatalf("active holds %d flows after the echo timeout, want 1", n)
	}
	replicate(t, a, j, replica, false)

	b := newTestEngine(t, Config{}, testRules())
	if taken, skipped := b.Import(replica.Records()); taken != 1 || skipped != 0 {
		t.Fatalf("Import took %d and skipped %d, want 1 and 0", taken, skipped)
	}
	fl := b.Flows()
	if len(fl) != 1 || fl[0].Proto != tcp || fl[0].State != StateFinWait {
		t.Fatalf("standby's flows = %+v, want the TCP flow in fin_wait", fl)
	}
}

func TestResyncDropsWhatTheActiveNoLongerHas(t *testing.T) {
	a := newTestEngine(t, Config{}, testRules())
	j, _ := NewJournal(1, nil)
	a.SetJournal(j)
	replica := NewReplica(DefaultMaxFlows)
	replica.Apply(&Record{Op: OpNew, Proto: udp, State: uint32(StateReplied), Local: a16("10.0.0.99"), Remote: a16("242.2.0.1"), Global: a16("242.1.0.1"), LPort: 1, GPort: 1, RPort: 2})
	for _, p := range []uint16{1000, 1001, 1002} {
		conversation{"UDP", pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: p, dport: 53}, false}.open(t, a)
	}
	if _, lost := j.Drain(make([]Record, 8), nil); !lost {
		t.Fatal("Drain of an overflowed journal did not report the loss")
	}
	if j.Overflows() != 1 {
		t.Fatalf("Overflows = %d, want 1", j.Overflows())
	}
	replicate(t, a, j, replica, true)
	if replica.Len() != 3 {
		t.Fatalf("replica holds %d flows after the resync, want the active's 3", replica.Len())
	}
}

func TestReplicaIsBounded(t *testing.T) {
	p := NewReplica(2)
	for i := range 3 {
		p.Apply(&Record{Op: OpNew, Proto: udp, State: uint32(StateUnreplied), LPort: uint16(i)})
	}
	if p.Len() != 2 || p.Full() != 1 {
		t.Fatalf("Len %d, Full %d; want 2 and 1", p.Len(), p.Full())
	}
	p.Apply(&Record{Op: OpChange, Proto: udp, State: uint32(StateReplied), LPort: 0})
	p.Apply(&Record{Op: OpRemove, Proto: udp, LPort: 1})
	if p.Len() != 1 || p.Records()[0].FlowState() != StateReplied {
		t.Fatalf("after a change and a removal: %+v", p.Records())
	}
}

func TestImportKeepsTheEngineInvariants(t *testing.T) {
	rec := func(proto uint8, local string, lport uint16, global string, gport uint16) Record {
		st := uint32(StateReplied) | stReplied
		if proto == tcp {
			st = uint32(StateEstablished) | stReplied
		}
		return Record{Op: OpNew, Proto: proto, State: st, Local: a16(local), LPort: lport, Global: a16(global), GPort: gport, Remote: a16("242.2.0.9"), RPort: 443}
	}
	b := newTestEngine(t, Config{MaxFlows: 16, MaxFlowsPerSource: 3}, testRules())
	recs := []Record{
		rec(tcp, "10.0.1.7", 40000, "242.1.0.50", 40000),
		rec(udp, "10.0.1.7", 5000, "242.1.0.50", 5000),
	}
	bad := []Record{
		rec(tcp, "10.0.1.7", 40000, "242.1.0.50", 40000), // the same flow again
		rec(tcp, "10.0.1.7", 40001, "242.1.0.99", 40001), // a global IP no rule gives the pod
		rec(tcp, "10.9.0.1", 40000, "242.1.0.1", 40000),  // not a local address
		rec(udp, "10.0.1.8", 5000, "242.1.0.50", 5000),   // another pod's UDP mapping
		func() Record {
			r := rec(udp, "10.0.0.7", 1, "242.1.0.3", 1)
			r.State = uint32(StateEstablished)
			return r
		}(),
		func() Record { r := rec(tcp, "10.0.0.7", 2, "242.1.0.3", 2); r.Op = OpRemove; return r }(),
	}
	if taken, skipped := b.Import(append(recs, bad...)); taken != len(recs) || skipped != len(bad) {
		t.Fatalf("Import took %d and skipped %d, want %d and %d", taken, skipped, len(recs), len(bad))
	}

	// A new TCP flow of another pod of the one-IP pool to the same
	// destination and port must not take the imported global port.
	out, ok := b.egress(t, pkt{src: "10.0.1.8", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn}.build())
	if src, _ := tuple(t, out); !ok || src == ap("242.1.0.50:40000") {
		t.Fatalf("new flow leaves from %v (ok %v), the imported flow's global port", src, ok)
	}
	// UDP keeps the imported endpoint-independent mapping: the pod's port
	// to a new destination leaves from it, another pod's does not.
	out, _ = b.egress(t, pkt{src: "10.0.1.7", dst: "242.2.0.10", proto: udp, sport: 5000, dport: 53}.build())
	if src, _ := tuple(t, out); src != ap("242.1.0.50:5000") {
		t.Fatalf("imported pod's UDP to a new destination leaves from %v, want its mapping 242.1.0.50:5000", src)
	}
	out, _ = b.egress(t, pkt{src: "10.0.1.8", dst: "242.2.0.10", proto: udp, sport: 5000, dport: 53}.build())
	if src, _ := tuple(t, out); src == ap("242.1.0.50:5000") {
		t.Fatal("another pod's UDP took the imported mapping")
	}
	// The pod's share counts its imported flows: it holds 3 now.
	if _, ok := b.egress(t, pkt{src: "10.0.1.7", dst: "242.2.0.9", proto: tcp, sport: 1, dport: 443, flags: syn}.build()); ok {
		t.Fatal("a source at its share with imported flows was given one more")
	}
	if taken, _ := b.Import([]Record{rec(tcp, "10.0.1.7", 40002, "242.1.0.50", 40002)}); taken != 0 {
		t.Fatal("Import gave a source at its share one more flow")
	}
}

func TestJournalCostsNoAllocations(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	j, _ := NewJournal(16, nil)
	e.SetJournal(j)
	orig, reply := conversation{"TCP", pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: syn}, false}.open(t, e)
	// Every packet of the cycle changes the state word: RST closes, SYN
	// reopens, SYN-ACK answers, ACK establishes.
	steps := []struct {
		p  pkt
		fn func(int, []byte, *packet.Parsed) bool
	}{}
	for _, s := range []struct {
		p     pkt
		flags uint8
		fn    func(int, []byte, *packet.Parsed) bool
	}{{orig, rst, e.Egress}, {orig, syn, e.Egress}, {reply, syn | ack, e.Ingress}, {orig, ack, e.Egress}} {
		s.p.flags = s.flags
		steps = append(steps, struct {
			p  pkt
			fn func(int, []byte, *packet.Parsed) bool
		}{s.p, s.fn})
	}
	bufs := make([][]byte, len(steps))
	for i := range steps {
		bufs[i] = steps[i].p.build()
	}
	buf := make([]byte, 1500)
	drained := make([]Record, 16)
	stamps := make([]int64, 16)
	var p packet.Parsed
	j.Reset()
	allocs := testing.AllocsPerRun(1000, func() {
		for i, s := range steps {
			n := copy(buf, bufs[i])
			p.Decode(buf[:n])
			if !s.fn(0, buf[:n], &p) {
				t.Fatal("dropped")
			}
		}
		if n, lost := j.Drain(drained, stamps); n != len(steps) || lost {
			t.Fatalf("journal holds %d records (lost %v), want one per packet (%d)", n, lost, len(steps))
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per cycle of state changes with a journal, want 0", allocs)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		x := randomRecord(r)
		b := AppendRecord(nil, &x)
		y, n, err := DecodeRecord(b)
		if err != nil || n != len(b) || y != x {
			t.Fatalf("decode(encode(%+v)) = %+v, %d, %v", x, y, n, err)
		}
	}
}

func randomRecord(r *rand.Rand) Record {
	x := Record{
		Op: Op(1 + r.IntN(3)), Proto: uint8(r.Uint32()), V6: r.IntN(2) == 0, Inbound: r.IntN(2) == 0, Echo: r.IntN(2) == 0,
		State: uint32(1+r.IntN(8)) | r.Uint32()&(stReplied|stFinOrig|stFinReply), Age: r.Uint32(),
		LPort: uint16(r.Uint32()), GPort: uint16(r.Uint32()), RPort: uint16(r.Uint32()),
	}
	n := 4
	if x.V6 {
		n = 16
	}
	for _, a := range []*[16]byte{&x.Local, &x.Global, &x.Remote} {
		for i := range n {
			a[i] = byte(r.Uint32())
		}
	}
	return x
}

func FuzzRecord(f *testing.F) {
	for _, s := range []string{"10.0.0.7", "fd00::7"} {
		a := netip.MustParseAddr(s)
		x := Record{Op: OpNew, Proto: tcp, V6: a.Is6(), State: uint32(StateEstablished) | stReplied, Age: 9, Local: addr16(a), LPort: 1, GPort: 2, RPort: 3}
		f.Add(AppendRecord(nil, &x))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		x, n, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if enc := AppendRecord(nil, &x); !bytes.Equal(enc, b[:n]) {
			t.Fatalf("encode(decode(%x)) = %x", b[:n], enc)
		}
		y, m, err := DecodeRecord(AppendRecord(nil, &x))
		if err != nil || m != n || y != x {
			t.Fatalf("decode(encode(%+v)) = %+v, %d, %v", x, y, m, err)
		}
	})
}
