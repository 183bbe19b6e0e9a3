// Search snippets with their matches marked. message.search gives each
// match as [start, end) in Unicode code points of the snippet, not in
// JavaScript's UTF-16 units, so an emoji before a match (two units, one
// code point) must not shift the marks: the snippet is split into code
// points first.

import { shown } from './markdown.js';

// splitHighlights cuts snippet into pieces, each {text, mark}, in order.
// Ranges that are out of bounds, empty, or overlap an earlier one are
// clamped or skipped: a bad range never loses or repeats text.
export function splitHighlights(snippet, highlights) {
  const cps = Array.from(snippet || '');
  const parts = [];
  let at = 0;
  for (const h of highlights || []) {
    if (!Array.isArray(h) || h.length !== 2) continue;
    const start = Math.max(at, Math.min(cps.length, Math.trunc(h[0]) || 0));
    const end = Math.min(cps.length, Math.trunc(h[1]) || 0);
    if (end <= start) continue;
    if (start > at) parts.push({ text: cps.slice(at, start).join(''), mark: false });
    parts.push({ text: cps.slice(start, end).join(''), mark: true });
    at = end;
  }
  if (at < cps.length) parts.push({ text: cps.slice(at).join(''), mark: false });
  return parts;
}

// renderSnippet makes the snippet as text nodes and <mark> elements:
// whatever the text holds stays text.
export function renderSnippet(snippet, highlights) {
  const f = document.createDocumentFragment();
  for (const p of splitHighlights(snippet, highlights)) {
    if (!p.mark) {
      f.append(document.createTextNode(shown(p.text)));
      continue;
    }
    const m = document.createElement('mark');
    m.textContent = shown(p.text);
    f.append(m);
  }
  return f;
}
