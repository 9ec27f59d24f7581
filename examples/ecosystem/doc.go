// Package ecosystem runs the README's Go snippets against the real
// modules they show ompalloc with: Apache Arrow Go v18.4.1, gonum v0.17.0
// and gorgonia's tensor v0.9.24. Its package gpucode is a user's GPU code
// tested on ompalloc's fake drivers through the public gputest package, as
// a module outside ompalloc tests it in CI without a GPU. It is a module of its own (go.mod, with
// ompalloc replaced by this checkout), so that ompalloc's own module
// never requires them; its test needs the module proxy (or a filled
// module cache), and CI runs it (.ci/run: "ecosystem").
//
// gorgonia.org/tensor v0.9.24 pulls in go4.org/unsafe/assume-no-moving-gc
// at a 2022 version whose init panics on Go releases it does not know
// (Go 1.26 included); go.mod upgrades it to v0.0.0-20231121144256-b99613f794b6,
// which no longer panics. A program of yours using gorgonia needs the same
// line: go get go4.org/unsafe/assume-no-moving-gc@latest.
package ecosystem
