//go:build linux

package fuse

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPermissionsNonRoot checks that the engine's permission checks hold
// for unprivileged users through the mount (no default_permissions).
func TestPermissionsNonRoot(t *testing.T) { permissionsNonRoot(t, mountOne(t)) }

// permissionsNonRoot runs the permission checks on mnt.
func permissionsNonRoot(t *testing.T, mnt string) {
	secret := filepath.Join(mnt, "secret")
	writeFile(t, secret, "root only")
	os.Chmod(secret, 0o600)
	pub := filepath.Join(mnt, "pub")
	grp := filepath.Join(mnt, "grp")
	sticky := filepath.Join(mnt, "sticky")
	noexec := filepath.Join(mnt, "noexec")
	for d, mode := range map[string]os.FileMode{pub: 0o777, grp: 0o770, sticky: 0o777 | os.ModeSticky, noexec: 0o766} {
		os.Mkdir(d, 0)
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	os.Chown(grp, 0, 2000)
	writeFile(t, filepath.Join(noexec, "f"), "x")

	denied := func(what string, groups []uint32, name string, args ...string) {
		t.Helper()
		out, err := asUserErr(1000, 1000, groups, name, args...)
		if err == nil {
			t.Errorf("%s: allowed, want denied", what)
		} else if msg := out + err.Error(); !strings.Contains(msg, "ermission denied") && !strings.Contains(msg, "not permitted") {
			t.Errorf("%s: %v: %s", what, err, out)
		}
	}
	allowed := func(what string, groups []uint32, name string, args ...string) {
		t.Helper()
		if out, err := asUserErr(1000, 1000, groups, name, args...); err != nil {
			t.Errorf("%s: %v: %s", what, err, out)
		}
	}
	denied("read 0600 root file", nil, "cat", secret)
	denied("write 0600 root file", nil, "sh", "-c", "echo x > "+secret)
	denied("create in root's 0755 dir", nil, "touch", filepath.Join(mnt, "new"))
	denied("chmod root's file", nil, "chmod", "777", secret)
	denied("chown to self", nil, "chown", "1000", secret)
	denied("unlink in root's dir", nil, "rm", "-f", secret)
	denied("enter group dir without the group", nil, "ls", grp)
	allowed("enter group dir with a supplementary group", []uint32{2000}, "ls", grp)
	allowed("create in group dir with a supplementary group", []uint32{2000}, "touch", filepath.Join(grp, "g"))
	denied("stat through a dir without search permission", nil, "stat", filepath.Join(noexec, "f"))

	allowed("create in 0777 dir", nil, "sh", "-c", "echo mine > "+filepath.Join(pub, "mine"))
	st, err := os.Stat(filepath.Join(pub, "mine"))
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("owner of a user's new file: %v %+v", err, st)
	}
	allowed("chmod own file", nil, "chmod", "600", filepath.Join(pub, "mine"))
	if out, err := asUserErr(1001, 1001, nil, "cat", filepath.Join(pub, "mine")); err == nil {
		t.Errorf("uid 1001 read uid 1000's 0600 file: %s", out)
	}
	// Sticky directory: only the owner may remove.
	allowed("create in sticky dir", nil, "touch", filepath.Join(sticky, "s"))
	if _, err := asUserErr(1001, 1001, nil, "rm", "-f", filepath.Join(sticky, "s")); err == nil {
		t.Error("uid 1001 removed uid 1000's file from a sticky dir")
	}
	// access(2) and exec.
	script := filepath.Join(pub, "script")
	writeFile(t, script, "#!/bin/sh\necho ran\n")
	os.Chmod(script, 0o744)
	denied("exec without x for others", nil, script)
	os.Chmod(script, 0o755)
	if out := asUser(t, 1000, 1000, script); strings.TrimSpace(out) != "ran" {
		t.Errorf("exec: %q", out)
	}
}
