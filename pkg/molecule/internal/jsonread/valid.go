package jsonread

// Validating while splitting.
//
// json.Valid runs encoding/json's state machine, one indirect call per
// byte, and tells only yes or no: a caller that then splits what it
// validated (SkipValue) reads every byte twice. The scanner here accepts
// and rejects exactly what json.Valid does (FuzzValidMatchesEncodingJSON)
// and hands out the pieces as it goes, so a page of feed rows is read
// once.

// maxDepth is encoding/json's nesting limit: json.Valid rejects input
// nested deeper than this.
const maxDepth = 10000

// Valid reports whether data is valid JSON, as json.Valid does.
func Valid(data []byte) bool {
	s := scanner{data: data}
	end := s.value(SkipSpace(data, 0))
	return end >= 0 && SkipSpace(data, end) == len(data)
}

// SplitArray checks that data is valid JSON holding one list, as
// json.Valid does, and splits it in the same pass: for each element it
// calls member with each member (the key's bytes without quotes, escapes
// left as they are, and the raw value) when the element is an object,
// then elem with the element's bytes. All share data's memory. It reports
// false when data is not a valid list or elem returns false; the
// callbacks may have seen a prefix of the elements by then, which the
// caller discards. member may be nil.
func SplitArray(data []byte, elem func(elem []byte) bool, member func(key, val []byte)) bool {
	i := SkipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return false
	}
	s := scanner{data: data}
	end := s.array(i, elem, member)
	return end >= 0 && SkipSpace(data, end) == len(data)
}

// scanner validates data; each method takes the index of a value's first
// byte and returns the index after it, or -1 when the value is invalid.
type scanner struct {
	data  []byte
	depth int
}

func (s *scanner) value(i int) int {
	if i >= len(s.data) {
		return -1
	}
	switch c := s.data[i]; {
	case c == '"':
		return s.str(i)
	case c == '{':
		return s.object(i, nil)
	case c == '[':
		return s.array(i, nil, nil)
	case c == 't':
		return s.literal(i, "true")
	case c == 'f':
		return s.literal(i, "false")
	case c == 'n':
		return s.literal(i, "null")
	case c == '-' || isDigit(c):
		return s.number(i)
	}
	return -1
}

// object validates the object at i, calling member (if not nil) with
// each member.
func (s *scanner) object(i int, member func(key, val []byte)) int {
	i, closed := s.open(i, '}')
	if i < 0 || closed {
		return i
	}
	d := s.data
	for {
		if i >= len(d) || d[i] != '"' {
			return -1
		}
		kend := s.str(i)
		if kend < 0 {
			return -1
		}
		key := d[i+1 : kend-1]
		i = SkipSpace(d, kend)
		if i >= len(d) || d[i] != ':' {
			return -1
		}
		i = SkipSpace(d, i+1)
		vend := s.value(i)
		if vend < 0 {
			return -1
		}
		if member != nil {
			member(key, d[i:vend:vend])
		}
		var closed bool
		if i, closed = s.separator(vend, '}'); i < 0 || closed {
			return i
		}
	}
}

// array validates the list at i, calling elem (if not nil) with each
// element and member (if not nil) with the members of each element that
// is an object. elem returning false stops the scan (-1).
func (s *scanner) array(i int, elem func([]byte) bool, member func(key, val []byte)) int {
	i, closed := s.open(i, ']')
	if i < 0 || closed {
		return i
	}
	d := s.data
	for {
		var end int
		if member != nil && i < len(d) && d[i] == '{' {
			end = s.object(i, member)
		} else {
			end = s.value(i)
		}
		if end < 0 || elem != nil && !elem(d[i:end:end]) {
			return -1
		}
		var closed bool
		if i, closed = s.separator(end, ']'); i < 0 || closed {
			return i
		}
	}
}

// open enters the object or list whose opening bracket is at i: the first
// member's or element's start (not closed), just past closer when it is
// empty (closed; the nesting level ends), or -1 past maxDepth.
func (s *scanner) open(i int, closer byte) (next int, closed bool) {
	if s.depth++; s.depth > maxDepth {
		return -1, false
	}
	i = SkipSpace(s.data, i+1)
	if i < len(s.data) && s.data[i] == closer {
		s.depth--
		return i + 1, true
	}
	return i, false
}

// separator reads what follows a member or an element ending at i: a
// comma (the next one's start, not closed), closer (just past it,
// closed; the nesting level ends) or anything else (-1).
func (s *scanner) separator(i int, closer byte) (next int, closed bool) {
	d := s.data
	i = SkipSpace(d, i)
	switch {
	case i >= len(d):
		return -1, false
	case d[i] == ',':
		return SkipSpace(d, i+1), false
	case d[i] == closer:
		s.depth--
		return i + 1, true
	}
	return -1, false
}

// str validates the string literal whose quote is at i: escapes as JSON
// has them, no control byte; other bytes, valid UTF-8 or not, pass (as
// they do json.Valid).
func (s *scanner) str(i int) int {
	d := s.data
	for i++; i < len(d); i++ {
		switch c := d[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i >= len(d) {
				return -1
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(d) || !isHex(d[i+1]) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) {
					return -1
				}
				i += 4
			default:
				return -1
			}
		case c < 0x20:
			return -1
		}
	}
	return -1
}

// number validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number(i int) int {
	d := s.data
	if d[i] == '-' {
		i++
	}
	switch {
	case i >= len(d):
		return -1
	case d[i] == '0':
		i++
	case isDigit(d[i]):
		i = digits(d, i)
	default:
		return -1
	}
	if i < len(d) && d[i] == '.' {
		if i++; i >= len(d) || !isDigit(d[i]) {
			return -1
		}
		i = digits(d, i)
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		if i++; i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return -1
		}
		i = digits(d, i)
	}
	return i
}

func (s *scanner) literal(i int, lit string) int {
	if len(s.data)-i < len(lit) || string(s.data[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// digits returns the index after the run of digits at i.
func digits(d []byte, i int) int {
	for i < len(d) && isDigit(d[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
