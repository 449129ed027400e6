package fs

import "context"

// DataRangesForTest returns the file ranges [start, end) of ino that hold
// data (extents other than holes), merged where they touch, as Yank sees
// them: a reference for Seek that does not use Seek's code.
func DataRangesForTest(ctx context.Context, f *FS, ino Ino) ([][2]uint64, error) {
	var out [][2]uint64
	err := f.View(ctx, RootCred, func(t *Txn) error {
		a, err := t.GetAttr(ctx, ino)
		if err != nil {
			return err
		}
		s, err := t.Yank(ctx, ino, 0, a.Size)
		if err != nil {
			return err
		}
		for _, p := range s.Pieces {
			lo, hi := p.Off, p.Off+uint64(p.Ext.Len)
			if k := len(out) - 1; k >= 0 && out[k][1] == lo {
				out[k][1] = hi
				continue
			}
			out = append(out, [2]uint64{lo, hi})
		}
		return nil
	})
	return out, err
}
