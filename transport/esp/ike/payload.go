package ike

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// payload is one IKE payload (RFC 7296 §3.2) without its generic header.
type payload interface {
	// kind is the payload type that goes in the preceding Next Payload field.
	kind() uint8
	// appendBody appends the payload's body, the bytes after the generic
	// payload header.
	appendBody(b []byte) []byte
}

// errMalformed marks input that breaks the wire format; the wrapped text
// says where.
var errMalformed = errors.New("malformed")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// unsupportedCriticalError is a payload of a type this package does not
// know with its critical bit set (RFC 7296 §2.5): the message is refused
// with UNSUPPORTED_CRITICAL_PAYLOAD naming the type.
type unsupportedCriticalError struct{ typ uint8 }

func (e *unsupportedCriticalError) Error() string {
	return fmt.Sprintf("unsupported critical payload type %d", e.typ)
}

// saPayload is a Security Association payload (§3.3).
type saPayload struct{ proposals []proposal }

// proposal is one proposal substructure of an SA payload (§3.3.1).
type proposal struct {
	num        uint8
	protocol   uint8 // protoIKE or protoESP
	spi        []byte
	transforms []transform
}

// transform is one transform substructure (§3.3.2).
type transform struct {
	typ   uint8
	id    uint16
	attrs []attribute
}

// attribute is a transform attribute (§3.3.5): TV when tv is set, with a
// 2-byte value, TLV otherwise.
type attribute struct {
	typ   uint16
	tv    bool
	value []byte
}

// keyLength returns the Key Length attribute, 0 if absent, and whether the
// transform carries any attribute this package does not know, which makes
// it unacceptable (§3.3.6).
func (t transform) keyLength() (bits uint16, unknown bool) {
	for _, a := range t.attrs {
		if a.typ == attrKeyLength && a.tv {
			bits = binary.BigEndian.Uint16(a.value)
			continue
		}
		unknown = true
	}
	return bits, unknown
}

func (*saPayload) kind() uint8 { return payloadSA }

func (p *saPayload) appendBody(b []byte) []byte {
	for i, pr := range p.proposals {
		start := len(b)
		last := byte(2)
		if i == len(p.proposals)-1 {
			last = 0
		}
		b = append(b, last, 0, 0, 0, pr.num, pr.protocol, byte(len(pr.spi)), byte(len(pr.transforms)))
		b = append(b, pr.spi...)
		for j, t := range pr.transforms {
			tstart := len(b)
			last := byte(3)
			if j == len(pr.transforms)-1 {
				last = 0
			}
			b = append(b, last, 0, 0, 0, t.typ, 0)
			b = binary.BigEndian.AppendUint16(b, t.id)
			for _, a := range t.attrs {
				if a.tv {
					b = binary.BigEndian.AppendUint16(b, 0x8000|a.typ)
					b = append(b, a.value...)
					continue
				}
				b = binary.BigEndian.AppendUint16(b, a.typ&0x7fff)
				b = binary.BigEndian.AppendUint16(b, uint16(len(a.value)))
				b = append(b, a.value...)
			}
			binary.BigEndian.PutUint16(b[tstart+2:], uint16(len(b)-tstart))
		}
		binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	}
	return b
}

func parseSA(b []byte) (*saPayload, error) {
	p := &saPayload{}
	for len(b) > 0 {
		if len(b) < 8 {
			return nil, malformed("SA: proposal header of %d bytes, want 8", len(b))
		}
		n := int(binary.BigEndian.Uint16(b[2:]))
		if n < 8 || n > len(b) {
			return nil, malformed("SA: proposal length %d with %d bytes left", n, len(b))
		}
		last := b[0]
		if (last == 0) != (n == len(b)) || (last != 0 && last != 2) {
			return nil, malformed("SA: proposal %d: Last Substruc %d disagrees with its position", len(p.proposals)+1, last)
		}
		pr := proposal{num: b[4], protocol: b[5]}
		spiSize, count := int(b[6]), int(b[7])
		body := b[8:n]
		if spiSize > len(body) {
			return nil, malformed("SA: proposal SPI size %d exceeds the proposal", spiSize)
		}
		pr.spi = clone(body[:spiSize])
		body = body[spiSize:]
		for len(body) > 0 {
			t, rest, err := parseTransform(body)
			if err != nil {
				return nil, err
			}
			pr.transforms = append(pr.transforms, t)
			body = rest
		}
		if len(pr.transforms) != count {
			return nil, malformed("SA: proposal announces %d transforms and holds %d", count, len(pr.transforms))
		}
		p.proposals = append(p.proposals, pr)
		b = b[n:]
	}
	if len(p.proposals) == 0 {
		return nil, malformed("SA: no proposal")
	}
	return p, nil
}

func parseTransform(b []byte) (transform, []byte, error) {
	if len(b) < 8 {
		return transform{}, nil, malformed("SA: transform header of %d bytes, want 8", len(b))
	}
	n := int(binary.BigEndian.Uint16(b[2:]))
	if n < 8 || n > len(b) {
		return transform{}, nil, malformed("SA: transform length %d with %d bytes left", n, len(b))
	}
	if last := b[0]; (last == 0) != (n == len(b)) || (last != 0 && last != 3) {
		return transform{}, nil, malformed("SA: transform Last Substruc %d disagrees with its position", last)
	}
	t := transform{typ: b[4], id: binary.BigEndian.Uint16(b[6:])}
	attrs := b[8:n]
	for len(attrs) > 0 {
		if len(attrs) < 4 {
			return transform{}, nil, malformed("SA: transform attribute of %d bytes", len(attrs))
		}
		v := binary.BigEndian.Uint16(attrs)
		a := attribute{typ: v & 0x7fff, tv: v&0x8000 != 0}
		if a.tv {
			a.value = clone(attrs[2:4])
			attrs = attrs[4:]
		} else {
			l := int(binary.BigEndian.Uint16(attrs[2:]))
			if 4+l > len(attrs) {
				return transform{}, nil, malformed("SA: attribute length %d exceeds the transform", l)
			}
			a.value = clone(attrs[4 : 4+l])
			attrs = attrs[4+l:]
		}
		t.attrs = append(t.attrs, a)
	}
	return t, b[n:], nil
}

// kePayload is a Key Exchange payload (§3.4).
type kePayload struct {
	group uint16
	data  []byte
}

func (*kePayload) kind() uint8 { return payloadKE }

func (p *kePayload) appendBody(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, p.group)
	return append(append(b, 0, 0), p.data...)
}

func parseKE(b []byte) (*kePayload, error) {
	if len(b) < 4 {
		return nil, malformed("KE: %d bytes, want at least 4", len(b))
	}
	return &kePayload{group: binary.BigEndian.Uint16(b), data: clone(b[4:])}, nil
}

// noncePayload is a Nonce payload (§3.9).
type noncePayload struct{ data []byte }

func (*noncePayload) kind() uint8 { return payloadNonce }

func (p *noncePayload) appendBody(b []byte) []byte { return append(b, p.data...) }

func parseNonce(b []byte) (*noncePayload, error) {
	if len(b) < 16 || len(b) > 256 {
		return nil, malformed("Nonce: %d bytes, want 16 to 256", len(b))
	}
	return &noncePayload{data: clone(b)}, nil
}

// idPayload is an Identification payload, IDi or IDr (§3.5).
type idPayload struct {
	responder bool
	id        identity
}

func (p *idPayload) kind() uint8 {
	if p.responder {
		return payloadIDr
	}
	return payloadIDi
}

// appendBody appends ID Type, RESERVED and the data: the bytes that the
// AUTH computation calls RestOfIDPayload (§2.15).
func (p *idPayload) appendBody(b []byte) []byte {
	return append(append(b, p.id.typ, 0, 0, 0), p.id.data...)
}

func parseID(b []byte, responder bool) (*idPayload, error) {
	if len(b) < 5 {
		return nil, malformed("ID: %d bytes, want at least 5", len(b))
	}
	return &idPayload{responder: responder, id: identity{typ: b[0], data: clone(b[4:])}}, nil
}

// authPayload is an Authentication payload (§3.8).
type authPayload struct {
	method uint8
	data   []byte
}

func (*authPayload) kind() uint8 { return payloadAuth }

func (p *authPayload) appendBody(b []byte) []byte {
	return append(append(b, p.method, 0, 0, 0), p.data...)
}

func parseAuth(b []byte) (*authPayload, error) {
	if len(b) < 5 {
		return nil, malformed("AUTH: %d bytes, want at least 5", len(b))
	}
	return &authPayload{method: b[0], data: clone(b[4:])}, nil
}

// notifyPayload is a Notify payload (§3.10).
type notifyPayload struct {
	protocol uint8
	spi      []byte
	typ      uint16
	data     []byte
}

func (*notifyPayload) kind() uint8 { return payloadNotify }

func (p *notifyPayload) appendBody(b []byte) []byte {
	b = append(b, p.protocol, byte(len(p.spi)))
	b = binary.BigEndian.AppendUint16(b, p.typ)
	return append(append(b, p.spi...), p.data...)
}

func parseNotify(b []byte) (*notifyPayload, error) {
	if len(b) < 4 || 4+int(b[1]) > len(b) {
		return nil, malformed("Notify: %d bytes do not hold its SPI", len(b))
	}
	n := 4 + int(b[1])
	return &notifyPayload{
		protocol: b[0],
		typ:      binary.BigEndian.Uint16(b[2:]),
		spi:      clone(b[4:n]),
		data:     clone(b[n:]),
	}, nil
}

// deletePayload is a Delete payload (§3.11): no SPI for the IKE SA, the
// sender's inbound SPIs for ESP.
type deletePayload struct {
	protocol uint8
	spiSize  uint8
	spis     [][]byte
}

func (*deletePayload) kind() uint8 { return payloadDelete }

func (p *deletePayload) appendBody(b []byte) []byte {
	b = append(b, p.protocol, p.spiSize)
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.spis)))
	for _, s := range p.spis {
		b = append(b, s...)
	}
	return b
}

func parseDelete(b []byte) (*deletePayload, error) {
	if len(b) < 4 {
		return nil, malformed("Delete: %d bytes, want at least 4", len(b))
	}
	p := &deletePayload{protocol: b[0], spiSize: b[1]}
	count, size := int(binary.BigEndian.Uint16(b[2:])), int(b[1])
	if len(b)-4 != count*size {
		return nil, malformed("Delete: %d SPIs of %d bytes in %d bytes", count, size, len(b)-4)
	}
	for i := range count {
		p.spis = append(p.spis, clone(b[4+i*size:4+(i+1)*size]))
	}
	return p, nil
}

// tsPayload is a Traffic Selector payload, TSi or TSr (§3.13).
type tsPayload struct {
	responder bool
	selectors []selector
}

// selector is one address-range traffic selector (§3.13.1).
type selector struct {
	proto              uint8
	startPort, endPort uint16
	start, end         netip.Addr // of one family
}

func (p *tsPayload) kind() uint8 {
	if p.responder {
		return payloadTSr
	}
	return payloadTSi
}

func (p *tsPayload) appendBody(b []byte) []byte {
	b = append(b, byte(len(p.selectors)), 0, 0, 0)
	for _, s := range p.selectors {
		typ, n := byte(tsIPv4Range), 16
		if s.start.Is6() {
			typ, n = tsIPv6Range, 40
		}
		b = append(b, typ, s.proto)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
		b = binary.BigEndian.AppendUint16(b, s.startPort)
		b = binary.BigEndian.AppendUint16(b, s.endPort)
		b = append(b, s.start.AsSlice()...)
		b = append(b, s.end.AsSlice()...)
	}
	return b
}

// parseTS keeps the address-range selectors and skips those of other types
// (RFC 4595 Fibre Channel, RFC 9478 security labels), which Snorkel never
// agrees to.
func parseTS(b []byte, responder bool) (*tsPayload, error) {
	if len(b) < 4 {
		return nil, malformed("TS: %d bytes, want at least 4", len(b))
	}
	p := &tsPayload{responder: responder}
	count := int(b[0])
	b = b[4:]
	for i := range count {
		if len(b) < 4 {
			return nil, malformed("TS: selector %d of %d missing", i+1, count)
		}
		n := int(binary.BigEndian.Uint16(b[2:]))
		if n < 4 || n > len(b) {
			return nil, malformed("TS: selector length %d with %d bytes left", n, len(b))
		}
		switch b[0] {
		case tsIPv4Range, tsIPv6Range:
			alen := 4
			if b[0] == tsIPv6Range {
				alen = 16
			}
			if n != 8+2*alen {
				return nil, malformed("TS: selector type %d of length %d, want %d", b[0], n, 8+2*alen)
			}
			start, _ := netip.AddrFromSlice(b[8 : 8+alen])
			end, _ := netip.AddrFromSlice(b[8+alen : 8+2*alen])
			p.selectors = append(p.selectors, selector{
				proto:     b[1],
				startPort: binary.BigEndian.Uint16(b[4:]),
				endPort:   binary.BigEndian.Uint16(b[6:]),
				start:     start,
				end:       end,
			})
		}
		b = b[n:]
	}
	if len(b) != 0 {
		return nil, malformed("TS: %d bytes after %d selectors", len(b), count)
	}
	return p, nil
}

// opaquePayload is a payload read and never acted on: Vendor ID,
// Configuration, certificates, EAP, and unknown non-critical types.
type opaquePayload struct {
	typ  uint8
	body []byte
}

func (p *opaquePayload) kind() uint8 { return p.typ }

func (p *opaquePayload) appendBody(b []byte) []byte { return append(b, p.body...) }

// skPayload is the Encrypted and Authenticated payload (§3.14) as it is on
// the wire: next is the type of the first payload inside, body the IV,
// ciphertext and ICV.
type skPayload struct {
	next uint8
	body []byte
}

func (*skPayload) kind() uint8 { return payloadSK }

func (p *skPayload) appendBody(b []byte) []byte { return append(b, p.body...) }

func clone(b []byte) []byte { return append([]byte(nil), b...) }
