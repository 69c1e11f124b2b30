package docs

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// archNamesAllowed are names docs/architecture.md may give that the tree
// does not have, each with why. Empty: every name must exist. A change
// made in parallel with another (a rename in proxy or dispatch, say) may
// list here the names it knows the other renames, until both are merged.
var archNamesAllowed = map[string]string{}

// Every Go name and file of this repository that docs/architecture.md
// gives exists: a file path (`dispatch/note.go`, `gate/redisgate/`, a
// bare `fetch.go` somewhere in the tree), a qualified name
// (`dispatch.Releaser`, `Member.Requeue`, `gate.Ticket.Key`), a Go
// identifier of mixed case (`InOrder`, `takeBody`), and in the page's Go
// blocks each interface's methods with their signatures and each method
// declared. The page is the map a newcomer reads first; a name it gives
// that the code no longer has sends them looking for nothing.
func TestArchitectureNamesExist(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	tree := loadTree(t, "..")
	spans, blocks := codeOf(string(doc))
	if len(spans) < 100 || len(blocks) < 5 {
		t.Fatalf("read %d code spans and %d Go blocks from architecture.md: the parser no longer reads the page", len(spans), len(blocks))
	}
	checked := 0
	fail := func(name, format string, args ...any) {
		if _, ok := archNamesAllowed[name]; ok {
			return
		}
		t.Errorf("architecture.md: "+format, args...)
	}
	for _, s := range spans {
		for _, p := range pathsIn(s.text) {
			checked++
			if !tree.hasPath(p) {
				fail(p, "line %d: `%s` names %s, which is not in the tree", s.line, s.text, p)
			}
		}
		if looksLikePath(s.text) {
			continue
		}
		for _, m := range qualified.FindAllStringSubmatch(s.text, -1) {
			checked++
			if why := tree.resolve(m[1], m[2], m[3]); why != "" {
				fail(m[0], "line %d: `%s`: %s", s.line, s.text, why)
			}
		}
		if ident.MatchString(s.text) && mixedCase(s.text) {
			name := strings.TrimSuffix(s.text, "()")
			checked++
			if !tree.names[name] {
				fail(name, "line %d: `%s` is declared nowhere in the tree", s.line, s.text)
			}
		}
	}
	for _, b := range blocks {
		checked += tree.checkBlock(b, fail)
	}
	if checked < 150 {
		t.Errorf("checked only %d names: the parser no longer reads the page", checked)
	}
}

// span is a code span of the page and its line.
type span struct {
	text string
	line int
}

// block is a ```go block of the page and the line it starts on.
type block struct {
	src  string
	line int
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	// qualified is pkg.Name, Type.Member or pkg.Type.Member.
	qualified = regexp.MustCompile(`(?:^|[^\w.])([a-z][a-z0-9]*|[A-Z]\w*)\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?`)
	ident     = regexp.MustCompile(`^[A-Za-z_]\w*(\(\))?$`)
	goPath    = regexp.MustCompile(`(?:^|[\s(])((?:[\w-]+/)*[\w-]+\.go|(?:[\w-]+/)+)(?:$|[\s),;:])`)
)

// codeOf splits the page into its code spans (outside fenced blocks) and
// its Go blocks.
func codeOf(doc string) (spans []span, blocks []block) {
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if fence, ok := strings.CutPrefix(strings.TrimSpace(l), "```"); ok {
			start := i + 1
			for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), "```"); i++ {
			}
			if fence == "go" {
				blocks = append(blocks, block{strings.Join(lines[start:min(i, len(lines))], "\n"), start + 1})
			}
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(l, -1) {
			spans = append(spans, span{m[1], i + 1})
		}
	}
	return spans, blocks
}

// pathsIn are the repository paths a span names: a .go file, or a
// directory written with its trailing slash.
func pathsIn(s string) []string {
	var out []string
	for _, m := range goPath.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

func looksLikePath(s string) bool { return strings.Contains(s, ".go") || strings.HasSuffix(s, "/") }

// mixedCase says whether an identifier is one of Go's rather than a word:
// an upper-case letter in it, and not a setting's ALL_CAPS name.
func mixedCase(s string) bool {
	return strings.ToLower(s) != s && strings.ToUpper(s) != s
}

// tree is what the repository declares, from its non-test Go files.
type tree struct {
	root  string
	files map[string]bool // every .go file's path from the root, and its base name
	dirs  map[string]bool
	pkgs  map[string]bool            // package names
	decls map[string]map[string]bool // package → its top-level names
	// members are each type's methods and fields (and an interface's
	// methods), by type name, whatever its package.
	members map[string]map[string]bool
	// ifaces are each interface's method signatures (types only), by
	// interface name; funcs each method's, by Type.Method.
	ifaces map[string]map[string]string
	funcs  map[string]string
	names  map[string]bool // every name declared at all
}

func loadTree(t *testing.T, root string) *tree {
	tr := &tree{root: root, files: map[string]bool{}, dirs: map[string]bool{}, pkgs: map[string]bool{}, decls: map[string]map[string]bool{},
		members: map[string]map[string]bool{}, ifaces: map[string]map[string]string{}, funcs: map[string]string{}, names: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			tr.dirs[rel+"/"] = true
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		tr.files[rel], tr.files[d.Name()] = true, true
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		tr.add(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func (tr *tree) member(typ, name string) {
	if tr.members[typ] == nil {
		tr.members[typ] = map[string]bool{}
	}
	tr.members[typ][name], tr.names[name] = true, true
}

func (tr *tree) add(f *ast.File) {
	pkg := f.Name.Name
	tr.pkgs[pkg] = true
	if tr.decls[pkg] == nil {
		tr.decls[pkg] = map[string]bool{}
	}
	decl := func(n string) { tr.decls[pkg][n], tr.names[n] = true, true }
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				decl(d.Name.Name)
				continue
			}
			typ := recvType(d.Recv.List[0].Type)
			tr.member(typ, d.Name.Name)
			tr.funcs[typ+"."+d.Name.Name] = signature(d.Type)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					decl(s.Name.Name)
					tr.addType(s)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						decl(n.Name)
					}
				}
			}
		}
	}
}

func (tr *tree) addType(s *ast.TypeSpec) {
	name := s.Name.Name
	switch ty := s.Type.(type) {
	case *ast.StructType:
		for _, f := range ty.Fields.List {
			for _, n := range f.Names {
				tr.member(name, n.Name)
			}
			if len(f.Names) == 0 { // embedded: its name is a member
				tr.member(name, recvType(f.Type))
			}
		}
	case *ast.InterfaceType:
		if tr.ifaces[name] == nil {
			tr.ifaces[name] = map[string]string{}
		}
		for _, m := range ty.Methods.List {
			ft, ok := m.Type.(*ast.FuncType)
			for _, n := range m.Names {
				tr.member(name, n.Name)
				if ok {
					tr.ifaces[name][n.Name] = signature(ft)
				}
			}
		}
	}
}

// recvType is a receiver's or embedded field's type name: T of *T, T[K].
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// signature is a func type's parameter and result types, without their
// names: what a caller or an implementer must match.
func signature(ft *ast.FuncType) string {
	list := func(fl *ast.FieldList) string {
		if fl == nil {
			return ""
		}
		var parts []string
		for _, f := range fl.List {
			var b bytes.Buffer
			printer.Fprint(&b, token.NewFileSet(), f.Type)
			for range max(len(f.Names), 1) {
				parts = append(parts, b.String())
			}
		}
		return strings.Join(parts, ", ")
	}
	return "(" + list(ft.Params) + ") (" + list(ft.Results) + ")"
}

// hasPath says whether p, a path from the root (or a bare file name), is
// in the tree.
func (tr *tree) hasPath(p string) bool {
	if strings.HasSuffix(p, "/") {
		return tr.dirs[p]
	}
	return tr.files[p]
}

// resolve checks a.b or a.b.c: a package's name and its member's, or a
// type's and its member's; "" when it resolves, else why not.
func (tr *tree) resolve(a, b, c string) string {
	if tr.pkgs[a] {
		if !tr.decls[a][b] {
			return "package " + a + " declares no " + b
		}
		if c != "" && !tr.members[b][c] {
			return a + "." + b + " has no method or field " + c
		}
		return ""
	}
	if strings.ToLower(a[:1]) == a[:1] {
		return "" // a variable's field (m.MarkBegun), or a package not of this tree
	}
	if tr.members[a] == nil {
		if tr.names[a] {
			return "" // a function or a value, not a type: a.b is not a member
		}
		return "no type " + a + " in the tree"
	}
	if !tr.members[a][b] {
		return a + " has no method or field " + b
	}
	return ""
}

// checkBlock checks a Go block of the page: each interface it declares
// has, in the tree, every method it shows with the signature it shows,
// and each method it declares exists with its signature. It returns how
// many names it checked.
func (tr *tree) checkBlock(b block, fail func(name, format string, args ...any)) int {
	f, err := parser.ParseFile(token.NewFileSet(), "block.go", "package x\n"+b.src, parser.SkipObjectResolution)
	if err != nil {
		return 0 // statements, not declarations (the assembly's lines)
	}
	checked := 0
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				continue
			}
			name := recvType(d.Recv.List[0].Type) + "." + d.Name.Name
			checked++
			if got, ok := tr.funcs[name]; !ok {
				fail(name, "the Go block at line %d declares %s, which the tree has not", b.line, name)
			} else if want := signature(d.Type); got != want {
				fail(name, "the Go block at line %d gives %s as %s; the tree's is %s", b.line, name, want, got)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				ts, ok := s.(*ast.TypeSpec)
				if !ok {
					continue
				}
				checked++
				it, ok := ts.Type.(*ast.InterfaceType)
				if !ok {
					if !tr.names[ts.Name.Name] {
						fail(ts.Name.Name, "the Go block at line %d declares type %s, which the tree has not", b.line, ts.Name.Name)
					}
					continue
				}
				have, ok := tr.ifaces[ts.Name.Name]
				if !ok {
					fail(ts.Name.Name, "the Go block at line %d declares interface %s, which the tree has not", b.line, ts.Name.Name)
					continue
				}
				for _, m := range it.Methods.List {
					ft, ok := m.Type.(*ast.FuncType)
					for _, n := range m.Names {
						name := ts.Name.Name + "." + n.Name
						checked++
						if got, found := have[n.Name]; !found {
							fail(name, "the Go block at line %d gives %s a method %s, which it has not", b.line, ts.Name.Name, n.Name)
						} else if ok && got != signature(ft) {
							fail(name, "the Go block at line %d gives %s as %s; the tree's is %s", b.line, name, signature(ft), got)
						}
					}
				}
			}
		}
	}
	return checked
}
