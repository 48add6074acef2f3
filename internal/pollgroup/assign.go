package pollgroup

import "hash/fnv"

// Owner is the member that should poll ws among members: the one with the
// highest score(ws, member) (rendezvous hashing). Every member computes it
// alone and all agree when they see the same members; a member that joins
// or leaves moves only the workspaces it wins or held, about 1/n of them.
// Ties, which need two equal 64-bit scores, go to the greater id. "" when
// members is empty.
func Owner(ws string, members []string) string {
	var (
		best  string
		top   uint64
		found bool
	)
	for _, m := range members {
		s := score(ws, m)
		if !found || s > top || (s == top && m > best) {
			best, top, found = m, s, true
		}
	}
	return best
}

// score is FNV-1a of "<ws>\x00<member>", mixed by splitmix64's finaliser:
// FNV alone spreads ids that differ only in their last bytes poorly over
// the high bits that decide the comparison.
func score(ws, member string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(ws))
	h.Write([]byte{0})
	h.Write([]byte(member))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
