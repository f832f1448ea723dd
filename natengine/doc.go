// Package natengine translates addresses between a cluster's local and global
// (Globalnet) address spaces. It is pure logic over package packet: no I/O, an
// injected clock.
package natengine
