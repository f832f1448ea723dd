//go:build !amd64

package packet

// sumBulk leaves all of b to the scalar loop: this architecture has no
// vector loop.
func sumBulk(b []byte, acc uint64) ([]byte, uint64) { return b, acc }
