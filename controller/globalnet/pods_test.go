package globalnet

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// TestLabelListMatchesSet compares labelList with labels.Set, the
// reference, on random labels and selectors.
func TestLabelListMatchesSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	word := func() string { return fmt.Sprintf("k%d", rng.IntN(12)) }
	for range 2000 {
		set := labels.Set{}
		for range rng.IntN(6) {
			set[word()] = word()
		}
		list := newLabelList(set)
		for range 10 {
			k := word()
			wv, wok := set[k]
			if v, ok := list.Lookup(k); v != wv || ok != wok || list.Has(k) != wok || list.Get(k) != wv {
				t.Fatalf("%v: Lookup(%s) = %q, %v; want %q, %v", set, k, v, ok, wv, wok)
			}
			sel := labels.SelectorFromSet(labels.Set{k: word()})
			if sel.Matches(list) != sel.Matches(set) {
				t.Fatalf("%v: selector %s matches the list %v, the set %v", set, sel, sel.Matches(list), sel.Matches(set))
			}
		}
	}
}
