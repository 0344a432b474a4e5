package filter

import (
	"errors"
	"regexp"
	"regexp/syntax"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
)

// regexStepsPerUnit is how many steps of a regex (a byte of its text times
// an instruction of its pattern's program) one unit of cost buys: a
// matches() is charged a tenth of a unit a byte of its text, as CEL charges
// its other walks of a string, times a tenth of its pattern's program.
//
// Go's regexp (RE2) runs each instruction of the program at most once a byte
// of the text, about 6 ns at worst (\S{500}, 502 instructions, over 1 MiB
// of 499-byte words: 2.9 s), so the whole cost limit is about 31 million
// steps, 0.2 s of matching at worst. A plain pattern reads a largest payload
// within the limit: [A-Z][A-Z0-9]+-[0-9]+ is 8 instructions, ~84,000 units
// over 1 MiB (CEL charged it by the pattern's length, 5.25 times a byte's
// tenth: refused over 600 KB, review helper-140); a UUID pattern (38) is
// refused over about 800 KB.
const regexStepsPerUnit = 100

// literalRegex is a filter's matches() pattern, compiled once.
type literalRegex struct {
	re *regexp.Regexp
	// insts is the size of its RE2 program (regexp/syntax: Parse,
	// Simplify, Compile), the most work a byte of text costs: a counted
	// repetition is a copy of its operand per count (\S{500}: 502).
	insts uint64
}

// literalRegexes compiles each matches() pattern of a, by its text. A
// pattern must be a literal: CEL charges a regex's cost after it has run,
// and a pattern from the payload (the sender's) against a large text of it
// could run for a minute before the cost limit said no. A literal pattern
// is checked when the filter compiles, by whoever wrote it, and charged by
// its program before it runs (chargeFirst). The error names the pattern's
// position in expr.
func literalRegexes(a *cel.Ast, expr string) (map[string]literalRegex, error) {
	iss := cel.NewIssuesWithSourceInfo(common.NewErrors(common.NewTextSource(expr)), a.NativeRep().SourceInfo())
	regexes := map[string]literalRegex{}
	celast.PreOrderVisit(a.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.CallKind || e.AsCall().FunctionName() != overloads.Matches {
			return
		}
		args := e.AsCall().Args()
		if len(args) == 0 {
			return
		}
		arg := args[len(args)-1]
		var pattern types.String
		isString := false
		if arg.Kind() == celast.LiteralKind {
			pattern, isString = arg.AsLiteral().(types.String)
		}
		if !isString {
			iss.ReportErrorAtID(arg.ID(), "matches() takes a literal pattern only (a pattern from the event could run without bound)")
			return
		}
		if _, done := regexes[string(pattern)]; done {
			return
		}
		re, err := regexp.Compile(string(pattern))
		if err != nil {
			iss.ReportErrorAtID(arg.ID(), "matches() pattern: %v", err)
			return
		}
		insts, err := programSize(string(pattern))
		if err != nil {
			iss.ReportErrorAtID(arg.ID(), "matches() pattern: %v", err)
			return
		}
		regexes[string(pattern)] = literalRegex{re: re, insts: insts}
	}))
	if err := iss.Err(); err != nil {
		return nil, err
	}
	return regexes, nil
}

// programSize is the number of instructions of pattern's program, built as
// regexp.Compile builds it.
func programSize(pattern string) (uint64, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	return uint64(len(prog.Inst)), nil
}

// regexCost is a matches() call's charge: (len(text)+1)/10 units times
// insts/10 (regexStepsPerUnit). A pattern not among the filter's literals
// (there is none: literalRegexes) is measured here.
func (d deepCost) regexCost(text, pattern ref.Val) (uint64, bool) {
	s, ok := text.(types.String)
	p, isString := pattern.(types.String)
	if !ok || !isString {
		return 0, false
	}
	insts := d.regexes[string(p)].insts
	if insts == 0 {
		var err error
		if insts, err = programSize(string(p)); err != nil {
			return 0, false
		}
	}
	return min((uint64(len(s))+1)*insts/regexStepsPerUnit+1, costLimit+1), true
}

// chargeFirst plans each matches() and contains() of a filter as a call
// charged before it runs. CEL charges a call after it returns, and the
// evaluation's context is checked only between steps of a comprehension:
// one matches() charged over the limit ran to its end first (\S{500} over
// 1 MiB: 2.9 s, past any deadline; review helper-140). Charged first, a
// call over what is left of the limit never starts.
//
// matches() runs the pattern literalRegexes compiled (CEL's own
// precompiling of literal patterns never sees these calls); contains() runs
// in time linear in its strings (contains), so its charge,
// (len(s)+len(sub))/10+1, is the work it does.
func chargeFirst(regexes map[string]literalRegex) interpreter.InterpretableDecoratorV2 {
	return func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		call, ok := i.(interpreter.InterpretableCall)
		if !ok || len(call.Args()) != 2 {
			return i, nil
		}
		args := call.Args()
		switch call.Function() {
		case overloads.Matches:
			var pattern types.String
			if c, isConst := args[1].(interpreter.InterpretableConst); isConst {
				pattern, _ = c.Value().(types.String)
			}
			r, found := regexes[string(pattern)]
			if !found {
				// literalRegexes compiled every pattern: a plan that is not
				// the AST's literal must not run uncharged.
				return nil, errors.New("matches(): the pattern is not planned as its literal")
			}
			return &chargedCall{call: call, lhs: args[0], rhs: args[1], run: func(text, _ types.String) ref.Val {
				return types.Bool(r.re.MatchString(string(text)))
			}}, nil
		case overloads.Contains:
			return &chargedCall{call: call, lhs: args[0], rhs: args[1], run: func(s, sub types.String) ref.Val {
				return types.Bool(contains(string(s), string(sub)))
			}}, nil
		}
		return i, nil
	}
}

// chargedCall is a strict call of two strings, charged (by deepCost) after
// its arguments are evaluated and before it runs.
type chargedCall struct {
	call     interpreter.InterpretableCall // what it replaces: its id, function and overload
	lhs, rhs interpreter.InterpretableV2
	run      func(lhs, rhs types.String) ref.Val
}

func (c *chargedCall) ID() int64 { return c.call.ID() }

func (c *chargedCall) Eval(a interpreter.Activation) ref.Val {
	return interpreter.EvalActivation(a, c.Exec)
}

func (c *chargedCall) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	l := c.lhs.Exec(frame)
	if types.IsUnknownOrError(l) {
		return l
	}
	r := c.rhs.Exec(frame)
	if types.IsUnknownOrError(r) {
		return r
	}
	ls, lok := l.(types.String)
	rs, rok := r.(types.String)
	if !lok || !rok { // a payload's value of another type: no work done, not charged
		return types.NewErrWithNodeID(c.call.ID(), "no such overload")
	}
	if costs := frame.CostTracker(); costs != nil {
		// Over what is left of the limit, this ends the evaluation here.
		costs.EvalBinary(frame, c.call.ID(), c.call, l, r, types.NullValue)
	}
	return c.run(ls, rs)
}

// contains is strings.Contains(s, sub) in time linear in len(s)+len(sub).
// Go's strings.Index compares a candidate window whole, and with a needle
// longer than 64 bytes from the payload that is quadratic (measured while
// fixing review helper-140: a needle of "b"×299,744 and a Thue-Morse tail of
// 'a' and 'c', which keeps the Rabin-Karp hash of the run, in "b"×700,000
// took 3.1 s; one of period 16, 0.17 s). A needle of at most 64 bytes costs
// Go's search at most 64 bytes compared a position (~1.5 ms over 1 MiB at
// worst); a longer one is searched with Knuth-Morris-Pratt.
func contains(s, sub string) bool {
	if len(sub) <= 64 || len(sub) > len(s) {
		return strings.Contains(s, sub)
	}
	return containsKMP(s, sub)
}

// containsKMP is Knuth-Morris-Pratt: each byte of s is passed once, and a
// mismatch falls back along sub's own prefixes (at most as many steps as
// matched before), so at most 2×len(s) comparisons.
func containsKMP(s, sub string) bool {
	if sub == "" {
		return true
	}
	// next[i] is the length of the longest proper prefix of sub[:i+1] that
	// is also its suffix.
	next := make([]int32, len(sub))
	for i, k := 1, int32(0); i < len(sub); i++ {
		for k > 0 && sub[i] != sub[k] {
			k = next[k-1]
		}
		if sub[i] == sub[k] {
			k++
		}
		next[i] = k
	}
	for i, k := 0, int32(0); i < len(s); i++ {
		if k == 0 {
			// Nothing matched: skip to sub's first byte.
			j := strings.IndexByte(s[i:], sub[0])
			if j < 0 {
				return false
			}
			i += j
		}
		for k > 0 && s[i] != sub[k] {
			k = next[k-1]
		}
		if s[i] == sub[k] {
			k++
			if int(k) == len(sub) {
				return true
			}
		}
	}
	return false
}
