package ike

import "encoding/binary"

// informationalRequest answers INFORMATIONAL (RFC 7296 §1.4): Deletes of
// CHILD_SAs are answered with the Deletes of their other halves, a Delete
// of the IKE SA removes it once answered, and an empty request is a
// liveness check that an empty answer satisfies.
func (e *Engine) informationalRequest(sa *ikeSA, m *message) ([]payload, func()) {
	p := sa.p
	var (
		resp  []payload
		after func()
	)
	for _, pl := range m.payloads {
		switch d := pl.(type) {
		case *deletePayload:
			switch {
			case d.protocol == protoIKE:
				after = func() { e.ikeDeleted(sa) }
			case d.protocol == protoESP && d.spiSize == 4:
				var ours [][]byte
				for _, s := range d.spis {
					c := e.childByOut(p, s)
					if c == nil {
						continue
					}
					// Deletes that crossed are not answered with a
					// Delete (§1.4.1).
					if c.state != childDeleting {
						ours = append(ours, spiBytes(c.InSPI))
					}
					e.removeChild(c)
				}
				if len(ours) > 0 {
					resp = append(resp, &deletePayload{protocol: protoESP, spiSize: 4, spis: ours})
				}
			}
		case *notifyPayload:
			if d.typ == notifyAuthenticationFailed {
				after = func() { e.fail(p, authFailed) }
			}
		}
	}
	return resp, after
}

// ikeDeleted removes sa, which the peer deleted, with its CHILD_SAs. A
// peer this side initiates to is connected again.
func (e *Engine) ikeDeleted(sa *ikeSA) {
	p := sa.p
	inUse := sa == p.ike
	e.removeSA(sa)
	if inUse {
		e.log.Info("ike: the peer deleted the IKE SA", "peer", p.name)
		e.scheduleRestart(p)
	}
}

// deleteIKE deletes sa, telling the peer (RFC 7296 §1.4.1). Its CHILD_SAs
// go at once, as they do at the peer with the IKE SA.
func (e *Engine) deleteIKE(sa *ikeSA) {
	if sa.p.ike == sa {
		sa.p.ike = nil
	}
	for len(sa.children) > 0 {
		e.removeChild(sa.children[0])
	}
	sa.queue = nil
	e.enqueue(sa, func(sa *ikeSA) {
		sa.state = saDeleting
		e.sendRequest(sa, exchInformational, []payload{&deletePayload{protocol: protoIKE}},
			&request{onReply: func([]payload) { e.removeSA(sa) }})
	})
}

// dpd checks that the peer is alive with an empty INFORMATIONAL (RFC 7296
// §2.4); its answer is all that counts.
func (e *Engine) dpd(sa *ikeSA) {
	if sa != sa.p.ike {
		return
	}
	e.sendRequest(sa, exchInformational, nil, &request{onReply: func([]payload) {}})
}

func spi64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }
