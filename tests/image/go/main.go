// Command imagetar writes a one-layer container image as a docker-archive (`docker save` format:
// manifest.json with RepoTags, the config blob, the gzipped layer), which `docker load`,
// `podman load` and `ctr images import` accept. tests/image/build.sh runs it; see there.
//
// The layer is described by a spec file, one entry per line (fields separated by blanks):
//
//	dir  /path MODE UID GID
//	file /path MODE UID GID SOURCE      (the content of SOURCE on this host, symlinks followed)
//
// MODE is octal (1777 for a sticky /tmp). Missing parent directories are added as 0755 root.
// Entries are written sorted by path with modification time 0 and no user or group names, and the
// image's creation time is 0 as well, so the same inputs give a byte-identical archive.
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type entry struct {
	path     string // without the leading "/"
	dir      bool
	mode     int64
	uid, gid int
	source   string
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var tags, env list
	var out, spec, user, workdir, entrypoint, cmd string
	flag.StringVar(&out, "out", "", "the archive to write")
	flag.StringVar(&spec, "spec", "", "the layer's spec file")
	flag.Var(&tags, "tag", "an image name with tag (repeatable); short names mean docker.io/library/…")
	flag.StringVar(&user, "user", "", "the image's User")
	flag.StringVar(&workdir, "workdir", "", "the image's WorkingDir")
	flag.Var(&env, "env", "KEY=VALUE for the image's Env (repeatable)")
	flag.StringVar(&entrypoint, "entrypoint", "", "the image's Entrypoint as a JSON array")
	flag.StringVar(&cmd, "cmd", "", "the image's Cmd as a JSON array")
	flag.Parse()
	if err := run(out, spec, tags, user, workdir, env, entrypoint, cmd); err != nil {
		fmt.Fprintln(os.Stderr, "imagetar:", err)
		os.Exit(1)
	}
}

func run(out, spec string, tags []string, user, workdir string, env []string, entrypoint, cmd string) error {
	if out == "" || spec == "" || len(tags) == 0 {
		return fmt.Errorf("-out, -spec and at least one -tag are required")
	}
	entries, err := readSpec(spec)
	if err != nil {
		return err
	}
	layerTar, err := writeLayer(entries)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: epoch, CreatedBy: "tests/image/build.sh", Comment: "ferrolb"},
	})
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = epoch
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH // the binaries were built on this host, for this host
	cfg.Config.User = user
	cfg.Config.WorkingDir = workdir
	cfg.Config.Env = env
	if cfg.Config.Entrypoint, err = jsonList(entrypoint); err != nil {
		return fmt.Errorf("-entrypoint: %w", err)
	}
	if cfg.Config.Cmd, err = jsonList(cmd); err != nil {
		return fmt.Errorf("-cmd: %w", err)
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	refs := map[name.Reference]v1.Image{}
	for _, t := range tags {
		tag, err := name.NewTag(t)
		if err != nil {
			return err
		}
		refs[tag] = img
	}
	tmp := out + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

func jsonList(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var l []string
	err := json.Unmarshal([]byte(s), &l)
	return l, err
}

func readSpec(file string) ([]entry, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byPath := map[string]entry{}
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		fields := strings.Fields(scanner.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		e, err := parseEntry(fields)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, n, err)
		}
		if _, dup := byPath[e.path]; dup {
			return nil, fmt.Errorf("%s:%d: /%s twice", file, n, e.path)
		}
		byPath[e.path] = e
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	for p := range byPath {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if e, ok := byPath[d]; ok && !e.dir {
				return nil, fmt.Errorf("/%s is a file but /%s is under it", d, p)
			}
			if _, ok := byPath[d]; !ok {
				byPath[d] = entry{path: d, dir: true, mode: 0o755}
			}
		}
	}
	entries := make([]entry, 0, len(byPath))
	for _, e := range byPath {
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	return entries, nil
}

func parseEntry(f []string) (entry, error) {
	var e entry
	switch {
	case f[0] == "dir" && len(f) == 5:
		e.dir = true
	case f[0] == "file" && len(f) == 6:
		e.source = f[5]
	default:
		return e, fmt.Errorf("expected `dir PATH MODE UID GID` or `file PATH MODE UID GID SOURCE`, got %q", strings.Join(f, " "))
	}
	p := path.Clean(f[1])
	if !strings.HasPrefix(p, "/") || p == "/" {
		return e, fmt.Errorf("%q is not an absolute path below /", f[1])
	}
	e.path = strings.TrimPrefix(p, "/")
	mode, err := strconv.ParseInt(f[2], 8, 64)
	if err != nil || mode&^0o7777 != 0 {
		return e, fmt.Errorf("bad mode %q", f[2])
	}
	e.mode = mode
	if e.uid, err = strconv.Atoi(f[3]); err != nil {
		return e, fmt.Errorf("bad uid %q", f[3])
	}
	if e.gid, err = strconv.Atoi(f[4]); err != nil {
		return e, fmt.Errorf("bad gid %q", f[4])
	}
	return e, nil
}

func writeLayer(entries []entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.path,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: time.Unix(0, 0),
		}
		var content []byte
		if e.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			var err error
			if content, err = os.ReadFile(e.source); err != nil {
				return nil, err
			}
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
