package jsfast

// validKey is nats.go's keyValid without its regular expression: not
// empty, no '.' first or last, no empty token ("..") and only the bytes of
// ^[-/_=\.a-zA-Z0-9]+$. Keys come from the events key builders; the check
// stays so that a bad key fails as it does in nats.go (ErrInvalidKey)
// instead of reaching the server as a wildcard or a wrong subject.
func validKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '/' || c == '_' || c == '=':
		case c == '.':
			if key[i-1] == '.' { // i > 0: key[0] is not '.'
				return false
			}
		default:
			return false
		}
	}
	return true
}
