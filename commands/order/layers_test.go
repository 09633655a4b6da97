package order

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The write side (every package under commands/) decides from its own
// state and the Catalog it is given; it imports no read model, and
// nothing of the delivery side (what both check, such as a URI's
// characters, lives in internal/).
func TestTheWriteSideImportsNoReadModelAndNoDeliverySide(t *testing.T) {
	root := filepath.Join("..") // commands/
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, "github.com/printpod/pod/projections") {
				t.Errorf("%s imports the read model %s", path, p)
			}
			if p == "github.com/printpod/pod/delivery" || strings.HasPrefix(p, "github.com/printpod/pod/delivery/") {
				t.Errorf("%s imports the delivery side %s", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no Go files found under commands/")
	}
}
