package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
	"github.com/snorkel-net/snorkel/transport/udp"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// Check runs every check of c that leaves the host as it found it:
// Validate; reading and judging each key file the transport reads when it
// opens, with the code that reads them then; and binding the UDP port and
// the metrics address, each let go at once, to see that they are free. It
// creates no device, route or file, so a WireGuard private key file that
// does not exist yet passes: the gateway generates it at start. What it
// cannot see is a port taken after it ran, or a TUN device the gateway
// may not create.
func (c *Config) Check() error {
	s, err := c.build()
	if err != nil {
		return err
	}
	var errs errList
	s.readKeys(&errs, false)
	s.probePorts(&errs)
	return errs.err()
}

// keys is the key material the transport reads from files when it opens.
type keys struct {
	wgPrivate wireguard.Key
	wgPSK     []*wireguard.Key // per remote; nil where none is configured
	espPSK    []byte
}

// readKeys reads and judges every key the config names, reporting each
// problem under its field. With create, a missing WireGuard private key file
// is generated, as WireGuardConfig.PrivateKeyFile promises; without, a
// missing one is no problem and wgPrivate stays zero.
func (s *spec) readKeys(errs *errList, create bool) keys {
	var k keys
	switch s.Transport.Kind {
	case transport.WireGuard:
		path := s.Transport.WireGuard.PrivateKeyFile
		var err error
		if create {
			k.wgPrivate, _, err = wireguard.LoadOrCreateKey(path)
		} else if k.wgPrivate, err = wireguard.ReadKeyFile(path); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		if err != nil {
			addKeyFileError(errs, "transport.wireguard.privateKeyFile", path, err, "`wg genkey`, or delete the file to have the gateway generate one")
		}
		k.wgPSK = make([]*wireguard.Key, len(s.Remotes))
		for i, r := range s.Remotes {
			if r.WireGuard == nil || r.WireGuard.PresharedKeyFile == "" {
				continue
			}
			path := r.WireGuard.PresharedKeyFile
			psk, err := wireguard.ReadKeyFile(path)
			if err != nil {
				addKeyFileError(errs, fmt.Sprintf("remotes[%d].wireguard.presharedKeyFile", i), path, err, "`wg genpsk`")
				continue
			}
			k.wgPSK[i] = &psk
		}
	case transport.ESP:
		e := s.Transport.ESP
		k.espPSK = e.PSK // its length is judged by Validate
		if e.PSKFile == "" {
			break
		}
		b, err := os.ReadFile(e.PSKFile)
		if err != nil {
			errs.add("transport.esp.pskFile", "cannot read the pre-shared key: %v; make the file readable by the gateway, or fix the path", err)
			break
		}
		k.espPSK = bytes.TrimSpace(b)
		if err := ike.CheckPSK(k.espPSK); err != nil {
			errs.add("transport.esp.pskFile", "%s holds %v", e.PSKFile, err)
		}
	}
	return k
}

// addKeyFileError reports a key file that cannot be read or holds no key;
// howToMake says how to make a good one.
func addKeyFileError(errs *errList, field, path string, err error, howToMake string) {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		errs.add(field, "cannot read %s: %v; make the file readable by the gateway, or fix the path", path, pe.Err)
		return
	}
	errs.add(field, "%s does not hold a base64 key (%v); write one with %s", path, err, howToMake)
}

// probePorts binds what the gateway will listen on and lets it go at once,
// so that a port already in use is reported before the start.
func (s *spec) probePorts(errs *errList) {
	conn, err := udp.Open(s.port)
	if err != nil {
		errs.addErr(portError(s.port, err))
	} else {
		conn.Close()
	}
	if a := s.MetricsAddress; a != "" {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			errs.add("metricsAddress", "cannot listen on %s: %v; stop the program that holds it or choose another address", a, err)
		} else {
			ln.Close()
		}
	}
}

// portError names the field and the fix for a UDP port the transport could
// not bind.
func portError(port uint16, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("transport.port: UDP port %d is already in use; stop the program that holds it or choose another port: %w", port, err)
	}
	return fmt.Errorf("transport.port: cannot bind UDP port %d: %w; give the gateway the privilege to bind it or choose another port", port, err)
}
