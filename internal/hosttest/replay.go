package hosttest

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// Recording is what a live run of a host showed, kept in testdata so
// that CI can replay it against thrum without the host: each hook run's
// input (in order), and the shape of the last model request of each
// conversation, where every hook's output that reached the request is
// replaced by the placeholder {{hook:N}} (N indexes Hooks). Paths of the
// scene read {{repo}}, {{home}} and {{dir}}; tools and system prompts
// are dropped.
type Recording struct {
	Host     string            `json:"host"`
	Version  string            `json:"version"`
	Case     string            `json:"case"`
	API      string            `json:"api"`
	Hooks    []RecordedHook    `json:"hooks"`
	Requests []json.RawMessage `json:"requests"`
}

// RecordedHook is one `thrum hook` run: the event, the host's input and
// whether its output (when it had any) reached a model request.
type RecordedHook struct {
	Event  string          `json:"event"`
	Input  json.RawMessage `json:"input"`
	Output string          `json:"output"` // what thrum answered, for the reader
	Placed bool            `json:"placed"`
	// Escape is how the host transformed the output before the model
	// saw it: "" (as it was) or "html" (Gemini CLI writes < and > as
	// &lt; and &gt;).
	Escape string `json:"escape,omitempty"`
}

// escapes are the transformations hosts were seen to apply to a hook's
// output, tried in order.
var escapes = []struct {
	name string
	f    func(string) string
}{
	{"", func(s string) string { return s }},
	{"html", strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace},
}

func escapeAs(name, s string) string {
	for _, e := range escapes {
		if e.name == name {
			return e.f(s)
		}
	}
	return s
}

// HookText is what a hook's output gives the host to show the model: its
// additional context, else a stop's reason or Cursor's follow-up.
func HookText(out []byte) string {
	var o struct {
		HookSpecificOutput struct {
			AdditionalContext string `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
		AdditionalContext string `json:"additional_context"`
		Reason            string `json:"reason"`
		FollowupMessage   string `json:"followup_message"`
	}
	if json.Unmarshal(out, &o) != nil {
		return ""
	}
	for _, s := range []string{o.HookSpecificOutput.AdditionalContext, o.AdditionalContext, o.Reason, o.FollowupMessage} {
		if s != "" {
			return s
		}
	}
	return ""
}

// Record makes the scene's recording of a case: its hook runs and the
// last turn request of each conversation.
func (s *Scene) Record(h Host, name string) *Recording {
	rec := &Recording{Host: h.Name, Version: h.Version, Case: name, API: h.API}
	paths := strings.NewReplacer(s.Repo, "{{repo}}", s.Home, "{{home}}", s.Dir, "{{dir}}")
	runs := s.HookRuns()
	last := map[string]*Request{}
	var order []string
	for _, r := range s.Model.Turns() {
		if last[r.Conversation] == nil {
			order = append(order, r.Conversation)
		}
		last[r.Conversation] = r
	}
	texts := map[string]string{} // hook output → placeholder
	for i, run := range runs {
		in := paths.Replace(string(run.Input))
		rh := RecordedHook{Event: run.Event, Input: json.RawMessage(in), Output: paths.Replace(strings.TrimSpace(string(run.Output)))}
		if t := HookText(run.Output); t != "" {
			for _, e := range escapes {
				for _, r := range last {
					rh.Placed = rh.Placed || r.Count(e.f(t)) > 0
				}
				if rh.Placed {
					rh.Escape = e.name
					texts[e.f(t)] = fmt.Sprintf("{{hook:%d}}", i)
					break
				}
			}
		}
		rec.Hooks = append(rec.Hooks, rh)
	}
	// Longest first, so that an output containing another is replaced
	// whole.
	keys := slices.SortedFunc(maps.Keys(texts), func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, k := range keys {
		pairs = append(pairs, k, texts[k])
	}
	hooks := strings.NewReplacer(pairs...)
	for _, conv := range order {
		var doc any
		if json.Unmarshal(last[conv].Body, &doc) != nil {
			continue
		}
		if m, ok := doc.(map[string]any); ok {
			for _, k := range []string{"tools", "system", "systemInstruction", "instructions"} {
				delete(m, k)
			}
		}
		doc = mapStrings(doc, func(v string) string { return paths.Replace(hooks.Replace(v)) })
		b, _ := json.Marshal(doc)
		rec.Requests = append(rec.Requests, b)
	}
	return rec
}

// Save writes the recording as indented JSON.
func (r *Recording) Save(path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return writeFile(path, string(b)+"\n")
}

// LoadRecording reads a recording.
func LoadRecording(path string) (*Recording, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Recording
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Build makes the recording's requests with each placeholder replaced
// by texts[N] as the host escaped it, and the
// scene's paths in place of {{repo}}, {{home}} and {{dir}}.
func (r *Recording) Build(texts []string, repo, home, dir string) []*Request {
	pairs := []string{"{{repo}}", repo, "{{home}}", home, "{{dir}}", dir}
	for i := len(texts) - 1; i >= 0; i-- { // {{hook:12}} before {{hook:1}}
		pairs = append(pairs, fmt.Sprintf("{{hook:%d}}", i), escapeAs(r.Hooks[i].Escape, texts[i]))
	}
	rep := strings.NewReplacer(pairs...)
	var out []*Request
	for _, raw := range r.Requests {
		var doc any
		if json.Unmarshal(raw, &doc) != nil {
			continue
		}
		doc = mapStrings(doc, rep.Replace)
		b, _ := json.Marshal(doc)
		out = append(out, ParseRequest(r.API, b))
	}
	return out
}

// ParseRequest reads a request body as the mock model would receive it.
func ParseRequest(api string, body []byte) *Request {
	r := &Request{API: api, Body: body}
	var doc any
	if json.Unmarshal(body, &doc) == nil {
		r.Strings = strs(doc, nil)
		r.Tools = toolNames(api, doc)
		r.Conversation = conversationKey(api, doc)
	}
	return r
}

// Outcomes is Scene.Outcomes over given requests and receipts.
func Outcomes(receipts map[string]Receipt, reqs []*Request, sent []Sent) []Outcome {
	return outcomes(receipts, reqs, sent)
}

func mapStrings(v any, f func(string) string) any {
	switch v := v.(type) {
	case string:
		return f(v)
	case []any:
		for i := range v {
			v[i] = mapStrings(v[i], f)
		}
	case map[string]any:
		for k := range v {
			v[k] = mapStrings(v[k], f)
		}
	}
	return v
}
