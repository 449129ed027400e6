package fs

import (
	"strings"

	"github.com/txnfs/txnfs/meta"
)

func (c Cred) isRoot() bool { return c.Uid == 0 }

func (c Cred) inGroup(gid uint32) bool {
	if c.Gid == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// allowed reports which of the access bits in mask cred has on the inode,
// by the POSIX mode-bit rules; the superuser may read and write anything
// and execute anything that is a directory or has an execute bit.
func allowed(c Cred, n *meta.Inode, mask uint32) uint32 {
	if c.isRoot() {
		got := mask & (AccessRead | AccessWrite)
		if mask&AccessExecute != 0 && (n.Type == uint8(TypeDirectory) || n.Mode&0o111 != 0) {
			got |= AccessExecute
		}
		return got
	}
	var bits uint32
	switch {
	case c.Uid == n.Uid:
		bits = (n.Mode >> 6) & 7
	case c.inGroup(n.Gid):
		bits = (n.Mode >> 3) & 7
	default:
		bits = n.Mode & 7
	}
	return bits & mask
}

func checkAccess(c Cred, n *meta.Inode, mask uint32) error {
	if allowed(c, n, mask) != mask {
		return ErrAccess
	}
	return nil
}

// checkSticky enforces the sticky-directory rule for removing or renaming
// the entry of inode n out of directory dir.
func checkSticky(c Cred, dir, n *meta.Inode) error {
	if dir.Mode&ModeSticky == 0 || c.isRoot() || c.Uid == dir.Uid || c.Uid == n.Uid {
		return nil
	}
	return ErrPerm
}

// checkName validates a directory entry name.
func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return ErrBadName
	case len(name) > MaxNameLen:
		return ErrNameTooLong
	case strings.ContainsAny(name, "/\x00"):
		return ErrBadName
	}
	return nil
}
