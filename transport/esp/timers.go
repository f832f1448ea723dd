package esp

import "time"

// clockTick is the resolution of the transport's coarse clock, which stamps
// SAStats.LastIn so that packets never call time.Now.
const clockTick = 250 * time.Millisecond

// runTimers keeps the coarse clock and sends the NAT-keepalives until
// Close.
func (t *Transport) runTimers() {
	defer t.timers.Done()
	tick := time.NewTicker(min(clockTick, t.cfg.keepalive))
	defer tick.Stop()
	due := time.Now().Add(t.cfg.keepalive)
	for {
		select {
		case <-t.done:
			return
		case now := <-tick.C:
			t.now.Store(now.UnixNano())
			if !now.Before(due) {
				due = now.Add(t.cfg.keepalive)
				t.sendKeepalives()
			}
		}
	}
}

// sendKeepalives sends a NAT-keepalive (RFC 3948 §2.3) to each peer that
// has an outbound SA, so that NATs on the path keep the mapping for the
// peer's traffic while it is idle.
func (t *Transport) sendKeepalives() {
	for _, p := range *t.peers.Load() {
		if p == nil || p.out.Load() == nil {
			continue
		}
		ka := [][]byte{{keepaliveByte}}
		if err := t.conn.Send(ka, *p.endpoint.Load()); err != nil {
			p.drops.add(dropKeepaliveFailed, 1)
		}
	}
}
