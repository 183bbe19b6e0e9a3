package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
)

type tableWriter struct{ tw *tabwriter.Writer }

// table starts an aligned table with a header row.
func table(w io.Writer, header ...string) *tableWriter {
	t := &tableWriter{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *tableWriter) row(cells ...string) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(t.tw, "\t")
		}
		fmt.Fprint(t.tw, shown(c)) // before the widths are measured
	}
	fmt.Fprintln(t.tw)
}

func (t *tableWriter) flush() { t.tw.Flush() }

// call is the shape of most commands: connect (as the agent when asAgent),
// make one call, print its result as JSON or through human.
func call(ctx context.Context, g *Globals, asAgent bool, do func(*session) (any, error), human func(io.Writer, any)) error {
	var s *session
	var err error
	if asAgent {
		s, err = connectAs(ctx, g)
	} else {
		s, err = connect(ctx, g)
		if err == nil && (g.AgentID != "" || g.Role != "") {
			err = s.identify(ctx) // optional: gives read state when named
		}
	}
	if err != nil {
		if s != nil {
			s.close()
		}
		return err
	}
	defer s.close()
	v, err := do(s)
	if err != nil {
		return err
	}
	return g.out(v, func(w io.Writer) { human(w, v) })
}
