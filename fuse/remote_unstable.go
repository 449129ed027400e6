package fuse

import (
	"sync"
	"sync/atomic"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	raw "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/txnfs/txnfs/nfs4/client"
)

// Unstable writes (RFC 8881 §18.32.3, §18.3.3): the remote mount sends
// WRITE with UNSTABLE4 and makes the data durable with COMMIT at fsync and
// close. A server that restarts between the two may have lost the data;
// it tells by a different write verifier in the COMMIT reply. The mount
// therefore keeps a copy of every write the server answered UNSTABLE4
// until a COMMIT returns the verifier that write was answered with; on a
// mismatch it writes the copies again (FILE_SYNC4) before fsync or close
// returns, as the Linux client resends its dirty pages. Without the
// copies an fsync after a server crash would succeed over lost data.
//
// Operations whose effect a later resend would undo (truncation,
// fallocate, server-side copy) commit the node's writes first.
//
// Copies are bounded: when a mount holds more than unstableMountLimit
// bytes, or a node more than unstableNodeLimit, the writer commits its
// node before answering.

const (
	unstableNodeLimit  = 64 << 20
	unstableMountLimit = 256 << 20
)

// unstableWrite is one write the server answered UNSTABLE4, with the
// verifier of that answer and the open it went through.
type unstableWrite struct {
	h    *rhandle
	off  uint64
	data []byte
	verf [8]byte
}

// unstableWrites are a node's writes not yet known to be durable.
type unstableWrites struct {
	mu     sync.Mutex
	writes []unstableWrite
	bytes  int
}

// add keeps a copy of data written at off and returns the node's bytes held.
func (u *unstableWrites) add(h *rhandle, off uint64, data []byte, verf [8]byte, total *atomic.Int64) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.writes = append(u.writes, unstableWrite{h: h, off: off, data: append([]byte(nil), data...), verf: verf})
	u.bytes += len(data)
	total.Add(int64(len(data)))
	return u.bytes
}

// take removes and returns every write held.
func (u *unstableWrites) take(total *atomic.Int64) []unstableWrite {
	u.mu.Lock()
	defer u.mu.Unlock()
	w := u.writes
	total.Add(-int64(u.bytes))
	u.writes, u.bytes = nil, 0
	return w
}

// putBack returns writes that take removed (the COMMIT failed), ahead of
// any written meanwhile.
func (u *unstableWrites) putBack(w []unstableWrite, total *atomic.Int64) {
	if len(w) == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, x := range w {
		n += len(x.data)
	}
	u.writes = append(w, u.writes...)
	u.bytes += n
	total.Add(int64(n))
}

// keepUnstable records a WRITE's answer: an UNSTABLE4 write is kept until
// a COMMIT confirms it. It reports whether the node (or the mount) now
// holds too much and must be committed.
func (m *RemoteServer) keepUnstable(h *rhandle, off uint64, data []byte, res *nfsv4.Write4resok) bool {
	if res.Committed != nfsv4.UNSTABLE4 {
		return false
	}
	h.n.dirty.Store(true)
	held := h.n.unstable.add(h, off, data[:res.Count], res.Writeverf, &m.unstableBytes)
	return held > unstableNodeLimit || m.unstableBytes.Load() > unstableMountLimit
}

// commit makes a node's UNSTABLE writes durable: COMMIT, and if its
// verifier shows that the server restarted since some of them, those
// again with FILE_SYNC4.
func (m *RemoteServer) commit(cancel <-chan struct{}, h *raw.InHeader, n *rnode) error {
	if !n.dirty.Swap(false) {
		return nil
	}
	writes := n.unstable.take(&m.unstableBytes)
	var cp client.Compound
	cp.PutFH(n.fh)
	cp.Commit()
	rep, err := m.do(cancel, h, &cp)
	if err != nil {
		n.unstable.putBack(writes, &m.unstableBytes)
		n.dirty.Store(true)
		return err
	}
	verf := [8]byte{}
	if r, _ := rep.Results[1].(*nfsv4.NfsResop4_OP_COMMIT); r != nil {
		if ok, _ := r.Opcommit.(*nfsv4.Commit4res_NFS4_OK); ok != nil {
			verf = ok.Resok4.Writeverf
		}
	}
	lost := 0
	for i, w := range writes {
		if w.verf == verf {
			continue
		}
		if lost == 0 {
			m.log.Warn("server restarted before COMMIT: writing the uncommitted data again", "node", n.fileid)
		}
		lost++
		if err := m.rewrite(cancel, h, n, w); err != nil {
			n.unstable.putBack(writes[i:], &m.unstableBytes)
			n.dirty.Store(true)
			return err
		}
	}
	m.rewrites.Add(uint64(lost))
	return nil
}

// rewrite writes w again, durably, split at the server's limit.
func (m *RemoteServer) rewrite(cancel <-chan struct{}, hdr *raw.InHeader, n *rnode, w unstableWrite) error {
	for done := 0; done < len(w.data); {
		chunk := w.data[done:min(len(w.data), done+m.maxWrite)]
		rep, err := m.doSid(cancel, hdr, func(cp *client.Compound) {
			cp.PutFH(n.fh)
			cp.Write(w.h.stateid(), w.off+uint64(done), chunk, true)
		})
		if err != nil {
			return err
		}
		res := writeResult(rep.Results[1])
		if res == nil || res.Count == 0 {
			return errShortWrite
		}
		done += int(res.Count)
	}
	return nil
}
