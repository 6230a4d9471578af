package ownership_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// forcers are the API paths that can force a seize, each as a function
// seizing id for node with force (a session opened for node first).
var forcers = map[string]func(t *testing.T, ctx context.Context, w *client.World, id, node string, force bool) (*ownership.Lease, error){
	"Store.Seize": func(_ *testing.T, ctx context.Context, w *client.World, id, node string, force bool) (*ownership.Lease, error) {
		return w.Ownership.Seize(ctx, id, node, time.Minute, force)
	},
	"Session.Seize": func(t *testing.T, ctx context.Context, w *client.World, id, node string, force bool) (*ownership.Lease, error) {
		ss, err := w.Ownership.OpenSession(ctx, node, time.Minute)
		require.NoError(t, err)
		t.Cleanup(func() { ss.Close() })
		return ss.Seize(ctx, id, force)
	},
}

// TestSeize_EveryForcedPathWritesTheForceKey: every API path that can
// force a seize writes the id's force key first, naming the node, and an
// unforced one does not (docs/security.md: the server keeps
// forcing to operators by refusing that key to everyone else).
func TestSeize_EveryForcedPathWritesTheForceKey(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	for name, seize := range forcers {
		t.Run(name, func(t *testing.T) {
			id := "held-" + strings.ReplaceAll(name, ".", "-")
			held, err := w.Ownership.Claim(ctx, id, "holder", time.Minute)
			require.NoError(t, err)

			_, err = seize(t, ctx, w, id, "taker-"+name, false)
			require.ErrorIs(t, err, ownership.ErrLive)
			_, err = handles.Of(w).KV.Get(ctx, wire.ForceKey(id))
			require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "an unforced seize wrote the force key")

			l, err := seize(t, ctx, w, id, "forcer-"+name, true)
			require.NoError(t, err)
			require.Equal(t, held.Epoch+1, l.Epoch)
			e, err := handles.Of(w).KV.Get(ctx, wire.ForceKey(id))
			require.NoError(t, err, "a forced seize through %s wrote no force key", name)
			f, err := wire.DecodeForce(e.Value())
			require.NoError(t, err)
			require.Equal(t, "forcer-"+name, f.Node)
			require.Less(t, e.Revision(), l.Revision, "the force key comes before the record")
		})
	}
}

// TestSeize_RulesExistOnce: the claim and seize rules exist once, in
// Store.claim and Store.seize, and every exported operation that can force
// is in the table of TestSeize_EveryForcedPathWritesTheForceKey. It fails
// when a rule is copied (a second run of a "claim" or "seize" decision, a
// second caller of forceAuthority) or a new forcing API is not tested.
func TestSeize_RulesExistOnce(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var forcing []string
	callers := map[string][]string{} // what is called -> from which functions
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			owner := funcName(fn)
			if fn.Name.IsExported() && hasParam(fn, "force") {
				forcing = append(forcing, owner)
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch {
				case sel.Sel.Name == "forceAuthority":
					callers["forceAuthority"] = append(callers["forceAuthority"], owner)
				case sel.Sel.Name == "run" && len(call.Args) > 1:
					if op, ok := call.Args[1].(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(op.Value)
						callers["run "+s] = append(callers["run "+s], owner)
					}
				}
				return true
			})
		}
	}
	require.Equal(t, []string{"Store.seize"}, callers["forceAuthority"], "the force key is written by the seize rule alone")
	require.Equal(t, []string{"Store.seize"}, callers["run seize"], "one seize rule")
	require.Equal(t, []string{"Store.claim"}, callers["run claim"], "one claim rule")
	sort.Strings(forcing)
	var tested []string
	for name := range forcers {
		tested = append(tested, name)
	}
	sort.Strings(tested)
	require.Equal(t, tested, forcing, "every exported operation that can force is tested for the force key")
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

func hasParam(fn *ast.FuncDecl, name string) bool {
	for _, p := range fn.Type.Params.List {
		for _, n := range p.Names {
			if n.Name == name {
				return true
			}
		}
	}
	return false
}
