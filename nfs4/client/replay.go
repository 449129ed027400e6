package client

import (
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"github.com/txnfs/txnfs/nfs4/internal/extxdr"
)

// Retransmission after a broken connection (RFC 8881 §2.10.6): the client
// resends a COMPOUND on the same slot and sequence id, and the server
// answers from its reply cache if it executed the first copy — but only if
// it cached the reply, which a server may skip unless SEQUENCE asked it to
// (sa_cachethis). NFS-Ganesha does: a resent COMPOUND whose first copy
// ran is answered NFS4ERR_RETRY_UNCACHED_REP, and its outcome is unknown.
// So the client:
//
//   - sets sa_cachethis for every COMPOUND that is not replaySafe and
//     whose reply is bounded by the session's ca_maxresponsesize_cached
//     (replyBound; 64 KiB asked for at CREATE_SESSION): a resend after a
//     reconnection gets the cached reply. A reply that could be larger is
//     not cached (asking would make the server fail the COMPOUND with
//     NFS4ERR_REP_TOO_BIG_TO_CACHE), so a resend of such a COMPOUND may
//     still be answered RETRY_UNCACHED_REP (ErrUncertain);
//   - resends a replaySafe COMPOUND answered RETRY_UNCACHED_REP as a new
//     request (next sequence id): running it twice has the effect of
//     running it once.

// replaySafe reports whether running ops twice has the same effect as
// running them once: they only set file handles, read or compare, or open
// a file without creating or truncating it and close it again in the same
// COMPOUND (the vectorized read pattern OPEN; READ…; CLOSE). Transactional
// COMPOUNDs are not: a transaction's commit is an effect.
func replaySafe(cp *Compound) bool {
	if cp.Txn || !cp.TxnID.IsZero() {
		return false
	}
	opens := 0
	for _, op := range cp.ops {
		switch a := op.(type) {
		case *nfsv4.NfsArgop4_OP_PUTFH, *nfsv4.NfsArgop4_OP_PUTROOTFH, *nfsv4.NfsArgop4_OP_PUTPUBFH,
			*nfsv4.NfsArgop4_OP_LOOKUP, *nfsv4.NfsArgop4_OP_LOOKUPP, *nfsv4.NfsArgop4_OP_GETATTR,
			*nfsv4.NfsArgop4_OP_GETFH, *nfsv4.NfsArgop4_OP_SAVEFH, *nfsv4.NfsArgop4_OP_RESTOREFH,
			*nfsv4.NfsArgop4_OP_ACCESS, *nfsv4.NfsArgop4_OP_READ, *nfsv4.NfsArgop4_OP_READLINK,
			*nfsv4.NfsArgop4_OP_READDIR, *nfsv4.NfsArgop4_OP_VERIFY, *nfsv4.NfsArgop4_OP_NVERIFY,
			*nfsv4.NfsArgop4_OP_SECINFO, *nfsv4.NfsArgop4_OP_SECINFO_NO_NAME,
			*nfsv4.NfsArgop4_OP_SEEK, *nfsv4.NfsArgop4_OP_LOCKT:
		case *nfsv4.NfsArgop4_OP_OPEN:
			if _, create := a.Opopen.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE); create {
				return false
			}
			if _, prev := a.Opopen.Claim.(*nfsv4.OpenClaim4_CLAIM_PREVIOUS); prev {
				return false
			}
			opens++
		case *nfsv4.NfsArgop4_OP_CLOSE:
			if a.Opclose.OpenStateid != CurrentStateid || opens == 0 {
				return false
			}
			opens--
		default:
			return false
		}
	}
	return opens == 0
}

// Reply size bounds, in bytes of XDR.
const (
	// replyHeader bounds the RPC reply header, the COMPOUND status and
	// result count, SEQUENCE's result and the transaction marker's,
	// without the tag.
	replyHeader = 160
	maxFH       = 128  // NFS4_FHSIZE
	maxOwner    = 1024 // owner and group strings, lock and delegation owners
	maxLinkText = 4096 // PATH_MAX: READLINK
)

// replyBound is an upper bound of the size of cp's reply, or -1 if some
// operation's result has no small bound (an ACL, a TXN_END conflict
// report, an operation this client does not know).
func replyBound(cp *Compound) int {
	n := replyHeader + 4 + len(cp.Tag)
	for _, op := range cp.ops {
		b := opReplyBound(op)
		if b < 0 {
			return -1
		}
		n += 8 + b // opcode and status
	}
	return n
}

// opReplyBound bounds one operation's result after its opcode and status
// (-1: unbounded).
func opReplyBound(op nfsv4.NfsArgop4) int {
	switch a := op.(type) {
	case *nfsv4.NfsArgop4_OP_PUTFH, *nfsv4.NfsArgop4_OP_PUTROOTFH, *nfsv4.NfsArgop4_OP_PUTPUBFH,
		*nfsv4.NfsArgop4_OP_LOOKUP, *nfsv4.NfsArgop4_OP_LOOKUPP, *nfsv4.NfsArgop4_OP_SAVEFH,
		*nfsv4.NfsArgop4_OP_RESTOREFH, *nfsv4.NfsArgop4_OP_VERIFY, *nfsv4.NfsArgop4_OP_NVERIFY,
		*nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE:
		return 0
	case *nfsv4.NfsArgop4_OP_GETFH:
		return 4 + maxFH
	case *nfsv4.NfsArgop4_OP_GETATTR:
		return attrsBound(Bitmap(a.Opgetattr.AttrRequest))
	case *nfsv4.NfsArgop4_OP_ACCESS:
		return 8
	case *nfsv4.NfsArgop4_OP_READ:
		return 8 + int(a.Opread.Count) + 3
	case *nfsv4.NfsArgop4_OP_READDIR:
		// maxcount bounds the whole READDIR4resok (RFC 8881 §18.23.2).
		return int(a.Opreaddir.Maxcount)
	case *nfsv4.NfsArgop4_OP_READLINK:
		return 4 + maxLinkText
	case *nfsv4.NfsArgop4_OP_OPEN:
		// stateid, change_info, rflags, attrset (a few words) and a
		// delegation: none (4.1's WND4 reasons are smaller), or a
		// stateid, a permission ACE with its who string and a space
		// limit. A client that asks for no delegation (this one always
		// does) gets none, but its ACE is bounded by a special who
		// ("EVERYONE@") rather than trusted to be absent.
		who := maxOwner
		if a.Opopen.ShareAccess&nfsv4.OPEN4_SHARE_ACCESS_WANT_DELEG_MASK == nfsv4.OPEN4_SHARE_ACCESS_WANT_NO_DELEG {
			who = 64
		}
		return 16 + 20 + 4 + 4 + 4*8 + (4 + 16 + 4 + 12 + 4 + who + 16)
	case *nfsv4.NfsArgop4_OP_CLOSE, *nfsv4.NfsArgop4_OP_OPEN_DOWNGRADE, *nfsv4.NfsArgop4_OP_LOCKU,
		*nfsv4.NfsArgop4_OP_DELEGRETURN, *nfsv4.NfsArgop4_OP_FREE_STATEID:
		return 16
	case *nfsv4.NfsArgop4_OP_WRITE:
		return 4 + 4 + 8
	case *nfsv4.NfsArgop4_OP_COMMIT:
		return 8
	case *nfsv4.NfsArgop4_OP_CREATE:
		return 20 + 4 + 4*8 // change_info, attrset
	case *nfsv4.NfsArgop4_OP_REMOVE, *nfsv4.NfsArgop4_OP_LINK:
		return 20
	case *nfsv4.NfsArgop4_OP_RENAME:
		return 40
	case *nfsv4.NfsArgop4_OP_SETATTR:
		return 4 + 4*8 // attrsset, also on failure
	case *nfsv4.NfsArgop4_OP_LOCK, *nfsv4.NfsArgop4_OP_LOCKT:
		// stateid, or LOCK4denied: range, type and the owner.
		return 8 + 8 + 4 + 8 + 4 + maxOwner
	case *nfsv4.NfsArgop4_OP_COPY:
		// write_response4 (optional callback id, count, committed,
		// verifier) and copy_requirements4; on NFS4ERR_OFFLOAD_NO_REQS
		// the requirements alone.
		return 4 + 16 + 8 + 4 + 8 + 8
	case *nfsv4.NfsArgop4_OP_CLONE, *nfsv4.NfsArgop4_OP_ALLOCATE, *nfsv4.NfsArgop4_OP_DEALLOCATE:
		return 0
	case *nfsv4.NfsArgop4_OP_SEEK:
		return 4 + 8
	case *extxdr.Arg:
		if a.GetArgop() == OpTxnBegin {
			return 16
		}
	}
	return -1
}

// attrsBound bounds a fattr4 with the attributes of mask (bitmap, length
// and values), or -1 if one of them has no small bound.
func attrsBound(mask Bitmap) int {
	n := 4 + 4*len(mask) + 4
	for w, word := range mask {
		for bit := 0; bit < 32; bit++ {
			if word&(1<<bit) == 0 {
				continue
			}
			switch a := uint32(32*w + bit); a {
			case nfsv4.FATTR4_SUPPORTED_ATTRS, nfsv4.FATTR4_SUPPATTR_EXCLCREAT:
				n += 4 + 4*8
			case nfsv4.FATTR4_FILEHANDLE:
				n += 4 + maxFH
			case nfsv4.FATTR4_OWNER, nfsv4.FATTR4_OWNER_GROUP:
				n += 4 + maxOwner
			case nfsv4.FATTR4_ACL, nfsv4.FATTR4_DACL, nfsv4.FATTR4_SACL, nfsv4.FATTR4_FS_LOCATIONS,
				nfsv4.FATTR4_FS_LOCATIONS_INFO, nfsv4.FATTR4_FS_LAYOUT_TYPES, nfsv4.FATTR4_LAYOUT_TYPES,
				nfsv4.FATTR4_MDSTHRESHOLD, nfsv4.FATTR4_FS_STATUS, nfsv4.FATTR4_RETENTION_HOLD,
				nfsv4.FATTR4_SEC_LABEL, nfsv4.FATTR4_LAYOUT_HINT, nfsv4.FATTR4_RETENTION_GET,
				nfsv4.FATTR4_RETENTEVT_GET, nfsv4.FATTR4_RETENTION_SET, nfsv4.FATTR4_RETENTEVT_SET:
				return -1
			default:
				if a > nfsv4.FATTR4_SEC_LABEL {
					return -1 // not known to this client
				}
				// Fixed-size values: at most an fsid or a
				// time with its set-how (16 bytes).
				n += 16
			}
		}
	}
	return n
}

// cacheThis reports whether to ask the server to cache cp's reply
// (sa_cachethis): for a COMPOUND that is not replaySafe, if its reply
// fits the session's cached-reply limit.
func cacheThis(cp *Compound, lim Limits) bool {
	if replaySafe(cp) {
		return false
	}
	b := replyBound(cp)
	return b >= 0 && b <= int(lim.MaxResponseSizeCached)
}
