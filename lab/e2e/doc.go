// Package e2e holds the network-namespace end-to-end tests of the gateway:
// two clusters built by package lab with real `snorkel gateway` processes on
// kernel TUN devices, and traffic between their pods checked through real
// sockets, ping and tcpdump, once per transport. Two scenarios replace c2's
// gateway to check interoperability: with a Linux kernel vxlan device, and
// with strongSwan's charon (IKEv2, userspace ESP through kernel-libipsec)
// negotiating, carrying and rekeying the esp transport's tunnel; another
// joins two clusters with the same CIDRs through Globalnet and
// checks traffic and translated ICMP errors across them.
//
// The tests need root (network namespaces, TUN devices); without it they
// skip. Each lab has a namespace prefix unique to the test process and its
// own state directory, so the tests run beside a lab someone else keeps up,
// and everything is torn down when a test ends, failed or not. The package
// has no code outside its tests.
package e2e
