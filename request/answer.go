package request

import "math"

// Usage is the token usage a Messages answer reports.
type Usage struct {
	Input      int64 // input_tokens
	Output     int64 // output_tokens
	CacheWrite int64 // cache_creation_input_tokens
	CacheRead  int64 // cache_read_input_tokens
	// CacheWrite1h is the part of CacheWrite of the 1-hour TTL
	// (cache_creation.ephemeral_1h_input_tokens), which is priced apart;
	// 0 when the answer does not split its writes.
	CacheWrite1h int64
}

// ParseAnswer reads the model and the usage of a whole JSON Messages
// answer, for the token metrics, in one walk that skips the content
// without decoding it. It reads what encoding/json would into
// {model string; usage {...int64}}, and ok is false where that would
// fail: b is not valid JSON, or model is not a string (nor null), usage
// not an object (nor null), or a count not a whole number that fits. The
// model is cut as a request's is.
func ParseAnswer(b []byte) (model string, u Usage, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return "", Usage{}, false
	}
	typed := true
	end := object(b, i, 0, func(k, kEnd, v int) int {
		end := skipValue(b, v, 1)
		if end < 0 {
			return -1
		}
		val := b[v:end]
		switch string(b[k:kEnd]) {
		case `"model"`:
			switch {
			case val[0] == '"':
				model = modelOf(val)
			case string(val) != "null":
				typed = false
			}
		case `"usage"`:
			switch {
			case val[0] == '{':
				typed = usageOf(val, &u) && typed
			case string(val) != "null":
				typed = false
			}
		}
		return end
	})
	if end < 0 || skipSpace(b, end) != len(b) || !typed {
		return "", Usage{}, false
	}
	return model, u, true
}

// usageOf fills u from the valid JSON object val; false when a count is
// not a whole number that fits in an int64 (nor null).
func usageOf(val []byte, u *Usage) bool {
	ok := true
	object(val, 0, 1, func(k, kEnd, v int) int {
		end := skipValue(val, v, 2)
		var dst *int64
		switch string(val[k:kEnd]) {
		case `"input_tokens"`:
			dst = &u.Input
		case `"output_tokens"`:
			dst = &u.Output
		case `"cache_creation_input_tokens"`:
			dst = &u.CacheWrite
		case `"cache_read_input_tokens"`:
			dst = &u.CacheRead
		case `"cache_creation"`:
			// The split by TTL; what is not an object is left alone, as
			// a reader of the four counts alone would.
			if end > 0 && val[v] == '{' {
				object(val, v, 2, func(k, kEnd, v int) int {
					end := skipValue(val, v, 3)
					if end > 0 && string(val[k:kEnd]) == `"ephemeral_1h_input_tokens"` {
						if x, whole := wholeOf(val[v:end]); whole {
							u.CacheWrite1h = x
						}
					}
					return end
				})
			}
			return end
		default:
			return end
		}
		if n := val[v:end]; string(n) != "null" {
			x, whole := wholeOf(n)
			ok = ok && whole
			*dst = x
		}
		return end
	})
	return ok
}

// wholeOf is the JSON value n as an int64, without allocating; false when
// it is not a whole number (no fraction, no exponent) that fits.
func wholeOf(n []byte) (int64, bool) {
	neg := n[0] == '-'
	if neg {
		n = n[1:]
	}
	if len(n) == 0 {
		return 0, false
	}
	var x uint64
	for _, c := range n {
		if c < '0' || c > '9' || x > (math.MaxUint64-9)/10 {
			return 0, false
		}
		x = x*10 + uint64(c-'0')
	}
	switch {
	case !neg && x <= math.MaxInt64:
		return int64(x), true
	case neg && x <= 1<<63:
		return -int64(x), true // 1<<63 wraps to MinInt64, as it should
	}
	return 0, false
}

// MemberOf is the value of the top-level member key of the JSON object b
// (the last, if repeated), as it is spelt, or nil when it has none;
// false when b is not a valid JSON object. A stream's message_start carries its
// Message in the member "message".
func MemberOf(b []byte, key string) ([]byte, bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil, false
	}
	var val []byte
	end := object(b, i, 0, func(k, kEnd, v int) int {
		end := skipValue(b, v, 1)
		if end > 0 && kEnd-k == len(key)+2 && string(b[k+1:kEnd-1]) == key {
			val = b[v:end]
		}
		return end
	})
	if end < 0 || skipSpace(b, end) != len(b) {
		return nil, false
	}
	return val, true
}
