package apisurface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// exported returns, for every public package of the module (its directory
// relative to the module root, not under internal/ or testdata/), its
// exported names as a user reaches them: "Func", "Type", "Type.Method",
// "Type.Field", "Var"; and the directories whose Go files are all tests.
func exported(t *testing.T, root string) (map[string]map[string]bool, []string) {
	pkgs := map[string]map[string]bool{}
	var testOnly []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		base := d.Name()
		if rel != "." && (base == "internal" || base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
			return filepath.SkipDir
		}
		if rel != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own (examples/ecosystem)
			}
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		names := map[string]bool{}
		nonTest, commands := 0, 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			nonTest++
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			if af.Name.Name == "main" {
				commands++ // a command: no program can import it
				continue
			}
			for _, decl := range af.Decls {
				switch decl := decl.(type) {
				case *ast.FuncDecl:
					if !decl.Name.IsExported() {
						continue
					}
					if decl.Recv == nil {
						names[decl.Name.Name] = true
						continue
					}
					typ := decl.Recv.List[0].Type
					if s, ok := typ.(*ast.StarExpr); ok {
						typ = s.X
					}
					if g, ok := typ.(*ast.IndexExpr); ok {
						typ = g.X
					}
					if g, ok := typ.(*ast.IndexListExpr); ok {
						typ = g.X
					}
					names[typ.(*ast.Ident).Name+"."+decl.Name.Name] = true
				case *ast.GenDecl:
					for _, spec := range decl.Specs {
						switch spec := spec.(type) {
						case *ast.TypeSpec:
							if !spec.Name.IsExported() {
								continue
							}
							names[spec.Name.Name] = true
							if st, ok := spec.Type.(*ast.StructType); ok {
								for _, f := range st.Fields.List {
									for _, n := range f.Names {
										if n.IsExported() {
											names[spec.Name.Name+"."+n.Name] = true
										}
									}
								}
							}
						case *ast.ValueSpec:
							for _, n := range spec.Names {
								if n.IsExported() {
									names[n.Name] = true
								}
							}
						}
					}
				}
			}
		}
		if len(files) > 0 && nonTest == 0 {
			testOnly = append(testOnly, rel)
		}
		if nonTest > commands {
			pkgs[rel] = names
		}
		return nil
	})
	require.NoError(t, err)
	return pkgs, testOnly
}

// TestNoPlumbingExported: the names issue 22 found exported only for this
// module's own packages are gone from the public packages, and the
// test-only packages under scripts/ and bench/ have no file a program
// could import.
func TestNoPlumbingExported(t *testing.T) {
	pkgs, testOnly := exported(t, filepath.Join("..", ".."))

	// The walk sees what it must: these are public (a walk that found
	// nothing would pass the rest).
	for _, want := range []struct{ pkg, name string }{
		{"alloc", "Lookup"}, {"alloc", "Allocator.Handle"}, {"alloc", "ReadPinnedStats"},
		{"target", "Device.LockMem"}, {"target", "Device.ID"}, {"target", "MemDevice"},
		{"loader", "ErrNotFound"},
	} {
		require.True(t, pkgs[want.pkg][want.name], "the walk finds %s.%s", want.pkg, want.name)
	}

	for _, gone := range []struct{ pkg, name string }{
		{"alloc", "LiveAllocator"},
		{"alloc", "Allocator.NotifyPinFallback"},
		{"alloc", "HugeTLBRanges"},
		{"alloc", "Pinned"}, // renamed ReadPinnedStats
		{"alloc", "Bytes"},  // renamed NewArrowAllocator
		{"alloc", "ByteAllocator"},
		{"target", "BeforeShutdown"},
		{"target", "FreeAfterUse"},
		{"target", "HostInUse"},
		{"target", "Device.HoldMem"},
		{"target", "Device.ReleaseMem"},
		{"target", "Device.Impl"},
		{"loader", "Call"},
		// The mechanics of loading moved to internal/dl (issue 28 item 3).
		{"loader", "C"}, {"loader", "Spec"}, {"loader", "Library"},
		{"loader", "Lazy"}, {"loader", "LibC"}, {"loader", "Symbol"},
	} {
		require.False(t, pkgs[gone.pkg][gone.name], "%s.%s is exported", gone.pkg, gone.name)
	}
	for dir := range pkgs {
		require.False(t, strings.HasPrefix(dir, "scripts/") || strings.HasPrefix(dir, "bench/"),
			"%s: a package under scripts/ or bench/ a program can import", dir)
		// The vendor SPI and the plugins are internal/plugin/... (issue 28
		// item 3): a user reaches a device through target only.
		require.False(t, strings.HasPrefix(dir, "target/"), "%s: a vendor plugin a program can import", dir)
	}
	require.Contains(t, testOnly, "scripts/gpucheck")
	require.Contains(t, testOnly, "bench/alloc/scripttest")
}

// TestDocShowsPoolKeepValues: go doc prints a constant's declaration as
// written, so PoolKeepChunks and PoolKeepHuge are declared with their
// numbers, not another constant's name (go doc printed "PoolKeepChunks =
// pinnedKeepChunks": a user checking VmLck after a free could not see
// how much stays locked).
func TestDocShowsPoolKeepValues(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "alloc", "*.go"))
	require.NoError(t, err)
	found := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range af.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != "PoolKeepChunks" && n.Name != "PoolKeepHuge" {
						continue
					}
					require.Less(t, i, len(vs.Values), "%s has its own value", n.Name)
					found[n.Name] = true
					ast.Inspect(vs.Values[i], func(x ast.Node) bool {
						_, isIdent := x.(*ast.Ident)
						require.False(t, isIdent, "%s is declared through a name, which go doc prints instead of its value", n.Name)
						return true
					})
				}
			}
		}
	}
	require.Len(t, found, 2, "both constants found")
}
