// Markdown to DOM nodes, safely: every piece of a message becomes a text
// node or an element made here with createElement, never parsed HTML, so
// a body such as <img src=x onerror=alert(1)> is shown as those
// characters. Links keep only http(s) and mailto targets. Images are shown
// as links (no request leaves for a URL a sender chose).

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

// Characters a reader cannot see, or that reorder what is seen around
// them: controls but newline and tab, format and bidi characters,
// default-ignorables, variation selectors, line and paragraph separators
// (the classes the CLI and the agents' frame escape). shown writes each
// as an escape (\x1b, \u202e, \U000e0041), so a message cannot hide text
// or make one line read as another. The joiner and the emoji selector
// inside an emoji sequence stay, since they only shape the picture, and
// a line may end in CRLF.
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\p{Variation_Selector}\p{Bidi_Control}]/gu;
// (An alternation, not a class: Chromium 156 misses an astral character
// matched by a class before $.)
const PICTURE = /(?:\p{Extended_Pictographic}|\p{Emoji_Modifier}|\u{fe0f})$/u;
const PICTURE_NEXT = /^\p{Extended_Pictographic}/u;

export function shown(s) {
  return String(s).replace(/\r\n/g, '\n').replace(HIDDEN, (c, at, all) => {
    if (c === '\n' || c === '\t') return c;
    if ((c === '\u200d' || c === '\ufe0f') && PICTURE.test(all.slice(Math.max(0, at - 2), at)) &&
      (c === '\ufe0f' || PICTURE_NEXT.test(all.slice(at + 1, at + 3)))) return c;
    const cp = c.codePointAt(0);
    if (cp < 0x80) return '\\x' + cp.toString(16).padStart(2, '0');
    if (cp <= 0xffff) return '\\u' + cp.toString(16).padStart(4, '0');
    return '\\U' + cp.toString(16).padStart(8, '0');
  });
}

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

function link(href, label) {
  if (!SAFE_URL.test(href)) return document.createTextNode(label === href ? href : `${label} (${href})`);
  const a = el('a');
  a.href = href;
  a.rel = 'noopener noreferrer nofollow';
  a.target = '_blank';
  a.textContent = label;
  return a;
}

// Inline spans: `code`, **strong**, *em* or _em_, [text](url), ![alt](url)
// and bare http(s) URLs.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|\b_([^_\s][^_]*)_\b|(!?)\[([^\]]*)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

export function inline(parent, text) {
  let rest = text;
  while (rest.length > 0) {
    const m = INLINE.exec(rest);
    if (!m) { parent.append(rest); return; }
    if (m.index > 0) parent.append(rest.slice(0, m.index));
    if (m[1]) {
      const c = el('code');
      c.textContent = m[2].replace(/^ (.*) $/, '$1');
      parent.append(c);
    } else if (m[3] !== undefined || m[4] !== undefined) {
      const s = el('strong');
      inline(s, m[3] ?? m[4]);
      parent.append(s);
    } else if (m[5] !== undefined || m[6] !== undefined) {
      const s = el('em');
      inline(s, m[5] ?? m[6]);
      parent.append(s);
    } else if (m[9] !== undefined) {
      const label = m[8] || m[9];
      parent.append(link(m[9], m[7] ? `image: ${label}` : label));
    } else if (m[10]) {
      parent.append(link(m[10], m[10]));
    }
    rest = rest.slice(m.index + m[0].length);
  }
}

// Tables: a header row, a delimiter row (|---|:--:|) and body rows, each
// cell split at a | that is not escaped.
const TABLE_DELIM = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

function cells(line) {
  const s = line.trim().replace(/^\|/, '').replace(/(^|[^\\])\|$/, '$1');
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function table(head, delim, rows) {
  const align = cells(delim).map((d) => (d.endsWith(':') ? (d.startsWith(':') ? 'center' : 'right') : ''));
  const t = el('table');
  const row = (parent, texts, tag) => {
    const tr = el('tr');
    // Every row has the header's number of cells.
    for (let i = 0; i < align.length; i++) {
      const c = el(tag, align[i]);
      inline(c, texts[i] ?? '');
      tr.append(c);
    }
    parent.append(tr);
  };
  const thead = el('thead');
  row(thead, cells(head), 'th');
  t.append(thead);
  if (rows.length) {
    const tbody = el('tbody');
    for (const r of rows) row(tbody, cells(r), 'td');
    t.append(tbody);
  }
  // A wide table scrolls inside its box rather than widening the page.
  const wrap = el('div', 'table');
  wrap.append(t);
  return wrap;
}

// indentOf counts leading whitespace, a tab as four spaces.
function indentOf(line) {
  let n = 0;
  for (const ch of line) {
    if (ch === ' ') n++;
    else if (ch === '\t') n += 4 - (n % 4);
    else break;
  }
  return n;
}

const LIST_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;

// render returns a DocumentFragment of text, a small Markdown subset:
// paragraphs, headings, fenced code, block quotes, tables, lists (nested
// by indentation) and inline spans.
export function render(text) {
  const frag = document.createDocumentFragment();
  const lines = String(text ?? '').replace(/\r\n?/g, '\n').split('\n');
  let para = null;
  // lists are the open lists, outermost first: {indent, el}; an item
  // indented past the innermost one's marker opens a list inside its last
  // item.
  let lists = [];
  const endBlocks = () => { para = null; lists = []; };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    let m;
    if ((m = /^\s*(```|~~~)(.*)$/.exec(line))) {
      endBlocks();
      const fence = m[1];
      const body = [];
      for (i++; i < lines.length && !lines[i].trimStart().startsWith(fence); i++) body.push(lines[i]);
      const pre = el('pre');
      const code = el('code');
      code.textContent = body.join('\n');
      pre.append(code);
      frag.append(pre);
    } else if (/^\s*$/.test(line)) {
      endBlocks();
    } else if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) {
      endBlocks();
      const h = el('p', 'h');
      h.setAttribute('role', 'heading');
      h.setAttribute('aria-level', String(m[1].length + 2 > 6 ? 6 : m[1].length + 2));
      inline(h, m[2]);
      frag.append(h);
    } else if (/^\s*>/.test(line)) {
      endBlocks();
      const quoted = [];
      for (; i < lines.length && /^\s*>/.test(lines[i]); i++) quoted.push(lines[i].replace(/^\s*> ?/, ''));
      i--;
      const q = el('blockquote');
      q.append(render(quoted.join('\n')));
      frag.append(q);
    } else if (line.includes('|') && i + 1 < lines.length && lines[i + 1].includes('|') && TABLE_DELIM.test(lines[i + 1])) {
      endBlocks();
      const delim = lines[i + 1];
      const rows = [];
      for (i += 2; i < lines.length && lines[i].includes('|') && !/^\s*$/.test(lines[i]); i++) rows.push(lines[i]);
      i--;
      frag.append(table(line, delim, rows));
    } else if ((m = LIST_ITEM.exec(line))) {
      para = null;
      const indent = indentOf(m[1]);
      const tag = /\d/.test(m[2]) ? 'ol' : 'ul';
      while (lists.length && lists[lists.length - 1].indent > indent) lists.pop();
      let top = lists[lists.length - 1];
      if (top && top.indent === indent && top.el.tagName.toLowerCase() !== tag) {
        lists.pop(); // another kind of list at the same depth
        top = lists[lists.length - 1];
      }
      if (!top || top.indent < indent) {
        const list = el(tag);
        const parentItem = top && top.el.lastElementChild;
        (parentItem || frag).append(list);
        top = { indent, el: list };
        lists.push(top);
      }
      const li = el('li');
      inline(li, m[3]);
      top.el.append(li);
    } else if (lists.length && indentOf(line) > 0) {
      // An indented line under an item continues it.
      const li = lists[lists.length - 1].el.lastElementChild;
      li.append(el('br'));
      inline(li, line.trim());
    } else {
      lists = [];
      if (!para) {
        para = el('p');
        frag.append(para);
      } else {
        para.append(el('br'));
      }
      inline(para, line);
    }
  }
  return frag;
}
