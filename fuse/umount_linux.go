package fuse

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	dev    string // "major:minor"
	dir    string
	fstype string
}

// findMount returns the mountinfo entry of the mount at dir.
func findMount(dir string) (mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mountInfo{}, err
	}
	defer f.Close()
	var found mountInfo
	ok := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || unescapeMount(fields[4]) != dir {
			continue
		}
		for i := 6; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				found, ok = mountInfo{dev: fields[2], dir: dir, fstype: fields[i+1]}, true // the last one wins
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return mountInfo{}, err
	}
	if !ok {
		return mountInfo{}, fmt.Errorf("%s is not a mount point", dir)
	}
	return found, nil
}

// unescapeMount undoes the octal escapes of /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			valid := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					valid = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if valid {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Unmount unmounts the txnfs FUSE mount at dir from outside the serving
// process. A live server sees the unmount and exits cleanly. If the
// mount is busy, Unmount fails unless force is set; with force, or when
// the serving process is dead (the mount answers ENOTCONN), the FUSE
// connection is aborted and the mount detached (lazy unmount), which is
// how a crashed mount is recovered.
func Unmount(dir string, force bool) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	mi, err := findMount(dir)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(mi.fstype, "fuse") {
		return fmt.Errorf("%s is a %s mount, not a FUSE mount", dir, mi.fstype)
	}
	dead := false
	if !force {
		// A dead server answers ENOTCONN at once. Not with force: a
		// hung server would block the stat itself (as it blocks its
		// users), and force aborts the connection anyway.
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); errors.Is(err, unix.ENOTCONN) {
			dead = true
		}
	}
	if os.Geteuid() != 0 {
		args := []string{"-u", dir}
		if force || dead {
			args = []string{"-u", "-z", dir}
		}
		out, err := exec.Command("fusermount3", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("fusermount3 %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if !dead {
		err := unix.Unmount(dir, 0)
		if err == nil {
			return nil
		}
		if !force {
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("unmounting %s: %w (files are open or a process is inside; use --force for a lazy unmount)", dir, err)
			}
			return fmt.Errorf("unmounting %s: %w", dir, err)
		}
	}
	// Abort the connection so that nothing waits on a dead or hung
	// server, then detach the mount.
	if _, minor, ok := strings.Cut(mi.dev, ":"); ok {
		const ctl = "/sys/fs/fuse/connections"
		if ents, err := os.ReadDir(ctl); err == nil && len(ents) == 0 {
			// fusectl is not mounted: mount it to reach the connection.
			unix.Mount("fusectl", ctl, "fusectl", 0, "")
		}
		abort := filepath.Join(ctl, minor, "abort")
		if err := os.WriteFile(abort, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("aborting the FUSE connection of %s: %w", dir, err)
		}
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching %s: %w", dir, err)
	}
	return nil
}

// setBDI applies bdi to the mount's backing device info (best effort:
// it needs root). A dirty limit that cannot be raised is logged as a
// warning (writes through the writeback cache are then throttled at the
// kernel's 1%); a read-ahead that cannot be set only at debug level.
func (l *mountLife) setBDI(bdi bdiSettings, log *slog.Logger) {
	if bdi.readAheadKB <= 0 && bdi.maxRatio <= 0 {
		return
	}
	dev := ""
	if abs, err := filepath.Abs(l.dir); err == nil {
		if mi, err := findMount(filepath.Clean(abs)); err == nil {
			dev = mi.dev
		}
	}
	if bdi.readAheadKB > 0 {
		p := filepath.Join("/sys/class/bdi", dev, "read_ahead_kb")
		if err := writeBDI(dev, p, bdi.readAheadKB); err != nil {
			log.Debug("cannot set read-ahead", "path", p, "err", err)
		}
	}
	if bdi.maxRatio > 0 {
		p := filepath.Join("/sys/class/bdi", dev, "max_ratio")
		if err := writeBDI(dev, p, bdi.maxRatio); err != nil {
			log.Warn("cannot raise the writeback cache's dirty page limit; writers will be throttled early", "path", p, "max_ratio", bdi.maxRatio, "err", err)
		} else {
			log.Debug("dirty page limit raised", "path", p, "max_ratio", bdi.maxRatio)
		}
	}
}

// writeBDI writes v to the sysfs file p of the backing device dev.
func writeBDI(dev, p string, v int) error {
	if dev == "" {
		return errors.New("the mount's device was not found in /proc/self/mountinfo")
	}
	return os.WriteFile(p, []byte(strconv.Itoa(v)), 0)
}
