package rpc

import (
	"bufio"
	"hash/crc32"
	"net"
	"testing"
	"time"
)

// BenchmarkRecordCRC reads 1 MiB WRITE-like records from a loopback TCP
// connection and takes their payload's CRC32C: "after" hashes the payload
// in a separate pass once the record is read (what the slice store did),
// "arriving" hashes it in blocks as it arrives (recordCRC), with reads
// capped at crcReadMax, or uncapped. One record in flight at a time, as
// from one NFS client; the modes take turns record by record (the host is
// shared: load drifts), and each reports its wall time per record, from
// the first read to the CRC.
//
//	go test ./nfs4/internal/rpc -run XXX -bench RecordCRC -count 5
func BenchmarkRecordCRC(b *testing.B) {
	const hdr, n = 200, 1 << 20
	body := make([]byte, hdr+n+40)
	for i := range body {
		body[i] = byte(i * 7)
	}
	msg := record(body)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		ack := make([]byte, 1)
		for {
			if _, err := c.Write(msg); err != nil {
				return
			}
			if _, err := c.Read(ack); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	defer func(old int) { crcReadMax = old }(crcReadMax)
	rd := bufio.NewReaderSize(c, 64<<10)
	h := &recordCRC{}
	want := crc32.Checksum(body[hdr:hdr+n], castagnoli)
	modes := []string{"after", "arriving", "arriving-uncapped"}
	spent := make([]time.Duration, len(modes))
	capped := crcReadMax
	b.ResetTimer()
	for i := range b.N {
		for m, mode := range modes {
			crcReadMax = capped
			if mode == "arriving-uncapped" {
				crcReadMax = 1 << 30
			}
			start := time.Now()
			var rec []byte
			var crc uint32
			if mode == "after" {
				rec, err = readRecord(rd, 2<<20, getRecord, nil, nil)
				if err == nil {
					crc = crc32.Checksum(rec[hdr:hdr+n], castagnoli)
				}
			} else {
				rec, err = readRecord(rd, 2<<20, getRecord, h, func(int) int { return hdr })
				if err == nil {
					crc, _ = h.sum(rec, rec[hdr:hdr+n])
				}
			}
			if i > 0 {
				spent[m] += time.Since(start)
			}
			if err != nil || crc != want {
				b.Fatalf("%v, crc %08x want %08x", err, crc, want)
			}
			putRecord(rec)
			c.Write([]byte{1})
		}
	}
	for m, mode := range modes {
		b.ReportMetric(float64(spent[m].Nanoseconds())/float64(max(1, b.N-1)), mode+"-ns/record")
	}
}
