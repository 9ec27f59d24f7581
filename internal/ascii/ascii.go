// Package ascii holds the one case folding OpenMP's names need: A-Z only.
// OpenMP compares its names (omp_atk_*, memory spaces, allocators, trait
// values) without regard to ASCII case; Unicode folding (strings.ToLower,
// strings.EqualFold: the Kelvin sign becomes "k") would let odd spellings
// through.
package ascii

// Lower returns s with A-Z lower-cased and every other byte as it is.
func Lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
