package occ

import (
	"fmt"
	"testing"
)

// BenchmarkBuffer is a grouped run's write set: n files removed, each
// writing the directory inode (overwritten every time), and deleting an
// entry, a cookie and the file's inode and span records; then the
// commit's Entries and Keys.
func BenchmarkBuffer(b *testing.B) {
	for _, n := range []int{1, 16, 128} {
		b.Run(fmt.Sprint("files=", n), func(b *testing.B) {
			var keys [][]byte
			for i := range n {
				keys = append(keys,
					fmt.Appendf(nil, "d\x00\x00\x00\x00\x00\x00\x01\x07file-%05d", i),
					fmt.Appendf(nil, "c\x00\x00\x00\x00\x00\x00\x01\x07\x00\x00\x00\x00\x00\x00%02x", i),
					fmt.Appendf(nil, "i\x00\x00\x00\x00\x00\x01%02x", (i*37)%256),
					fmt.Appendf(nil, "f\x00\x00\x00\x00\x00\x01%02x\x00\x00\x00\x00", (i*37)%256),
				)
			}
			dir := []byte("i\x00\x00\x00\x00\x00\x00\x01\x07")
			val := make([]byte, 60)
			for b.Loop() {
				buf := NewBuffer()
				for i := range n {
					if _, ok := buf.Get(keys[4*i]); ok {
						b.Fatal("pending write before any")
					}
					buf.Set(dir, val)
					for _, k := range keys[4*i : 4*i+4] {
						buf.Delete(k)
					}
				}
				if len(buf.Entries()) != 4*n+1 || len(buf.Keys()) != 4*n+1 {
					b.Fatal("wrong count")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/file")
		})
	}
}
