package drain_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

// recordOnly are the names of internal/wire that read, write or address an
// ownership record, a node lease or a force key. Only package ownership
// uses them: drain asks it (Authorize, Touch, Unchanged, CountHeld).
var recordOnly = map[string]bool{
	"Record": true, "RecordVersion": true, "EncodeRecord": true, "DecodeRecord": true,
	"RecordKey": true, "RecordSubject": true, "RecordPrefix": true,
	"NodeKey": true, "NodePrefix": true,
	"ForceKey": true, "ForcePrefix": true, "Force": true, "EncodeForce": true, "DecodeForce": true,
	"StateHeld": true, "StateFree": true,
}

// crossing is one use of ownership's part of the layout.
type crossing struct {
	pos  token.Pos
	what string
}

// ownershipBoundary lists what in one Go file of package drain crosses
// into ownership's part of the layout: a wire name of recordOnly, a string
// literal that starts with a record, node lease or force key prefix, or
// an import of encoding/json (drain decodes its cursors and locks with
// wire's codecs and has nothing else in JSON; a record decoded by hand
// would need it).
func ownershipBoundary(f *ast.File) []crossing {
	var found []crossing
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "encoding/json" {
			found = append(found, crossing{imp.Pos(), "import encoding/json"})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "wire" && recordOnly[n.Sel.Name] {
				found = append(found, crossing{n.Pos(), "wire." + n.Sel.Name})
			}
		case *ast.BasicLit:
			s, err := strconv.Unquote(n.Value)
			if n.Kind != token.STRING || err != nil {
				return true
			}
			for _, p := range []string{wire.RecordPrefix, wire.NodePrefix, wire.ForcePrefix} {
				if strings.HasPrefix(s, p) {
					found = append(found, crossing{n.Pos(), strconv.Quote(s)})
				}
			}
		}
		return true
	})
	return found
}

// TestDrain_WritesNoOwnershipRecord: drain never parses or writes an
// ownership record or node lease itself (docs/design.md, the map): every such read and
// write is ownership's. It fails the build when a file of drain builds a
// record, node lease or force key, names the record codec or its states,
// or imports encoding/json. The packages split out of drain (mailbox,
// purge, and internal/store, which they share with it) are held to the
// same rule: mailbox reads owners through ownership (Owner, CountHeld,
// ScanRecords) and its DeleteState claims through it.
func TestDrain_WritesNoOwnershipRecord(t *testing.T) {
	var files []string
	for _, dir := range []string{".", "../mailbox", "../purge", "../internal/store"} {
		in, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, in, "no Go files in %s: is the glob wrong?", dir)
		files = append(files, in...)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, c := range ownershipBoundary(f) {
			t.Errorf("%s: %s: drain reads or writes ownership records, node leases and force keys only through package ownership", fset.Position(c.pos), c.what)
		}
		checked++
	}
	require.Greater(t, checked, 25, "too few files of drain and the packages split from it checked: is the glob wrong?")
}

// TestDrain_WritesNoOwnershipRecord_Detects: the check finds each kind of
// crossing it is for (a check that never fires proves nothing).
func TestDrain_WritesNoOwnershipRecord_Detects(t *testing.T) {
	src := `package drain

import (
	"encoding/json"

	"github.com/fencepost/fencepost/internal/wire"
)

func takeover(id string, data []byte) {
	var r wire.Record
	_ = json.Unmarshal(data, &r)
	r, _ = wire.DecodeRecord(data)
	r.State = wire.StateHeld
	_, _ = wire.EncodeRecord(r)
	_ = wire.RecordKey(id)
	_ = "o." + wire.EncodeID(id)
	_ = "n.*"
	_ = wire.RecordPrefix + "*" // as WorldStat listed the records before CountHeld
	_ = wire.ForceKey(id)
	_ = wire.LockKey(id) // drain's own: allowed
	_ = "c." + id       // drain's own: allowed
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "takeover.go", src, parser.SkipObjectResolution)
	require.NoError(t, err)
	var found []string
	for _, c := range ownershipBoundary(f) {
		found = append(found, c.what)
	}
	require.ElementsMatch(t, []string{
		"import encoding/json", "wire.Record", "wire.DecodeRecord", "wire.StateHeld",
		"wire.EncodeRecord", "wire.RecordKey", `"o."`, `"n.*"`, "wire.RecordPrefix", "wire.ForceKey",
	}, found)
}
