package server

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// clientRecords keeps the owners of confirmed clients in stable storage
// (RFC 8881 §8.4.2.1: the server must know after a restart which clients
// may reclaim). The records are a small text file in Config.StateDir,
// rewritten whole on every change (write to a temporary file, fsync,
// rename, fsync the directory), so a crash leaves the old or the new
// version. It holds the owners recorded by the previous instance that have
// not come back yet (prev: kept until the grace period ends, so that a
// second restart during the grace period still lets them reclaim) and the
// confirmed clients of this instance (cur).
type clientRecords struct {
	path string
	log  *slog.Logger

	mu        sync.Mutex
	prev, cur map[string]bool
}

const clientRecordsFile = "nfs4-clients"
const clientRecordsHeader = "txnfs nfs4 client records v1"

// openClientRecords loads the records in dir (none if the file does not
// exist yet) and returns the store and the previous instance's owners.
func openClientRecords(dir string, log *slog.Logger) (*clientRecords, [][]byte, error) {
	r := &clientRecords{path: filepath.Join(dir, clientRecordsFile), log: log,
		prev: map[string]bool{}, cur: map[string]bool{}}
	b, err := os.ReadFile(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("server: client records: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 4096)
	if !sc.Scan() || sc.Text() != clientRecordsHeader {
		return nil, nil, fmt.Errorf("server: client records %s: bad header", r.path)
	}
	var owners [][]byte
	for sc.Scan() {
		o, err := hex.DecodeString(sc.Text())
		if err != nil || len(o) == 0 || len(o) > 1024 {
			return nil, nil, fmt.Errorf("server: client records %s: bad line %q", r.path, sc.Text())
		}
		if !r.prev[string(o)] {
			r.prev[string(o)] = true
			owners = append(owners, o)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("server: client records %s: %w", r.path, err)
	}
	return r, owners, nil
}

// record adds (a client was confirmed) or removes (a confirmed client went
// away: its state is gone, it has nothing to reclaim) owner, and writes
// the records before returning.
func (r *clientRecords) record(owner []byte, add bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := string(owner)
	if add {
		if r.cur[k] {
			return
		}
		r.cur[k] = true
	} else {
		if !r.cur[k] && !r.prev[k] {
			return
		}
		delete(r.cur, k)
		delete(r.prev, k)
	}
	r.saveLocked()
}

// graceEnded forgets the previous instance's clients that did not come
// back.
func (r *clientRecords) graceEnded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.prev) == 0 {
		return
	}
	r.prev = map[string]bool{}
	r.saveLocked()
}

func (r *clientRecords) saveLocked() {
	if err := r.writeLocked(); err != nil {
		// Clients keep working; after a restart some may not be able to
		// reclaim their state.
		r.log.Error("nfs4: saving client records", "path", r.path, "err", err)
	}
}

func (r *clientRecords) writeLocked() error {
	lines := make([]string, 0, len(r.prev)+len(r.cur))
	for k := range r.prev {
		lines = append(lines, hex.EncodeToString([]byte(k)))
	}
	for k := range r.cur {
		if !r.prev[k] {
			lines = append(lines, hex.EncodeToString([]byte(k)))
		}
	}
	sort.Strings(lines)
	var b bytes.Buffer
	b.WriteString(clientRecordsHeader + "\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	tmp := r.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, r.path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(r.path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
