// Package bytesize is the flag value of a size in bytes that sluice's commands share:
// --memory-limit, --max-event-bytes, --jetstream-max-bytes.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a flag value (pflag.Value) holding a size in bytes, written as a number with
// an optional unit: 1048576, 512KiB, 64MiB, 1GiB (also KB, MB, GB as powers of 1000, and
// K, M, G as powers of 1024). It must be positive.
type Size int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
}

// String writes the size with the largest binary unit that divides it.
func (b *Size) String() string {
	n := int64(*b)
	for _, u := range []struct {
		s string
		m int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// Set parses s.
func (b *Size) Set(s string) error {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return fmt.Errorf("%q is not a positive size such as 1048576, 512KiB or 64MiB", s)
	}
	*b = Size(n * mult)
	return nil
}

// Type names the value in flag usage.
func (b *Size) Type() string { return "size" }
