// Package samtemplate reads CloudFormation / AWS SAM templates (and any other
// YAML) into plain Go values, turning the short-form intrinsic tags (!Ref,
// !Sub, !GetAtt, !If, ...) into their long form ({"Ref": x},
// {"Fn::Sub": x}, ...) so a test can walk the document without caring which
// form the author used. Its tests assert the invariants of the repository's
// template.yaml.
package samtemplate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrNoModuleRoot is returned by RepoRoot when no go.mod is found above the
// working directory.
var ErrNoModuleRoot = errors.New("samtemplate: no go.mod above the working directory")

// Load reads every YAML document of the file at path.
func Load(path string) ([]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// Parse decodes every document of a YAML stream.
func Parse(data []byte) ([]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []any
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		v, err := convert(&n)
		if err != nil {
			return nil, err
		}
		docs = append(docs, v)
	}
}

// convert turns a node into map[string]any, []any, string, int, float64,
// bool or nil, expanding CloudFormation's short-form tags.
func convert(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return convert(n.Content[0])
	case yaml.AliasNode:
		return convert(n.Alias)
	}
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // merge key
				mv, err := convert(val)
				if err != nil {
					return nil, err
				}
				if mm, ok := mv.(map[string]any); ok {
					for kk, vv := range mm {
						if _, set := m[kk]; !set {
							m[kk] = vv
						}
					}
				}
				continue
			}
			cv, err := convert(val)
			if err != nil {
				return nil, err
			}
			m[k.Value] = cv
		}
		v = m
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			cv, err := convert(c)
			if err != nil {
				return nil, err
			}
			s = append(s, cv)
		}
		v = s
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!int":
			i, err := strconv.ParseInt(n.Value, 0, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			return int(i), nil
		case "!!float":
			f, err := strconv.ParseFloat(n.Value, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			return f, nil
		case "!!bool":
			return n.Value == "true" || n.Value == "True" || n.Value == "TRUE", nil
		case "!!null":
			return nil, nil
		}
		v = n.Value
	}
	if !strings.HasPrefix(n.Tag, "!") || strings.HasPrefix(n.Tag, "!!") {
		return v, nil
	}
	name := strings.TrimPrefix(n.Tag, "!")
	switch name {
	case "Ref", "Condition":
		return map[string]any{name: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			res, attr, _ := strings.Cut(s, ".")
			return map[string]any{"Fn::GetAtt": []any{res, attr}}, nil
		}
	}
	return map[string]any{"Fn::" + name: v}, nil
}

// RepoRoot returns the directory of the go.mod above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoModuleRoot
		}
		dir = parent
	}
}

// Path walks v by map keys and (decimal) list indexes; ok is false when a
// step does not exist.
func Path(v any, keys ...string) (any, bool) {
	for _, k := range keys {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

var subVar = regexp.MustCompile(`\$\{([^}!][^}]*)\}`)

// References returns every name v refers to: Ref targets, GetAtt
// resources, ${Name} and ${Name.Attr} in Fn::Sub strings, and Condition
// names of Fn::If and Condition keys.
func References(v any) map[string]bool {
	refs := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		switch c := v.(type) {
		case map[string]any:
			for k, val := range c {
				switch k {
				case "Ref", "Condition":
					if s, ok := val.(string); ok {
						refs[s] = true
					}
				case "Fn::GetAtt":
					if l, ok := val.([]any); ok && len(l) > 0 {
						if s, ok := l[0].(string); ok {
							refs[s] = true
						}
					}
				case "Fn::Sub":
					s, _ := val.(string)
					if l, ok := val.([]any); ok && len(l) > 0 {
						s, _ = l[0].(string)
					}
					for _, m := range subVar.FindAllStringSubmatch(s, -1) {
						name, _, _ := strings.Cut(m[1], ".")
						refs[name] = true
					}
				case "Fn::If":
					if l, ok := val.([]any); ok && len(l) > 0 {
						if s, ok := l[0].(string); ok {
							refs[s] = true
						}
					}
				}
				walk(val)
			}
		case []any:
			for _, e := range c {
				walk(e)
			}
		}
	}
	walk(v)
	return refs
}
