package jsonread

import "time"

// UTCTime reads the form of RFC 3339 the platform writes its timestamps
// in, 2006-01-02T15:04:05[.fraction]Z with one to nine digits of
// fraction, as time.Parse(time.RFC3339Nano, ...) does, without
// allocating (time.Parse takes a string: a []byte converted to one is a
// copy on the heap). It reports false for anything else, valid or not
// (an offset, a longer fraction, an escape, a range time.Parse refuses):
// the caller then asks time.Parse, whose answer is the answer.
// FuzzUTCTimeMatchesTimeParse pins it.
func UTCTime(b []byte) (time.Time, bool) {
	const short = len("2006-01-02T15:04:05Z")
	if len(b) < short || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' || b[len(b)-1] != 'Z' {
		return time.Time{}, false
	}
	year, ok1 := num(b[0:4])
	month, ok2 := num(b[5:7])
	day, ok3 := num(b[8:10])
	hour, ok4 := num(b[11:13])
	minute, ok5 := num(b[14:16])
	sec, ok6 := num(b[17:19])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	if frac := b[19 : len(b)-1]; len(frac) > 0 {
		if len(frac) < 2 || len(frac) > 10 || frac[0] != '.' {
			return time.Time{}, false
		}
		n, ok := num(frac[1:])
		if !ok {
			return time.Time{}, false
		}
		for range 10 - len(frac) {
			n *= 10
		}
		nsec = n
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

// num reads a run of decimal digits, all of b.
func num(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
