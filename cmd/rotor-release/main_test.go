package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The six platforms of docs/service.md, named as the README and packagers expect.
func TestTargetNames(t *testing.T) {
	want := []string{
		"rotor_1.2.3_linux_amd64.tar.gz", "rotor_1.2.3_linux_arm64.tar.gz",
		"rotor_1.2.3_darwin_amd64.tar.gz", "rotor_1.2.3_darwin_arm64.tar.gz",
		"rotor_1.2.3_windows_amd64.zip", "rotor_1.2.3_windows_arm64.zip",
	}
	var got []string
	for _, tg := range allTargets {
		got = append(got, tg.archive("v1.2.3"))
		wantBin := "rotor"
		if tg.os == "windows" {
			wantBin = "rotor.exe"
		}
		if tg.binary() != wantBin {
			t.Errorf("%s: binary %q, want %q", tg, tg.binary(), wantBin)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("archives:\n got %q\nwant %q", got, want)
	}
	if ts, err := parseTargets(" darwin/arm64,linux/amd64"); err != nil || targetList(ts) != "darwin/arm64,linux/amd64" {
		t.Errorf("parseTargets = %v, %v", ts, err)
	}
	for _, bad := range []string{"linux/386", "plan9/amd64", "linux"} {
		if _, err := parseTargets(bad); err == nil {
			t.Errorf("parseTargets(%q) accepted it", bad)
		}
	}
}

// Stamps that -ldflags would split, or that would leave dist/, are refused.
func TestConfigureRefusesBadStamps(t *testing.T) {
	for _, r := range []release{
		{version: ""}, {version: "1.0 beta"}, {version: "../x"}, {version: "v1", commit: "a'b"},
	} {
		if err := r.configure("", ""); err == nil {
			t.Errorf("version %q commit %q accepted", r.version, r.commit)
		}
	}
	r := release{version: "v1.2.3", commit: "abc1234"}
	if err := r.configure("", "0"); err != nil || !r.date.Equal(time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("configure with -date 0: %v, date %v (want zip's 1980 floor)", err, r.date)
	}
}

// One real release, for this machine's platform only (building all six
// would cost minutes): the archive holds the binary, README.md and LICENSE
// with their modes, checksums.txt matches its bytes, and the binary says the
// stamped version and commit.
func TestReleaseForThisPlatform(t *testing.T) {
	host := target{runtime.GOOS, runtime.GOARCH}
	if !slices.Contains(allTargets, host) {
		t.Skipf("%s is not a release platform", host)
	}
	// Everything comes from the module cache and the local toolchain.
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOTOOLCHAIN", "local")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	root := filepath.Join("..", "..")
	r := release{root: root, goCmd: "go", dist: t.TempDir(), version: "v9.8.7-test", commit: "abc1234"}
	if err := r.configure(host.String(), "1700000000"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	name := host.archive(r.version)
	archive := filepath.Join(r.dist, name)
	if want := archive + "\n" + filepath.Join(r.dist, "checksums.txt") + "\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}

	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(r.dist, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if want := hex.EncodeToString(sum[:]) + "  " + name + "\n"; string(sums) != want {
		t.Errorf("checksums.txt = %q, want %q", sums, want)
	}

	files, err := readArchive(name, data)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{host.binary() + " -rwxr-xr-x", "README.md -rw-r--r--", "LICENSE -rw-r--r--"}
	var got []string
	for _, f := range files {
		got = append(got, f.name+" "+f.mode.String())
		if !f.modTime.Equal(r.date) {
			t.Errorf("%s dated %v, want %v", f.name, f.modTime, r.date)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	for i, doc := range []string{"README.md", "LICENSE"} {
		if disk, _ := os.ReadFile(filepath.Join(root, doc)); !bytes.Equal(files[i+1].data, disk) {
			t.Errorf("%s in the archive differs from the one in the module", doc)
		}
	}

	bin := filepath.Join(t.TempDir(), host.binary())
	if err := os.WriteFile(bin, files[0].data, 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", host.binary(), err)
	}
	if !strings.HasPrefix(string(v), "rotor v9.8.7-test (commit abc1234, go") {
		t.Errorf("--version printed %q", v)
	}
}

// An archived is one entry read back from an archive.
type archived struct {
	name    string
	mode    fs.FileMode
	modTime time.Time
	data    []byte
}

// readArchive reads every entry of a .tar.gz or .zip, in order.
func readArchive(name string, data []byte) ([]archived, error) {
	if strings.HasSuffix(name, ".zip") {
		return readZip(data)
	}
	return readTarGz(data)
}

func readTarGz(data []byte) ([]archived, error) {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	var files []archived
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" {
			return nil, fmt.Errorf("%s has an owner: %d/%d %q/%q", hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files = append(files, archived{hdr.Name, hdr.FileInfo().Mode(), hdr.ModTime, b})
	}
}

func readZip(data []byte) ([]archived, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	var files []archived
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		files = append(files, archived{f.Name, f.Mode(), f.Modified, b})
	}
	return files, nil
}
