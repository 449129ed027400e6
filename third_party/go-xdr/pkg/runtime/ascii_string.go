package runtime

import (
	"fmt"
	"io"
	"unicode"
	"unsafe"
)

func validateASCII(s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c > unicode.MaxASCII {
			return fmt.Errorf("character at offset %d has non-ASCII value %#x", i, c)
		}
	}
	return nil
}

// ReadASCIIString reads an XDR encoded ASCII string value.
func ReadASCIIString(r io.Reader, maximumSizeBytes uint32) (string, int64, error) {
	s, n, err := readString(r, maximumSizeBytes)
	if err != nil {
		return "", n, err
	}
	if err := validateASCII(s); err != nil {
		return "", n, err
	}
	return s, n, err
}

// readString reads the bytes of an XDR string into a string allocated
// once (a copy even from a SliceReader: a string must not change).
func readString(r io.Reader, maximumSizeBytes uint32) (string, int64, error) {
	b, n, err := readVariableLengthOpaque(r, maximumSizeBytes, false)
	if err != nil || len(b) == 0 {
		return "", n, err
	}
	// b is this function's own: nothing else can change it.
	return unsafe.String(unsafe.SliceData(b), len(b)), n, nil
}

// WriteASCIIString writes an XDR encoded ASCII string value.
func WriteASCIIString(w io.Writer, maximumSizeBytes uint32, s string) (int64, error) {
	if err := validateASCII(s); err != nil {
		return 0, err
	}
	return WriteVariableLengthOpaque(w, maximumSizeBytes, []byte(s))
}
