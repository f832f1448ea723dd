// Command mkimage writes container images into one docker-save archive
// without a container engine or a registry, for nodes whose containerd
// imports it:
//
//	go run ./deploy/mkimage -o OUT.tar [--snorkel BIN [--snorkel-tag T]]
//	    [--pause BIN [--pause-tag T]] [--coredns BIN [--coredns-tag T]]
//	    [--client-tag T]
//	ctr -n k8s.io images import OUT.tar
//
// Each binary must be static (deploy/build-static.sh builds snorkel's);
// the client image copies the host's curl, dig, ping and their libraries.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/snorkel-net/snorkel/deploy/imagetar"
)

func main() {
	err := run(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// staticImage is an image made from one binary a flag names.
type staticImage struct {
	name            string // the binary's flag; its tag's flag is name-tag
	binary, tag     string
	recipe          func(binary, tag string) (imagetar.Image, error)
	defaultTag, how string
}

func run(args []string) error {
	fl := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	out := fl.String("o", "", "the archive to write (required)")
	statics := []*staticImage{
		{name: "snorkel", recipe: imagetar.Snorkel, defaultTag: "ghcr.io/snorkel-net/snorkel:dev", how: "deploy/build-static.sh bin/snorkel-static"},
		{name: "pause", recipe: imagetar.Pause, defaultTag: "snorkel.local/pause:dev", how: "CGO_ENABLED=0 go build -o bin/pause ./deploy/imagetar/pause"},
		{name: "coredns", recipe: imagetar.CoreDNS, defaultTag: "snorkel.local/coredns:dev", how: "CGO_ENABLED=0 go build in CoreDNS's module"},
	}
	for _, s := range statics {
		fl.StringVar(&s.binary, s.name, "", "the static "+s.name+" binary: makes the "+s.name+" image (build it with "+s.how+")")
		fl.StringVar(&s.tag, s.name+"-tag", s.defaultTag, "the "+s.name+" image's name")
	}
	clientTag := fl.String("client-tag", "", "makes the client image (curl, dig, nslookup, ping, sh from this host) under this name")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every input is a flag (-h lists them)", fl.Arg(0))
	}
	if *out == "" {
		return errors.New("-o is required: the archive to write, e.g. -o bin/images.tar")
	}
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var images []imagetar.Image
	for _, s := range statics {
		if s.binary == "" {
			if set[s.name+"-tag"] {
				return fmt.Errorf("--%s-tag without --%s: give the binary too, e.g. --%s bin/%s", s.name, s.name, s.name, s.name)
			}
			continue
		}
		img, err := s.recipe(s.binary, s.tag)
		if err != nil {
			return fmt.Errorf("--%s: %w", s.name, err)
		}
		images = append(images, img)
	}
	if set["client-tag"] {
		if *clientTag == "" {
			return errors.New("--client-tag is empty: name the client image, e.g. --client-tag snorkel.local/client:dev")
		}
		img, err := imagetar.Client(*clientTag)
		if err != nil {
			return fmt.Errorf("--client-tag: %w", err)
		}
		images = append(images, img)
	}
	if len(images) == 0 {
		return errors.New("no image asked for: give --snorkel, --pause, --coredns or --client-tag")
	}
	return writeArchive(*out, images)
}

// writeArchive writes images to out through a temporary file beside it,
// so a failed run leaves no half archive for ctr to choke on.
func writeArchive(out string, images []imagetar.Image) error {
	f, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".*")
	if err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	defer os.Remove(f.Name())
	if err := imagetar.Write(f, images...); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	return nil
}
