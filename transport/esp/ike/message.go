package ike

import (
	"encoding/binary"
	"errors"
)

// headerLen is the size of the IKE header (RFC 7296 §3.1).
const headerLen = 28

// maxMessage bounds the messages the engine builds and accepts; with PSK
// authentication and no certificates IKEv2 messages stay far below it.
const maxMessage = 64 << 10

// message is an IKE message. After parseMessage the payloads of an
// encrypted message are a single *skPayload; openSK replaces it with the
// payloads inside.
type message struct {
	spiI, spiR uint64
	exchange   uint8
	flags      uint8
	id         uint32
	payloads   []payload
}

func (m *message) isResponse() bool    { return m.flags&flagResponse != 0 }
func (m *message) fromInitiator() bool { return m.flags&flagInitiator != 0 }

// remoteSPI is the SPI that the sender of m chose.
func (m *message) remoteSPI() uint64 {
	if m.fromInitiator() {
		return m.spiI
	}
	return m.spiR
}

// parseMessage parses the header and the unencrypted payload chain of b.
// It keeps no reference to b. When the header parses and a payload does
// not, it returns the message without payloads and the error, so that the
// caller can answer an unsupported critical payload.
func parseMessage(b []byte) (*message, error) {
	if len(b) < headerLen {
		return nil, malformed("message of %d bytes, shorter than the IKE header", len(b))
	}
	if b[17]>>4 != 2 {
		return nil, malformed("major version %d, want 2", b[17]>>4)
	}
	if n := binary.BigEndian.Uint32(b[24:]); n != uint32(len(b)) {
		return nil, malformed("header length %d for a %d-byte message", n, len(b))
	}
	m := &message{
		spiI:     binary.BigEndian.Uint64(b),
		spiR:     binary.BigEndian.Uint64(b[8:]),
		exchange: b[18],
		flags:    b[19],
		id:       binary.BigEndian.Uint32(b[20:]),
	}
	ps, err := parsePayloads(b[16], b[headerLen:])
	if err != nil {
		return m, err
	}
	m.payloads = ps
	return m, nil
}

// parsePayloads parses a chain of payloads whose first has type next. An
// SK payload ends the chain and must end b.
func parsePayloads(next uint8, b []byte) ([]payload, error) {
	var ps []payload
	for next != payloadNone {
		if len(b) < 4 {
			return nil, malformed("payload type %d: %d bytes left, want a 4-byte header", next, len(b))
		}
		n := int(binary.BigEndian.Uint16(b[2:]))
		if n < 4 || n > len(b) {
			return nil, malformed("payload type %d: length %d with %d bytes left", next, n, len(b))
		}
		typ, critical, body := next, b[1]&0x80 != 0, b[4:n]
		next = b[0]
		if typ == payloadSK {
			if n != len(b) {
				return nil, malformed("SK payload is not the last payload")
			}
			return append(ps, &skPayload{next: next, body: clone(body)}), nil
		}
		p, err := parsePayload(typ, critical, body)
		if err != nil {
			return nil, err
		}
		if p != nil {
			ps = append(ps, p)
		}
		b = b[n:]
	}
	if len(b) != 0 {
		return nil, malformed("%d bytes after the last payload", len(b))
	}
	return ps, nil
}

// parsePayload parses one payload body. It returns nil, nil for an unknown
// payload type without the critical bit, which is skipped (§2.5).
func parsePayload(typ uint8, critical bool, body []byte) (payload, error) {
	switch typ {
	case payloadSA:
		return parseSA(body)
	case payloadKE:
		return parseKE(body)
	case payloadIDi, payloadIDr:
		return parseID(body, typ == payloadIDr)
	case payloadAuth:
		return parseAuth(body)
	case payloadNonce:
		return parseNonce(body)
	case payloadNotify:
		return parseNotify(body)
	case payloadDelete:
		return parseDelete(body)
	case payloadTSi, payloadTSr:
		return parseTS(body, typ == payloadTSr)
	case payloadCert, payloadCertReq, payloadVendorID, payloadCP, payloadEAP:
		return &opaquePayload{typ: typ, body: clone(body)}, nil
	}
	if critical {
		return nil, &unsupportedCriticalError{typ: typ}
	}
	return nil, nil
}

// appendHeader appends the IKE header of m with the given first payload
// type and total length.
func (m *message) appendHeader(b []byte, next uint8, length int) []byte {
	b = binary.BigEndian.AppendUint64(b, m.spiI)
	b = binary.BigEndian.AppendUint64(b, m.spiR)
	b = append(b, next, 0x20, m.exchange, m.flags)
	b = binary.BigEndian.AppendUint32(b, m.id)
	return binary.BigEndian.AppendUint32(b, uint32(length))
}

// encode returns m on the wire. An *skPayload among the payloads must be
// the last one.
func (m *message) encode() []byte {
	b := m.appendHeader(make([]byte, 0, 256), firstKind(m.payloads), 0)
	b = appendPayloads(b, m.payloads)
	binary.BigEndian.PutUint32(b[24:], uint32(len(b)))
	return b
}

func firstKind(ps []payload) uint8 {
	if len(ps) == 0 {
		return payloadNone
	}
	return ps[0].kind()
}

// appendPayloads appends a chain of payloads with their generic headers.
func appendPayloads(b []byte, ps []payload) []byte {
	for i, p := range ps {
		next := uint8(payloadNone)
		if i+1 < len(ps) {
			next = ps[i+1].kind()
		}
		if sk, ok := p.(*skPayload); ok {
			next = sk.next
		}
		start := len(b)
		b = append(b, next, 0, 0, 0)
		b = p.appendBody(b)
		binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	}
	return b
}

// first returns the first payload of type T in ps.
func first[T payload](ps []payload) (T, bool) {
	for _, p := range ps {
		if t, ok := p.(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}

// notify returns the first Notify payload of type typ in ps.
func notify(ps []payload, typ uint16) *notifyPayload {
	for _, p := range ps {
		if n, ok := p.(*notifyPayload); ok && n.typ == typ {
			return n
		}
	}
	return nil
}

// errorNotify returns the first Notify of an error type in ps (§3.10.1).
func errorNotify(ps []payload) *notifyPayload {
	for _, p := range ps {
		if n, ok := p.(*notifyPayload); ok && n.typ < notifyFirstStatus {
			return n
		}
	}
	return nil
}

// idOf returns the IDi (responder false) or IDr payload of ps.
func idOf(ps []payload, responder bool) *idPayload {
	for _, p := range ps {
		if id, ok := p.(*idPayload); ok && id.responder == responder {
			return id
		}
	}
	return nil
}

// tsOf returns the TSi (responder false) or TSr payload of ps.
func tsOf(ps []payload, responder bool) *tsPayload {
	for _, p := range ps {
		if ts, ok := p.(*tsPayload); ok && ts.responder == responder {
			return ts
		}
	}
	return nil
}

// unsupportedCritical reports the payload type that err refuses, if err is
// an *unsupportedCriticalError.
func unsupportedCritical(err error) (uint8, bool) {
	var u *unsupportedCriticalError
	if errors.As(err, &u) {
		return u.typ, true
	}
	return 0, false
}
