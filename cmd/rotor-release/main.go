// Command rotor-release builds rotor's release archives (make release): for
// each target OS and architecture, a static, -trimpath rotor binary stamped
// with the version and commit, packed with README.md and LICENSE into
// dist/rotor_<version>_<os>_<arch>.tar.gz (.zip for Windows), and
// dist/checksums.txt with the SHA-256 of every archive, in sha256sum's
// format. It needs only the Go toolchain and the module cache: nothing is
// downloaded beyond what go build itself fetches.
//
// The archives have no top-level directory, as GoReleaser's have, so
// `tar xzf rotor_..._linux_amd64.tar.gz rotor` takes just the binary. Their
// entries are the same from one run to the next: fixed order, modes (0755
// the binary, 0644 the documents), owner and time (-date, by default
// $SOURCE_DATE_EPOCH, which make release sets to the commit's time).
//
// Usage:
//
//	rotor-release -version v1.2.3 -commit abc1234 [-targets linux/amd64,darwin/arm64] [-dist dist]
package main

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	r := release{root: ".", goCmd: "go"}
	flag.StringVar(&r.version, "version", "", "the version to stamp and name the archives by (required)")
	flag.StringVar(&r.commit, "commit", "", "the commit to stamp")
	flag.StringVar(&r.dist, "dist", "dist", "the folder the archives and checksums.txt are written to")
	targets := flag.String("targets", "", "comma-separated os/arch pairs to build (default: all of "+targetList(allTargets)+")")
	date := flag.String("date", os.Getenv("SOURCE_DATE_EPOCH"), "the time of every archive entry, in Unix seconds (default $SOURCE_DATE_EPOCH, else 1980-01-01)")
	flag.Parse()
	if err := r.configure(*targets, *date); err != nil {
		fmt.Fprintln(os.Stderr, "rotor-release:", err)
		flag.Usage()
		os.Exit(1)
	}
	if err := r.run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rotor-release:", err)
		os.Exit(1)
	}
}

// A target is one OS and architecture rotor is released for.
type target struct{ os, arch string }

// allTargets are the platforms of docs/service.md, in the order they are built.
var allTargets = []target{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

func (t target) String() string { return t.os + "/" + t.arch }

// binary is the executable's name inside the archive.
func (t target) binary() string {
	if t.os == "windows" {
		return "rotor.exe"
	}
	return "rotor"
}

// archive is the archive's file name for the given version. A leading "v"
// is dropped (v1.2.3 gives rotor_1.2.3_...), as GoReleaser names archives,
// so that packaging recipes written for its names fit.
func (t target) archive(version string) string {
	ext := ".tar.gz"
	if t.os == "windows" {
		ext = ".zip"
	}
	return fmt.Sprintf("rotor_%s_%s_%s%s", strings.TrimPrefix(version, "v"), t.os, t.arch, ext)
}

// parseTargets reads a comma-separated list of os/arch pairs; "" is all
// of them. Only the released platforms are accepted.
func parseTargets(s string) ([]target, error) {
	if s == "" {
		return allTargets, nil
	}
	var ts []target
	for _, name := range strings.Split(s, ",") {
		i := slices.IndexFunc(allTargets, func(t target) bool { return t.String() == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("unknown target %q (want one of %s)", name, targetList(allTargets))
		}
		ts = append(ts, allTargets[i])
	}
	return ts, nil
}

func targetList(ts []target) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return strings.Join(names, ",")
}

// validStamp matches what may be stamped and put in a file name: what git
// describe and rev-parse print, and semantic versions. No spaces or quotes,
// which -ldflags would split on, and no path separators.
var validStamp = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+-]*$`)

// release is one run: what to build, from where, into where.
type release struct {
	root    string // the module root: ./cmd/rotor, README.md and LICENSE are found there
	goCmd   string // the go command
	dist    string
	version string
	commit  string
	targets []target
	date    time.Time // of every archive entry
}

// configure checks the flags and sets the targets and entry time.
func (r *release) configure(targets, date string) error {
	if !validStamp.MatchString(r.version) {
		return fmt.Errorf("-version %q: want a version such as v1.2.3 or what git describe prints", r.version)
	}
	if r.commit != "" && !validStamp.MatchString(r.commit) {
		return fmt.Errorf("-commit %q: want a commit hash", r.commit)
	}
	ts, err := parseTargets(targets)
	if err != nil {
		return err
	}
	r.targets = ts
	// zip cannot hold a time before 1980, so that is the floor and the
	// default.
	r.date = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	if date != "" {
		sec, err := strconv.ParseInt(date, 10, 64)
		if err != nil {
			return fmt.Errorf("-date %q: want Unix seconds", date)
		}
		if t := time.Unix(sec, 0).UTC(); t.After(r.date) {
			r.date = t
		}
	}
	return nil
}

// run builds and packs every target into r.dist, then writes checksums.txt.
// It prints each file it writes to out.
func (r *release) run(ctx context.Context, out io.Writer) error {
	if err := os.MkdirAll(r.dist, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "rotor-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var sums strings.Builder
	for _, t := range r.targets {
		bin := filepath.Join(tmp, t.os+"_"+t.arch, t.binary())
		if err := r.build(ctx, t, bin); err != nil {
			return err
		}
		name := t.archive(r.version)
		sum, err := r.pack(t, bin, filepath.Join(r.dist, name))
		if err != nil {
			return fmt.Errorf("packing %s: %w", name, err)
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, name)
		fmt.Fprintln(out, filepath.Join(r.dist, name))
	}
	checksums := filepath.Join(r.dist, "checksums.txt")
	if err := os.WriteFile(checksums, []byte(sums.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(out, checksums)
	return nil
}

// build compiles rotor for t into bin: static (no cgo, so it runs on any
// libc or none), without the builder's paths, stripped, and stamped as
// make build stamps it.
func (r *release) build(ctx context.Context, t target, bin string) error {
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", r.version, r.commit)
	cmd := exec.CommandContext(ctx, r.goCmd, "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "./cmd/rotor")
	cmd.Dir = r.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+t.os, "GOARCH="+t.arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", t, err, out)
	}
	return nil
}

// An entry is one file of an archive.
type entry struct {
	name string      // in the archive
	path string      // on disk
	mode fs.FileMode // in the archive, whatever the file's mode on disk
}

// pack writes the archive for t at path and returns its SHA-256 in hex.
func (r *release) pack(t target, bin, path string) (sum string, err error) {
	entries := []entry{
		{t.binary(), bin, 0o755},
		{"README.md", filepath.Join(r.root, "README.md"), 0o644},
		{"LICENSE", filepath.Join(r.root, "LICENSE"), 0o644},
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	h := sha256.New()
	w := io.MultiWriter(f, h)
	if t.os == "windows" {
		err = writeZip(w, entries, r.date)
	} else {
		err = writeTarGz(w, entries, r.date)
	}
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeTarGz writes entries as a gzipped tar. The gzip header carries no
// name or time (gzip.Writer's zero Header), and the tar headers no owner,
// so the bytes depend on the entries and date only.
func writeTarGz(w io.Writer, entries []entry, date time.Time) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		err := copyEntry(e, func(size int64) (io.Writer, error) {
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Size: size, Mode: int64(e.mode), ModTime: date, Format: tar.FormatUSTAR}
			return tw, tw.WriteHeader(hdr)
		})
		if err != nil {
			return err
		}
	}
	return errors.Join(tw.Close(), gz.Close())
}

// writeZip writes entries as a zip, deflated, with Unix modes so that
// unzip on macOS or Linux keeps the binary executable.
func writeZip(w io.Writer, entries []entry, date time.Time) error {
	zw := zip.NewWriter(w)
	for _, e := range entries {
		err := copyEntry(e, func(int64) (io.Writer, error) {
			hdr := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: date}
			hdr.SetMode(e.mode)
			return zw.CreateHeader(hdr)
		})
		if err != nil {
			return err
		}
	}
	return zw.Close()
}

// copyEntry copies e's file into the writer that create returns for it,
// given the file's size.
func copyEntry(e entry, create func(size int64) (io.Writer, error)) error {
	f, err := os.Open(e.path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	w, err := create(fi.Size())
	if err != nil {
		return err
	}
	_, err = io.Copy(w, f)
	return err
}
