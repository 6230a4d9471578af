package wire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// layoutExempt are the non-test files outside internal/wire that may
// spell the layout themselves, and why.
var layoutExempt = map[string]string{
	// A producer that knows only docs/wire.md, by design (its test is the
	// wire conformance test).
	"examples/rawproducer/main.go": "plain nats.go producer",
	// The permission table: subject patterns with a <w> placeholder,
	// documented one by one; the layout and the table are checked against
	// each other by daemon's auth tests.
	"daemon/auth.go": "permission patterns",
	// The accounts of fencepostd --auth: the same patterns, as the
	// imports and exports that carry them between accounts.
	"daemon/accounts.go": "account imports and exports of the permission patterns",
}

// layoutLiterals are the string fragments that build a subject, stream or
// bucket name of the layout by hand.
var layoutLiterals = []string{`fp.`, `.mb.`, `.dl.`, `$KV.`, `KV_`, `FP_MB_`}

// ownershipOnly are the wire names only the ownership package may use:
// ownership records and node leases are written there alone (drain asks
// ownership.Store.Authorize and Touch). fencing names the record subject
// in the header of a fenced write, and may use RecordSubject.
var ownershipOnly = []string{"RecordKey", "RecordSubject", "NodeKey", "ForceKey", "EncodeRecord"}

// handlesUsers are the packages whose non-test files may take a world's
// JetStream handles (internal/handles), and why. Every other package
// works through their typed operations (world exposes typed
// operations, not JetStream handles: docs/design.md, the map).
var handlesUsers = map[string]string{
	"world":            "opens the streams and keeps the handles",
	"ownership":        "writes the ownership records and node leases",
	"drain":            "reads the mailboxes, commits cursors, writes dead letters and locks",
	"mailbox":          "stat and listing read the mailbox stream's subjects; repost and purge remove dead letters; state deletes purge their markers",
	"purge":            "fencepostd's purger follows the cursors and purges the mailbox stream",
	"queue":            "publishes into the mailbox stream",
	"timer":            "lists, counts and cancels the timer stream's timers, and sweeps its fired copies",
	"worker":           "its one consumer of every mailbox (design 3.10)",
	"shard":            "a held shard's reader of its stored mail, its fenced cursor commits and its removal of committed mail",
	"daemon":           "fencepostd's audit and node-lease retirement watch the bucket as it is written",
	"bench":            "the ledger follows the bucket stream's history to check every commit",
	"testkit/testutil": "test helpers read the mailbox stream and publish into it",
}

// TestLayout_OwnedByWire fails the build when a subject, stream or bucket
// name is spelled outside internal/wire, when a record shape (a struct
// with a `json:"v"` field) is declared outside it, or when a package other
// than ownership touches ownership record keys, or when a package not in
// handlesUsers takes a world's JetStream handles. One package owns the
// layout (docs/design.md section 0).
func TestLayout_OwnedByWire(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			if strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata" || rel == "internal/wire" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || layoutExempt[rel] != "" {
			return nil
		}
		checked++
		checkLayoutFile(t, path, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files under %s: is the walk broken?", checked, root)
	}
}

func checkLayoutFile(t *testing.T, path, rel string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	pkgDir := filepath.ToSlash(filepath.Dir(rel))
	for _, imp := range f.Imports {
		if imp.Path.Value == `"github.com/fencepost/fencepost/internal/handles"` && handlesUsers[pkgDir] == "" && !strings.HasPrefix(pkgDir, "internal/") {
			t.Errorf("%s: %s takes a world's JetStream handles: use the typed operations of world, drain, ownership or queue (or add the package to handlesUsers with the reason)", fset.Position(imp.Pos()), pkgDir)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			for _, frag := range layoutLiterals {
				if strings.Contains(s, frag) {
					t.Errorf("%s: %q spells the layout (%q): use internal/wire", fset.Position(n.Pos()), s, frag)
				}
			}
		case *ast.StructType:
			for _, fld := range n.Fields.List {
				if fld.Tag != nil && strings.Contains(fld.Tag.Value, `json:"v"`) {
					t.Errorf("%s: a record shape (json \"v\") outside internal/wire: decode records with wire's codecs", fset.Position(fld.Pos()))
				}
			}
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "wire" && pkgDir != "ownership" && pkgDir != "fencing" {
				for _, name := range ownershipOnly {
					if n.Sel.Name == name {
						t.Errorf("%s: wire.%s outside ownership: ownership owns every record write (use its Store)", fset.Position(n.Pos()), name)
					}
				}
			}
		}
		return true
	})
}
