// Package filter is a subscription's content filter: a CEL expression
// (cel.dev, the language of Kubernetes admission rules and Envoy) over the
// event's metadata and its parsed JSON body, compiled once and evaluated for
// each event before its jobs are written.
//
// An expression sees
//
//	event.source       string: the source name (stripe, github, …)
//	event.type         string: the event type
//	event.headers      map(string, string): request headers, lower-case
//	                   names, repeated values joined with ", "
//	event.occurred_at  timestamp, or null when the provider gives none
//	payload            the body parsed as JSON (maps, lists, numbers as
//	                   doubles, ±Inf beyond a double's range, strings,
//	                   booleans), or null when the body is not JSON or is
//	                   over MaxPayload bytes
//
// and must be a bool, for example
//
//	payload.data.object.amount > 10000 && event.type == "charge.succeeded"
//
// An expression that fails to evaluate for an event (a field the payload
// lacks, a type mismatch) does not match it, and Match says so with an
// error; write has(payload.data.object.amount) to test for a field. Each
// evaluation is bounded in cost (== and in on lists and maps charged by
// their deep size, matches() by its text's length times its pattern's
// compiled size before it runs), since the payload is the sender's.
package filter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// MaxLength bounds an expression's text.
const MaxLength = 4096

// costLimit bounds one evaluation (CEL's cost units: about one per node
// visited and per element of a list or map comprehension).
// Room for three passes over a largest payload at CEL's charge for walking a
// string (a tenth of a unit a byte): a filter that reads each of its strings
// once must fit (review helper-133: at 100,000 size() of every string of a
// 1 MB body was refused).
const costLimit = 3 * MaxPayload / 10

// interruptEvery is how many comprehension iterations run between checks of
// the evaluation's context (MatchContext).
const interruptEvery = 16

// deepCost charges what ==, != and in do when they walk lists and maps:
// CEL charges an == of two lists or maps their top-level size while
// comparing them whole, so a comparison of two large values of the payload
// inside a comprehension cost one unit a pass and took seconds within the
// cost limit (22.7 s for a 480 KB body: review helper-127). An == or != of
// two lists (or two maps) of one size is charged both sides' deep size
// (their elements, and their elements' elements, ..., and their strings'
// bytes), what measuring and comparing them walks; x in a list is charged
// the list's length times x's deep size. Everything else
// keeps CEL's charge: a key looked up in a map, a comparison of values of
// different kinds or sizes decided at once, scalars (charging those by the
// payload's size dropped ordinary filters on large payloads: review
// helper-131). A matches() is charged by its pattern's program
// (regexCost), contains() by its strings' length, both before they run
// (chargeFirst). A count stops past costLimit: over it the evaluation ends.
type deepCost struct {
	regexes map[string]literalRegex // the filter's matches() patterns
}

func (d deepCost) CallCost(function, overload string, args []ref.Val, _ ref.Val) *uint64 {
	if function == overloads.Matches && len(args) == 2 {
		if n, ok := d.regexCost(args[0], args[1]); ok {
			return &n
		}
	}
	if len(args) == 1 && (stringWalks[overload] || stringWalks[function]) {
		// size() counts a string's code points, double() and the other
		// conversions parse all of it: CEL charges them 1 (review
		// helper-132: a 1 MB string's size() in a comprehension ran for
		// seconds within the limit). Charged as CEL charges its other walks
		// of a string: a tenth of a unit a byte.
		l, ok := byteLen(args[0])
		if !ok {
			return nil
		}
		n := min(l/10+1, costLimit+1)
		return &n
	}
	if len(args) != 2 {
		return nil
	}
	if _, ok := args[0].(types.Timestamp); ok {
		if _, zoned := args[1].(types.String); zoned {
			// A timestamp's getter in a time zone loads the zone on every
			// call (from disk, uncached; a name that is none is searched
			// for everywhere): CEL charges it 1, and 150,000 of them in a
			// comprehension ran for seconds (review helper-136).
			n := uint64(zonedGetterCost)
			return &n
		}
	}
	if n, ok := stringPairCost(function, args[0], args[1]); ok {
		return &n
	}
	var n uint64
	switch function {
	case operators.Equals, operators.NotEquals:
		a, aList := args[0].(traits.Lister)
		b, bList := args[1].(traits.Lister)
		am, aMap := args[0].(traits.Mapper)
		bm, bMap := args[1].(traits.Mapper)
		switch {
		case aList && bList:
			if a.Size() != b.Size() {
				return nil // unequal at once
			}
		case aMap && bMap:
			if am.Size() != bm.Size() {
				return nil // unequal at once
			}
		default:
			return nil
		}
		// What measuring them walks, both sides (the smaller alone let a
		// large side be walked for a charge of 1 on every pass: review
		// helper-135); each walk stops past the limit.
		n = deepSize(args[0], costLimit+1) + deepSize(args[1], costLimit+1)
	case operators.In, operators.OldIn:
		list, ok := args[1].(traits.Lister)
		if !ok {
			return nil // a map: one lookup
		}
		size, _ := list.Size().(types.Int)
		if size <= 0 {
			return nil // nothing to compare with: the needle is not walked
		}
		l := uint64(size)
		n = l * max(deepSize(args[0], costLimit/l+2), 1)
	default:
		return nil
	}
	n = min(n, costLimit+1)
	return &n
}

// zonedGetterCost is the charge of a timestamp getter given a time zone
// (getHours("Europe/Berlin")): about 3,000 of them fit in an evaluation, a
// few ms of zone loading each at worst.
const zonedGetterCost = 100

// stringPairCost charges comparisons, concatenations and searches of two
// strings (or two bytes) what they walk, reading only their lengths: CEL's
// own charge of them counted a string's code points on every call (a 900 KB
// string == a literal in a comprehension ran for seconds at 1 unit a pass),
// and a + of two of the payload's strings, dispatched at run time, was not
// charged at all (review helper-133). An == of unequal lengths is decided
// at once.
func stringPairCost(function string, a, b ref.Val) (uint64, bool) {
	la, lb, ok := byteLens(a, b)
	if !ok {
		return 0, false
	}
	var n uint64
	switch function {
	case operators.Equals, operators.NotEquals:
		if la == lb {
			n = la/10 + 1
		} else {
			n = 1
		}
	case operators.Less, operators.LessEquals, operators.Greater, operators.GreaterEquals:
		n = min(la, lb)/10 + 1
	case operators.Add:
		n = (la+lb)/10 + 1
	case overloads.Contains:
		// CEL charges it len(s)/10 × len(sub)/10, as if each position
		// compared the whole needle: a 33-byte needle was over the limit
		// on a 1 MB log (review helper-140). Our contains() is linear.
		n = (la+lb)/10 + 1
	case overloads.StartsWith, overloads.EndsWith:
		n = min(la, lb)/10 + 1 // compares at most the shorter
	default:
		return 0, false
	}
	return min(n, costLimit+1), true
}

// byteLens are the lengths of a and b when both are strings or both bytes.
func byteLens(a, b ref.Val) (uint64, uint64, bool) {
	la, okA := byteLen(a)
	lb, okB := byteLen(b)
	return la, lb, okA && okB && a.Type() == b.Type()
}

// byteLen is v's length in bytes when it is a string or bytes.
func byteLen(v ref.Val) (uint64, bool) {
	switch x := v.(type) {
	case types.String:
		return uint64(len(x)), true
	case types.Bytes:
		return uint64(len(x)), true
	}
	return 0, false
}

// stringWalks are the one-argument calls that read a string argument whole,
// by overload (a string's known at compile time) or by function (one of the
// payload's, dyn, dispatched at run time).
var stringWalks = map[string]bool{
	overloads.SizeString: true, overloads.SizeStringInst: true,
	overloads.StringToDouble: true, overloads.StringToInt: true, overloads.StringToUint: true,
	overloads.StringToTimestamp: true, overloads.StringToDuration: true,
	overloads.Size: true, overloads.TypeConvertDouble: true, overloads.TypeConvertInt: true, overloads.TypeConvertUint: true,
	overloads.TypeConvertTimestamp: true, overloads.TypeConvertDuration: true,
	overloads.TypeConvertBytes: true, overloads.TypeConvertString: true, overloads.StringToBytes: true, overloads.BytesToString: true,
}

// deepSize counts v's elements at every depth, and a tenth of its strings'
// bytes (what comparing them reads), at most limit.
func deepSize(v ref.Val, limit uint64) uint64 {
	var n uint64
	var walk func(ref.Val)
	walk = func(v ref.Val) {
		if n >= limit {
			return
		}
		if l, ok := byteLen(v); ok {
			n += l / 10
			return
		}
		switch c := v.(type) {
		case traits.Lister:
			for it := c.Iterator(); it.HasNext() == types.True && n < limit; {
				n++
				walk(it.Next())
			}
		case traits.Mapper:
			for it := c.Iterator(); it.HasNext() == types.True && n < limit; {
				k := it.Next()
				n++
				walk(c.Get(k))
			}
		}
	}
	walk(v)
	return n
}

// MaxPayload bounds the body parsed for a filter: a larger body is
// evaluated with payload null. Every writer that evaluates filters (ingress
// at arrival, a replay's catch-up later) builds the payload with
// ParsePayload, so one event passes or fails a filter the same way on each
// path.
const MaxPayload = 1 << 20

// ParsePayload is an event's payload for a filter: body parsed as JSON, or
// nil when it is not JSON or is over MaxPayload bytes. Numbers are doubles;
// one beyond a double's range is ±Inf (encoding/json refused the whole body
// for it, and every field of a valid JSON body was then null).
func ParsePayload(body []byte) any {
	if len(body) > MaxPayload {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) { // more after the value: not one JSON document
		return nil
	}
	return doubles(v)
}

// doubles replaces each json.Number in v with its float64 (±Inf beyond a
// double's range), in place.
func doubles(v any) any {
	switch x := v.(type) {
	case json.Number:
		f, _ := strconv.ParseFloat(string(x), 64) // out of range: ±Inf, as wanted
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = doubles(e)
		}
	case []any:
		for i, e := range x {
			x[i] = doubles(e)
		}
	}
	return v
}

// Event is what an expression is evaluated against.
type Event struct {
	Source     string
	Type       string
	Headers    map[string][]string
	OccurredAt *time.Time
	// Payload is the body parsed as JSON (encoding/json into any), or nil.
	Payload any
}

// Filter is a compiled expression, safe for concurrent use.
type Filter struct {
	expr string
	prg  cel.Program
}

var env = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("payload", cel.DynType),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
	)
	if err != nil {
		panic(fmt.Sprintf("filter: CEL environment: %v", err))
	}
	return e
}()

// Compile checks expr and prepares it. The error names the position of
// the first problem (line:column) and quotes the expression.
func Compile(expr string) (*Filter, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, errors.New("filter: empty expression")
	}
	if len(expr) > MaxLength {
		return nil, fmt.Errorf("filter: expression is %d bytes, at most %d", len(expr), MaxLength)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("filter %q: %s", expr, strings.TrimSpace(iss.Err().Error()))
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("filter %q: is a %s, want a bool", expr, t)
	}
	regexes, err := literalRegexes(ast, expr)
	if err != nil {
		return nil, fmt.Errorf("filter %q: %s", expr, strings.TrimSpace(err.Error()))
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit), cel.CostTracking(deepCost{regexes: regexes}), cel.EvalOptions(cel.OptOptimize),
		cel.InterruptCheckFrequency(interruptEvery), cel.CustomDecoratorV2(chargeFirst(regexes)))
	if err != nil {
		return nil, fmt.Errorf("filter %q: %w", expr, err)
	}
	return &Filter{expr: expr, prg: prg}, nil
}

// String is the expression.
func (f *Filter) String() string { return f.expr }

// Match is MatchContext without a deadline of the caller's (the cost limit
// bounds it).
func (f *Filter) Match(ev Event) (bool, error) {
	return f.MatchContext(context.Background(), ev)
}

// MatchContext reports whether ev passes the filter. An evaluation error (a
// missing field, a non-bool result, the cost limit) is a miss, returned with
// the error so the caller can count it. When ctx ends first the evaluation
// stops (its comprehensions check it) and the error is ctx's: not a miss, the
// caller's deadline (ingress answers 503, and the provider retries).
func (f *Filter) MatchContext(ctx context.Context, ev Event) (bool, error) {
	// Names that differ only in case are one header: their values are
	// joined in the order of the names, so every evaluation sees the same.
	names := slices.Sorted(maps.Keys(ev.Headers))
	headers := make(map[string]string, len(ev.Headers))
	for _, k := range names {
		lk := strings.ToLower(k)
		v := strings.Join(ev.Headers[k], ", ")
		if prev, ok := headers[lk]; ok {
			v = prev + ", " + v
		}
		headers[lk] = v
	}
	var occurred any
	if ev.OccurredAt != nil {
		// In UTC: ingress has the sender's offset, catch-up the server's
		// zone; one instant must read alike on both.
		occurred = ev.OccurredAt.UTC()
	}
	out, _, err := f.prg.ContextEval(ctx, map[string]any{
		"event": map[string]any{
			"source": ev.Source, "type": ev.Type, "headers": headers, "occurred_at": occurred,
		},
		"payload": ev.Payload,
	})
	if err != nil {
		if ctx.Err() != nil {
			return false, fmt.Errorf("filter %q: evaluation stopped: %w", f.expr, context.Cause(ctx))
		}
		return false, fmt.Errorf("filter %q: %w", f.expr, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("filter %q: evaluated to %v (%s), want a bool", f.expr, out.Value(), out.Type())
	}
	return b, nil
}

// Pattern is a subscription's source or event-type pattern ('*' matches
// any run of characters, as the fan-out trigger's LIKE does) as an
// anchored regular expression, for the writers that evaluate filters in Go
// to find the filtered subscriptions an event's source and type fall under.
func Pattern(glob string) *regexp.Regexp {
	parts := strings.Split(glob, "*")
	for i, s := range parts {
		parts[i] = regexp.QuoteMeta(s)
	}
	return regexp.MustCompile(`^(?s:` + strings.Join(parts, ".*") + `)$`)
}

// Check compiles expr and reports only whether it compiles: a consumer
// service's consumers.Config.CheckFilter.
func Check(expr string) error {
	_, err := Compile(expr)
	return err
}
