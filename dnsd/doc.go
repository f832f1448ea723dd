// Package dnsd serves the clusterset.local zone.
package dnsd
