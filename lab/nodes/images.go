package nodes

import (
	"fmt"
	"os"

	"github.com/snorkel-net/snorkel/deploy/imagetar"
)

// Images the lab imports into every node, by reference. ClientImage has
// what the tutorial's user types in a pod (curl, dig, nslookup, ping).
const (
	CoreDNSImage = "registry.lab/coredns:1"
	ClientImage  = "registry.lab/tutorial-client:1"
)

// Images are the static binaries the lab's images are built from, and the
// reference of Snorkel's image: the one `snorkel join` deploys by default,
// so that join finds it on the nodes.
type Images struct {
	Snorkel, SnorkelImage string
	Pause                 string
	CoreDNS               string
}

func (im Images) tags() []string {
	return []string{im.SnorkelImage, PauseImage, CoreDNSImage, ClientImage}
}

// write builds the images into one archive at path.
func (im Images) write(path string) error {
	var imgs []imagetar.Image
	for _, build := range []func() (imagetar.Image, error){
		func() (imagetar.Image, error) { return imagetar.Snorkel(im.Snorkel, im.SnorkelImage) },
		func() (imagetar.Image, error) { return imagetar.Pause(im.Pause, PauseImage) },
		func() (imagetar.Image, error) { return imagetar.CoreDNS(im.CoreDNS, CoreDNSImage) },
		func() (imagetar.Image, error) { return imagetar.Client(ClientImage) },
	} {
		img, err := build()
		if err != nil {
			return fmt.Errorf("nodes: images: %w", err)
		}
		imgs = append(imgs, img)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("nodes: images: %w", err)
	}
	if err := imagetar.Write(f, imgs...); err != nil {
		f.Close()
		return fmt.Errorf("nodes: images: %w", err)
	}
	return f.Close()
}
