package stats

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
)

// Bitset is a growable set of sequence numbers, one bit each: 10,000 events/s for an
// hour is 36 M bits, 4.5 MB. Not safe for concurrent use.
type Bitset struct {
	words []uint64
	max   uint64 // highest member + 1 (0 when empty)
	n     uint64 // members
}

// Add inserts seq and reports whether it was already present.
func (b *Bitset) Add(seq uint64) (dup bool) {
	w := seq / 64
	if w >= uint64(len(b.words)) {
		grow := max(w+1, uint64(2*len(b.words)))
		nw := make([]uint64, grow)
		copy(nw, b.words)
		b.words = nw
	}
	m := uint64(1) << (seq % 64)
	if b.words[w]&m != 0 {
		return true
	}
	b.words[w] |= m
	b.n++
	if seq+1 > b.max {
		b.max = seq + 1
	}
	return false
}

// Has reports whether seq is present.
func (b *Bitset) Has(seq uint64) bool {
	w := seq / 64
	return w < uint64(len(b.words)) && b.words[w]&(1<<(seq%64)) != 0
}

// Len is the number of members.
func (b *Bitset) Len() uint64 { return b.n }

// Max is the highest member + 1, 0 when empty.
func (b *Bitset) Max() uint64 { return b.max }

// Gaps counts the numbers in [0, Max) that are missing: the events a receiver never
// saw below the highest one it did see.
func (b *Bitset) Gaps() uint64 { return b.max - b.n }

// Missing calls fn for each member of b that is not in other (for bench: accepted by the
// target but never delivered), and returns how many there were.
func (b *Bitset) Missing(other *Bitset, fn func(seq uint64)) uint64 {
	var count uint64
	for i, w := range b.words {
		if i < len(other.words) {
			w &^= other.words[i]
		}
		for w != 0 {
			t := bits.TrailingZeros64(w)
			w &= w - 1
			count++
			if fn != nil {
				fn(uint64(i)*64 + uint64(t))
			}
		}
	}
	return count
}

// CopyTo makes dst an independent copy of b.
func (b *Bitset) CopyTo(dst *Bitset) {
	dst.words = append([]uint64(nil), b.words...)
	dst.max, dst.n = b.max, b.n
}

// Union adds every member of other to b and returns how many were already in b.
func (b *Bitset) Union(other *Bitset) (common uint64) {
	if len(other.words) > len(b.words) {
		nw := make([]uint64, len(other.words))
		copy(nw, b.words)
		b.words = nw
	}
	for i, w := range other.words {
		common += uint64(bits.OnesCount64(b.words[i] & w))
		b.n += uint64(bits.OnesCount64(w &^ b.words[i]))
		b.words[i] |= w
	}
	b.max = max(b.max, other.max)
	return common
}

// MaxEncodedBits bounds a decoded Bitset: 2³² sequence numbers, 512 MiB.
const MaxEncodedBits = 1 << 32

// MarshalText encodes b as base64 of its deflated little-endian words.
func (b *Bitset) MarshalText() ([]byte, error) {
	var buf bytes.Buffer
	enc := base64.NewEncoder(base64.StdEncoding, &buf)
	zw, _ := flate.NewWriter(enc, flate.BestSpeed) // the level is valid
	var word [8]byte
	for _, w := range b.words[:(b.max+63)/64] {
		binary.LittleEndian.PutUint64(word[:], w)
		if _, err := zw.Write(word[:]); err != nil {
			return nil, fmt.Errorf("bitset: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("bitset: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("bitset: %w", err)
	}
	return buf.Bytes(), nil
}

// UnmarshalText decodes what MarshalText wrote. It refuses more than MaxEncodedBits
// bits and a length that is not whole words.
func (b *Bitset) UnmarshalText(text []byte) error {
	zr := flate.NewReader(base64.NewDecoder(base64.StdEncoding, bytes.NewReader(text)))
	defer zr.Close()
	raw, err := io.ReadAll(io.LimitReader(zr, MaxEncodedBits/8+1))
	if err != nil {
		return fmt.Errorf("bitset: %w", err)
	}
	if len(raw) > MaxEncodedBits/8 {
		return fmt.Errorf("bitset: more than %d bits", uint64(MaxEncodedBits))
	}
	if len(raw)%8 != 0 {
		return fmt.Errorf("bitset: %d bytes is not a whole number of 64-bit words", len(raw))
	}
	*b = Bitset{words: make([]uint64, len(raw)/8)}
	for i := range b.words {
		w := binary.LittleEndian.Uint64(raw[8*i:])
		b.words[i] = w
		b.n += uint64(bits.OnesCount64(w))
		if w != 0 {
			b.max = uint64(i)*64 + uint64(64-bits.LeadingZeros64(w))
		}
	}
	return nil
}
