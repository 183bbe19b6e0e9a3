package mcpserver

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/thrumhq/thrum/inbox"
	"github.com/thrumhq/thrum/rpc"
)

// SearchMessagesInput is the input of search_messages: message.search's
// query with the filters an agent asks for most (the others would cost
// every agent's context tokens in tools/list: see TestToolSchemas).
type SearchMessagesInput struct {
	Query string `json:"query" jsonschema:"words, \"a phrase\", prefix*, AND/OR/NOT"`
	From  string `json:"from,omitempty" jsonschema:"author's name"`
	Limit *int   `json:"limit,omitempty" jsonschema:"max results (default 10)"`
}

// SearchMessagesOutput is what search_messages found, most relevant
// first. It carries excerpts, not whole messages: get_message shows one
// in full, so the tool's schema and answers stay small.
type SearchMessagesOutput struct {
	Results []SearchHit `json:"results"`
	Total   int         `json:"total"`
}

// SearchHit is one message search_messages found.
type SearchHit struct {
	MessageID string `json:"message_id"`
	From      string `json:"from"`
	Timestamp string `json:"timestamp"`
	// Snippet is the matching excerpt with each match in **bold**.
	Snippet string `json:"snippet"`
}

const searchDefaultLimit = 10

func (s *Server) addSearchTool() {
	add(s, &mcp.Tool{Name: "search_messages", Annotations: annotate("Search messages", true, false, true),
		Description: "Find messages by their words, best first, matches in **bold**."},
		edits{"limit": bounds(1, 100)}, nil, s.searchMessages)
}

func (s *Server) searchMessages(ctx context.Context, _ *mcp.CallToolRequest, in SearchMessagesInput) (SearchMessagesOutput, error) {
	out := SearchMessagesOutput{Results: []SearchHit{}}
	if strings.TrimSpace(in.Query) == "" {
		return out, invalidArg("search_messages", "query is required: give one or more words")
	}
	p := &rpc.SearchMessagesParams{Query: in.Query, AuthorID: in.From, PageSize: searchDefaultLimit}
	if in.Limit != nil {
		p.PageSize = *in.Limit
	}
	r, err := inbox.Call(ctx, s.ib, func(ctx context.Context, c *rpc.Client) (*rpc.SearchMessagesResult, error) {
		return c.SearchMessages(ctx, p)
	})
	if err != nil {
		return out, err
	}
	out.Total = r.Total
	for _, m := range r.Results {
		out.Results = append(out.Results, SearchHit{MessageID: m.MessageID, From: m.AgentID,
			Timestamp: m.CreatedAt, Snippet: bold(m.Snippet, m.Highlights)})
	}
	return out, nil
}

// bold marks the ranges (in characters) of s with **.
func bold(s string, ranges [][2]int) string {
	rs := []rune(s)
	var b strings.Builder
	at := 0
	for _, h := range ranges {
		if h[0] < at || h[1] > len(rs) || h[0] >= h[1] {
			continue
		}
		b.WriteString(string(rs[at:h[0]]) + "**" + string(rs[h[0]:h[1]]) + "**")
		at = h[1]
	}
	b.WriteString(string(rs[at:]))
	return b.String()
}
