package apisurface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// crossWrites lists, for every non-test Go file of the module under root,
// each assignment to a variable of another of the module's packages
// ("alloc/ops.go: heap.SampleHook"): a package that sets another's
// variable is how a hidden call path is built (a function variable filled
// in at start-up, which go-to-definition cannot follow).
func crossWrites(t *testing.T, root string) []string {
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || d.Name() == "examples") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		mod := map[string]bool{} // the names this file gives the module's packages
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if !strings.HasPrefix(p, "github.com/ompalloc/ompalloc/") {
				continue
			}
			name := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			mod[name] = true
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			a, ok := n.(*ast.AssignStmt)
			if !ok {
				return true
			}
			for _, l := range a.Lhs {
				if s, ok := l.(*ast.SelectorExpr); ok {
					if id, ok := s.X.(*ast.Ident); ok && mod[id.Name] {
						out = append(out, filepath.ToSlash(rel)+": "+id.Name+"."+s.Sel.Name)
					}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestNoHiddenCallPaths keeps the calls between the module's packages
// visible (issue 28 item 4): alloc, kmp and memprof call the device core
// (internal/device) directly, and no package fills in another's function
// variables at start-up. The only variables one package sets in another
// are the hot paths' way back up, which alloc sets once: internal/heap's
// hooks for sampled and checked frees, and internal/handles' General, the
// general path of omp_alloc that kmp's inlined call falls back to (see
// ARCHITECTURE.md, "internal/heap" and "internal/handles"). It also fails when
// internal/hooks declares anything but its two counters.
func TestNoHiddenCallPaths(t *testing.T) {
	root := filepath.Join("..", "..")
	allowed := map[string]bool{
		"alloc/ops.go: heap.SampleHook":     true,
		"alloc/ops.go: heap.FreeCheckHook":  true,
		"alloc/ops.go: heap.FreeFollowHook": true,
		"alloc/ops.go: handles.General":     true, // omp_alloc's general path: kmp's inlined call reaches it through internal/handles, below alloc
	}
	var bad []string
	for _, w := range crossWrites(t, root) {
		if !allowed[w] {
			bad = append(bad, w)
		}
	}
	require.Empty(t, bad, "a package sets another package's variable: call the other package (internal/device for what alloc needs of a device) instead")

	// internal/hooks: counters only, no function variables.
	files, err := filepath.Glob(filepath.Join(root, "internal", "hooks", "*.go"))
	require.NoError(t, err)
	var vars []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				sel, ok := vs.Type.(*ast.SelectorExpr)
				typ := "?"
				if ok {
					if x, ok := sel.X.(*ast.Ident); ok {
						typ = x.Name + "." + sel.Sel.Name
					}
				}
				for _, n := range vs.Names {
					vars = append(vars, n.Name+" "+typ)
				}
			}
		}
	}
	require.ElementsMatch(t, []string{"FreeChecks atomic.Int64"}, vars,
		"internal/hooks holds the heap's counters only: a function variable there is a hidden call path")
}

// TestOneRegistrationLinePerVendor keeps adding a GPU vendor to its own
// folder plus one line of internal/device/vendors.go (issue 28 item 5): no
// other non-test code imports a vendor's plugin package, but the CUDA-only
// driver peak of `ompalloc bench` (cmd/ompalloc/peak.go) and the CUDA probe
// (internal/cmd/gpuprobe), features of that vendor rather than generic
// logic, which call libcuda through the plugin's one binding (cuda.Bound).
func TestOneRegistrationLinePerVendor(t *testing.T) {
	root := filepath.Join("..", "..")
	vendor := func(p string) bool {
		return strings.HasPrefix(p, "github.com/ompalloc/ompalloc/internal/plugin/") &&
			p != "github.com/ompalloc/ompalloc/internal/plugin/host"
	}
	allowed := map[string]bool{
		"internal/device/vendors.go":          true, // the registration list
		"cmd/ompalloc/peak.go":                true, // CUDA's own peak, a CUDA feature
		"internal/cmd/gpuprobe/main_linux.go": true, // the CUDA probe
	}
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(rel, "internal/plugin/") || d.Name() == "testdata" || (path != root && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir // a vendor's own folder may import itself
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if vendor(p) && !allowed[rel] {
				bad = append(bad, rel+" imports "+p)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, bad, "generic code names a vendor: route it through internal/device's vendor list (ARCHITECTURE.md, \"Adding a vendor\")")
}
