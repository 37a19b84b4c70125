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

// validToken reports whether s is a non-empty name of letters, digits, '-' and '_',
// which is valid as a subject token and in stream and consumer names.
func validToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
		default:
			return false
		}
	}
	return true
}
