package runtime

import (
	"errors"
	"io"
)

var (
	marshaledFalse = [4]byte{0, 0, 0, 0}
	marshaledTrue  = [4]byte{0, 0, 0, 1}
)

var errInvalidBoolean = errors.New("boolean value not zero or one")

// ReadBool reads an XDR encoded boolean value.
func ReadBool(r io.Reader) (bool, int64, error) {
	v, n, err := readUint(r, 4)
	if err != nil {
		return false, n, err
	}
	switch v {
	case 0:
		return false, n, nil
	case 1:
		return true, n, nil
	default:
		return false, n, errInvalidBoolean
	}
}

// WriteBool writes an XDR encoded boolean value.
func WriteBool(w io.Writer, v bool) (int64, error) {
	if v {
		n, err := w.Write(marshaledTrue[:])
		return int64(n), err
	}
	n, err := w.Write(marshaledFalse[:])
	return int64(n), err
}
