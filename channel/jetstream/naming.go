package jetstream

import (
	"crypto/sha256"
	"encoding/hex"
)

// hashToken maps an arbitrary name (broker key, subscription name) to a 16-hex-digit
// token that is valid in subjects, stream and consumer names. 64 bits make a collision
// among the names of one installation vanishingly unlikely.
func hashToken(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:8])
}
