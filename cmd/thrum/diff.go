package main

import (
	"fmt"
	"strings"
)

// unifiedDiff is the unified diff (three lines of context) that turns old
// into new, headed with name, or "" when they are the same. A file that
// does not exist yet is old == "" with created set.
func unifiedDiff(name, old, new string, created bool) string {
	if old == new {
		return ""
	}
	a, b := splitLines(old), splitLines(new)
	// Only the middle differs when a setup edit splices text in: compare
	// that, so a long file costs no more than its changed region.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops := diffLines(a[pre:len(a)-suf], b[pre:len(b)-suf])
	// The whole script: unchanged prefix, the middle, unchanged suffix.
	script := make([]byte, 0, pre+len(ops)+suf)
	for range pre {
		script = append(script, ' ')
	}
	script = append(script, ops...)
	for range suf {
		script = append(script, ' ')
	}

	var out strings.Builder
	from := "a/" + name
	if created {
		from = "/dev/null"
	}
	fmt.Fprintf(&out, "--- %s\n+++ b/%s\n", from, name)
	const context = 3
	ai, bi := 0, 0 // line index in a and b at script[k]
	for k := 0; k < len(script); {
		if script[k] == ' ' {
			k, ai, bi = k+1, ai+1, bi+1
			continue
		}
		// A hunk: from context lines before this change to context lines
		// after the last change closer than 2*context to the next.
		start := max(k-context, 0)
		end := k
		for end < len(script) {
			if script[end] != ' ' {
				end++
				continue
			}
			run := end
			for run < len(script) && script[run] == ' ' {
				run++
			}
			if run == len(script) || run-end > 2*context {
				end = min(end+context, len(script))
				break
			}
			end = run
		}
		back := k - start
		as, bs := ai-back, bi-back
		var body strings.Builder
		na, nb := 0, 0
		x, y := as, bs
		for _, op := range script[start:end] {
			switch op {
			case ' ':
				body.WriteString(" " + a[x] + "\n")
				x, y, na, nb = x+1, y+1, na+1, nb+1
			case '-':
				body.WriteString("-" + a[x] + "\n")
				x, na = x+1, na+1
			case '+':
				body.WriteString("+" + b[y] + "\n")
				y, nb = y+1, nb+1
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n%s", hunkRange(as, na), hunkRange(bs, nb), body.String())
		// Advance past the hunk.
		for _, op := range script[k:end] {
			if op != '+' {
				ai++
			}
			if op != '-' {
				bi++
			}
		}
		k = end
	}
	return out.String()
}

// hunkRange is a hunk header's "start,count" (start is 1-based, or the
// line before an empty range).
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits s into lines without their newlines; a missing final
// newline is not marked (setup's files are written with one).
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// diffLines is an edit script from a to b — ' ' keep, '-' delete, '+'
// insert — with the fewest changes, from the longest common subsequence.
func diffLines(a, b []string) []byte {
	// lcs[i][j] is the length of the LCS of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []byte
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, ' ')
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, '-')
			i++
		default:
			ops = append(ops, '+')
			j++
		}
	}
	return ops
}
