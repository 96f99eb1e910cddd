package metrics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxLine is the longest line Parse reads.
const MaxLine = 1 << 20

// ParseError is a fault in the text Parse reads: the line (from 1) and
// what is wrong with it.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("metrics: line %d: %s", e.Line, e.Msg) }

// ErrLineTooLong means a line is longer than MaxLine.
var ErrLineTooLong = errors.New("metrics: line too long")

// Parse reads families in the text exposition format (version 0.0.4), in
// the order they first appear. A sample without a TYPE line before it
// belongs to an untyped family of its name; a histogram's or summary's
// _bucket, _sum and _count samples belong to it. Faults are *ParseError,
// or ErrLineTooLong, or the reader's error.
func Parse(r io.Reader) ([]Family, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxLine)
	p := parser{byName: map[string]int{}}
	for sc.Scan() {
		p.line++
		if err := p.parseLine(sc.Text()); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%w (line %d, over %d bytes)", ErrLineTooLong, p.line+1, MaxLine)
		}
		return nil, err
	}
	return p.fams, nil
}

type parser struct {
	line   int
	fams   []Family
	byName map[string]int
}

func (p *parser) fail(format string, args ...any) error {
	return &ParseError{Line: p.line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) family(name string) *Family {
	i, ok := p.byName[name]
	if !ok {
		i = len(p.fams)
		p.byName[name] = i
		p.fams = append(p.fams, Family{Name: name})
	}
	return &p.fams[i]
}

func (p *parser) parseLine(line string) error {
	// Carriage returns ending a line belong to its line ending (the scanner
	// drops one): kept in a HELP text, they would not survive being written
	// and read again.
	line = strings.TrimLeft(strings.TrimRight(line, "\r"), " \t")
	if line == "" {
		return nil
	}
	if line[0] == '#' {
		return p.parseComment(line[1:])
	}
	return p.parseSample(line)
}

func (p *parser) parseComment(rest string) error {
	kw, rest := token(rest)
	if kw != "HELP" && kw != "TYPE" {
		return nil // a plain comment
	}
	name, after := token(rest)
	if name == "" {
		return nil // "# HELP" alone: a plain comment too
	}
	if !validName(name, true) {
		return p.fail("invalid metric name %q in %s", name, kw)
	}
	after = strings.TrimLeft(after, " \t")
	if kw == "HELP" && after == "" {
		return nil // no help is no HELP
	}
	f := p.family(name)
	if kw == "HELP" {
		if f.Help != "" {
			return p.fail("second HELP for %s", name)
		}
		h, err := unescape(after, false)
		if err != nil {
			return p.fail("HELP of %s: %v", name, err)
		}
		f.Help = h
		return nil
	}
	if len(f.Samples) > 0 {
		return p.fail("TYPE for %s after its samples", name)
	}
	if f.Type != "" {
		return p.fail("second TYPE for %s", name)
	}
	switch t := Type(strings.TrimRight(after, " \t")); t {
	case Counter, Gauge, Untyped, "histogram", "summary":
		f.Type = t
	default:
		return p.fail("unknown type %q for %s", t, name)
	}
	return nil
}

func (p *parser) parseSample(line string) error {
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' && line[i] != '\t' {
		i++
	}
	name := line[:i]
	if !validName(name, true) {
		return p.fail("invalid metric name %q", name)
	}
	s := Sample{Name: name}
	rest := line[i:]
	if strings.HasPrefix(rest, "{") {
		labels, n, err := parseLabels(rest)
		if err != nil {
			return p.fail("%s: %v", name, err)
		}
		s.Labels = labels
		rest = rest[n:]
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return p.fail("%s: want a value and at most a timestamp after the name, got %q", name, rest)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return p.fail("%s: value %q: %v", name, fields[0], errors.Unwrap(err))
	}
	s.Value = v
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return p.fail("%s: timestamp %q is not an integer", name, fields[1])
		}
	}
	f := p.family(p.familyOf(name))
	if f.Type == "" {
		f.Type = Untyped
	}
	f.Samples = append(f.Samples, s)
	return nil
}

// familyOf is the family a sample called name belongs to: a histogram's or
// summary's for its suffixed samples, else its own.
func (p *parser) familyOf(name string) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		if i, ok := p.byName[base]; ok && (p.fams[i].Type == "histogram" || p.fams[i].Type == "summary") {
			return base
		}
	}
	return name
}

// parseLabels parses `{a="x",b="y"}` at the start of s and returns the
// labels and the bytes it took.
func parseLabels(s string) ([]Label, int, error) {
	var out []Label
	i := 1 // past '{'
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			return nil, 0, errors.New("labels not closed")
		}
		if s[i] == '}' {
			return out, i + 1, nil
		}
		j := i
		for j < len(s) && s[j] != '=' && s[j] != ' ' && s[j] != '\t' {
			j++
		}
		name := s[i:j]
		if !validName(name, false) {
			return nil, 0, fmt.Errorf("invalid label name %q", name)
		}
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j+1 >= len(s) || s[j] != '=' || s[j+1] != '"' {
			return nil, 0, fmt.Errorf("label %s: want =\"", name)
		}
		j += 2
		k := j
		for k < len(s) && s[k] != '"' {
			if s[k] == '\\' {
				k++
			}
			k++
		}
		if k >= len(s) {
			return nil, 0, fmt.Errorf("label %s: value not closed", name)
		}
		v, err := unescape(s[j:k], true)
		if err != nil {
			return nil, 0, fmt.Errorf("label %s: %v", name, err)
		}
		for _, l := range out {
			if l.Name == name {
				return nil, 0, fmt.Errorf("label %s given twice", name)
			}
		}
		out = append(out, Label{name, v})
		i = k + 1
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i < len(s) && s[i] == ',' {
			i++
		} else if i >= len(s) || s[i] != '}' {
			return nil, 0, fmt.Errorf("label %s: want , or } after its value", name)
		}
	}
}

// unescape undoes escape: \\ and \n, and \" in label values.
func unescape(s string, quote bool) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		switch {
		case i >= len(s):
			return "", errors.New("a lone backslash at the end")
		case s[i] == '\\':
			b.WriteByte('\\')
		case s[i] == 'n':
			b.WriteByte('\n')
		case s[i] == '"' && quote:
			b.WriteByte('"')
		default:
			if quote {
				return "", fmt.Errorf("unknown escape \\%c", s[i])
			}
			// HELP text keeps other backslashes as they are.
			b.WriteByte('\\')
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}

// token returns the first word of s (after spaces and tabs) and what
// follows it.
func token(s string) (word, rest string) {
	s = strings.TrimLeft(s, " \t")
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}
