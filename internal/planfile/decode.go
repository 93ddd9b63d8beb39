package planfile

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"gopkg.in/yaml.v3"
)

// MaxFileBytes bounds a plans file; a real one is a few kilobytes.
const MaxFileBytes = 1 << 20

//go:embed plans.schema.json
var schemaJSON []byte

// Schema returns the JSON Schema of the format, as served at
// /docs/plans.schema.json; Decode validates every file against it.
func Schema() []byte { return slices.Clone(schemaJSON) }

// ErrInvalid is what every *Error matches with errors.Is: the file was
// refused and nothing was written.
var ErrInvalid = errors.New("invalid plans file")

// Problem is one error in a file.
type Problem struct {
	File string `json:"file"`
	// Line is 1-based; 0 when the problem has no place in the file (a plan
	// the file leaves out that cannot be pruned).
	Line int `json:"line"`
	// Field is the path of the field, e.g. "plans[1].limits[0].window_seconds".
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	if p.Field != "" {
		b.WriteString(": " + p.Field)
	}
	b.WriteString(": " + p.Message)
	return b.String()
}

// Error lists every problem of a refused file.
type Error struct {
	Problems []Problem `json:"problems"`
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Parsed is a decoded file with the line of each of its fields.
type Parsed struct {
	Name string
	File File
	// lines maps a field path ("plans[0].limits[1].name") to its line.
	lines map[string]int
}

// Line returns the line of field, or of its nearest enclosing field that
// the file spells out, or 0.
func (p *Parsed) Line(field string) int {
	for field != "" {
		if l, ok := p.lines[field]; ok {
			return l
		}
		i := strings.LastIndexAny(field, ".[")
		if i < 0 {
			break
		}
		field = field[:i]
	}
	return p.lines[""]
}

// problem is a Problem at field of this file.
func (p *Parsed) problem(field, format string, args ...any) Problem {
	return Problem{File: p.Name, Line: p.Line(field), Field: field, Message: fmt.Sprintf(format, args...)}
}

var (
	compiledSchema = mustCompileSchema()
	yamlLine       = regexp.MustCompile(`line (\d+)`)
)

// mustCompileSchema compiles the embedded schema; it is a constant of the
// program, so a failure is a build defect found by any test.
func mustCompileSchema() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		panic(fmt.Sprintf("planfile: schema: %v", err))
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("plans.schema.json", doc); err != nil {
		panic(fmt.Sprintf("planfile: schema: %v", err))
	}
	s, err := c.Compile("plans.schema.json")
	if err != nil {
		panic(fmt.Sprintf("planfile: schema: %v", err))
	}
	return s
}

// Decode reads a YAML or JSON plans file (JSON is YAML) named name, for
// error messages. It checks the syntax and the schema; the rules that need
// the store of record (routes, roles, conflicts) are checked by the Store.
// A refused file returns an *Error whose problems each name the file, line
// and field.
func Decode(name string, data []byte) (*Parsed, error) {
	p := &Parsed{Name: name, lines: map[string]int{}}
	fail := func(line int, field, format string, args ...any) (*Parsed, error) {
		return nil, &Error{Problems: []Problem{{File: name, Line: line, Field: field, Message: fmt.Sprintf(format, args...)}}}
	}
	if len(data) > MaxFileBytes {
		return fail(0, "", "the file is %d bytes; at most %d", len(data), MaxFileBytes)
	}
	var root yaml.Node
	docs := yaml.NewDecoder(bytes.NewReader(data))
	if err := docs.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		line := 0
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		return fail(line, "", "not valid YAML or JSON: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	// A second document (after "---") would be silently ignored by a
	// plain unmarshal: its plans would look applied and never be.
	var next yaml.Node
	switch err := docs.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return fail(0, "", "not valid YAML or JSON after the first document: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	default:
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return fail(line, "", "a second YAML document (after ---): a plans file is one document; merge its plans and services into the first")
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return fail(1, "", "the file is empty: want a mapping with version, services and plans")
	}
	doc := root.Content[0]
	p.lines[""] = doc.Line
	generic, err := p.walk(doc, "")
	if err != nil {
		return nil, err
	}
	if err := compiledSchema.Validate(generic); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return fail(0, "", "%s", err.Error())
		}
		return nil, &Error{Problems: p.schemaProblems(ve)}
	}
	// The schema has checked every type and name, so this cannot fail on
	// the file's account; it is only the typed view of the same value.
	b, err := json.Marshal(generic)
	if err != nil {
		return fail(0, "", "%s", err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p.File); err != nil {
		return fail(0, "", "%s", err.Error())
	}
	return p, nil
}

// walk turns the YAML tree into the plain values JSON Schema validates,
// recording the line of every field on the way.
func (p *Parsed) walk(n *yaml.Node, path string) (any, error) {
	p.lines[path] = n.Line
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, &Error{Problems: []Problem{{File: p.Name, Line: k.Line, Field: path, Message: "a key must be a plain name"}}}
			}
			field := k.Value
			if path != "" {
				field = path + "." + k.Value
			}
			if _, dup := m[k.Value]; dup {
				return nil, &Error{Problems: []Problem{{File: p.Name, Line: k.Line, Field: field, Message: "appears twice"}}}
			}
			val, err := p.walk(v, field)
			if err != nil {
				return nil, err
			}
			p.lines[field] = k.Line
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, err := p.walk(c, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			s[i] = v
		}
		return s, nil
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, &Error{Problems: []Problem{{File: p.Name, Line: n.Line, Field: path, Message: err.Error()}}}
		}
		switch x := v.(type) {
		case int:
			return json.Number(strconv.Itoa(x)), nil
		case uint64:
			return json.Number(strconv.FormatUint(x, 10)), nil
		case float64:
			return json.Number(strconv.FormatFloat(x, 'g', -1, 64)), nil
		case string, bool, nil:
			return x, nil
		default:
			// timestamps and binary: the schema has no place for them
			return n.Value, nil
		}
	case yaml.AliasNode:
		// Aliases could expand a small file into a huge one; a plans file
		// has no need for them.
		return nil, &Error{Problems: []Problem{{File: p.Name, Line: n.Line, Field: path, Message: "anchors and aliases are not supported"}}}
	}
	return nil, &Error{Problems: []Problem{{File: p.Name, Line: n.Line, Field: path, Message: "unexpected YAML node"}}}
}

// schemaProblems flattens a schema error into one problem per failed
// field, in file order.
func (p *Parsed) schemaProblems(ve *jsonschema.ValidationError) []Problem {
	printer := message.NewPrinter(language.English)
	var out []Problem
	var visit func(e *jsonschema.ValidationError)
	visit = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				visit(c)
			}
			return
		}
		field := fieldPath(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.AdditionalProperties:
			for _, name := range k.Properties {
				f := join(field, name)
				out = append(out, p.problem(f, "unknown field %q", name))
			}
			return
		case *kind.Required:
			for _, name := range k.Missing {
				out = append(out, Problem{File: p.Name, Line: p.Line(field), Field: join(field, name), Message: "is required"})
			}
			return
		}
		out = append(out, p.problem(field, "%s", describeKind(e.ErrorKind, printer)))
	}
	visit(ve)
	slices.SortStableFunc(out, func(a, b Problem) int { return a.Line - b.Line })
	return slices.CompactFunc(out, func(a, b Problem) bool { return a == b })
}

// describeKind words the schema's common errors for people; the library's
// own wording prints numbers as 2.6784×10⁰⁶.
func describeKind(k jsonschema.ErrorKind, printer *message.Printer) string {
	num := func(r *big.Rat) string {
		if r.IsInt() {
			return r.Num().String()
		}
		return r.FloatString(3)
	}
	switch k := k.(type) {
	case *kind.Minimum:
		return fmt.Sprintf("must be at least %s, not %s", num(k.Want), num(k.Got))
	case *kind.Maximum:
		return fmt.Sprintf("must be at most %s, not %s", num(k.Want), num(k.Got))
	case *kind.Type:
		return fmt.Sprintf("must be %s, not %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprintf("%q", w)
		}
		return fmt.Sprintf("must be one of %s, not %q", strings.Join(want, ", "), fmt.Sprint(k.Got))
	case *kind.Const:
		return fmt.Sprintf("must be %v", k.Want)
	case *kind.Pattern:
		return fmt.Sprintf("%q does not match %s", k.Got, k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters, not %d", k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("at most %d items, not %d", k.Want, k.Got)
	}
	return k.LocalizedString(printer)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// fieldPath turns a JSON pointer's tokens into "plans[0].limits[1].name".
func fieldPath(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		if _, err := strconv.Atoi(t); err == nil {
			b.WriteString("[" + t + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}
