package thrum

import "github.com/thrumhq/thrum/store"

// ProjectionOf returns n's SQLite projection to the package's external
// tests, which compare it with a rebuild of the log. They only read it:
// the library hands it to no one, since a write to it would bypass the
// log.
func ProjectionOf(n *Node) *store.Store { return n.store }

// SignOff makes n write its events unsigned, as before signatures: the
// baseline the signing benchmarks compare with.
func SignOff(n *Node) { n.signOff = true }
